"""Schedules and their fires through the API (issue 24, item 6): the schedule page's rules, as code."""

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from portal.projects.models import Environment, Plan, Project
from portal.schedules import services
from portal.schedules.models import Schedule, ScheduleFire

from .conftest import PERSONAS, READERS, bearer, expected, session

pytestmark = pytest.mark.django_db

EDITORS = ("owner", "editor")


def nightly(plan, **changes) -> Schedule:
    fields = {
        "project": plan.project,
        "plan": plan,
        "kind": "daily",
        "at_time": time(2, 0),
        "every_hours": None,
        "cron": "",
        "time_zone": "Europe/Berlin",
        "enabled": True,
        "ends_on": None,
        "busy_wait_minutes": 30,
        "catch_up_hours": 2.0,
    }
    return services.schedule_save(**{**fields, **changes})


def other_team_plan(charlie) -> Plan:
    team = charlie.teams.get()
    project = Project.objects.create(team=team, name="Elsewhere")
    environment = Environment.objects.create(project=project, name="Theirs", base_url="http://127.0.0.1:8002")
    return Plan.objects.create(project=project, environment=environment, name="Theirs", users=1, ramp_up=1, hold=1)


def test_a_schedule_created_through_the_api_is_the_one_the_page_shows(alice, plan):
    # when
    response = session(alice).post(
        "/api/v1/schedules/",
        {"plan": str(plan.code), "kind": "weekdays", "at_time": "02:30", "time_zone": "Europe/Berlin"},
        format="json",
    )

    # then: saved by the page's service, with the page's defaults, and answered as stored
    assert response.status_code == 201, response.content
    body = response.json()
    schedule = Schedule.objects.get()
    assert (schedule.cron, schedule.time_zone, schedule.busy_wait_minutes) == ("30 2 * * 1-5", "Europe/Berlin", 30)
    assert body["code"] == str(schedule.code)
    assert (body["project"], body["plan"], body["plan_name"]) == (str(plan.project.code), str(plan.code), "Smoke")
    assert (body["kind"], body["at_time"], body["cron"], body["enabled"]) == (
        "weekdays",
        "02:30:00",
        "30 2 * * 1-5",
        True,
    )
    assert "Monday through Friday" in body["description"]
    # the next fires are at 02:30 in Berlin, on weekdays
    assert len(body["next_fires"]) == 5
    for fire in body["next_fires"]:
        berlin = datetime.fromisoformat(fire.replace("Z", "+00:00")).astimezone(ZoneInfo("Europe/Berlin"))
        assert (berlin.hour, berlin.minute) == (2, 30) and berlin.weekday() < 5
    assert body["recent_fires"] == []
    assert session(alice).get(f"/api/v1/schedules/{schedule.code}/").json() == {
        **body,
        "next_fires": body["next_fires"],
    }


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"kind": "daily", "at_time": None}, "at_time", "time"),
        ({"kind": "hours", "every_hours": None}, "every_hours", ""),
        ({"kind": "hours", "every_hours": 24}, "every_hours", "less than or equal to 23"),
        ({"kind": "cron", "cron": "0 2 * *"}, "cron", "five fields"),
        ({"kind": "cron", "cron": "0 25 * * *"}, "cron", ""),
        ({"time_zone": "Mars/Olympus"}, "time_zone", "Mars/Olympus"),
        ({"busy_wait_minutes": 24 * 60 + 1}, "busy_wait_minutes", ""),
        ({"catch_up_hours": -1}, "catch_up_hours", ""),
        ({"kind": "fortnightly"}, "kind", ""),
        ({"colour": "red"}, "colour", "Unknown field."),
    ],
)
def test_bad_input_is_a_400_in_the_apis_shape_and_saves_nothing(alice, plan, changes, field, message):
    body = {"plan": str(plan.code), "kind": "daily", "at_time": "02:00", **changes}

    response = session(alice).post("/api/v1/schedules/", body, format="json")

    assert response.status_code == 400, response.content
    error = response.json()
    assert (error["status"], error["code"]) == (400, "invalid")
    assert field in error["fields"], error
    assert message in " ".join(error["fields"][field])
    assert not Schedule.objects.exists()


