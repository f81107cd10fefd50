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
