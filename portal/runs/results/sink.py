"""The interval writer: one ShardInterval row and one PageInterval row per label, per shard and second.

The sink's write is also the shard's heartbeat; it is the only code that writes the interval tables.
"""

import logging

from django.db import connection, transaction
from django.utils import timezone

from workers.engine.histogram import Histogram
from workers.engine.runner import HANDOFF

from ..models import (
    PageInterval,
    Run,
    RunShard,
    ShardInterval,
    SlowTrace,
)
from . import protocols, storage

log = logging.getLogger(__name__)
Status = Run.Status


SHARD_INTERVAL_FIELDS = [
    "active_users",
    "iterations_started",
    "iterations_completed",
    "iterations_dropped",
    "loop_lag_p99_ms",
    "loop_lag_max_ms",
    "cpu_pct",
]


PAGE_INTERVAL_FIELDS = [
    "pages",
    "hits",
    "errors",
    "errors_by_kind",
    "error_samples",
    "bytes_in",
    "bytes_out",
    "hist_bin",
    "ttfb_bin",
    "connect_count",
    "connect_sum_us",
]


SHARD_TOTAL_FIELDS = [
    "pages",
    "errors",
    "latency_sum_us",
    "latency_count",
    "pages_total",
    "errors_total",
    "latency_sum_total",
    "latency_count_total",
    "dropped_total",
    "hits",
    "bytes_in",
    "hist_bin",
]


def _page_row(run_id: int, shard_no: int, second: int, label: str, stats: dict) -> PageInterval:
    connect = stats.get("connect_hist") or {}
    return PageInterval(
        run_id=run_id,
        shard_no=shard_no,
        second=second,
        label=label[:210],
        pages=stats.get("pages", 0),
        hits=stats.get("hits", 0),
        errors=stats.get("errors", 0),
        errors_by_kind=stats.get("errors_by_kind", {}),
        error_samples=stats.get("error_samples", {}),
        bytes_in=stats.get("bytes_in", 0),
        bytes_out=stats.get("bytes_out", 0),
        hist_bin=storage.encode(stats.get("hist")),
        ttfb_bin=storage.encode(stats.get("ttfb_hist")),
        connect_count=connect.get("n", 0),
        connect_sum_us=connect.get("sum", 0),
    )


def _shard_totals(run_id: int, shard_no: int, second: int, labels: dict, dropped: int) -> dict:
    """This second's totals over all labels, and the running totals up to it.

    The running totals of latency and dropped iterations stay null after a row that lacks them
    (written before they existed): a sum that starts from an unknown is unknown.
    """
    merged = Histogram()
    for stats in labels.values():
        if stats.get("hist"):
            merged.merge(Histogram.from_dict(stats["hist"]))
    this = {
        "pages": sum(stats.get("pages", 0) for stats in labels.values()),
        "errors": sum(stats.get("errors", 0) for stats in labels.values()),
        "latency_sum_us": sum((stats.get("hist") or {}).get("sum", 0) for stats in labels.values()),
        "latency_count": sum((stats.get("hist") or {}).get("n", 0) for stats in labels.values()),
    }
    extra = {
        "hits": sum(stats.get("hits", 0) for stats in labels.values()),
        "bytes_in": sum(stats.get("bytes_in", 0) for stats in labels.values()),
        "hist_bin": merged.to_bytes(),  # empty, not null, when no page ended: null marks an older row
    }
    before = ShardInterval.objects.filter(run_id=run_id, shard_no=shard_no, second__lt=second).order_by("-second")
    totals = before.values_list(
        "pages_total", "errors_total", "latency_sum_total", "latency_count_total", "dropped_total"
    ).first() or (0, 0, 0, 0, 0)
    adds = (this["pages"], this["errors"], this["latency_sum_us"], this["latency_count"], dropped)
    keys = ("pages_total", "errors_total", "latency_sum_total", "latency_count_total", "dropped_total")
    return this | extra | {k: None if t is None else t + a for k, t, a in zip(keys, totals, adds, strict=True)}


