"""projects:plan-preview: the plan form's values in, the engine's picture of the load profile out."""

import json

import pytest
from django.urls import reverse

from portal.projects.models import Plan

from .data import levels_data
from .test_profiles import DURATIONS, EXCHANGE, WORDS, _kind_data

pytestmark = pytest.mark.django_db


def _preview(client, project, data, method="post"):
    return getattr(client, method)(reverse("projects:plan-preview", args=[project.code]), data)


@pytest.mark.parametrize(
    ("kind", "series", "windows"),
    [
        ("ramp", "users", [{"start": 30.0, "end": 330.0, "label": "Hold"}]),
        ("constant", "users", [{"start": 0.0, "end": 600.0, "label": "Hold"}]),
        ("pacing", "users", [{"start": 30.0, "end": 330.0, "label": "Hold"}]),
        ("arrival_rate", "rate", [{"start": 60.0, "end": 660.0, "label": "Hold"}]),
        (
            "steps",
            "users",
            [
                {"start": 3600.0 + i * 24300, "end": 21600.0 + i * 24300, "label": f"Level {i + 1}: {users} users"}
                for i, users in enumerate((20, 30, 40, 45, 50))
            ],
        ),
    ],
)
def test_preview_of_each_kind(alice_client, project, environment, kind, series, windows):
    # when
    response = _preview(alice_client, project, _kind_data(environment, kind))
    # then
    assert response.status_code == 200
    data = response.json()
    assert (data["kind"], data["duration"], data["description"]) == (kind, DURATIONS[kind], WORDS[kind])
    assert data["windows"] == windows
    assert len(data["t"]) == len(data[series]) >= 200
    assert data["t"][0] == 0 and data["t"][-1] == DURATIONS[kind]
    if kind == "arrival_rate":
        assert "users" not in data
        assert (data["rate"][0], max(data["rate"])) == (5.0, 20.0)
    else:
        assert max(data["users"]) == (50 if kind != "constant" else 30)


def test_preview_draws_what_the_ramp_does(alice_client, project, environment):
    # when
    data = _preview(alice_client, project, _kind_data(environment, "ramp")).json()
    users = dict(zip(data["t"], data["users"], strict=True))
    # then: all 50 users during the hold, none after the ramp-down
    assert users[30.0] == users[330.0 - 0.001] == 50
    assert users[340.0] == 0


def test_preview_ignores_what_is_not_the_profile(alice_client, project, environment, plan):
    # given: a name already taken, no environment, a bad threshold
    data = {**_kind_data(environment, "ramp", name=plan.name, threshold_apd_ms="-1"), "environment": ""}
    # when
    response = _preview(alice_client, project, data)
    # then
    assert response.status_code == 200
    assert response.json()["duration"] == 340


def test_preview_by_get(alice_client, project, environment):
    # when
    response = _preview(alice_client, project, _kind_data(environment, "constant"), method="get")
    # then
    assert response.status_code == 200
    assert response.json()["windows"] == [{"start": 0.0, "end": 600.0, "label": "Hold"}]


@pytest.mark.parametrize(
    ("kind", "fields", "errors"),
    [
        ("ramp", {"hold": "0"}, {"hold": ["Ensure this value is greater than or equal to 1."]}),
        ("ramp", {"users": ""}, {"users": ["This field is required."]}),
        ("arrival_rate", {"rate": "many"}, {"rate": ["Enter a number."]}),
        ("ramp", {"profile_kind": ""}, {"profile_kind": ["This field is required."]}),
        ("steps", levels_data([]), {"levels": ["Add at least one level."]}),
        (
            "steps",
            levels_data([EXCHANGE[0], {**EXCHANGE[1], "hold": "-1"}]),
            {"levels-1-hold": ["Ensure this value is greater than or equal to 1."]},
        ),
        (
            "ramp",
            {"hold": str(73 * 3600)},
            {"hold": ["Ramp-up, hold and ramp-down add up to 73 h; the longest run allowed is 72 h."]},
        ),
    ],
)
def test_preview_of_invalid_values_is_their_errors(alice_client, project, environment, kind, fields, errors):
    # when
    response = _preview(alice_client, project, _kind_data(environment, kind, **fields))
    # then
    assert response.status_code == 400
    assert response.json() == {"errors": errors}


