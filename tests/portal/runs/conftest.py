import pytest

from portal.runs.models import Run


@pytest.fixture
def run(plan, alice):
    """A run row as run_create makes it, without enqueueing anything."""
    return Run.objects.create(
        project=plan.project,
        number=1,
        plan=plan,
        environment=plan.environment,
        plan_name=plan.name,
        environment_name=plan.environment.name,
        plan_snapshot=plan.to_engine_dict(),
        config_snapshot=plan.environment.configuration,
        created_by=alice,
    )


@pytest.fixture
def watched():
    """The watchdog has been passing without a gap for an hour, so it may judge silences now."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.runs.models import WatchdogView

    now = timezone.now()
    return WatchdogView.objects.create(last_pass_at=now, watching_since=now - timedelta(hours=1))
