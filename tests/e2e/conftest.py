import os

import pytest
from django.db import connection

from tests.processes import DemoTarget, Worker, database_url, stop_kept, take_kept


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
    # A heartbeat every second: each transactional test's flush deletes the workers' registrations, and a run
    # waits (admission) until its worker registers again, up to a whole heartbeat (5 s by default) per test.
    env.update(DATABASE_URL=url, PLIMSOLL_START_DELAY="1", PLIMSOLL_WORKER_HEARTBEAT="1", PYTHONUNBUFFERED="1")
    return env


# One worker for every module that asks for it, started once (5–7 s each time on CI): at a module's end it is kept,
# idle, and the next module that asks for it takes it over (its broker queues purged first). It never runs beside
# other workers: starting any `Worker` stops it first (warm, so its generator registration goes with it, which
# admission and the capacity test count on), a module that asks for no `celery_worker` (its own workers, `make
# run`'s, or none) stops it before its first test, and it stops when the last test of tests/e2e has run.
@pytest.fixture(scope="package")
def _kept_worker():
    yield
    stop_kept()


@pytest.fixture(scope="module")
def celery_worker(_kept_worker, worker_env, tmp_path_factory):
    from workers.celery import app

    app.control.purge()  # nothing left over from an earlier session or module
    worker = take_kept() or Worker(tmp_path_factory.mktemp("worker") / "worker.log", worker_env)
    yield worker
    worker.keep()


@pytest.fixture(scope="module", autouse=True)
def _no_kept_worker_unasked(request):
    users = {"celery_worker", "uncapped_soak"}  # the fixtures that take the kept worker
    if not any(item.module is request.module and users & set(item.fixturenames) for item in request.session.items):
        stop_kept()


# Session scope: the uncapped token-cache soak (38 s of load) serves two modules that read the same
# run (tests/e2e/soak.py). It starts a target of its own and stops it before any test reads its figures;
# its worker is the kept one (above), idle before and after, so it runs nothing else meanwhile.
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
            worker = take_kept() or Worker(tmp_path_factory.mktemp("uncapped-soak-worker") / "worker.log", worker_env)
            try:
                user = get_user_model().objects.create_user("soak")
                project = Project.objects.create(team=user.teams.get(), name="Soak")
                result = soak.uncapped_soak(project, user, target, worker)
            finally:
                worker.keep()  # idle again, for the next module's celery_worker
                # Committed outside any test: emptied as a transactional test's teardown would.
                call_command("flush", interactive=False, verbosity=0)
    finally:
        target.close()
    return result
