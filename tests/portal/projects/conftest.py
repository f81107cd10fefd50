"""Fixtures of the projects pages' tests, on top of the personas in tests/conftest.py."""

import pytest

from portal.accounts.models import Membership


@pytest.fixture
def step(test_case):
    return test_case.steps.get(position=0)


@pytest.fixture
def mix_entry(plan):
    return plan.mix.get()


@pytest.fixture
def make_run(db):
    """Creates a run of a plan with a given status, numbered after the project's last one."""
    from portal.runs.models import Run

    def make(plan, status=Run.Status.PASSED):
        number = Run.objects.filter(project=plan.project).count() + 1
        return Run.objects.create(
            project=plan.project,
            number=number,
            plan=plan,
            environment=plan.environment,
            plan_name=plan.name,
            environment_name=plan.environment.name,
            plan_snapshot=plan.to_engine_dict(),
            status=status,
        )

    return make


@pytest.fixture
def bob_viewer_only(bob):
    """bob without a team of his own: a viewer in alice's team and nothing else."""
    Membership.objects.filter(user=bob).exclude(role=Membership.Role.VIEWER).delete()
    return bob
