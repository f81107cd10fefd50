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
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.common import task
from portal.projects.metric_sources import from_prometheus, sources_of
from portal.runs.models import Run
from portal.telemetry.countersets import COUNTER_SETS
from portal.telemetry.scrape import SCRAPE_TIMEOUT_S, scrape

from .models import MetricCollection, ServerSample

log = logging.getLogger(__name__)


def _margin(interval: int) -> float:
    """Seconds scraped after the run's end, so the last rates cover its last seconds."""
    return max(interval, 5)


def on_run_admitted(sender, run_id: int, **kwargs) -> None:
    """``portal.runs.signals.run_admitted``: the environment's servers are read from the run's start."""
    collection_start(run_id=run_id)


def collection_start(*, run_id: int) -> MetricCollection | None:
    """Snapshots the environment's metric sources and starts the chain of scrape rounds (idempotent)."""
    run = Run.objects.select_related("environment").get(id=run_id)
    if run.environment is None or run.start_at is None:
        return None
    env = run.environment
    servers = [
        {"id": s.id, "name": s.name, "role": s.role, "url": s.metrics_url, "counter_set": s.counter_set}
        | ({"prometheus": env.prometheus_url, "selector": s.prometheus_selector} if from_prometheus(env, s) else {})
        for s in sources_of(env)
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
    token = _token_of(run) if any("prometheus" in s for s in servers) else ("", "")

    def read(server: dict) -> tuple[float, list | None, str]:
        if "prometheus" in server:
            return _query(server, token, timeout)
        return scrape(server["url"], server["counter_set"], timeout=timeout)

    # One thread per server: a server that hangs until its timeout delays none of the others.
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        results = list(pool.map(read, servers))
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


def _token_of(run: Run) -> tuple[str, str]:
    """(the environment's Prometheus token, or "" and why it cannot be read)."""
    from portal.telemetry.promql import PrometheusError, token_decrypt

    env = run.environment
    try:
        return (token_decrypt(env.prometheus_token) if env else ""), ""
    except PrometheusError as exc:
        return "", str(exc)


def _query(server: dict, token: tuple[str, str], timeout: float) -> tuple[float, list | None, str]:
    """A scrape round's reading of one server from Prometheus: as ``scrape`` answers (at, values, gap reason)."""
    from portal.telemetry.promql import PrometheusError, instant

    at = time.time()
    if token[1]:
        return at, None, token[1]
    try:
        values = instant(
            server["prometheus"], token[0], server["selector"], COUNTER_SETS[server["counter_set"]], at, timeout=timeout
        )
    except (PrometheusError, ValueError) as exc:
        return at, None, str(exc)[:300]
    return at, values, ""


def prometheus_backfill(*, run_id: int) -> dict[int, str]:
    """A run's server figures read afterwards from its environment's Prometheus (an imported run, say).

    For every server of the environment with label matchers, the run's window (one interval before
    its start to a margin after its end) is read with ``query_range`` at the environment's interval
    and stored as the scrape rounds a live collection stores (upserted: running it twice is safe).
    Returns {server id: why it has no figures} for the servers that failed as a whole.
    """
    from portal.telemetry.promql import PrometheusError, token_decrypt, window

    run = Run.objects.select_related("environment").get(id=run_id)
    env = run.environment
    if env is None or run.start_at is None or not env.prometheus_url:
        return {}
    interval = env.metrics_interval_s
    end_offset = (run.finished_at - run.start_at).total_seconds() if run.finished_at else run.planned_duration
    start = run.start_at.timestamp()
    failed: dict[int, str] = {}
    servers = [s for s in sources_of(env) if from_prometheus(env, s)]
    if not servers:
        return {}
    snapshot = [
        {"id": s.id, "name": s.name, "role": s.role, "url": "", "counter_set": s.counter_set}
        | {"prometheus": env.prometheus_url, "selector": s.prometheus_selector}
        for s in servers
    ]
    # The run page reads which servers a run has from its collection: one, finished, for a run in the past.
    collection, created = MetricCollection.objects.get_or_create(
        run_id=run_id, defaults={"interval_s": interval, "servers": snapshot, "done": True}
    )
    if not created:
        interval = collection.interval_s
        known = {s["id"] for s in collection.servers}
        if missing := [s for s in snapshot if s["id"] not in known]:
            MetricCollection.objects.filter(id=collection.id).update(servers=collection.servers + missing)
    first, last = -1, math.ceil((end_offset + _margin(interval)) / interval)
    for server in servers:
        try:
            readings = window(
                env.prometheus_url,
                token_decrypt(env.prometheus_token),
                server.prometheus_selector,
                COUNTER_SETS[server.counter_set],
                start + first * interval,
                start + last * interval,
                interval,
            )
        except PrometheusError as exc:
            failed[server.id] = str(exc)[:300]
            readings = {start + tick * interval: failed[server.id] for tick in range(first, last + 1)}
        rows = [
            ServerSample(
                run_id=run_id,
                server_id=server.id,
                tick=round((t - start) / interval),
                offset_s=round(t - start, 3),
                values=None if isinstance(got, str) else got,
                error=got[:300] if isinstance(got, str) else "",
            )
            for t, got in readings.items()
        ]
        ServerSample.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["run", "server_id", "tick"],
            update_fields=["offset_s", "values", "error"],
        )
    return failed


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
