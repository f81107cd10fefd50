"""Deleting what a tuning journey is recorded against (issue 10, item 6): never a 500.

Decision: a plan used by an experiment is kept (refused with the experiments' names);
a project is deleted whole, its experiments and ledger with it, as its confirmation
page says.
"""

import pytest
from django.urls import reverse

from portal.history.models import Experiment, TuningChange
from portal.projects.models import Plan, Project
from tests.portal.history.test_services import make_experiment

pytestmark = pytest.mark.django_db


@pytest.fixture
def experiment(plan, alice):
    return make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL)


def test_a_plan_with_an_experiment_is_kept_and_the_page_says_why(alice_client, plan, experiment):
    # when
    page = alice_client.get(reverse("projects:plan-delete", args=[plan.code])).content.decode()
    response = alice_client.post(reverse("projects:plan-delete", args=[plan.code]), follow=True)
    # then
    assert "This plan can't be deleted." in page and "Index on work_items.area" in page
    assert response.status_code == 200
    assert "Not deleted: “" in response.content.decode()
    assert Plan.objects.filter(pk=plan.pk).exists()


def test_a_plan_without_experiments_is_deleted(alice_client, plan):
    response = alice_client.post(reverse("projects:plan-delete", args=[plan.code]))
    assert response.status_code == 302
    assert not Plan.objects.filter(pk=plan.pk).exists()


def test_a_project_with_experiments_is_deleted_whole_after_listing_them(alice_client, project, experiment):
    # when
    page = alice_client.get(reverse("projects:delete", args=[project.code])).content.decode()
    response = alice_client.post(reverse("projects:delete", args=[project.code]))
    # then
    assert "<li>1 experiment</li>" in page and "<li>1 tuning change</li>" in page
    assert response.status_code == 302
    assert not Project.objects.filter(pk=project.pk).exists()
    assert not Experiment.objects.exists() and not TuningChange.objects.exists()


def test_viewers_and_outsiders_delete_nothing(bob_client, charlie, plan, project, experiment):
    assert bob_client.post(reverse("projects:delete", args=[project.code])).status_code == 403
    bob_client.force_login(charlie)
    assert bob_client.post(reverse("projects:plan-delete", args=[plan.code])).status_code == 404
    assert Project.objects.filter(pk=project.pk).exists()
