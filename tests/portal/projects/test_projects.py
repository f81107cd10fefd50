import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from portal.accounts.models import Membership, Team
from portal.accounts.services import team_create
from portal.projects.models import Environment, MixEntry, Plan, Project, Step, TestCase
from portal.runs.models import Run

pytestmark = pytest.mark.django_db


def _fill_project(team, name, make_run=None):
    """A project with an environment, a test case, a plan and a run."""
    project = Project.objects.create(team=team, name=name)
    env = Environment.objects.create(project=project, name="Staging", base_url="http://127.0.0.1:8001")
    tc = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=tc, name="Home", path="/")
    plan = Plan.objects.create(project=project, environment=env, name="Smoke")
    MixEntry.objects.create(plan=plan, test_case=tc)
    if make_run:
        make_run(plan, status=Run.Status.FAILED)
    return project


def test_home_sends_anonymous_users_to_log_in(client):
    # when
    response = client.get("/")
    # then
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_home_lists_projects(alice_client, project):
    # when
    response = alice_client.get(reverse("projects:home"))
    # then
    assert response.status_code == 200
    assert "Intranet" in response.content.decode()


def test_list_shows_counts_and_last_run(alice_client, project, plan, make_run):
    # given
    make_run(plan, status=Run.Status.PASSED)
    make_run(plan, status=Run.Status.FAILED)
    # when
    response = alice_client.get(reverse("projects:list"))
    # then
    row = response.context["projects"][0]
    assert (row.environment_count, row.test_case_count, row.plan_count) == (1, 1, 1)
    assert (row.last_run_number, row.last_run_status) == (2, "failed")
    assert 'class="badge failed"' in response.content.decode()


def test_list_shows_only_the_users_projects(charlie_client, project):
    # when
    response = charlie_client.get(reverse("projects:list"))
    # then
    page = response.content.decode()
    assert "Intranet" not in page
    assert "No projects yet — create one to define the system you'll test" in page
    assert reverse("projects:new") in page


def test_list_names_teams_only_for_members_of_several(alice_client, alice, project):
    # given: one team
    response = alice_client.get(reverse("projects:list"))
    assert response.context["show_team"] is False
    # when: alice joins a second team
    team_create(name="Ops", owner=alice)
    response = alice_client.get(reverse("projects:list"))
    # then
    assert response.context["show_team"] is True
    assert "alice&#x27;s team" in response.content.decode()


def test_list_costs_the_same_queries_for_many_projects(alice_client, team, make_run):
    # given
    _fill_project(team, "First", make_run)
    with CaptureQueriesContext(connection) as one:
        alice_client.get(reverse("projects:list"))
    for i in range(5):
        _fill_project(team, f"Project {i}", make_run)
    # when / then
    with CaptureQueriesContext(connection) as six:
        response = alice_client.get(reverse("projects:list"))
    assert len(response.context["projects"]) == 6
    assert len(six) == len(one)


def test_list_query_count(alice_client, team, make_run, django_assert_max_num_queries):
    # given
    for i in range(10):
        _fill_project(team, f"Project {i}", make_run)
    # when / then: session, user, projects, team count, writable teams
    with django_assert_max_num_queries(6):
        alice_client.get(reverse("projects:list"))


def test_viewer_only_user_sees_no_create_button_and_cannot_create(bob_viewer_only, client, project):
    # given
    client.force_login(bob_viewer_only)
    # when
    page = client.get(reverse("projects:list")).content.decode()
    form = client.get(reverse("projects:new"))
    post = client.post(reverse("projects:new"), {"name": "Sneaky"})
    # then
    assert "Intranet" in page
    assert reverse("projects:new") not in page
    assert form.status_code == 403
    assert post.status_code == 403
    assert not Project.objects.filter(name="Sneaky").exists()


def test_viewer_creates_projects_only_in_their_own_team(bob_client, bob, team):
    # when: bob is a viewer in alice's team but owns his own
    response = bob_client.post(reverse("projects:new"), {"name": "Mine", "team": str(team.code)})
    # then
    assert response.status_code == 302
    assert Project.objects.get(name="Mine").team.name == "bob's team"
    assert not team.projects.exists()


