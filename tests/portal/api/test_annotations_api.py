"""Runs and tuning changes as Grafana annotations (issue 29): the plain list and the simple JSON protocol."""

from datetime import UTC, datetime, timedelta

import pytest

from portal.history.models import TuningChange
from portal.projects.models import Environment, Plan, Project
from portal.runs.models import Run
from tests.portal.api.conftest import bearer, session
from tests.portal.runs.factories import plan_run

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@pytest.fixture
def history(plan, environment, alice):
    """A night's run, a change applied the next morning, a run the next night, and one a week later."""
    first = plan_run(plan, start_at=T0, finished_at=T0 + timedelta(minutes=10), status=Run.Status.PASSED)
    change = TuningChange.objects.create(
        environment=environment,
        number=1,
        category="index",
        title="Index on the area field",
        edits=[{"key": "search.index", "value": "on"}],
        status=TuningChange.Status.APPLIED,
        applied_at=T0 + timedelta(hours=8),
        made_by=alice,
    )
    second = plan_run(plan, start_at=T0 + timedelta(days=1), finished_at=T0 + timedelta(days=1, minutes=10))
    later = plan_run(plan, start_at=T0 + timedelta(days=7), finished_at=T0 + timedelta(days=7, minutes=10))
    return first, change, second, later


def test_the_list_has_the_runs_and_changes_of_the_range_in_time_order(alice, history):
    first, change, second, _ = history

    response = session(alice).get(
        "/api/v1/annotations/", {"from": T0.isoformat(), "to": (T0 + timedelta(days=2)).isoformat()}
    )

    assert response.status_code == 200
    got = response.json()
    assert [a["time"] for a in got] == [ms(first.start_at), ms(change.applied_at), ms(second.start_at)]
    assert got[0]["timeEnd"] == ms(first.finished_at)
    assert got[0]["title"] == "Run #1 Smoke: passed" and "status:passed" in got[0]["tags"]
    assert got[1]["title"] == "Tuning change #1 Index on the area field"
    assert "search.index = on" in got[1]["text"] and "tuning-change" in got[1]["tags"]


def test_grafanas_milliseconds_and_a_project_filter_work_and_a_run_spanning_the_start_is_in(alice, history, team):
    first, change, _, _ = history
    other = Project.objects.create(team=team, name="Shop")
    env = Environment.objects.create(project=other, name="Shop staging", base_url="http://127.0.0.1:8002")
    shop_plan = Plan.objects.create(project=other, environment=env, name="Checkout", users=1, ramp_up=1, hold=5)
    plan_run(shop_plan, start_at=T0 + timedelta(minutes=1), finished_at=T0 + timedelta(minutes=20))

    window = {"from": ms(T0 + timedelta(minutes=5)), "to": ms(T0 + timedelta(hours=9))}
    both = session(alice).get("/api/v1/annotations/", window).json()
    intranet = session(alice).get("/api/v1/annotations/", {**window, "project": "Intranet"}).json()

    assert len(both) == 3  # the two runs still going at the window's start, and the change
    assert [a["time"] for a in intranet] == [ms(first.start_at), ms(change.applied_at)]


def test_another_teams_runs_and_changes_are_never_listed(charlie, history):
    window = {"from": T0.isoformat(), "to": (T0 + timedelta(days=10)).isoformat()}
    assert session(charlie).get("/api/v1/annotations/", window).json() == []


def test_a_token_reads_its_own_teams_annotations(token_secret, history):
    window = {"from": T0.isoformat(), "to": (T0 + timedelta(days=10)).isoformat()}
    got = bearer(token_secret("read")).get("/api/v1/annotations/", window).json()
    assert len(got) == 4


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"to": "2026-11-21T00:00:00Z"}, "start"),
        ({"from": "yesterday", "to": "2026-11-21T00:00:00Z"}, "start"),
        ({"from": "2026-11-21T00:00:00Z", "to": "2026-11-20T00:00:00Z"}, "end"),
        ({"from": "2020-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "end"),
    ],
)
def test_a_bad_range_is_a_400_naming_the_field(alice, query, field):
    response = session(alice).get("/api/v1/annotations/", query)
    assert response.status_code == 400
    assert field in response.json()["fields"]


def test_the_simple_json_data_source_tests_its_connection_and_queries_annotations(token_secret, history):
    first, change, second, _ = history
    client = bearer(token_secret("read"))

    assert client.get("/api/v1/grafana/").json()["status"] == "ok"
    body = {
        "range": {"from": "2026-11-20T00:00:00.000Z", "to": "2026-11-22T00:00:00.000Z", "raw": {"from": "now-2d"}},
        "annotation": {"name": "Plimsoll", "enable": True, "query": "project=Intranet"},
    }
    got = client.post("/api/v1/grafana/annotations", body, format="json").json()

    assert [a["time"] for a in got] == [ms(first.start_at), ms(change.applied_at), ms(second.start_at)]
    assert got[0]["annotation"]["name"] == "Plimsoll"
    bad = client.post("/api/v1/grafana/annotations", {"annotation": {}}, format="json")
    assert bad.status_code == 400


def test_anonymous_callers_get_401(client):
    assert client.get("/api/v1/annotations/", {"from": "2026-11-20", "to": "2026-11-21"}).status_code == 401
    assert client.post("/api/v1/grafana/annotations", {}, content_type="application/json").status_code == 401