def interval_write(run_id: int, shard_no: int, report: dict) -> None:
    """Stores one second of a shard (an engine interval report): the one way interval rows are written.

    The engine's sink calls it every second; an imported run's file is stored through it too
    (issue 18), so both kinds of run have the same rows. Upserts on the natural keys, so a
    report written twice replaces itself. Call it inside a transaction.
    """
    second = report["second"]
    lag = report.get("loop_lag_ms") or {}
    labels = report.get("labels", {})
    ShardInterval.objects.bulk_create(
        [
            ShardInterval(
                run_id=run_id,
                shard_no=shard_no,
                second=second,
                active_users=report.get("active_users", 0),
                iterations_started=report.get("iterations_started", 0),
                iterations_completed=report.get("iterations_completed", 0),
                iterations_dropped=report.get("iterations_dropped", 0),
                loop_lag_p99_ms=lag.get("p99"),
                loop_lag_max_ms=lag.get("max"),
                cpu_pct=report.get("cpu_pct"),
                **_shard_totals(run_id, shard_no, second, labels, report.get("iterations_dropped", 0)),
            )
        ],
        update_conflicts=True,
        unique_fields=["run", "second", "shard_no"],
        update_fields=SHARD_INTERVAL_FIELDS + SHARD_TOTAL_FIELDS,
    )
    rows = [_page_row(run_id, shard_no, second, label, stats) for label, stats in labels.items()]
    if rows:
        PageInterval.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["run", "second", "shard_no", "label"],
            update_fields=PAGE_INTERVAL_FIELDS,
        )
    protocols.write(run_id, shard_no, second, labels)  # streams, WebSocket, h2: only labels that have them
    traces = [
        SlowTrace(run_id=run_id, shard_no=shard_no, second=second, label=label[:210], **s)
        for label, stats in labels.items()
        if (s := _slowest(stats)) is not None
    ]
    if traces:
        SlowTrace.objects.bulk_create(
            traces,
            update_conflicts=True,
            unique_fields=["run", "label", "second", "shard_no"],
            update_fields=["ms", "trace_id"],
        )


_HEX = frozenset("0123456789abcdef")


def _slowest(stats: dict) -> dict | None:
    """The engine's ``slowest`` of a label (trace context), if well-formed: a 32-hex trace id and a duration."""
    s = stats.get("slowest")
    if not isinstance(s, dict):
        return None
    trace_id, ms = s.get("trace_id"), s.get("ms")
    if not (isinstance(trace_id, str) and len(trace_id) == 32 and set(trace_id) <= _HEX and trace_id != "0" * 32):
        return None
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not 0 <= ms < 1e9:
        return None
    return {"trace_id": trace_id, "ms": float(ms)}


class ShardSink:
    """The engine's sink for one shard: writes each interval report and answers "stop?".

    Each call is the shard's heartbeat. Rows are upserted on their natural key, so a report
    written twice (a retry after a database hiccup) replaces itself and never counts twice;
    the shard's running totals are the previous second's plus this one's, so a rewrite
    recomputes the same values.
    """

    def __init__(self, run_id: int, shard_no: int, *, worker: str = ""):
        self.run_id = run_id
        self.shard_no = shard_no
        self.worker = worker
        self.last_second: int | None = None  # the last second written: a continuation resumes after it
        self.handoff_at = None  # when it first answered HANDOFF (the worker began to stop)

    def __call__(self, report: dict) -> bool:
        try:
            answer = self._write(report)
            self.last_second = report["second"]
            return answer
        except Exception:
            # A connection broken by a database outage stays broken outside a request cycle:
            # drop it, so the retry a second later connects afresh.
            connection.close_if_unusable_or_obsolete()
            raise
        finally:
            # The engine calls us from a thread of its own; don't leave its connection behind.
            if report.get("final"):
                connection.close()

    def _write(self, report: dict) -> bool:
        with transaction.atomic():
            interval_write(self.run_id, self.shard_no, report)
            shard = self._heartbeat()
            Run.objects.filter(id=self.run_id, status=Status.STARTING).update(status=Status.RUNNING)
        run = Run.objects.only("cancel_requested", "status").get(id=self.run_id)
        # Stop when the user asked to, or when another worker holds this shard now (or nobody may).
        if run.cancel_requested or shard is None or shard.status != RunShard.Status.RUNNING:
            return True
        if shard.handoff_requested:
            self.handoff_at = self.handoff_at or timezone.now()
            return HANDOFF
        return False

    def _heartbeat(self) -> RunShard | None:
        """Beats the shard's heart if this worker still holds it; takes back a shard declared lost too early.

        A shard the watchdog declared lost while its worker was alive (a database outage hid
        its heartbeats) becomes running again at its next flush, as long as no other worker
        took it over (claiming it changes its worker) and its run has not ended; the handoff
        the watchdog offered is withdrawn.
        """
        shards = RunShard.objects.filter(run_id=self.run_id, shard_no=self.shard_no)
        if self.worker:
            shards = shards.filter(worker=self.worker)
            taken_back = shards.filter(
                status__in=[RunShard.Status.LOST, RunShard.Status.PENDING],
                run__status__in=[Status.STARTING, Status.RUNNING],
            ).update(status=RunShard.Status.RUNNING, finished_at=None, released_at=None, error_message="")
            if taken_back:
                log.warning("run %s shard %s: alive after all, taken back", self.run_id, self.shard_no)
                handoffs = shards.values_list("handoffs", flat=True).first() or []
                if handoffs and handoffs[-1].get("kind") == "lost" and "resumed_on" not in handoffs[-1]:
                    shards.update(handoffs=handoffs[:-1])
        shards.filter(status=RunShard.Status.RUNNING).update(heartbeat_at=timezone.now())
        return shards.only("status", "handoff_requested").first()
