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
