import re

import pytest
from django.urls import reverse
from django.utils.html import escape

from portal.projects.models import Environment, MixEntry, Plan, Project, Step, TestCase

from .data import HTMX, plan_data

pytestmark = pytest.mark.django_db

TOPBAR = '<header class="topbar">'


@pytest.fixture
def search(project):
    """A second test case of alice's project, not yet in the plan's mix."""
    tc = TestCase.objects.create(project=project, name="Search")
    Step.objects.create(test_case=tc, name="Search", path="/search?q=x")
    return tc


def _mix(plan):
    return list(plan.mix.order_by("position").values_list("test_case__name", "weight", "position"))


def _shares(response):
    """(test case, percentage) per row of the mix table, as the page shows them."""
    rows = re.findall(
        r'<tr id="mix-\d+">.*?>([^<>]+)</a></td>.*?<td class="num share">([\d.]+) %', response.content.decode(), re.S
    )
    return [(name, float(share)) for name, share in rows]


# The plan form


def test_new_plan_without_an_environment_says_to_create_one(alice_client, project):
    # when
    page = alice_client.get(reverse("projects:plan-new", args=[project.code])).content.decode()
    # then
    assert "Create an environment first" in page
    assert reverse("projects:environment-new", args=[project.code]) in page


def test_create_plan(alice_client, project, environment):
    # when
    response = alice_client.post(
        reverse("projects:plan-new", args=[project.code]),
        plan_data(environment, threshold_apd_ms="1000", threshold_error_rate_pct="0.1"),
    )
    # then
    plan = Plan.objects.get(name="Capacity")
    assert response.status_code == 302
    assert response.url == plan.get_absolute_url()
    assert (plan.project, plan.environment, plan.users, plan.duration) == (project, environment, 50, 340)
    assert (plan.threshold_apd_ms, plan.threshold_p95_ms, plan.threshold_error_rate_pct) == (1000, None, 0.1)


@pytest.mark.parametrize(
    ("field", "value", "most"),
    [
        ("threshold_min_pages_per_s", "1e30", "1000000"),
        ("threshold_apd_ms", "99999999", "600000"),
        ("threshold_p95_ms", "700000", "600000"),
    ],
)
def test_nonsense_thresholds_are_refused(alice_client, project, environment, field, value, most):
    # when
    response = alice_client.post(
        reverse("projects:plan-new", args=[project.code]), plan_data(environment, **{field: value})
    )
    # then
    assert response.status_code == 200
    assert f"Ensure this value is less than or equal to {most}" in response.content.decode()
    assert not Plan.objects.filter(name="Capacity").exists()


def test_plan_environment_must_be_the_projects(alice_client, project, environment, team):
    # given
    other = Project.objects.create(team=team, name="Shop")
    elsewhere = Environment.objects.create(project=other, name="Shop staging", base_url="http://127.0.0.1:9000")
    # when
    response = alice_client.post(reverse("projects:plan-new", args=[project.code]), plan_data(elsewhere))
    # then
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not Plan.objects.filter(name="Capacity").exists()


def test_plan_may_not_run_longer_than_allowed(alice_client, project, environment, settings):
    # given
    settings.PLIMSOLL_MAX_RUN_SECONDS = 3600
    # when
    response = alice_client.post(
        reverse("projects:plan-new", args=[project.code]),
        plan_data(environment, ramp_up="600", hold="3000", ramp_down="60"),
    )
    # then
    assert response.status_code == 200
    assert (
        "Ramp-up, hold and ramp-down add up to 1 h 1 min; the longest run allowed is 1 h." in response.content.decode()
    )
    assert not Plan.objects.filter(name="Capacity").exists()


def test_plan_name_taken(alice_client, project, plan, environment):
    # when
    response = alice_client.post(
        reverse("projects:plan-new", args=[project.code]), plan_data(environment, name="smoke")
    )
    # then
    assert response.status_code == 200
    assert escape("This project already has a plan called “smoke”.") in response.content.decode()
    assert project.plans.count() == 1


def test_edit_plan(alice_client, plan, environment):
    # when
    response = alice_client.post(
        reverse("projects:plan-edit", args=[plan.code]), plan_data(environment, name="Smoke", users="7")
    )
    # then
    assert response.status_code == 302
    plan.refresh_from_db()
    assert plan.users == 7
    assert plan.mix.count() == 1


# The plan page


def test_plan_detail_shows_profile_thresholds_and_mix(alice_client, plan):
    # when
    response = alice_client.get(reverse("projects:plan", args=[plan.code]))
    # then
    page = response.content.decode()
    assert "Staging" in page
    assert "<dt>Total</dt><dd><strong>6 s</strong></dd>" in page
    assert "none — every finished run passes" in page
    assert reverse("runs:start", args=[plan.code]) in page
    assert '<button type="submit" class="run-button" >' in page
    assert _shares(response) == [("Browse", 100.0)]


