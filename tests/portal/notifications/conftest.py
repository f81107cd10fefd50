import pytest

from tests.portal.accounts.conftest import mail_sent_at_commit  # noqa: F401,E402  (tasks run in this process)
from tests.portal.schedules.conftest import nightly  # noqa: F401  (the schedule fixture, shared)
from tests.portal.sharing.conftest import story  # noqa: F401,E402  (an experiment with its trials, shared)

from .test_notifications import receiver, smtp  # noqa: F401,E402  (the real SMTP server and HTTP receiver)


@pytest.fixture(autouse=True)
def limits_of_this_test(settings):
    """The abuse limits (portal.limits) count in the cache, by user and team ids that come back after each
    test's rollback: each test counts under a key prefix of its own, so no test inherits another's counts."""
    import uuid

    settings.CACHES = {
        alias: {**conf, "KEY_PREFIX": f"{conf.get('KEY_PREFIX', '')}-{uuid.uuid4().hex[:8]}"}
        for alias, conf in settings.CACHES.items()
    }
