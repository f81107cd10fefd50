from datetime import UTC, datetime

import pytest


def utc(*args):
    return datetime(*args, tzinfo=UTC)


@pytest.fixture
def nightly(project, plan):
    """A daily 02:00 UTC schedule of the conftest plan, created at 12:00 the day before."""
    from portal.schedules.services import schedule_save

    return schedule_save(
        project=project,
        plan=plan,
        kind="daily",
        at_time=datetime(2026, 5, 1, 2).time(),
        every_hours=None,
        cron="",
        time_zone="UTC",
        enabled=True,
        ends_on=None,
        busy_wait_minutes=30,
        catch_up_hours=2,
        now=utc(2026, 4, 30, 12),
    )
