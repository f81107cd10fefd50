"""A shard: claimed and executed by one worker, released for another (a handoff), ended."""

import logging
import math
import os
import socket
import traceback
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from portal.common import task
from workers.engine.plan import Plan as EnginePlan
from workers.engine.targets import TargetNotAllowed
from workers.labels import parse_labels

from ..models import (
    Run,
    RunShard,
)
from ..results.sink import ShardSink
from .lifecycle import ENQUEUE_RETRY, run_finalize
from .targets import allowlist

log = logging.getLogger(__name__)
Status = Run.Status


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def shard_execute(run_id: int, shard_no: int, *, worker_node: str = "") -> None:
    """Runs one shard to its end, or until its worker hands it on; safe to call twice (the second finds it claimed).

    ``worker_node`` is the Celery node's name: its warm shutdown asks the shards it runs for a
    handoff (``shards_hand_off``). A shard released as a continuation (``resume_second`` > 0)
    resumes the plan's schedule at that second.
    """
    from workers.engine import run_sync

    now = timezone.now()
    me = _worker_name()
    claimed = RunShard.objects.filter(run_id=run_id, shard_no=shard_no, status=RunShard.Status.PENDING).update(
        status=RunShard.Status.RUNNING,
        worker=me,
        worker_node=worker_node,
        worker_labels=parse_labels(settings.PLIMSOLL_WORKER_LABELS),
        claimed_at=now,
        heartbeat_at=now,
        handoff_requested=False,
        released_at=None,
    )
    if not claimed:
        log.info("run %s shard %s: already claimed or gone; nothing to do", run_id, shard_no)
        return
    run = Run.objects.get(id=run_id)
    shard = run.shards.get(shard_no=shard_no)
    if run.cancel_requested or run.status not in (Status.STARTING, Status.RUNNING):
        _shard_end(shard, RunShard.Status.DONE)
        run_finalize(run_id)
        return
    if shard.handoffs and "resumed_on" not in shard.handoffs[-1]:
        if now >= run.start_at + timedelta(seconds=run.planned_duration):
            _continuation_end(shard, "the plan's end came first")  # too late: nothing of the schedule is left
            run_finalize(run_id)
            return
        _note_resumed(shard, me, now, run.start_at)
    plan = EnginePlan.from_dict(run.plan_snapshot)
    sink = ShardSink(run_id, shard_no, worker=me)
    # This thread's connection would sit idle for the whole run (the sink has its own), and a
    # database outage meanwhile would leave it broken for the end: connect afresh then.
    connection.close()
    try:
        totals = run_sync(
            plan,
            sink=sink,
            # Users k % shard_count == shard_no (and so many arrivals, and unique data-set rows).
            shard=(shard_no, run.shard_count),
            start_at=run.start_at.timestamp(),
            allowlist=allowlist(),
            resume_at=shard.resume_second,
            data_taken=(shard.totals or {}).get("data_taken"),
        )
    except TargetNotAllowed as exc:
        _shard_end(shard, RunShard.Status.FAILED, error=f"Target refused at connect time: {exc}")
    except Exception as exc:  # the run must end with the reason, whatever broke
        log.exception("run %s shard %s failed", run_id, shard_no)
        _shard_end(shard, RunShard.Status.FAILED, error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
    else:
        merged = _merge_totals(shard.totals, _totals_dict(totals))
        resume = sink.last_second + 1 if sink.last_second is not None else shard.resume_second
        handing_off = totals.handed_off and resume < run.planned_duration and not run.cancel_requested
        released = handing_off and _shard_release(
            shard, worker=me, resume_second=resume, kind="stopped", totals=merged, stopped_at=sink.handoff_at
        )
        if released:
            return  # another worker takes it from here
        _shard_end(shard, RunShard.Status.DONE, totals=merged)
    run_finalize(run_id)
    _admit_next()


def _admit_next() -> None:
    """A slot is free now: the next waiting run starts at once, not at the next tick (issue 25)."""
    from .admission import admit

    try:
        admit()
    except Exception:  # the beat's tick runs the pass anyway
        log.exception("admission after a shard's end failed; the next tick retries")


def _merge_totals(before: dict | None, now: dict) -> dict:
    """A shard's totals over all the workers that ran a part of it."""
    if not before:
        return now
    merged = dict(now)
    for key in ("requests", "errors", "aborted", "bytes_in"):
        merged[key] = before.get(key, 0) + now.get(key, 0)
    merged["duration_s"] = max(before.get("duration_s", 0), now.get("duration_s", 0))
    merged["start_late_ms"] = before.get("start_late_ms", now.get("start_late_ms"))  # the first start's
    if before.get("otlp") and now.get("otlp"):
        counts = ("spans", "exported", "dropped", "failed", "posts", "cpu_ms")
        merged["otlp"] = {**now["otlp"], **{k: before["otlp"].get(k, 0) + now["otlp"].get(k, 0) for k in counts}}
    elif before.get("otlp"):
        merged["otlp"] = before["otlp"]
    return merged


def _shard_release(
    shard: RunShard, *, worker: str, resume_second: int, kind: str, totals: dict | None, stopped_at=None
) -> bool:
    """Offers the rest of the shard's schedule to any worker: pending again, resuming at ``resume_second``.

    Its task is queued again; the watchdog re-sends it while nobody claims it, and after
    PLIMSOLL_HANDOFF_GRACE seconds ends the shard interrupted (or lost).
    """
    now = timezone.now()
    handoff = {
        "kind": kind,
        "worker": shard.worker,
        "stopped_at_s": resume_second,
        # When the worker began to stop (its drain), so the gap counts the drain and the flush too.
        "stopped_at": (stopped_at or now).isoformat(),
        "released_at": now.isoformat(),
    }
    with transaction.atomic():
        released = RunShard.objects.filter(
            id=shard.id, status__in=[RunShard.Status.RUNNING, RunShard.Status.LOST], worker=worker
        ).update(
            status=RunShard.Status.PENDING,
            resume_second=resume_second,
            released_at=now,
            handoff_requested=False,
            resent=False,  # a new message for the continuation: the watchdog may send it once more
            handoffs=[*RunShard.objects.get(id=shard.id).handoffs, handoff],
            totals=totals,
        )
        if released:
            run_id, shard_no = shard.run_id, shard.shard_no
            transaction.on_commit(lambda: _send_shard(run_id, shard_no))
    if released:
        log.warning("run %s shard %s released at second %s (%s)", shard.run_id, shard.shard_no, resume_second, kind)
    return bool(released)


def _send_shard(run_id: int, shard_no: int) -> None:
    """Queues a shard's task; a broker that cannot be reached now is retried by the watchdog."""
    from .admission import engine_queue

    run_shard_task = task("run_shard_task")
    queue = engine_queue(Run.objects.filter(id=run_id).values_list("pool", flat=True).first() or "")
    try:
        run_shard_task.apply_async((run_id, shard_no), queue=queue, retry=True, retry_policy=ENQUEUE_RETRY)
    except Exception:
        log.exception("run %s shard %s: could not queue its task; the watchdog sends it again", run_id, shard_no)


def _note_resumed(shard: RunShard, worker: str, now, start_at) -> None:
    """Completes the shard's last handoff on the timeline: where, when and after how long it resumed."""
    handoffs = list(shard.handoffs)
    last = dict(handoffs[-1])
    released = datetime.fromisoformat(last.get("stopped_at") or last["released_at"])
    last.update(
        resumed_on=worker,
        resumed_at_s=max(shard.resume_second, math.floor((now - start_at).total_seconds())),
        gap_s=round((now - released).total_seconds(), 1),
    )
    handoffs[-1] = last
    RunShard.objects.filter(id=shard.id).update(handoffs=handoffs, error_message="")
    shard.handoffs = handoffs


def shards_hand_off(*, worker_node: str) -> int:
    """Asks the shards a Celery node runs to hand over (its warm shutdown); they see it at their next flush."""
    return RunShard.objects.filter(status=RunShard.Status.RUNNING, worker_node=worker_node).update(
        handoff_requested=True
    )


def _totals_dict(totals) -> dict:
    return {
        "requests": totals.requests,
        "errors": totals.errors,
        "aborted": totals.aborted,
        "bytes_in": totals.bytes_in,
        "duration_s": round(totals.duration_s, 3),
        # How long after the run's common start this shard began: shards must start together.
        "start_late_ms": round(totals.start_late_s * 1000, 2),
        # Unique data-set rows taken (rows the shard's continuation must not use again).
        "data_taken": dict(totals.data_taken),
        # The OTLP export of spans (workers/engine/otlp.py), when the plan had an endpoint.
        **({"otlp": dict(totals.otlp)} if totals.otlp else {}),
    }


def _shard_end(shard: RunShard, status: str, *, error: str = "", totals: dict | None = None) -> None:
    # Only a running (or pending) shard ends here: one the watchdog declared lost stays lost.
    RunShard.objects.filter(id=shard.id, status__in=[RunShard.Status.RUNNING, RunShard.Status.PENDING]).update(
        status=status, finished_at=timezone.now(), error_message=error, totals=totals
    )


def _continuation_end(shard: RunShard, why: str) -> None:
    """Ends a released shard nobody resumed: interrupted (its worker stopped) or lost (it went silent)."""
    last = shard.handoffs[-1] if shard.handoffs else {}
    if last.get("kind") == "lost":
        status = RunShard.Status.LOST
        message = f"{shard.error_message or 'its worker went silent'}; {why}"
    else:
        status = RunShard.Status.INTERRUPTED
        message = f"worker {last.get('worker', '?')} stopped at {last.get('stopped_at_s', '?')} s, {why}"
    if RunShard.objects.filter(id=shard.id, status__in=[RunShard.Status.PENDING, RunShard.Status.RUNNING]).update(
        status=status, finished_at=timezone.now(), error_message=message, released_at=None
    ):
        log.warning("run %s shard %s %s: %s", shard.run_id, shard.shard_no, status, message)
