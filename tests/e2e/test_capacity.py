"""Capacity on real Celery workers (issue 25): a load worker and a bookkeeping worker, as in the Procfile.

The load worker (``-Q engine``, one slot) registers its slot; a second run waits for it while the first
runs, bookkeeping (the watchdog) is never held up by the shard, and when the first run's shard ends the
waiting run starts at once, not at a tick (no beat runs here).
"""

import time

import pytest

from portal.projects.models import Project
from portal.runs import services
from portal.runs.models import GeneratorWorker, Run, RunShard, WatchdogView
from tests.e2e.test_distribution import make_plan
from tests.processes import Worker, wait_until
from workers.tasks import watchdog_task

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def split_workers(worker_env, tmp_path):
    from workers.celery import app

    app.control.purge()
    env = dict(worker_env, PLIMSOLL_SHARD_MAX_USERS="4", PLIMSOLL_WORKER_LABELS="zone=test")
    engine = Worker(tmp_path / "engine.log", env, name="engine", concurrency=1, queues="engine")
    bookkeeping = Worker(tmp_path / "bookkeeping.log", env, name="bookkeeping", concurrency=1, queues="default")
    yield engine, bookkeeping
    for worker in (engine, bookkeeping):
        if worker.proc.poll() is None:
            worker.close()


def test_a_run_waits_for_the_slot_bookkeeping_is_never_starved_and_a_freed_slot_starts_the_next_run(
    split_workers, project, alice, demo_target
):
    engine, bookkeeping = split_workers
    # given: the load worker registered its one slot (the bookkeeping worker registers none)
    wait_until(lambda: GeneratorWorker.objects.filter(slots=1).exists(), timeout=30, what="the registration")
    registered = GeneratorWorker.objects.get()
    assert registered.queues == ["engine"] and registered.labels == {"zone": "test"}

    # when: a 20 s run takes the slot, and a second run (another environment and target) is created
    first = services.run_create(plan=make_plan(project, demo_target.base_url, hold=20), user=alice)
    wait_until(lambda: RunShard.objects.filter(run=first, status="running").exists(), timeout=30, what="shard")
    other_target = demo_target.base_url.replace("127.0.0.1", "localhost")
    other_project = Project.objects.create(team=project.team, name="Other")
    second = services.run_create(plan=make_plan(other_project, other_target, hold=2), user=alice)
    time.sleep(3)

    # then: it waits, with its place
    second.refresh_from_db()
    assert second.status == Run.Status.QUEUED and not second.shards.exists()
    queue = services.run_queue(second)
    assert (queue["position"], queue["free"], queue["slots"]) == (1, 0, 1)

    # and bookkeeping runs while the shard holds the only load slot
    sent = time.monotonic()
    watchdog_task.delay()
    wait_until(
        lambda: WatchdogView.objects.filter(last_pass_at__isnull=False).exists(), timeout=10, what="a watchdog pass"
    )
    assert time.monotonic() - sent < 10
    assert RunShard.objects.get(run=first).status == RunShard.Status.RUNNING

    # when: the first run is stopped, its shard ends and frees the slot
    services.run_cancel(run=first)
    wait_until(lambda: RunShard.objects.get(run=first).status == RunShard.Status.DONE, timeout=20, what="shard end")
    freed = RunShard.objects.get(run=first).finished_at

    # then: the waiting run is admitted by the shard's own process as it ends, within 2 s of the slot freeing
    wait_until(lambda: Run.objects.get(id=second.id).admitted_at is not None, timeout=10, what="admission")
    second.refresh_from_db()
    assert (second.admitted_at - freed).total_seconds() <= 2.0, (freed, second.admitted_at)
    wait_until(lambda: Run.objects.get(id=second.id).status in Run.FINISHED, timeout=40, what="the second run")
    second.refresh_from_db()
    assert second.status in (Run.Status.PASSED, Run.Status.FAILED, Run.Status.FINISHED), (
        second.status,
        second.error_message,
    )
    assert second.load["complete"] and second.load["shards"][0]["late_s"] < 1
