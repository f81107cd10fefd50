from tests.portal.schedules.conftest import nightly  # noqa: F401  (the schedule fixture, shared)
