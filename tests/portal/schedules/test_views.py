"""Schedule pages: the form and its preview, the fires, access for alice, bob (viewer) and charlie (outsider)."""

from datetime import timedelta

import pytest
from django.urls import reverse

from portal.schedules.models import Schedule, ScheduleFire
from portal.schedules.services import schedules_tick

from .conftest import utc

pytestmark = pytest.mark.django_db

FORM = {
    "kind": "weekdays",
    "at_time": "02:30",
    "time_zone": "Europe/Berlin",
    "enabled": "on",
    "busy_wait_minutes": "30",
    "catch_up_hours": "2",
}


def test_alice_adds_a_schedule(alice_client, project, plan):
    response = alice_client.post(reverse("schedules:new", args=[project.code]), {**FORM, "plan": plan.id})
    assert response.status_code == 302
    schedule = Schedule.objects.get()
    assert (schedule.cron, schedule.time_zone, schedule.plan) == ("30 2 * * 1-5", "Europe/Berlin", plan)
    page = alice_client.get(reverse("schedules:project", args=[project.code])).content.decode()
    assert "At 02:30, Monday through Friday (Europe/Berlin)" in page
    assert "waits up to 30 min" in page and "less than 2 h late" in page


def test_bad_cron_is_a_clear_400(alice_client, project, plan):
    data = {**FORM, "kind": "cron", "cron": "0 25 * * *", "plan": plan.id}
    response = alice_client.post(reverse("schedules:new", args=[project.code]), data)
    assert response.status_code == 400
    assert "Not a valid cron expression" in response.content.decode()
    assert not Schedule.objects.exists()


def test_preview_reads_the_schedule_and_its_next_five_fires(alice_client, project):
    response = alice_client.get(
        reverse("schedules:preview", args=[project.code]), {**FORM, "kind": "hours", "every_hours": "6"}
    )
    page = response.content.decode()
    assert "At 30 minutes past the hour, every 6 hours (Europe/Berlin)" in page
    assert "CET</li>" in page  # fire times in the schedule's time zone
    assert page.count("<li>") == 5


def test_preview_of_a_bad_time_zone_says_so(alice_client, project):
    response = alice_client.get(reverse("schedules:preview", args=[project.code]), {**FORM, "time_zone": "Mars/X"})
    assert response.status_code == 200 and "is not a time zone name" in response.content.decode()


def test_fires_and_who_started_the_run_are_shown(alice_client, nightly, project):
    schedules_tick(now=utc(2026, 5, 1, 2, 0, 5))
    schedules_tick(now=utc(2026, 5, 3, 5))  # two nights later, too late: missed
    fire = ScheduleFire.objects.get(outcome="started")
    page = alice_client.get(reverse("schedules:project", args=[project.code])).content.decode()
    assert f"#{fire.run.number}" in page and "more than the 2 h" in page
    run_page = alice_client.get(fire.run.get_absolute_url()).content.decode()
    assert "started by the schedule" in run_page and "At 02:00 (UTC)" in run_page


def test_list_page_query_count_is_bounded(alice_client, nightly, project, plan, django_assert_max_num_queries):
    from portal.schedules.services import schedule_save

    for hour in range(5):
        schedule_save(
            project=project, plan=plan, kind="hours", at_time=None, every_hours=hour + 1, cron="",
            time_zone="UTC", enabled=True, ends_on=None, busy_wait_minutes=30, catch_up_hours=2,
            now=utc(2026, 4, 30, 12),
        )  # fmt: skip
    schedules_tick(now=utc(2026, 5, 1, 2, 0, 5))
    Schedule.objects.update(last_due_at=utc(2026, 4, 30, 12))
    schedules_tick(now=utc(2026, 5, 2, 2, 0, 5))
    with django_assert_max_num_queries(12):
        response = alice_client.get(reverse("schedules:project", args=[project.code]))
    assert response.status_code == 200


def test_pause_and_enable(alice_client, nightly):
    alice_client.post(reverse("schedules:toggle", args=[nightly.code]))
    nightly.refresh_from_db()
    assert not nightly.enabled
    alice_client.post(reverse("schedules:toggle", args=[nightly.code]))
    nightly.refresh_from_db()
    assert nightly.enabled


def test_viewer_reads_but_cannot_change(bob_client, nightly, project, plan):
    assert bob_client.get(reverse("schedules:project", args=[project.code])).status_code == 200
    assert bob_client.post(reverse("schedules:toggle", args=[nightly.code])).status_code == 403
    assert bob_client.post(reverse("schedules:delete", args=[nightly.code])).status_code == 403
    response = bob_client.post(reverse("schedules:new", args=[project.code]), {**FORM, "plan": plan.id})
    assert response.status_code == 403
    response = bob_client.post(reverse("schedules:edit", args=[nightly.code]), {**FORM, "plan": plan.id})
    assert response.status_code == 403
    assert Schedule.objects.get().enabled and Schedule.objects.count() == 1


