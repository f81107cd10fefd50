"""Load profiles of a plan: the form for each kind, the levels of a steps profile, the engine's dict, words."""

import pytest
from django.urls import reverse
from django.utils.html import escape

from portal.projects.models import Plan, PlanLevel
from workers.engine.plan import Plan as EnginePlan

from .data import levels_data, plan_data

pytestmark = pytest.mark.django_db

# The Exchange suite of the seed stories: 1 h ramp-up, 5 h measured, 30 min ramp-down, 15 min quiet.
EXCHANGE = [{"users": u, "ramp_up": 3600, "hold": 18000, "ramp_down": 1800, "quiet": 900} for u in (20, 30, 40, 45, 50)]
NOT_USED = {"users": "", "ramp_up": "", "hold": "", "ramp_down": "", "pacing": "", "rate": "", "max_users": ""}


def _kind_data(environment, kind, **fields):
    """A valid plan form post for ``kind``, with the other kinds' fields left empty."""
    per_kind = {
        "ramp": {"users": "50", "ramp_up": "30", "hold": "300", "ramp_down": "10"},
        "constant": {"users": "30", "hold": "600"},
        "steps": levels_data(EXCHANGE),
        "pacing": {"users": "50", "ramp_up": "30", "hold": "300", "ramp_down": "10", "pacing": "10"},
        "arrival_rate": {"rate": "20", "rate_start": "5", "ramp_up": "60", "hold": "600", "max_users": "200"},
    }
    return plan_data(environment, **{"profile_kind": kind, **NOT_USED, **per_kind[kind], **fields})


def _create(client, project, data):
    return client.post(reverse("projects:plan-new", args=[project.code]), data)


ENGINE_PROFILES = {
    "ramp": {"users": 50, "ramp_up": 30.0, "hold": 300.0, "ramp_down": 10.0},
    "constant": {"kind": "constant", "users": 30, "hold": 600.0},
    "steps": {
        "kind": "steps",
        "levels": [{k: float(v) if k != "users" else v for k, v in lv.items()} for lv in EXCHANGE],
    },
    "pacing": {"kind": "pacing", "users": 50, "ramp_up": 30.0, "hold": 300.0, "ramp_down": 10.0, "pacing": 10.0},
    "arrival_rate": {
        "kind": "arrival_rate",
        "rate": 20.0,
        "ramp_up": 60.0,
        "hold": 600.0,
        "rate_start": 5.0,
        "max_users": 200,
    },
}
DURATIONS = {"ramp": 340, "constant": 600, "steps": 5 * 24300 - 900, "pacing": 340, "arrival_rate": 660}
WORDS = {
    "ramp": "50 users: 30 s ramp-up, 5 min measured, 10 s ramp-down",
    "constant": "30 users from the start, 10 min measured",
    "steps": "5 levels: 20 → 50 users, 1 h ramp-up, 5 h measured, 30 min ramp-down, 15 min quiet each",
    "pacing": "50 users, each starting an iteration every 10 s: 30 s ramp-up, 5 min measured, 10 s ramp-down",
    "arrival_rate": "5 → 20 iterations/s over 1 min, then 20 iterations/s for 10 min measured, at most 200 users",
}
KINDS = list(ENGINE_PROFILES)


