import pytest


@pytest.fixture
def mail_sent_at_commit(django_capture_on_commit_callbacks, settings, mailoutbox):
    """Runs a block's on_commit callbacks, with Celery tasks run in this process (no broker).

    The task's own code (render, send through Django's mail backend) runs as in a worker;
    only the trip through Redis is skipped. ``mailoutbox`` holds what was sent.
    """
    from workers.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield lambda: django_capture_on_commit_callbacks(execute=True)
    app.conf.task_always_eager = before


@pytest.fixture(autouse=True)
def limits_of_this_test(settings):
    """The abuse limits (portal.limits) count in the cache, by user and team ids that come back after each
    test's rollback: each test counts under a key prefix of its own, so no test inherits another's counts."""
    import uuid

    settings.CACHES = {
        alias: {**conf, "KEY_PREFIX": f"{conf.get('KEY_PREFIX', '')}-{uuid.uuid4().hex[:8]}"}
        for alias, conf in settings.CACHES.items()
    }
