"""The watchdog: silent shards offered as continuations or declared lost, unclaimed runs ended,
complete runs finalized. It judges silence only over time it watched itself.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.common import task

from ..models import (
    Run,
    RunShard,
    WatchdogView,
)
from ..results import read
from ..results.rollup import live_rollup_due, rollup_due
from .admission import pool_capacity
from .lifecycle import ENQUEUE_RETRY, QUEUED_TIMEOUT, _run_error, finalize_stuck, run_finalize
from .shards import _continuation_end, _shard_release

log = logging.getLogger(__name__)
Status = Run.Status


def watchdog() -> None:
    """Declares silent shards lost, ends runs no worker took, and finalizes what is complete.

    It judges silence only over time it watched itself (``_watching_since``): after its own
    outage (no database, no broker, no beat) it waits a whole timeout before declaring anything.
    A silent shard's schedule is offered as a continuation (``_offer_silent_shards``).
    """
    now = timezone.now()
    timeout = timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT)
    watched = now - _watching_since(now)
    _offer_silent_shards(now, watched)
    _end_unclaimed_continuations(now)
    _resend_waiting_tasks(now)
    unclaimed = RunShard.objects.filter(
        status=RunShard.Status.PENDING, released_at__isnull=True, run__start_at__lt=now - timeout
    ).select_related("run")
    for shard in unclaimed if watched >= timeout else []:
        RunShard.objects.filter(id=shard.id, status=RunShard.Status.PENDING).update(
            status=RunShard.Status.LOST,
            finished_at=now,
            error_message=f"no worker was free to start this shard within {settings.PLIMSOLL_SHARD_TIMEOUT} s "
            "of the run's start; add workers or raise PLIMSOLL_SHARD_MAX_USERS",
        )
    # A run waiting for capacity waits as long as it takes, unless no worker of its pool is registered at all.
    staffed = [pool for pool, slots in pool_capacity(now).items() if slots > 0]
    queued_long = Run.objects.filter(status=Status.QUEUED, created_at__lt=now - QUEUED_TIMEOUT).exclude(
        pool__in=staffed
    )
    for run_id in (queued_long if watched >= QUEUED_TIMEOUT else Run.objects.none()).values_list("id", flat=True):
        _run_error(
            run_id,
            f"No Celery worker took this run within {QUEUED_TIMEOUT.seconds} s. Is a worker running "
            "(make run starts one) and does it reach the same broker?",
        )
    active = Run.objects.filter(status__in=[Status.STARTING, Status.RUNNING, Status.CANCELLING]).filter(
        ~Q(shards__status__in=[RunShard.Status.PENDING, RunShard.Status.RUNNING])
    )
    for run_id in active.values_list("id", flat=True).distinct():
        run_finalize(run_id)
    finalize_stuck()
    live_rollup_due()
    rollup_due()


# Watchdog passes further apart than this (beat sends one every 10 s) mean it was out in between
# (no database, broker or beat), so it saw no heartbeats then.
WATCHDOG_GAP = timedelta(seconds=15)


# A queued run, or a released shard, whose task no worker took for this long has its task sent
# again (a broker restarted without persistence loses its messages); a repeat does no harm.
RESEND_AFTER = timedelta(seconds=15)


def _watching_since(now) -> datetime:
    """Records this pass; returns since when the watchdog has watched the database without a gap."""
    with transaction.atomic():
        view = WatchdogView.objects.select_for_update().first()
        if view is None:  # the first pass ever has seen nothing yet
            WatchdogView.objects.create(last_pass_at=now, watching_since=now)
            return now
        if now - view.last_pass_at > WATCHDOG_GAP:
            log.warning("watchdog: no pass since %s; judging silence again from now", view.last_pass_at)
            view.watching_since = now
        view.last_pass_at = now
        view.save(update_fields=["last_pass_at", "watching_since"])
        return view.watching_since


def _offer_silent_shards(now, watched: timedelta) -> None:
    """A shard silent for a whole timeout that the watchdog watched: its worker died; offer the rest.

    The shard is released as a continuation from the second after its last flush (the
    seconds between that flush and the crash are missing, not zero); if no worker claims it
    within the grace period, it ends lost.
    """
    timeout = timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT)
    if watched < timeout:
        return
    silent = RunShard.objects.filter(status=RunShard.Status.RUNNING, heartbeat_at__lt=now - timeout)
    for shard in silent.select_related("run"):
        last = read.shard_seconds_last(shard.run_id, shard.shard_no)
        resume = last + 1 if last is not None else shard.resume_second
        totals = dict(shard.totals or {})
        if unique := _unique_cases(shard.run.plan_snapshot):
            # Rows a crashed shard took are unknown: the iterations it started since it was claimed
            # bound them (each took at most one row), so no row is used twice; a few may be skipped.
            started = read.shard_iterations_started(shard.run_id, shard.shard_no, since=shard.resume_second)
            before = totals.get("data_taken") or {}
            totals["data_taken"] = {case: before.get(case, 0) + started for case in unique}
        # Its gap counts from its last heartbeat, when it went silent, not from this verdict.
        released = _shard_release(
            shard,
            worker=shard.worker,
            resume_second=resume,
            kind="lost",
            totals=totals or None,
            stopped_at=shard.heartbeat_at,
        )
        if released:
            RunShard.objects.filter(id=shard.id).update(
                error_message=f"no heartbeat for {settings.PLIMSOLL_SHARD_TIMEOUT} s (its worker {shard.worker} "
                "probably died); every interval it recorded before is kept"
            )


def _unique_cases(plan_snapshot: dict) -> list[str]:
    """The test cases whose data set hands each row out once (``unique``)."""
    return [
        tc["name"] for tc in plan_snapshot.get("test_cases", []) if (tc.get("data_set") or {}).get("mode") == "unique"
    ]


def _end_unclaimed_continuations(now) -> None:
    """A released shard no worker claimed within the grace period (or before the plan's end) ends."""
    grace = timedelta(seconds=settings.PLIMSOLL_HANDOFF_GRACE)
    waiting = RunShard.objects.filter(status=RunShard.Status.PENDING, released_at__isnull=False).select_related("run")
    for shard in waiting:
        run_end = shard.run.start_at + timedelta(seconds=shard.run.planned_duration)
        if shard.run.cancel_requested:
            _continuation_end(shard, "the run was stopped before a worker took over")
        elif shard.released_at < now - grace:
            _continuation_end(shard, f"no worker took over within {settings.PLIMSOLL_HANDOFF_GRACE} s")
        elif run_end < now:
            _continuation_end(shard, "no worker took over before the plan's end")


def _resend_waiting_tasks(now) -> None:
    """Admits waiting runs (their state is in the database: a broker restart loses none), and sends once
    more the task of a shard that no worker took although its slot was free (lost with the broker).

    A shard is sent again at most once (``resent``): runs are admitted only onto free slots, so a
    shard still pending RESEND_AFTER after its send lost its message; sending it on every pass
    would fill the engine queue with copies (8 → 16 → 24 → 32 for one run, issue 25).
    """
    from .admission import admit, engine_queue

    try:
        admit()
    except Exception:
        log.exception("watchdog: the admission pass failed; the next pass retries")
    run_shard_task = task("run_shard_task")
    old = now - RESEND_AFTER
    try:
        waiting = RunShard.objects.filter(
            Q(released_at__lt=old) | Q(released_at__isnull=True, run__start_at__lt=old),
            status=RunShard.Status.PENDING,
            resent=False,
        )
        for shard_id, run_id, shard_no, pool in waiting.values_list("id", "run_id", "shard_no", "run__pool"):
            if RunShard.objects.filter(id=shard_id, resent=False).update(resent=True):
                run_shard_task.apply_async(
                    (run_id, shard_no), queue=engine_queue(pool), retry=True, retry_policy=ENQUEUE_RETRY
                )
    except Exception:
        log.exception("watchdog: could not send waiting tasks again; next pass retries")
