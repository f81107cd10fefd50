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
    from tests.portal.runs.factories import plan_run

    def make(plan, status=Run.Status.PASSED):
        return plan_run(plan, status=status, start_at=None)

    return make


@pytest.fixture
def bob_viewer_only(bob):
    """bob without a team of his own: a viewer in alice's team and nothing else."""
    Membership.objects.filter(user=bob).exclude(role=Membership.Role.VIEWER).delete()
    return bob