def test_outsider_gets_404_everywhere(charlie_client, nightly, project, plan):
    for url in [
        reverse("schedules:project", args=[project.code]),
        reverse("schedules:preview", args=[project.code]),
        reverse("schedules:edit", args=[nightly.code]),
    ]:
        assert charlie_client.get(url).status_code == 404
    for url in [reverse("schedules:toggle", args=[nightly.code]), reverse("schedules:delete", args=[nightly.code])]:
        assert charlie_client.post(url).status_code == 404
    response = charlie_client.post(reverse("schedules:new", args=[project.code]), {**FORM, "plan": plan.id})
    assert response.status_code == 404


def test_plan_of_another_project_cannot_be_chosen(alice_client, project, plan, team):
    from portal.projects.models import Project

    other = Project.objects.create(team=team, name="Other")
    response = alice_client.post(reverse("schedules:new", args=[other.code]), {**FORM, "plan": plan.id})
    assert response.status_code == 400 and not Schedule.objects.exists()


def test_edit_changes_the_timing_and_counts_from_now(alice_client, nightly, plan):
    data = {**FORM, "kind": "cron", "cron": "15 3 * * *", "time_zone": "UTC", "plan": plan.id}
    response = alice_client.post(reverse("schedules:edit", args=[nightly.code]), data)
    assert response.status_code == 302
    nightly.refresh_from_db()
    assert nightly.cron == "15 3 * * *"
    assert nightly.last_due_at > utc(2026, 5, 1) - timedelta(days=1)


def test_alice_pins_a_baseline_and_bob_cannot(alice_client, bob, nightly, plan, client):
    from portal.schedules.models import Baseline

    url = reverse("schedules:baseline", args=[nightly.code])
    data = {"kind": "last_n", "last_n": "5", "tolerance_pct": "15"}
    assert alice_client.post(url, data).status_code == 302
    baseline = Baseline.objects.get(plan=plan)
    assert (baseline.kind, baseline.last_n, baseline.tolerance_pct) == ("last_n", 5, 15.0)
    page = alice_client.get(nightly.get_absolute_url()).content.decode()
    assert "the last 5 valid runs before it" in page and "more than 15 % worse" in page
    client.force_login(bob)
    assert client.post(url, {**data, "last_n": "2"}).status_code == 403
    assert Baseline.objects.get(plan=plan).last_n == 5


def test_a_run_of_another_plan_cannot_be_pinned(alice_client, nightly, plan, project, environment):
    from portal.projects.models import Plan
    from portal.schedules.models import Baseline
    from tests.portal.runs.factories import plan_run

    other = Plan.objects.create(project=project, environment=environment, name="Other", users=1, hold=1)
    run = plan_run(other, status="passed", start_at=None)
    url = reverse("schedules:baseline", args=[nightly.code])
    response = alice_client.post(url, {"kind": "run", "run": run.id, "last_n": "3", "tolerance_pct": "10"}, follow=True)
    assert "Select a valid choice" in response.content.decode()
    assert not Baseline.objects.exists()


def test_run_page_and_schedule_page_show_the_verdict(alice_client, nightly):
    from portal.schedules.models import RunVerdict

    schedules_tick(now=utc(2026, 5, 1, 2, 0, 5))
    run = ScheduleFire.objects.get().run
    RunVerdict.objects.create(
        run=run,
        verdict="regressed",
        headline="Run #1 regressed against Baseline: Search APD 40 ms → 200 ms.",
        rows=[{"page": "Search", "figure": "APD", "verdict": "regressed", "before": "40 ms", "after": "200 ms",
               "change": "400 % more", "noise": "±2 ms", "basis": ""}],
    )  # fmt: skip
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'id="baseline-verdict"' in page and "Search APD 40 ms → 200 ms" in page
    listing = alice_client.get(reverse("schedules:edit", args=[nightly.code])).content.decode()
    assert "verdict-regressed" in listing


def test_morning_view_has_the_trend_of_the_last_fires(alice_client, nightly, project):
    import json

    from portal.runs.models import Run

    for day in range(3):
        schedules_tick(now=utc(2026, 5, 1 + day, 2, 0, 5))
        fire = ScheduleFire.objects.get(due_at=utc(2026, 5, 1 + day, 2))
        Run.objects.filter(id=fire.run_id).update(
            status="passed", summary={"totals": {"apd_ms": 100.0 + day, "pages_per_s": 20.0 - day}}
        )
    page = alice_client.get(reverse("schedules:project", args=[project.code])).content.decode()
    data = json.loads(page.split('<script id="schedule-sparklines" type="application/json">')[1].split("</script>")[0])
    points = data[str(nightly.code)]
    assert [(p["apd_ms"], p["pages_per_s"]) for p in points] == [(100.0, 20.0), (101.0, 19.0), (102.0, 18.0)]
    assert 'class="schedule-sparkline"' in page and "js/charts/schedule-sparklines.js" in page


def test_a_baseline_of_the_last_run_reads_in_the_singular(alice_client, nightly, plan):
    url = reverse("schedules:baseline", args=[nightly.code])
    assert alice_client.post(url, {"kind": "last_n", "last_n": "1", "tolerance_pct": "10"}).status_code == 302
    page = alice_client.get(nightly.get_absolute_url()).content.decode()
    assert "the last valid run before it" in page and "the last 1 valid runs" not in page