def test_the_apis_messages_are_the_forms(alice, plan):
    from portal.schedules.forms import ScheduleForm

    form = ScheduleForm(
        {"plan": plan.pk, "kind": "daily", "time_zone": "UTC", "busy_wait_minutes": 30, "catch_up_hours": 2},
        project=plan.project,
    )
    assert not form.is_valid()

    response = session(alice).post("/api/v1/schedules/", {"plan": str(plan.code), "kind": "daily"}, format="json")

    assert response.json()["fields"]["at_time"] == list(form.errors["at_time"])


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_and_owners_create_schedules(persona, request, plan):
    response = persona.post(
        "/api/v1/schedules/", {"plan": str(plan.code), "kind": "hours", "every_hours": 6}, format="json"
    )

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=EDITORS), (name, response.content)
    assert Schedule.objects.exists() == (name in EDITORS)


def test_a_write_token_creates_and_a_read_token_does_not(alice, team, plan):
    from portal.accounts.services import token_create

    read = bearer(token_create(user=alice, team=team, name="r", scope="read")[1])
    write = bearer(token_create(user=alice, team=team, name="w", scope="write")[1])
    body = {"plan": str(plan.code), "kind": "cron", "cron": "15 */4 * * *"}

    assert read.post("/api/v1/schedules/", body, format="json").status_code == 403
    assert write.post("/api/v1/schedules/", body, format="json").status_code == 201
    assert Schedule.objects.get().cron == "15 */4 * * *"


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_every_member_reads_schedules_and_fires_and_nobody_else(persona, request, plan):
    schedule = nightly(plan)
    ScheduleFire.objects.create(schedule=schedule, due_at=timezone.now(), outcome="skipped", reason="busy")

    listed = persona.get("/api/v1/schedules/")
    one = persona.get(f"/api/v1/schedules/{schedule.code}/")
    fires = persona.get(f"/api/v1/schedules/{schedule.code}/fires/")

    name = request.node.callspec.params["persona"]
    assert one.status_code == expected(name, ok=200, allowed=READERS)
    assert fires.status_code == expected(name, ok=200, allowed=READERS)
    if name in READERS:
        assert [s["code"] for s in listed.json()["results"]] == [str(schedule.code)]
        assert [f["reason"] for f in fires.json()] == ["busy"]
    elif name == "outsider":
        assert listed.json()["results"] == []


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_and_owners_change_and_delete_schedules(persona, request, plan):
    schedule = nightly(plan)
    name = request.node.callspec.params["persona"]

    changed = persona.patch(f"/api/v1/schedules/{schedule.code}/", {"enabled": False}, format="json")
    schedule.refresh_from_db()
    assert changed.status_code == expected(name, ok=200, allowed=EDITORS), (name, changed.content)
    assert schedule.enabled == (name not in EDITORS)

    deleted = persona.delete(f"/api/v1/schedules/{schedule.code}/")
    assert deleted.status_code == expected(name, ok=204, allowed=EDITORS)
    assert Schedule.objects.exists() == (name not in EDITORS)


def test_a_patch_keeps_the_fields_it_does_not_name_and_re_enabling_counts_from_now(alice, plan):
    schedule = nightly(plan, kind="hours", at_time=time(0, 15), every_hours=6, ends_on=datetime(2030, 1, 1).date())
    long_ago = timezone.now() - timedelta(days=3)
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False, last_due_at=long_ago, disabled_reason="paused")

    response = session(alice).patch(f"/api/v1/schedules/{schedule.code}/", {"enabled": True}, format="json")

    assert response.status_code == 200, response.content
    schedule.refresh_from_db()
    assert (schedule.kind, schedule.every_hours, schedule.cron, schedule.time_zone) == (
        "hours",
        6,
        "15 */6 * * *",
        "Europe/Berlin",
    )
    assert str(schedule.ends_on) == "2030-01-01" and schedule.enabled and schedule.disabled_reason == ""
    # the paused days are not "missed": fires count from now
    assert schedule.last_due_at > timezone.now() - timedelta(minutes=1)