@pytest.mark.parametrize("kind", KINDS)
def test_create_a_plan_of_each_kind(alice_client, project, environment, kind):
    # when
    response = _create(alice_client, project, _kind_data(environment, kind))
    # then
    assert response.status_code == 302, response.context["form"].errors
    plan = Plan.objects.get(name="Capacity")
    assert plan.profile_kind == kind
    assert plan.to_engine_dict()["profile"] == ENGINE_PROFILES[kind]
    assert plan.duration == DURATIONS[kind]
    assert plan.profile_description == WORDS[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_engine_accepts_the_profile_of_each_kind(alice_client, project, environment, test_case, kind):
    # given
    _create(alice_client, project, _kind_data(environment, kind))
    plan = Plan.objects.get(name="Capacity")
    alice_client.post(reverse("projects:mix-add", args=[plan.code]), {"test_case": str(test_case.code), "weight": "1"})
    # when
    engine_plan = EnginePlan.from_dict(plan.to_engine_dict())
    # then
    assert engine_plan.profile.kind == kind
    assert engine_plan.profile.to_dict() | ENGINE_PROFILES[kind] == engine_plan.profile.to_dict()


def test_fields_of_other_kinds_are_neither_checked_nor_changed(alice_client, plan, environment):
    # given: a ramp plan of 5 users
    # when: it becomes constant, with rubbish in the ramp-only and arrival-only fields
    response = alice_client.post(
        reverse("projects:plan-edit", args=[plan.code]),
        _kind_data(environment, "constant", name="Smoke", ramp_up="soon", ramp_down="-4", rate="fast", pacing="0"),
    )
    # then
    assert response.status_code == 302
    plan.refresh_from_db()
    assert (plan.profile_kind, plan.users, plan.hold) == ("constant", 30, 600)
    assert (plan.ramp_up, plan.ramp_down, plan.rate, plan.pacing) == (1, 0, None, None)


@pytest.mark.parametrize(
    ("kind", "fields", "errors"),
    [
        (
            "ramp",
            {"users": "", "hold": ""},
            {"users": ["This field is required."], "hold": ["This field is required."]},
        ),
        ("constant", {"users": "0"}, {"users": ["Ensure this value is greater than or equal to 1."]}),
        ("pacing", {"pacing": ""}, {"pacing": ["This field is required."]}),
        ("pacing", {"pacing": "0"}, {"pacing": ["Ensure this value is greater than or equal to 0.1."]}),
        (
            "arrival_rate",
            {"rate": "", "max_users": ""},
            {"rate": ["This field is required."], "max_users": ["This field is required."]},
        ),
        ("arrival_rate", {"rate": "0"}, {"rate": ["Ensure this value is greater than or equal to 0.01."]}),
        ("arrival_rate", {"rate_start": "-1"}, {"rate_start": ["Ensure this value is greater than or equal to 0."]}),
        (
            "arrival_rate",
            {"max_users": "100001"},
            {"max_users": ["Ensure this value is less than or equal to 100000."]},
        ),
        (
            "ramp",
            {"profile_kind": "spiky"},
            {"profile_kind": ["Select a valid choice. spiky is not one of the available choices."]},
        ),
    ],
)
def test_the_chosen_kind_needs_its_fields(alice_client, project, environment, kind, fields, errors):
    # when
    response = _create(alice_client, project, _kind_data(environment, kind, **fields))
    # then
    assert response.status_code == 200
    assert response.context["form"].errors == errors
    assert not Plan.objects.exists()


def test_starting_rate_is_optional(alice_client, project, environment):
    # when
    _create(alice_client, project, _kind_data(environment, "arrival_rate", rate_start=""))
    # then
    plan = Plan.objects.get()
    assert plan.to_engine_dict()["profile"] == {
        "kind": "arrival_rate",
        "rate": 20.0,
        "ramp_up": 60.0,
        "hold": 600.0,
        "max_users": 200,
    }
    assert plan.profile_description == (
        "20 → 20 iterations/s over 1 min, then 20 iterations/s for 10 min measured, at most 200 users"
    )


@pytest.mark.parametrize(
    ("kind", "fields", "message"),
    [
        (
            "ramp",
            {"ramp_up": "600", "hold": "3000", "ramp_down": "60"},
            "Ramp-up, hold and ramp-down add up to 1 h 1 min",
        ),
        (
            "pacing",
            {"ramp_up": "600", "hold": "3000", "ramp_down": "60"},
            "Ramp-up, hold and ramp-down add up to 1 h 1 min",
        ),
        ("constant", {"hold": "3601"}, "The hold lasts 1 h"),
        ("arrival_rate", {"ramp_up": "601", "hold": "3000"}, "Ramp-up and hold add up to 1 h"),
    ],
)
def test_a_plan_may_not_run_longer_than_allowed(alice_client, project, environment, settings, kind, fields, message):
    # given
    settings.PLIMSOLL_MAX_RUN_SECONDS = 3600
    # when
    response = _create(alice_client, project, _kind_data(environment, kind, **fields))
    # then
    assert response.context["form"].errors["hold"] == [f"{message}; the longest run allowed is 1 h."]
    assert not Plan.objects.exists()


def test_the_whole_72_hours_are_allowed(alice_client, project, environment):
    # when
    response = _create(alice_client, project, _kind_data(environment, "constant", hold=str(72 * 3600)))
    # then
    assert response.status_code == 302


# Levels of a steps profile


def test_levels_are_saved_in_the_order_of_the_rows(alice_client, project, environment):
    # when
    _create(alice_client, project, _kind_data(environment, "steps"))
    # then
    plan = Plan.objects.get()
    assert list(plan.levels.values_list("users", "position")) == [(20, 0), (30, 1), (40, 2), (45, 3), (50, 4)]
    assert plan.peak_users == 50
    assert plan.load_summary == "20 → 50 users"


def test_blank_rows_are_not_levels(alice_client, project, environment):
    # given: a level, and an empty row as the page offers one to fill in
    levels = levels_data([EXCHANGE[0], {"users": "", "ramp_up": "0", "hold": "", "ramp_down": "0", "quiet": "0"}])
    # when
    response = _create(alice_client, project, _kind_data(environment, "steps", **levels))
    # then
    assert response.status_code == 302
    assert Plan.objects.get().levels.count() == 1


def test_a_steps_profile_needs_a_level(alice_client, project, environment):
    # when
    response = _create(alice_client, project, _kind_data(environment, "steps", **levels_data([])))
    # then
    page = response.content.decode()
    assert "Some levels of the profile need fixing (see below)." in page
    assert "Add at least one level." in page
    assert not Plan.objects.exists()


def test_bad_level_is_shown_in_its_row(alice_client, project, environment):
    # given
    levels = levels_data([EXCHANGE[0], {**EXCHANGE[1], "users": "0", "hold": ""}])
    # when
    response = _create(alice_client, project, _kind_data(environment, "steps", **levels))
    # then
    form = response.context["form"]
    assert form.non_field_errors() == ["Some levels of the profile need fixing (see below)."]
    assert form.levels.errors == [
        {},
        {"users": ["Ensure this value is greater than or equal to 1."], "hold": ["This field is required."]},
    ]
    assert not Plan.objects.exists()


def test_levels_may_not_run_longer_than_allowed(alice_client, project, environment):
    # given: 3 × (1 h + 25 h + 30 min + 15 min), less the last level's quiet (the run ends before it)
    levels = levels_data([{**EXCHANGE[0], "hold": 25 * 3600}] * 3)
    # when
    response = _create(alice_client, project, _kind_data(environment, "steps", **levels))
    # then
    assert response.context["form"].levels.non_form_errors() == [
        "The 3 levels add up to 80 h; the longest run allowed is 72 h."
    ]
    assert not Plan.objects.exists()


def test_edit_levels_change_remove_and_add(alice_client, project, environment):
    # given
    _create(alice_client, project, _kind_data(environment, "steps"))
    plan = Plan.objects.get()
    ids = list(plan.levels.values_list("id", flat=True))
    rows = [{**level, "id": pk} for level, pk in zip(EXCHANGE, ids, strict=True)]
    rows[0]["users"] = 10
    rows[1]["DELETE"] = "on"
    rows.append({**EXCHANGE[-1], "users": 60})
    # when
    response = alice_client.post(
        reverse("projects:plan-edit", args=[plan.code]),
        _kind_data(environment, "steps", **levels_data(rows, initial=len(ids))),
    )
    # then
    assert response.status_code == 302, response.context["form"].levels.errors
    assert list(plan.levels.values_list("users", "position")) == [(10, 0), (40, 1), (45, 2), (50, 3), (60, 4)]


def test_levels_of_another_plan_cannot_be_edited(alice_client, project, environment, plan):
    # given: a level of another plan
    other = PlanLevel.objects.create(plan=plan, users=7, hold=10)
    _create(alice_client, project, _kind_data(environment, "steps"))
    mine = Plan.objects.get(name="Capacity")
    # when
    alice_client.post(
        reverse("projects:plan-edit", args=[mine.code]),
        _kind_data(environment, "steps", **levels_data([{**EXCHANGE[0], "id": other.pk, "users": 99}], initial=1)),
    )
    # then: the row is taken as a new level of this plan; the other plan's level is untouched
    other.refresh_from_db()
    assert (other.plan, other.users) == (plan, 7)
    assert not mine.levels.filter(pk=other.pk).exists()


def test_switching_away_from_steps_keeps_the_levels(alice_client, project, environment):
    # given
    _create(alice_client, project, _kind_data(environment, "steps"))
    plan = Plan.objects.get()
    # when
    alice_client.post(reverse("projects:plan-edit", args=[plan.code]), _kind_data(environment, "ramp"))
    # then
    plan.refresh_from_db()
    assert plan.profile_kind == "ramp"
    assert plan.levels.count() == 5
    assert "kind" not in plan.to_engine_dict()["profile"]


def test_a_steps_plan_without_levels_cannot_run(plan):
    # given
    plan.profile_kind = Plan.ProfileKind.STEPS
    plan.save()
    # then
    assert plan.problems() == ["Add at least one level to the steps profile."]


# The pages


def test_plan_form_offers_a_first_level_from_the_ramp(alice_client, plan):
    # when
    response = alice_client.get(reverse("projects:plan-edit", args=[plan.code]))
    # then
    levels = response.context["form"].levels
    assert len(levels.forms) == 1
    assert levels.forms[0].initial == {"users": 5, "ramp_up": 1.0, "hold": 5.0, "ramp_down": 0.0, "quiet": 0}
    page = response.content.decode()
    assert 'data-kinds="ramp constant pacing"' in page  # users: the script shows it for these kinds
    assert '<div data-kinds="steps" class="levels">' in page
    assert 'id="level-template"' in page


def test_plan_form_of_a_steps_plan_has_its_levels_and_an_empty_row(alice_client, project, environment):
    # given
    _create(alice_client, project, _kind_data(environment, "steps"))
    plan = Plan.objects.get()
    # when
    levels = alice_client.get(reverse("projects:plan-edit", args=[plan.code])).context["form"].levels
    # then
    assert [f.instance.users for f in levels.forms] == [20, 30, 40, 45, 50, None]
    assert levels.forms[-1].initial == {}


def test_plan_page_shows_the_profile_in_words_and_the_levels(alice_client, project, environment):
    # given
    _create(alice_client, project, _kind_data(environment, "steps"))
    plan = Plan.objects.get()
    # when
    page = alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    # then
    assert escape(WORDS["steps"]) in page
    assert "<dt>Total</dt><dd><strong>33 h 30 min</strong></dd>" in page
    assert '<td class="num">45</td><td class="num">1 h</td><td class="num">5 h</td>' in page


def test_lists_show_the_load(alice_client, project, environment):
    # given
    _create(alice_client, project, _kind_data(environment, "arrival_rate"))
    # when
    page = alice_client.get(reverse("projects:detail", args=[project.code])).content.decode()
    # then
    assert '<td class="num">20 iterations/s</td>' in page