def test_plan_detail_shows_thresholds(alice_client, plan):
    # given
    plan.threshold_apd_ms, plan.threshold_error_rate_pct = 1000, 0.5
    plan.save()
    # when
    page = alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    # then
    assert "≤ 1000 ms" in page
    assert "≤ 0.5 %" in page


def test_plan_with_problems_cannot_run(alice_client, plan, test_case):
    # given
    test_case.steps.all().delete()
    # when
    page = alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    # then
    assert "This plan can't run yet" in page
    assert "Test case “Browse” has no steps." in page
    assert 'class="run-button" disabled' in page


def test_viewer_cannot_press_run(bob_client, plan, mix_entry):
    # when
    page = bob_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    # then
    assert 'class="run-button" disabled' in page
    assert "Viewers can't start runs" in page
    assert reverse("projects:mix-update", args=[mix_entry.pk]) not in page
    assert reverse("projects:mix-add", args=[plan.code]) not in page


def test_plan_detail_lists_its_runs(alice_client, plan, make_run):
    # given
    runs = [make_run(plan) for _ in range(3)]
    # when
    page = alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    # then
    for run in runs:
        assert run.get_absolute_url() in page


def test_delete_plan_keeps_its_runs(alice_client, plan, make_run, project):
    # given
    run = make_run(plan)
    # when
    response = alice_client.post(reverse("projects:plan-delete", args=[plan.code]))
    # then
    assert response.status_code == 302
    assert response.url == project.get_absolute_url()
    assert not Plan.objects.exists()
    run.refresh_from_db()
    assert (run.plan, run.plan_name) == (None, "Smoke")


# The mix editor


def test_add_to_mix(alice_client, plan, search):
    # when
    response = alice_client.post(
        reverse("projects:mix-add", args=[plan.code]), {"test_case": str(search.code), "weight": "3"}, **HTMX
    )
    # then
    page = response.content.decode()
    assert response.status_code == 200
    assert TOPBAR not in page
    assert page.strip().startswith('<section id="mix">')
    assert '<div id="run-box" class="run-box" hx-swap-oob="true">' in page
    assert _mix(plan) == [("Browse", 1, 0), ("Search", 3, 1)]
    assert _shares(response) == [("Browse", 25.0), ("Search", 75.0)]


def test_add_to_mix_without_javascript_redirects_back(alice_client, plan, search):
    # when
    response = alice_client.post(
        reverse("projects:mix-add", args=[plan.code]), {"test_case": str(search.code), "weight": "1"}
    )
    # then
    assert response.status_code == 302
    assert response.url == plan.get_absolute_url() + "#mix"
    assert plan.mix.count() == 2


def test_add_offers_only_test_cases_not_in_the_mix(alice_client, plan, search):
    # when
    response = alice_client.get(reverse("projects:plan", args=[plan.code]))
    # then
    choices = list(response.context["add_form"].fields["test_case"].queryset)
    assert choices == [search]


def test_add_a_test_case_already_in_the_mix(alice_client, plan, test_case):
    # when
    response = alice_client.post(
        reverse("projects:mix-add", args=[plan.code]), {"test_case": str(test_case.code), "weight": "1"}, **HTMX
    )
    # then: refused (400), the mix fragment says why (HTMX swaps a 4xx fragment: base.html's responseHandling)
    assert response.status_code == 400
    assert plan.mix.count() == 1


def test_add_another_projects_test_case(alice_client, plan, team):
    # given
    other = Project.objects.create(team=team, name="Shop")
    foreign = TestCase.objects.create(project=other, name="Checkout")
    # when
    response = alice_client.post(
        reverse("projects:mix-add", args=[plan.code]), {"test_case": str(foreign.code), "weight": "1"}
    )
    # then
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    assert not MixEntry.objects.filter(test_case=foreign).exists()


def test_change_weight(alice_client, plan, mix_entry, search):
    # given
    MixEntry.objects.create(plan=plan, test_case=search, weight=1, position=1)
    # when
    response = alice_client.post(reverse("projects:mix-update", args=[mix_entry.pk]), {"weight": "3"}, **HTMX)
    # then
    assert TOPBAR not in response.content.decode()
    assert _mix(plan) == [("Browse", 3, 0), ("Search", 1, 1)]
    assert _shares(response) == [("Browse", 75.0), ("Search", 25.0)]
    assert "75 %" in response.content.decode()


@pytest.mark.parametrize("weight", ["0", "-2", "many", "10001"])
def test_bad_weight_is_refused_with_a_message(alice_client, plan, mix_entry, weight):
    # when
    response = alice_client.post(reverse("projects:mix-update", args=[mix_entry.pk]), {"weight": weight}, **HTMX)
    # then: 400, with the message in the mix fragment
    assert response.status_code == 400
    assert escape("Weight of “Browse”:") in response.content.decode()
    # one rule, whatever the number: −2 and 0 used to say "≥ 0" and "≥ 1"
    assert "Give a whole number from 1 to 10,000." in response.content.decode()
    mix_entry.refresh_from_db()
    assert mix_entry.weight == 1