def test_a_put_changes_every_field(alice, plan):
    schedule = nightly(plan)
    body = {
        "plan": str(plan.code),
        "kind": "cron",
        "cron": "0 3 * * 6",
        "time_zone": "America/New_York",
        "enabled": True,
        "busy_wait_minutes": 0,
        "catch_up_hours": 0.5,
        "ends_on": "2031-06-30",
    }

    response = session(alice).put(f"/api/v1/schedules/{schedule.code}/", body, format="json")

    assert response.status_code == 200, response.content
    schedule.refresh_from_db()
    assert (schedule.kind, schedule.cron, schedule.at_time, schedule.time_zone) == (
        "cron",
        "0 3 * * 6",
        None,
        "America/New_York",
    )
    assert (schedule.busy_wait_minutes, schedule.catch_up_hours, str(schedule.ends_on)) == (0, 0.5, "2031-06-30")


def test_a_plan_of_another_team_is_a_404_and_of_another_project_a_400(alice, charlie, plan, team):
    theirs = other_team_plan(charlie)
    response = session(alice).post("/api/v1/schedules/", {"plan": str(theirs.code), "kind": "hours", "every_hours": 2})
    assert response.status_code == 404
    assert not Schedule.objects.exists()

    schedule = nightly(plan)
    other_project = Project.objects.create(team=team, name="Second")
    other_plan = Plan.objects.create(
        project=other_project, environment=plan.environment, name="Other", users=1, ramp_up=1, hold=1
    )
    moved = session(alice).patch(f"/api/v1/schedules/{schedule.code}/", {"plan": str(other_plan.code)}, format="json")
    assert moved.status_code == 400
    assert "plan" in moved.json()["fields"]
    schedule.refresh_from_db()
    assert schedule.plan == plan


def test_the_list_filters_by_project_and_plan(alice, plan, team):
    mine = nightly(plan)
    second = Plan.objects.create(
        project=plan.project, environment=plan.environment, name="Soak", users=1, ramp_up=1, hold=1
    )
    theirs = nightly(second)
    other_project = Project.objects.create(team=team, name="Second")
    client = session(alice)

    def codes(query):
        response = client.get(f"/api/v1/schedules/{query}")
        assert response.status_code == 200, response.content
        return sorted(s["code"] for s in response.json()["results"])

    assert codes("") == sorted([str(mine.code), str(theirs.code)])
    assert codes(f"?plan={plan.code}") == [str(mine.code)]
    assert codes(f"?project={plan.project.code}&plan={second.code}") == [str(theirs.code)]
    assert codes(f"?project={other_project.code}") == []
    assert client.get("/api/v1/schedules/?plan=not-a-code").status_code == 400


def test_fires_say_what_became_of_each_and_the_list_holds_the_last_five(alice, plan, finished_run):
    schedule = nightly(plan)
    start = datetime(2026, 11, 1, 1, 0, tzinfo=UTC)
    for day in range(7):
        ScheduleFire.objects.create(
            schedule=schedule, due_at=start + timedelta(days=day), outcome="skipped", reason=f"day {day}"
        )
    ScheduleFire.objects.create(
        schedule=schedule, due_at=start + timedelta(days=8), outcome="started", run=finished_run
    )
    client = session(alice)

    fires = client.get(f"/api/v1/schedules/{schedule.code}/fires/").json()
    listed = client.get("/api/v1/schedules/").json()["results"][0]

    assert len(fires) == 8
    assert fires[0]["outcome"] == "started"
    assert (fires[0]["run"], fires[0]["run_number"]) == (str(finished_run.code), finished_run.number)
    assert [f["reason"] for f in fires[1:]] == [f"day {d}" for d in range(6, -1, -1)]
    assert fires[1]["run"] is None
    assert [f["due_at"] for f in listed["recent_fires"]] == [f["due_at"] for f in fires[:5]]


def test_the_list_takes_a_fixed_number_of_queries(alice, plan, django_assert_max_num_queries):
    for hour in range(6):
        schedule = nightly(plan, at_time=time(hour, 0))
        ScheduleFire.objects.create(schedule=schedule, due_at=timezone.now(), outcome="missed")
    client = session(alice)
    client.get("/api/v1/schedules/")  # warm the session

    with django_assert_max_num_queries(12):
        response = client.get("/api/v1/schedules/")
    assert len(response.json()["results"]) == 6
