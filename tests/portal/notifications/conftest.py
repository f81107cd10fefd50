from tests.portal.schedules.conftest import nightly  # noqa: F401  (the schedule fixture, shared)
from tests.portal.sharing.conftest import story  # noqa: F401,E402  (an experiment with its trials, shared)

from .test_notifications import receiver, smtp  # noqa: F401,E402  (the real SMTP server and HTTP receiver)
