"""The scheduler's decisions with explicit clocks: what is due, what was missed, when to skip."""

from datetime import UTC, date, datetime, time, timedelta

import pytest

from portal.schedules import timing

BERLIN = "Europe/Berlin"


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def test_simple_forms_become_cron_and_read_in_words():
    assert timing.cron_for(kind="daily", at=time(2, 0)) == "0 2 * * *"
    assert timing.cron_for(kind="weekdays", at=time(2, 30)) == "30 2 * * 1-5"
    assert timing.cron_for(kind="hours", every_hours=6) == "0 */6 * * *"
    assert timing.describe("0 2 * * *", BERLIN) == "At 02:00 (Europe/Berlin)"
    assert timing.describe("30 2 * * 1-5", "UTC") == "At 02:30, Monday through Friday (UTC)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "cron", "cron": "61 * * * *"}, "Not a valid cron expression"),
        ({"kind": "cron", "cron": "* * *"}, "five fields"),
        ({"kind": "hours", "every_hours": 0}, "from 1 to 23"),
        ({"kind": "daily"}, "time of day"),
    ],
)
def test_bad_specs_have_clear_messages(kwargs, message):
    with pytest.raises(timing.ScheduleSpecError, match=message):
        timing.cron_for(**kwargs)


def test_unknown_time_zone_is_refused():
    with pytest.raises(timing.ScheduleSpecError, match="not a time zone"):
        timing.zone("Mars/Olympus")


def test_next_five_fires_follow_the_time_zone_across_dst():
    # Berlin goes to summer time on 2026-03-29: 02:00 does not exist that night, cron fires at 03:00.
    fires = timing.next_fires("0 2 * * *", BERLIN, utc(2026, 3, 27, 12))
    assert [f.astimezone(UTC) for f in fires[:3]] == [utc(2026, 3, 28, 1), utc(2026, 3, 29, 1), utc(2026, 3, 30, 0)]
    assert len(fires) == 5


def test_one_tick_after_the_fire_runs_it():
    decision = timing.plan_tick(
        expression="0 2 * * *",
        tz_name="UTC",
        last_due_at=utc(2026, 5, 1, 1, 59, 55),
        now=utc(2026, 5, 1, 2, 0, 5),
        catch_up=timedelta(hours=2),
    )
    assert [(d.due_at, d.action) for d in decision.fires] == [(utc(2026, 5, 1, 2), "run")]
    assert decision.last_due_at == utc(2026, 5, 1, 2)


def test_nothing_due_between_fires():
    decision = timing.plan_tick(
        expression="0 2 * * *",
        tz_name="UTC",
        last_due_at=utc(2026, 5, 1, 2),
        now=utc(2026, 5, 1, 14),
        catch_up=timedelta(hours=2),
    )
    assert decision.fires == [] and decision.last_due_at is None


def test_beat_down_across_a_fire_runs_it_once_when_less_than_catch_up_late():
    decision = timing.plan_tick(
        expression="0 2 * * *",
        tz_name="UTC",
        last_due_at=utc(2026, 5, 1, 1),
        now=utc(2026, 5, 1, 3, 30),
        catch_up=timedelta(hours=2),
    )
    assert [(d.due_at, d.action) for d in decision.fires] == [(utc(2026, 5, 1, 2), "run")]


def test_too_late_is_missed_with_the_reason():
    decision = timing.plan_tick(
        expression="0 2 * * *",
        tz_name="UTC",
        last_due_at=utc(2026, 5, 1, 1),
        now=utc(2026, 5, 1, 4, 30),
        catch_up=timedelta(hours=2),
    )
    (fire,) = decision.fires
    assert fire.action == "missed"
    assert "2 h 30 min after this fire, more than the 2 h" in fire.reason
    assert decision.last_due_at == utc(2026, 5, 1, 2)


def test_beat_down_for_days_never_bursts():
    # Hourly schedule, beat down three days: one run at most, every other fire missed.
    decision = timing.plan_tick(
        expression="0 * * * *",
        tz_name="UTC",
        last_due_at=utc(2026, 5, 1, 0, 0),
        now=utc(2026, 5, 4, 0, 10),
        catch_up=timedelta(hours=2),
    )
    actions = [d.action for d in decision.fires]
    assert actions.count("run") == 1 and actions[-1] == "run"
    assert len(decision.fires) == timing.MAX_MISSED_ROWS + 1
    assert "earlier fires were missed too" in decision.fires[0].reason


def test_no_fire_after_the_end_date_and_the_schedule_ends():
    decision = timing.plan_tick(
        expression="0 2 * * *",
        tz_name="UTC",
        last_due_at=utc(2026, 5, 1, 2),
        now=utc(2026, 5, 2, 2, 0, 5),
        catch_up=timedelta(hours=2),
        ends_on=date(2026, 5, 1),
    )
    assert decision.fires == [] and decision.ended


def test_busy_environment_waits_then_skips():
    due = utc(2026, 5, 1, 2)
    wait = timedelta(minutes=30)
    assert timing.busy_decision(due_at=due, now=due + timedelta(minutes=29), busy_wait=wait) == "wait"
    assert timing.busy_decision(due_at=due, now=due + timedelta(minutes=30), busy_wait=wait) == "skip"
