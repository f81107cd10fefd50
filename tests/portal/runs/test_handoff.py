"""Shard continuation and the watchdog's own view, driven through the services as workers and the watchdog do."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from portal.runs import services
from portal.runs.models import Run, RunShard, WatchdogView
from portal.runs.services.shards import _shard_release
from tests.portal.runs.factories import add_second, project_run
from workers.engine.runner import HANDOFF

pytestmark = pytest.mark.django_db

HOME = {"Browse: Home": ([10.0], {})}


@pytest.fixture
def running(run, settings):
    """A 6 s run started 3 s ago, its one shard running on worker w:9 of node n@h and flushing."""
    settings.PLIMSOLL_HANDOFF_GRACE = 120
    now = timezone.now()
    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING, shard_count=1, start_at=now - timedelta(seconds=3))
    RunShard.objects.create(
        run=run, shard_no=0, user_count=5, status="running", worker="h:9", worker_node="n@h", heartbeat_at=now
    )
    for s in range(3):
        add_second(run, s, labels=HOME)
    run.refresh_from_db()
    return run


def silence(run, seconds):
    RunShard.objects.filter(run=run).update(heartbeat_at=timezone.now() - timedelta(seconds=seconds))


def test_the_watchdog_gives_grace_after_its_own_outage(running, settings):
    # given: the watchdog's last pass was a minute ago (it could not reach the database), and the
    # shard's last heartbeat is older than the timeout because its flushes could not get through either
    WatchdogView.objects.create(last_pass_at=timezone.now() - timedelta(seconds=60), watching_since=timezone.now())
    silence(running, settings.PLIMSOLL_SHARD_TIMEOUT + 5)

    # when: the database is back and the watchdog passes
    services.watchdog()

    # then: it has not watched for a whole timeout, so it declares nothing
    assert RunShard.objects.get(run=running).status == RunShard.Status.RUNNING
    view = WatchdogView.objects.get()
    assert timezone.now() - view.watching_since < timedelta(seconds=5)

    # when: it has watched a whole timeout and the shard is still silent
    WatchdogView.objects.update(watching_since=timezone.now() - timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT + 1))
    last_heard = RunShard.objects.get(run=running).heartbeat_at
    services.watchdog()

    # then: its worker died; the rest of its schedule is offered from the second after its last flush
    shard = RunShard.objects.get(run=running)
    assert shard.status == RunShard.Status.PENDING and shard.released_at is not None
    assert shard.resume_second == 3
    assert [h["kind"] for h in shard.handoffs] == ["lost"] and shard.handoffs[0]["stopped_at_s"] == 3
    # the gap a resumption reports counts from the last heartbeat (when it went silent), not from the verdict
    assert shard.handoffs[0]["stopped_at"] == last_heard.isoformat()
    assert "no heartbeat" in shard.error_message


def test_a_shard_declared_lost_takes_itself_back_when_its_worker_flushes_again(running, settings, watched):
    # given: the watchdog offered the shard as a continuation, nobody claimed it
    silence(running, settings.PLIMSOLL_SHARD_TIMEOUT + 5)
    services.watchdog()
    assert RunShard.objects.get(run=running).status == RunShard.Status.PENDING

    # when: its worker, alive after all, flushes its next second
    answer = services.ShardSink(running.id, 0, worker="h:9")({"second": 3, "labels": {}})

    # then: it holds the shard again, the offered handoff is withdrawn, and it goes on
    shard = RunShard.objects.get(run=running)
    assert shard.status == RunShard.Status.RUNNING and shard.handoffs == [] and shard.error_message == ""
    assert answer is False


def test_another_worker_holding_the_shard_stops_the_old_one(running):
    RunShard.objects.filter(run=running).update(worker="other:1")

    assert services.ShardSink(running.id, 0, worker="h:9")({"second": 3, "labels": {}}) is True
    assert RunShard.objects.get(run=running).worker == "other:1"


def test_a_stopping_node_asks_only_its_own_shards_to_hand_over(running):
    # given: a second run's shard on another node
    other = project_run(running.project, plan_snapshot=running.plan_snapshot)
    RunShard.objects.create(run=other, shard_no=0, user_count=1, status="running", worker="g:1", worker_node="m@g")

    # when
    asked = services.shards_hand_off(worker_node="n@h")

    # then: only n@h's shard answers HANDOFF at its next flush
    assert asked == 1
    assert services.ShardSink(running.id, 0, worker="h:9")({"second": 3, "labels": {}}) == HANDOFF
    assert not RunShard.objects.get(run=other).handoff_requested


def test_a_released_shard_nobody_takes_over_ends_interrupted_after_the_grace(running, settings):
    # given: its worker stopped and released it at second 3, the grace (120 s) ago
    settings.PLIMSOLL_SHARD_TIMEOUT = 30
    Run.objects.filter(id=running.id).update(start_at=timezone.now() - timedelta(seconds=4))
    running.refresh_from_db()
    running.plan_snapshot["profile"]["hold"] = 600  # the plan's end is far
    Run.objects.filter(id=running.id).update(plan_snapshot=running.plan_snapshot)
    shard = RunShard.objects.get(run=running)
    assert _shard_release(shard, worker="h:9", resume_second=3, kind="stopped", totals=None)
    services.watchdog()
    assert RunShard.objects.get(run=running).status == RunShard.Status.PENDING  # within the grace: waits

    # when: the grace ends
    RunShard.objects.filter(run=running).update(released_at=timezone.now() - timedelta(seconds=121))
    services.watchdog()

    # then: interrupted with the reason, and the run partial with it
    shard = RunShard.objects.get(run=running)
    assert shard.status == RunShard.Status.INTERRUPTED
    assert shard.error_message == "worker h:9 stopped at 3 s, no worker took over within 120 s"
    running.refresh_from_db()
    assert running.status == Run.Status.PARTIAL
    assert "no worker took over" in running.error_message
    assert running.summary["handoffs"][0]["text"] == "worker h:9 stopped at 3 s; no worker took shard 0 over"
    # told apart from a lost shard wherever doubtful runs are explained (journey, trial sets)
    assert running.doubts == ["a shard was interrupted: its worker stopped and no worker took over"]


def test_the_run_page_shows_each_handoff(running, alice_client, charlie):
    # given: a shard handed over at second 2 and resumed at second 4
    RunShard.objects.filter(run=running).update(
        handoffs=[
            {
                "kind": "stopped",
                "worker": "h:9",
                "stopped_at_s": 2,
                "released_at": timezone.now().isoformat(),
                "resumed_on": "g:4",
                "resumed_at_s": 4,
                "gap_s": 1.5,
            }
        ]
    )
    url = reverse("runs:detail", args=[running.code])

    # when
    page = alice_client.get(url).content.decode()

    # then: the marker's data and its sentence are on the page; an outsider still gets a 404
    assert 'id="handoff-data"' in page and "handoff-markers.js" in page
    assert "worker h:9 stopped at 2 s; shard 0 resumed on g:4 after 1.5 s" in page
    outsider = Client()
    outsider.force_login(charlie)
    assert outsider.get(url).status_code == 404


def test_a_watchdog_that_never_passed_before_judges_nothing_yet(running, settings):
    # given: no pass was ever recorded, and the shard looks silent
    silence(running, settings.PLIMSOLL_SHARD_TIMEOUT + 5)

    # when
    services.watchdog()

    # then: it has seen no heartbeats yet, so it waits a whole timeout first
    assert RunShard.objects.get(run=running).status == RunShard.Status.RUNNING


def test_stopping_a_run_ends_its_waiting_continuation_at_once(running):
    # given: a shard released by its stopping worker, waiting for another
    assert _shard_release(RunShard.objects.get(run=running), worker="h:9", resume_second=3, kind="stopped", totals=None)

    # when: the user stops the run
    services.run_cancel(run=running)
    services.watchdog()

    # then: the run ends cancelled without waiting for the grace
    running.refresh_from_db()
    assert running.status == Run.Status.CANCELLED
    assert RunShard.objects.get(run=running).status == RunShard.Status.INTERRUPTED
