"""Collecting server metrics during a run: a chain of short scrape rounds (ticks) on the default queue.

Why a chain of ticks rather than one long task: a scrape round takes at most a couple of
seconds, so the collector never holds a worker slot for a whole soak (shards need them),
and a lost round (a worker killed) costs one gap, not the rest of the run. Each tick is
claimed by a conditional UPDATE of ``MetricCollection.next_tick`` (a tick delivered twice
runs once), stores its samples with an upsert on (run, server, tick), and schedules the
next one at its own second of the run. The watchdog restarts a chain whose heartbeat went
silent; what was stored stays.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.common import task
from portal.runs.models import Run

from .countersets import COUNTER_SETS
from .models import MetricCollection, ServerSample
from .scrape import SCRAPE_TIMEOUT_S, scrape

log = logging.getLogger(__name__)


def _margin(interval: int) -> float:
    """Seconds scraped after the run's end, so the last rates cover its last seconds."""
    return max(interval, 5)


def sources_of(environment) -> list:
    """The environment's servers that have a metrics endpoint and a counter set."""
    return [s for s in environment.servers.all() if s.metrics_url and s.counter_set in COUNTER_SETS]


def metric_sources_problems(environment) -> list[str]:
    """Why a run on ``environment`` must not start because of its metrics endpoints (checked before each run)."""
    from .scrape import check_metrics_url

    problems = []
    for server in sources_of(environment):
        try:
            check_metrics_url(server.metrics_url)
        except ValueError as exc:
            problems.append(f"Server “{server.name}”: its metrics endpoint is refused: {exc}")
    return problems


def collection_start(*, run_id: int) -> MetricCollection | None:
    """Snapshots the environment's metric sources and starts the chain of scrape rounds (idempotent)."""
    run = Run.objects.select_related("environment").get(id=run_id)
    if run.environment is None or run.start_at is None:
        return None
    servers = [
        {"id": s.id, "name": s.name, "role": s.role, "url": s.metrics_url, "counter_set": s.counter_set}
        for s in sources_of(run.environment)
    ]
    if not servers:
        return None
    interval = run.environment.metrics_interval_s
    collection, created = MetricCollection.objects.get_or_create(
        run_id=run_id, defaults={"interval_s": interval, "servers": servers, "heartbeat_at": timezone.now()}
    )
    if created:
        # The first round is due at once: it lands before the start (the baseline every rate needs).
        first = math.floor(-(run.start_at - timezone.now()).total_seconds() / interval)
        MetricCollection.objects.filter(id=collection.id).update(next_tick=first)
        transaction.on_commit(lambda: _enqueue(run_id, first, run.start_at + timedelta(seconds=first * interval)))
    return collection


def _enqueue(run_id: int, tick: int, eta) -> None:
    collect_metrics_task = task("collect_metrics_task")

    collect_metrics_task.apply_async((run_id, tick), eta=max(eta, timezone.now()))


def _current_tick(run: Run, interval: int) -> int:
    return math.floor((timezone.now() - run.start_at).total_seconds() / interval)


def _finished_for_good(run: Run, interval: int, at_offset: float) -> bool:
    """Whether a round at ``at_offset`` seconds of the run is past the end and its margin."""
    margin = _margin(interval)
    if run.status in Run.FINISHED:
        end = (run.finished_at - run.start_at).total_seconds() if run.finished_at else 0.0
        return at_offset > end + margin
    # An active run is scraped until it ends, however late; the run's own hard end bounds it.
    return False


def collect_tick(*, run_id: int, tick: int) -> None:
    """One scrape round of every server, then the next round scheduled; safe to run twice."""
    now = timezone.now()
    if not MetricCollection.objects.filter(run_id=run_id, done=False, next_tick__lte=tick).update(
        next_tick=tick + 1, heartbeat_at=now
    ):
        return  # this round ran already (a repeated message), or the collection ended
    collection = MetricCollection.objects.select_related("run").get(run_id=run_id)
    run, interval = collection.run, collection.interval_s
    start = run.start_at.timestamp()
    timeout = min(SCRAPE_TIMEOUT_S, interval * 0.8)
    servers = collection.servers
    # One thread per server: a server that hangs until its timeout delays none of the others.
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        results = list(pool.map(lambda s: scrape(s["url"], s["counter_set"], timeout=timeout), servers))
    rows = [
        ServerSample(
            run_id=run_id,
            server_id=s["id"],
            tick=tick,
            offset_s=round(at - start, 3),
            values=values,
            error=error,
        )
        for s, (at, values, error) in zip(servers, results, strict=True)
    ]
    ServerSample.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["run", "server_id", "tick"],
        update_fields=["offset_s", "values", "error"],
    )
    run.refresh_from_db(fields=["status", "finished_at"])
    following = max(tick + 1, _current_tick(run, interval) if run.start_at else tick + 1)
    if _finished_for_good(run, interval, following * interval):
        MetricCollection.objects.filter(run_id=run_id).update(done=True)
        return
    _enqueue(run_id, following, run.start_at + timedelta(seconds=following * interval))


def collection_watchdog() -> None:
    """Ends collections of finished runs, and restarts a chain that went silent (a lost worker or message)."""
    now = timezone.now()
    for collection in MetricCollection.objects.filter(done=False).select_related("run"):
        run, interval = collection.run, collection.interval_s
        offset = (now - run.start_at).total_seconds()
        if _finished_for_good(run, interval, offset):
            MetricCollection.objects.filter(id=collection.id).update(done=True)
            continue
        silent_for = max(3 * interval, 15)
        stale = now - timedelta(seconds=silent_for)
        if collection.heartbeat_at and collection.heartbeat_at >= stale:
            continue
        tick = _current_tick(run, interval)
        # Conditional on the old heartbeat: two watchdogs restart the chain once.
        if MetricCollection.objects.filter(id=collection.id, heartbeat_at=collection.heartbeat_at).update(
            heartbeat_at=now, restarts=collection.restarts + 1
        ):
            log.warning("run %s: metrics collector silent for %s s; restarted at tick %s", run.id, silent_for, tick)
            _enqueue(run.id, tick, now)