def test_preview_of_an_edited_steps_plan(alice_client, project, environment):
    # given: a saved steps plan, whose form posts its levels' ids, one row removed
    alice_client.post(reverse("projects:plan-new", args=[project.code]), _kind_data(environment, "steps"))
    plan = Plan.objects.get()
    ids = plan.levels.values_list("id", flat=True)
    rows = [{**level, "id": pk, "plan": plan.pk} for level, pk in zip(EXCHANGE, ids, strict=True)]
    rows[0]["DELETE"] = "on"
    data = _kind_data(environment, "steps", **levels_data(rows, initial=5))
    # when
    response = _preview(alice_client, project, data)
    # then: drawn as the form stands, and nothing saved
    assert response.status_code == 200
    assert [w["label"] for w in response.json()["windows"]] == [
        f"Level {i}: {u} users" for i, u in enumerate((30, 40, 45, 50), start=1)
    ]
    assert plan.levels.count() == 5


def test_preview_without_the_engines_function(alice_client, project, environment, monkeypatch):
    # given: an engine from before previews
    from workers.engine import schedule

    monkeypatch.delattr(schedule, "preview")
    # when
    response = _preview(alice_client, project, _kind_data(environment, "ramp"))
    # then
    assert response.status_code == 501
    assert response.json() == {"errors": {"__all__": ["This version of the engine cannot preview load profiles yet."]}}


def test_a_viewer_may_preview(bob_client, project, environment):
    # when
    response = _preview(bob_client, project, _kind_data(environment, "ramp"))
    # then
    assert response.status_code == 200


def test_charlie_gets_404(charlie_client, project, environment):
    # when
    responses = [
        _preview(charlie_client, project, _kind_data(environment, "ramp")),
        _preview(charlie_client, project, _kind_data(environment, "ramp"), method="get"),
    ]
    # then
    assert [r.status_code for r in responses] == [404, 404]


def test_anonymous_is_sent_to_log_in(client, project, environment):
    # when
    response = _preview(client, project, _kind_data(environment, "ramp"))
    # then
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_only_get_and_post(alice_client, project):
    # when
    response = alice_client.put(reverse("projects:plan-preview", args=[project.code]))
    # then
    assert response.status_code == 405


def _embedded(page: str) -> dict | None:
    start = page.index('<script id="profile-preview-data" type="application/json">') + len(
        '<script id="profile-preview-data" type="application/json">'
    )
    return json.loads(page[start : page.index("</script>", start)])


def test_plan_page_embeds_the_preview(alice_client, plan):
    # when
    page = alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    # then
    data = _embedded(page)
    assert data["windows"] == [{"start": 1.0, "end": 6.0, "label": "Hold"}]
    assert 'id="profile-chart"' in page
    assert "js/charts/profile-preview.js" in page


def test_plan_form_embeds_the_saved_preview_and_asks_for_more(alice_client, plan, project):
    # when
    page = alice_client.get(reverse("projects:plan-edit", args=[plan.code])).content.decode()
    # then
    assert _embedded(page)["duration"] == 6
    assert f'data-preview-url="{reverse("projects:plan-preview", args=[project.code])}"' in page
    assert "js/plan-form.js" in page


def test_new_plan_form_previews_the_default_profile(alice_client, project, environment):
    # when
    page = alice_client.get(reverse("projects:plan-new", args=[project.code])).content.decode()
    # then
    assert _embedded(page)["description"] == "20 users: 10 s ramp-up, 1 min measured, 0 s ramp-down"


def test_plan_page_without_the_engines_function_says_so(alice_client, plan, monkeypatch):
    # given
    from workers.engine import schedule

    monkeypatch.delattr(schedule, "preview")
    # when
    page = alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    # then
    assert "No chart of this profile" in page
    assert "profile-preview.js" not in page


@pytest.mark.parametrize("kind", ["ramp", "pacing", "arrival_rate", "steps"])
def test_the_preview_is_its_typed_payload(alice_client, project, environment, kind):
    """portal/projects/payloads.py ProfilePreview: every key the preview sends is typed, the required ones there."""
    import typing

    from portal.projects.payloads import ProfilePreview

    data = _preview(alice_client, project, _kind_data(environment, kind)).json()
    typed = set(typing.get_type_hints(ProfilePreview))
    assert ProfilePreview.__required_keys__ <= set(data) <= typed
    assert {"users", "rate", "max_users"} & set(data)  # a curve to draw: users or rate
