"""Planned against achieved load: a run is never judged on load that did not run (issue 25, item 1)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.runs import services
from portal.runs.models import Run, RunShard
from portal.runs.services.load import shard_load
from tests.portal.runs.factories import add_second
from workers.engine.plan import Plan as EnginePlan

pytestmark = pytest.mark.django_db

LABELS = {"Browse: Home": ([10.0], {})}


def two_shards(run, *, hold=10):
    """A constant run of 4 users for ``hold`` s in two shards of 2, running; the thresholds hold."""
    run.plan_snapshot["profile"] = {"kind": "constant", "users": 4, "hold": hold}
    run.plan_snapshot["thresholds"] = {"apd_ms": 1000}
    Run.objects.filter(id=run.id).update(
        plan_snapshot=run.plan_snapshot, status=Run.Status.RUNNING, shard_count=2, start_at=timezone.now()
    )
    return Run.objects.get(id=run.id)


def shard(run, no, *, seconds, status=RunShard.Status.DONE, late_ms=0.0, claimed=True):
    RunShard.objects.create(
        run=run,
        shard_no=no,
        user_count=2,
        status=status,
        claimed_at=timezone.now() if claimed else None,
        totals={"requests": 1, "start_late_ms": late_ms} if claimed else None,
    )
    for s in seconds:
        add_second(run, s, shard_no=no, users=2, labels=LABELS)


def test_a_run_whose_shards_ran_the_whole_plan_is_judged_on_its_thresholds(run):
    run = two_shards(run)
    shard(run, 0, seconds=range(10), late_ms=400.0)  # under a second late: within the second it was due
    shard(run, 1, seconds=range(10))

    services.run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.PASSED
    assert (run.load["planned"], run.load["achieved"], run.load["complete"]) == (40.0, 40.0, True)
    assert run.load["unit"] == "user-seconds" and run.load["shards"][0]["late_s"] == 0.4
    assert run.counts


def test_a_shard_that_started_late_makes_the_run_incomplete_never_passed(run):
    # given: shard 1 began 4 s after the common start (its worker was busy): 6 of its 10 s ran
    run = two_shards(run)
    shard(run, 0, seconds=range(10))
    shard(run, 1, seconds=range(4, 10), late_ms=4200.0)

    services.run_finalize(run.id)

    # then: incomplete although its thresholds held, with the load it ran in words
    run.refresh_from_db()
    assert run.status == Run.Status.INCOMPLETE
    assert run.summary["verdict"] == "passed"  # the figures are kept, not judged
    assert run.load["achieved"] == 32.0 and run.load["planned"] == 40.0 and run.load["pct"] == 80.0
    assert run.load["shards"][1]["pct"] == 60.0 and run.load["shards"][1]["late_s"] == 4.2
    sentence = "ran 4 of 4 users for 10 s: 32 of 40 planned user-seconds (80 %); shard 1 started 4.2 s late"
    assert run.load["sentence"] == sentence
    assert run.error_message.startswith(f"Incomplete: it {sentence}.")
    # kept out of trends, baselines and comparisons unless included by hand
    assert run.doubts == [f"it is incomplete: it {sentence}"]
    assert not run.counts
    run.include_anyway = True
    assert run.counts


def test_a_shard_that_never_started_makes_the_run_incomplete(run, settings, watched):
    # given: shard 1 found no worker; the watchdog gives up on it after the shard timeout
    run = two_shards(run)
    long_ago = timezone.now() - timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT + 5)
    Run.objects.filter(id=run.id).update(start_at=long_ago)
    shard(run, 0, seconds=range(10))
    shard(run, 1, seconds=[], status=RunShard.Status.PENDING, claimed=False)

    services.watchdog()

    run.refresh_from_db()
    assert run.shards.get(shard_no=1).status == RunShard.Status.LOST
    assert run.status == Run.Status.INCOMPLETE
    assert run.load["sentence"] == (
        "ran 2 of 4 users for 10 s: 20 of 40 planned user-seconds (50 %); shard 1 (2 users) never started"
    )


def test_a_run_where_no_shard_started_sent_nothing_and_is_incomplete_not_passed(run, settings, watched):
    run = two_shards(run)
    long_ago = timezone.now() - timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT + 5)
    Run.objects.filter(id=run.id).update(start_at=long_ago)
    shard(run, 0, seconds=[], status=RunShard.Status.PENDING, claimed=False)
    shard(run, 1, seconds=[], status=RunShard.Status.PENDING, claimed=False)

    services.watchdog()

    run.refresh_from_db()
    assert run.status == Run.Status.INCOMPLETE
    assert run.load["achieved"] == 0 and run.load["sentence"].startswith("ran 0 of 4 users for 0 s")


def test_a_lost_shard_ends_the_run_partial_with_the_load_it_ran(run):
    # given: shard 1 ran 3 s, then its worker died and nobody took over
    run = two_shards(run)
    shard(run, 0, seconds=range(10))
    shard(run, 1, seconds=range(3), status=RunShard.Status.LOST)

    services.run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.PARTIAL  # a loss: partial, never passed
    assert run.load["achieved"] == 26.0 and not run.load["complete"]
    assert "shard 1 lost at 3 s" in run.load["sentence"]
    assert run.error_message.startswith("Incomplete: it ran 4 of 4 users for 10 s: 26 of 40 planned")


def test_a_continuation_gap_is_missing_load(run):
    # given: shard 1 was lost at 3 s and resumed elsewhere at 7 s (a continuation): 4 s missing
    run = two_shards(run)
    shard(run, 0, seconds=range(10))
    shard(run, 1, seconds=[*range(3), *range(7, 10)])

    services.run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.INCOMPLETE
    assert run.load["shards"][1]["spans"] == [[0, 3], [7, 10]]
    assert "shard 1 missed 3–7 s" in run.load["sentence"]


def test_the_rule_is_a_setting(run, settings):
    # given: one shard 4 s late, 80 % of the load; the operator accepts 55 %
    settings.PLIMSOLL_INCOMPLETE_BELOW_PCT = 55
    run = two_shards(run)
    shard(run, 0, seconds=range(10))
    shard(run, 1, seconds=range(4, 10), late_ms=4000.0)

    services.run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.PASSED and run.load["rule_pct"] == 55


def test_arrival_rate_load_counts_iterations_on_schedule():
    # 10 arrivals/s for 10 s, no ramp: 100 arrivals, 50 per shard of 2
    profile = EnginePlan.from_dict(
        {
            "base_url": "http://127.0.0.1:1",
            "profile": {"kind": "arrival_rate", "rate": 10, "rate_start": 10, "ramp_up": 0, "hold": 10, "max_users": 5},
            "test_cases": [{"name": "A", "steps": [{"name": "s", "path": "/"}]}],
        }
    ).profile

    assert shard_load(profile, 0, 2, None) == (50.0, 50.0)
    assert shard_load(profile, 1, 2, [(0, 10)]) == (50.0, 50.0)
    assert shard_load(profile, 1, 2, [(5, 10)]) == (50.0, 25.0)  # started 5 s late: half its arrivals
    assert shard_load(profile, 0, 2, []) == (50.0, 0.0)


def test_the_api_and_the_report_say_a_run_is_incomplete(run, alice_client):
    from django.urls import reverse

    run = two_shards(run)
    shard(run, 0, seconds=range(10))
    shard(run, 1, seconds=range(4, 10), late_ms=4000.0)
    services.run_finalize(run.id)

    data = alice_client.get(reverse("api:run-detail", args=[run.code])).json()
    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    assert data["status"] == "incomplete"
    assert data["load"]["pct"] == 80.0 and data["load"]["sentence"].startswith("ran 4 of 4 users for 10 s")
    assert [s["late_s"] for s in data["load"]["shards"]] == [0.0, 4.0]
    assert 'id="incomplete"' in page and "ran 4 of 4 users for 10 s" in page
    assert "thresholds held" not in page  # no verdict shown on load that did not run


def test_notifications_say_a_run_is_incomplete(run):
    from portal.notifications.models import Event
    from portal.notifications.services import run_events, run_payload

    run = two_shards(run)
    shard(run, 0, seconds=range(10))
    shard(run, 1, seconds=[], status=RunShard.Status.LOST, claimed=False)
    services.run_finalize(run.id)
    run.refresh_from_db()

    events = run_events(run)
    payload = run_payload(run, events)

    assert Event.RUN_ERROR in events
    assert payload["run"]["status"] == "incomplete"
    assert payload["run"]["load"].startswith("ran 2 of 4 users for 10 s: 20 of 40 planned user-seconds (50 %)")
    assert "incomplete" in payload["headline"] and "ran 2 of 4 users" in payload["headline"]
