import pytest


@pytest.fixture
def eager_tasks():
    """Celery tasks run in this process as they are sent (no broker): a trial set's advance, say."""
    from workers.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before
