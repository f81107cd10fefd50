"""The beat tick against the real database: each documented outcome, with the fire rows to prove it."""

import threading
from datetime import timedelta

import pytest
from django.db import connection

from portal.runs.models import Run
from portal.schedules.models import Schedule, ScheduleFire
from portal.schedules.services import schedule_set_enabled, schedules_tick

from .conftest import utc

pytestmark = pytest.mark.django_db
FIRE = utc(2026, 5, 1, 2)


def fires(schedule):
    return list(ScheduleFire.objects.filter(schedule=schedule).order_by("due_at").values_list("due_at", "outcome"))


def test_a_due_fire_starts_one_run_that_says_the_schedule_started_it(nightly, plan):
    schedules_tick(now=FIRE + timedelta(seconds=5))
    fire = ScheduleFire.objects.get(schedule=nightly)
    assert (fire.due_at, fire.outcome) == (FIRE, "started")
    run = fire.run
    assert run.plan == plan and run.created_by is None
    assert Run.objects.get(id=run.id).schedule_fire.schedule == nightly


def test_a_tick_delivered_twice_gives_one_run(nightly):
    schedules_tick(now=FIRE + timedelta(seconds=5))
    schedules_tick(now=FIRE + timedelta(seconds=5))
    schedules_tick(now=FIRE + timedelta(seconds=15))
    assert fires(nightly) == [(FIRE, "started")]
    assert Run.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_beats_at_once_give_one_run(nightly):
    barrier = threading.Barrier(2)
    errors = []

    def beat():
        try:
            barrier.wait()
            schedules_tick(now=FIRE + timedelta(seconds=5))
        except Exception as exc:  # reported below: a thread's exception would be lost
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert fires(nightly) == [(FIRE, "started")]
    assert Run.objects.count() == 1


def test_busy_environment_waits_then_skips_with_the_reason(nightly, plan, alice):
    from portal.runs.services import run_create

    busy = run_create(plan=plan, user=alice)  # queued: it holds the environment
    schedules_tick(now=FIRE + timedelta(seconds=5))
    fire = ScheduleFire.objects.get(schedule=nightly)
    assert fire.outcome == "waiting" and f"Run #{busy.number} is on the environment" in fire.reason
    schedules_tick(now=FIRE + timedelta(minutes=20))
    assert ScheduleFire.objects.get(schedule=nightly).outcome == "waiting"
    schedules_tick(now=FIRE + timedelta(minutes=31))
    fire.refresh_from_db()
    assert fire.outcome == "skipped"
    assert f"still busy with run #{busy.number} 30 min after the fire time" in fire.reason
    assert Run.objects.count() == 1


def test_busy_environment_freed_in_time_starts_the_run(nightly, plan, alice):
    from portal.runs.services import run_create

    busy = run_create(plan=plan, user=alice)
    schedules_tick(now=FIRE + timedelta(seconds=5))
    Run.objects.filter(id=busy.id).update(status=Run.Status.PASSED)
    schedules_tick(now=FIRE + timedelta(minutes=12))
    fire = ScheduleFire.objects.get(schedule=nightly)
    assert fire.outcome == "started" and fire.run_id != busy.id


def test_beat_down_across_a_fire_runs_it_once_if_not_too_late(nightly):
    schedules_tick(now=FIRE + timedelta(minutes=90))
    schedules_tick(now=FIRE + timedelta(minutes=90, seconds=10))
    assert fires(nightly) == [(FIRE, "started")]
    assert Run.objects.count() == 1


def test_beat_down_for_three_nights_runs_no_burst(nightly):
    schedules_tick(now=FIRE + timedelta(days=2, hours=1))
    assert fires(nightly) == [
        (FIRE, "missed"),
        (FIRE + timedelta(days=1), "missed"),
        (FIRE + timedelta(days=2), "started"),
    ]
    assert Run.objects.count() == 1


def test_too_late_is_recorded_as_missed(nightly):
    schedules_tick(now=FIRE + timedelta(hours=3))
    fire = ScheduleFire.objects.get(schedule=nightly)
    assert fire.outcome == "missed" and "more than the 2 h" in fire.reason
    assert Run.objects.count() == 0


def test_paused_schedule_does_not_fire_and_enabling_does_not_catch_up(nightly):
    schedule_set_enabled(schedule=nightly, enabled=False)
    schedules_tick(now=FIRE + timedelta(seconds=5))
    assert fires(nightly) == []
    schedule_set_enabled(schedule=nightly, enabled=True, now=FIRE + timedelta(minutes=5))
    schedules_tick(now=FIRE + timedelta(minutes=6))
    assert fires(nightly) == []  # the paused fire is not "missed": nobody asked for it


def test_deleted_plan_disables_the_schedule_with_the_reason(nightly, plan):
    plan.delete()
    schedules_tick(now=FIRE + timedelta(seconds=5))
    nightly.refresh_from_db()
    assert not nightly.enabled
    assert nightly.disabled_reason == "Its plan “Smoke” was deleted; choose another plan to enable it again."


def test_target_no_longer_allowed_disables_the_schedule(nightly, settings):
    settings.PLIMSOLL_ALLOWED_TARGETS = "10.9.8.0/24"
    schedules_tick(now=FIRE + timedelta(seconds=5))
    nightly.refresh_from_db()
    fire = ScheduleFire.objects.get(schedule=nightly)
    assert fire.outcome == "skipped" and "no longer allowed" in fire.reason
    assert not nightly.enabled and "no longer allowed" in nightly.disabled_reason
    assert Run.objects.count() == 0


def test_end_date_ends_the_schedule(nightly):
    Schedule.objects.filter(id=nightly.id).update(ends_on=FIRE.date())
    schedules_tick(now=FIRE + timedelta(seconds=5))
    schedules_tick(now=FIRE + timedelta(days=1, seconds=5))
    nightly.refresh_from_db()
    assert fires(nightly) == [(FIRE, "started")]
    assert not nightly.enabled and "end date (2026-05-01) has passed" in nightly.disabled_reason


def test_seed_demo_gets_one_paused_nightly_soak():
    from django.core.management import call_command

    call_command("seed_demo")
    call_command("seed_demo")
    schedule = Schedule.objects.get()
    assert schedule.plan.name.startswith("Soak")
    assert (schedule.cron, schedule.time_zone, schedule.enabled) == ("0 2 * * *", "UTC", False)
    schedules_tick(now=schedule.last_due_at + timedelta(days=2))
    assert not ScheduleFire.objects.exists()  # paused: ready to enable, fires nothing