def test_remove_from_mix_renumbers(alice_client, plan, mix_entry, search, project):
    # given
    third = TestCase.objects.create(project=project, name="Upload")
    MixEntry.objects.create(plan=plan, test_case=search, weight=2, position=1)
    MixEntry.objects.create(plan=plan, test_case=third, weight=2, position=2)
    # when
    response = alice_client.post(reverse("projects:mix-delete", args=[mix_entry.pk]), **HTMX)
    # then
    assert _mix(plan) == [("Search", 2, 0), ("Upload", 2, 1)]
    assert _shares(response) == [("Search", 50.0), ("Upload", 50.0)]


def test_removing_the_last_entry_shows_the_problem(alice_client, plan, mix_entry):
    # when
    page = alice_client.post(reverse("projects:mix-delete", args=[mix_entry.pk]), **HTMX).content.decode()
    # then
    assert "The mix is empty" in page
    assert "Add at least one test case to the mix." in page
    assert 'class="run-button" disabled' in page


@pytest.mark.parametrize(
    ("name", "direction", "order"),
    [
        ("Search", "up", ["Search", "Browse"]),
        ("Browse", "down", ["Search", "Browse"]),
        ("Browse", "up", ["Browse", "Search"]),
    ],
)
def test_move_in_mix(alice_client, plan, mix_entry, search, name, direction, order):
    # given
    MixEntry.objects.create(plan=plan, test_case=search, weight=1, position=5)
    entry = plan.mix.get(test_case__name=name)
    # when
    response = alice_client.post(reverse("projects:mix-move", args=[entry.pk, direction]), **HTMX)
    # then
    assert response.status_code == 200
    assert [name for name, _, _ in _mix(plan)] == order
    assert [position for _, _, position in _mix(plan)] == [0, 1]


def test_mix_actions_need_post(alice_client, plan, mix_entry):
    # when
    responses = [
        alice_client.get(reverse("projects:mix-add", args=[plan.code])),
        alice_client.get(reverse("projects:mix-update", args=[mix_entry.pk])),
        alice_client.get(reverse("projects:mix-delete", args=[mix_entry.pk])),
        alice_client.get(reverse("projects:mix-move", args=[mix_entry.pk, "up"])),
    ]
    # then
    assert [r.status_code for r in responses] == [405] * 4


def test_htmx_get_of_the_plan_is_the_mix_fragment(alice_client, plan):
    # when
    page = alice_client.get(reverse("projects:plan", args=[plan.code]), **HTMX).content.decode()
    # then
    assert TOPBAR not in page
    assert page.strip().startswith('<section id="mix">')


def test_one_user_and_one_row_are_singular(alice_client, plan):
    from portal.common import plural
    from portal.runs.templatetags.plimsoll import load_of

    # given
    plan.users = 1
    plan.save()
    # then
    assert plan.load_summary == "1 user"
    assert plan.profile_description.startswith("1 user:")
    assert "1 user:" in alice_client.get(plan.get_absolute_url()).content.decode()
    assert load_of({"kind": "constant", "users": 1}) == "1 user"
    assert load_of({"kind": "steps", "levels": [{"users": 1}]}) == "1 level up to 1 user"
    assert load_of({"kind": "steps", "levels": [{"users": 1}, {"users": 2}]}) == "2 levels up to 2 users"
    assert (plural(1, "row"), plural(1200, "row")) == ("1 row", "1,200 rows")


def test_the_plan_form_sets_trace_context_and_its_sampled_share(alice_client, project, environment):
    url = reverse("projects:plan-new", args=[project.code])
    page = alice_client.get(url).content.decode()
    assert re.search(r'<input type="checkbox" name="trace_context"[^>]*checked', page)  # on for a new plan

    bad = alice_client.post(url, plan_data(environment, trace_context="on", trace_sample_rate="1.5"))
    assert bad.status_code == 200 and not Plan.objects.filter(project=project).exists()

    alice_client.post(url, plan_data(environment, trace_context="on", trace_sample_rate="0.5"))
    alice_client.post(url, plan_data(environment, name="Quiet"))  # the box left unticked: off
    on, off = Plan.objects.get(project=project, name="Capacity"), Plan.objects.get(project=project, name="Quiet")
    assert (on.trace_context, on.trace_sample_rate) == (True, 0.5)
    assert (off.trace_context, off.trace_sample_rate) == (False, 1.0)
    assert on.to_engine_dict()["trace_sample_rate"] == 0.5 and off.to_engine_dict()["trace_context"] is False
