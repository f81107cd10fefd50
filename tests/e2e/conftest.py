import os

import pytest
from django.db import connection

from tests.processes import DemoTarget, Worker, database_url


@pytest.fixture(scope="session")
def demo_target(tmp_path_factory):
    target = DemoTarget(tmp_path_factory.mktemp("demo"))
    yield target
    target.close()


@pytest.fixture(scope="session")
def worker_env(django_db_setup, django_db_blocker):
    """The environment of worker processes: same settings, pointed at the test database."""
    with django_db_blocker.unblock():
        url = database_url(connection.settings_dict)
    env = dict(os.environ)
    env.update(DATABASE_URL=url, PLIMSOLL_START_DELAY="1", PYTHONUNBUFFERED="1")
    return env


# Module scope: modules that need other workers (tests/e2e/test_distribution.py) start their own,
# and a worker left over from another module would take their shards.
@pytest.fixture(scope="module")
def celery_worker(worker_env, tmp_path_factory):
    from workers.celery import app

    app.control.purge()  # nothing left over from an earlier session
    worker = Worker(tmp_path_factory.mktemp("worker") / "worker.log", worker_env)
    yield worker
    worker.close()


# Session scope: the uncapped token-cache soak (38 s of load) serves two modules that read the same
# run (tests/e2e/soak.py). It starts a target and a worker of its own and stops them before any test
# reads its figures, so no other module's worker takes its shard, nor its worker another module's.
@pytest.fixture(scope="session")
def uncapped_soak(worker_env, django_db_blocker, tmp_path_factory):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from portal.projects.models import Project
    from tests.e2e import soak
    from workers.celery import app

    target = DemoTarget(tmp_path_factory.mktemp("uncapped-soak-demo"), items=1000)
    try:
        with django_db_blocker.unblock():
            app.control.purge()
            worker = Worker(tmp_path_factory.mktemp("uncapped-soak-worker") / "worker.log", worker_env, name="soak")
            try:
                user = get_user_model().objects.create_user("soak")
                project = Project.objects.create(team=user.teams.get(), name="Soak")
                result = soak.uncapped_soak(project, user, target, worker)
            finally:
                worker.close()
                # Committed outside any test: emptied as a transactional test's teardown would.
                call_command("flush", interactive=False, verbosity=0)
    finally:
        target.close()
    return result