def test_create_project(alice_client, team):
    # when
    response = alice_client.post(reverse("projects:new"), {"name": "Shop", "description": "The web shop"})
    # then
    project = Project.objects.get(name="Shop")
    assert response.status_code == 302
    assert response.url == project.get_absolute_url()
    assert project.team == team
    assert project.description == "The web shop"


def test_create_project_offers_a_team_choice_to_members_of_several(alice_client, alice):
    # given
    ops = team_create(name="Ops", owner=alice)
    # when
    page = alice_client.get(reverse("projects:new")).content.decode()
    response = alice_client.post(reverse("projects:new"), {"name": "Shop", "team": str(ops.code)})
    # then
    assert 'name="team"' in page
    assert response.status_code == 302
    assert Project.objects.get(name="Shop").team == ops


def test_create_project_refuses_a_team_the_user_only_views(alice_client, alice, charlie):
    # given: alice writes to two teams and views a third
    team_create(name="Ops", owner=alice)
    charlies = Team.objects.get(memberships__user=charlie)
    Membership.objects.create(team=charlies, user=alice, role=Membership.Role.VIEWER)
    # when
    response = alice_client.post(reverse("projects:new"), {"name": "Shop", "team": str(charlies.code)})
    # then
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not Project.objects.filter(name="Shop").exists()


def test_create_project_with_a_taken_name(alice_client, project):
    # when
    response = alice_client.post(reverse("projects:new"), {"name": "intranet"})
    # then
    assert response.status_code == 200
    assert escape("alice's team already has a project called “intranet”.") in response.content.decode()
    assert Project.objects.count() == 1


def test_edit_project(alice_client, project):
    # when
    response = alice_client.post(reverse("projects:edit", args=[project.code]), {"name": "Extranet"})
    # then
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.name == "Extranet"


def test_edit_project_to_a_taken_name(alice_client, project, team):
    # given
    Project.objects.create(team=team, name="Shop")
    # when
    response = alice_client.post(reverse("projects:edit", args=[project.code]), {"name": "Shop"})
    # then
    assert response.status_code == 200
    assert "already has a project called" in response.content.decode()
    project.refresh_from_db()
    assert project.name == "Intranet"


def test_project_detail_shows_its_parts(alice_client, project, plan, make_run):
    # given
    run = make_run(plan)
    # when
    response = alice_client.get(reverse("projects:detail", args=[project.code]))
    # then
    page = response.content.decode()
    for text in ("Staging", "Browse", "Smoke", "Recent runs", run.get_absolute_url(), 'class="badge passed"'):
        assert text in page
    assert reverse("runs:project", args=[project.code]) in page
    assert '<nav class="breadcrumbs"' in page
    assert reverse("projects:environment-new", args=[project.code]) in page


def test_empty_project_says_what_to_do_next(alice_client, project):
    # when
    page = alice_client.get(reverse("projects:detail", args=[project.code])).content.decode()
    # then
    assert "Add an environment: the base URL of the system under test" in page
    assert "Add a test case" in page
    assert "Add a plan" in page
    assert "No runs yet: open a plan and press Run" in page


def test_viewer_sees_no_change_buttons(bob_client, project, plan):
    # when
    page = bob_client.get(reverse("projects:detail", args=[project.code])).content.decode()
    # then
    for name in ("projects:edit", "projects:delete", "projects:environment-new", "projects:plan-new"):
        assert reverse(name, args=[project.code]) not in page


def test_delete_project_asks_first(alice_client, project, plan, make_run):
    # given
    make_run(plan)
    # when
    response = alice_client.get(reverse("projects:delete", args=[project.code]))
    # then
    page = response.content.decode()
    assert "1 run and its results" in page
    assert Project.objects.filter(pk=project.pk).exists()


def test_delete_project_with_everything_in_it(alice_client, project, plan, make_run):
    # given: plans protect environments and test cases, and a run refers to all of them
    make_run(plan)
    # when
    response = alice_client.post(reverse("projects:delete", args=[project.code]))
    # then
    assert response.status_code == 302
    assert response.url == reverse("projects:list")
    assert not Project.objects.exists()
    assert not Run.objects.exists()
    assert not TestCase.objects.exists()
