import pytest

from tests.portal.runs.factories import plan_run


@pytest.fixture
def run(plan, alice):
    """A run row as run_create makes it, without enqueueing anything."""
    return plan_run(plan, number=1, config_snapshot=plan.environment.configuration, created_by=alice, start_at=None)


@pytest.fixture
def watched():
    """The watchdog has been passing without a gap for an hour, so it may judge silences now."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.runs.models import WatchdogView

    now = timezone.now()
    return WatchdogView.objects.create(last_pass_at=now, watching_since=now - timedelta(hours=1))
