"""Every kind of load profile in the registry (workers/engine/profiles.py) reaches the engine, the plan's
storage, the form, the API and the docs: a new kind that one of them does not know fails here."""

import re
from pathlib import Path

import pytest
from django.urls import reverse

from portal.projects import profiles
from portal.projects.models import Plan
from tests.portal.api.conftest import session
from workers.engine import profiles as engine_profiles
from workers.engine.plan import Plan as EnginePlan
from workers.engine.schedule import measurement_windows, preview, total_duration

from .data import levels_data, plan_data

pytestmark = pytest.mark.django_db

KINDS = list(engine_profiles.KINDS.values())
DOCS = Path(__file__).resolve().parents[3] / "docs" / "plan-format.md"


def _engine_plan(profile: dict) -> EnginePlan:
    return EnginePlan.from_dict(
        {"base_url": "http://127.0.0.1:9", "test_cases": [{"name": "a", "steps": [{"name": "a", "path": "/"}]}],
         "profile": profile}
    )  # fmt: skip


def _values(kind) -> dict:
    """The kind's example as flat parameters (the plan's columns)."""
    return {key: kind.example.get(key) for key in kind.fields}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_the_engine_parses_each_kind_and_its_shape_adds_up(kind):
    profile = _engine_plan(kind.example).profile
    assert engine_profiles.kind_of(profile) is kind
    assert kind.to_dict(profile)["kind"] == kind.name
    assert _engine_plan(kind.to_dict(profile)).profile == profile  # its own output parses back the same
    assert total_duration(profile) == kind.duration(profile) > 0
    shape = preview(profile, points=20)
    assert shape["kind"] == kind.name and shape["duration"] == kind.duration(profile)
    assert ("rate" if kind.open_model else "users") in shape
    assert shape["windows"] and [(w["start"], w["end"]) for w in shape["windows"]] == [
        (a, b) for a, b, _ in measurement_windows(profile)
    ]
    assert kind.describe(profile) and kind.load_words(profile) and kind.cli_words(profile)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_the_docs_have_a_row_for_each_kind_naming_its_keys(kind):
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith(f"| `{kind.name}` |")]
    assert len(rows) == 1, f"docs/plan-format.md has no row for the {kind.name} profile"
    for key in kind.required:
        assert f"`{key}`" in rows[0], f"the {kind.name} row does not name {key}"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_the_form_offers_each_kind_and_saves_it(kind, alice_client, project, environment):
    new = reverse("projects:plan-new", args=[project.code])
    page = alice_client.get(new).content.decode()
    assert f'<option value="{kind.name}"' in page
    assert re.search(rf'<p data-kinds="{kind.name}">', page), f"no help paragraph for {kind.name}"

    fields = {key: "" if value is None else str(value) for key, value in _values(kind).items()}
    levels = levels_data(kind.example.get("levels", ()))
    response = alice_client.post(new, {**plan_data(environment, profile_kind=kind.name, **fields), **levels})

    assert response.status_code == 302, response.content.decode()[:2000]
    plan = Plan.objects.get(name="Capacity")
    assert plan.kind is kind
    expected = _engine_plan(kind.example).profile
    assert _engine_plan(plan.profile_dict()).profile == expected
    assert plan.duration == kind.duration(expected)
    assert plan.peak_users == kind.peak_users(expected)
    assert plan.profile_description == kind.describe(expected, profiles.WORDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_the_api_takes_each_kind(kind, alice, project, environment, test_case):
    document = {
        "project": str(project.code),
        "environment": str(environment.code),
        "name": f"{kind.name} plan",
        "profile_kind": kind.name,
        **_values(kind),
        "levels": kind.example.get("levels", []),
        "mix": [{"test_case": str(test_case.code), "weight": 1}],
    }
    response = session(alice).post("/api/v1/plans/", document, format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    expected = _engine_plan(kind.example).profile
    assert body["profile_kind"] == kind.name and body["problems"] == []
    assert body["duration_s"] == kind.duration(expected)
    plan = Plan.objects.get(code=body["code"])
    assert _engine_plan(plan.to_engine_dict()["profile"]).profile == expected


def test_the_choices_are_the_registry_in_the_forms_order():
    assert [value for value, _ in Plan._meta.get_field("profile_kind").choices] == [
        kind.name for kind in sorted(KINDS, key=lambda k: k.position)
    ]
    assert Plan.ProfileKind.RAMP == "ramp" and Plan.PROFILE_FIELDS["steps"] == ()
