"""Reads of a run's interval rows for other apps and the run's other modules (watchdog, stop criteria,
load, live figures, ``/metrics``, the analysis): each read is one function here, so no code outside
the results store names an interval model or table (``tests/portal/runs/test_store_door.py``).

Per-second figures over all pages come from the shards' rows (``ShardInterval``: one per shard and
second, kept per second for the run's life), never from the page rows, which the roll-up takes
(while the run is live, older than PLIMSOLL_LIVE_ROLLUP_AFTER; after it, all of them).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from django.db import connection
from django.db.models import Max, Q, Sum

from ..models import PageInterval, PageRollup, ShardInterval
from . import storage

Spans = list[tuple[int, int]]


def pages_per_second(run) -> dict[int, int]:
    """Pages per second, all shards and pages: the second's row of each shard holds its pages.

    A run recorded before the shards' rows held them (every row 0) is read from its page rows.
    """
    rows = ShardInterval.objects.filter(run=run).values("second").annotate(p=Sum("pages"))
    out = {r["second"]: r["p"] for r in rows}
    if any(out.values()):
        return out
    rows = PageInterval.objects.filter(run=run).values("second").annotate(p=Sum("pages"))
    return {r["second"]: r["p"] for r in rows} or out


def page_totals(run) -> tuple[int, int]:
    """(pages, errors) summed over the page rows: for runs recorded before the shards' running totals."""
    totals = PageInterval.objects.filter(run=run).aggregate(p=Sum("pages"), e=Sum("errors"))
    return totals["p"] or 0, totals["e"] or 0


def last_second(run) -> int | None:
    """The run's last second that any row (page or shard) holds; None before the first."""
    last = [
        PageInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"],
        ShardInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"],
    ]
    last = [s for s in last if s is not None]
    return max(last) if last else None


def shard_last_second(run) -> int | None:
    """The last second any shard of the run wrote a row for (its heartbeat); None before the first."""
    return ShardInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"]


def error_rows(run, windows: list[dict]):
    """(label, errors_by_kind, error_samples) of the rows with errors in the measurement windows: the spans
    rolled up while the run was live (earlier than every per-second row left) first, then the seconds."""
    in_windows = Q()
    for w in windows:
        in_windows |= Q(second__gte=w["start"], second__lt=w["end"])
    rows = (
        PageInterval.objects.filter(in_windows, run=run, errors__gt=0)
        .order_by("second", "shard_no", "label")
        .values_list("label", "errors_by_kind", "error_samples")
    )
    rolled = (
        PageRollup.objects.filter(in_windows, run=run, errors__gt=0, seconds_bin__isnull=False)
        .order_by("second", "label")
        .values_list("label", "errors_by_kind", "error_samples")
    )
    return itertools.chain(rolled.iterator(chunk_size=2000), rows.iterator(chunk_size=2000))


# The watchdog and the stop criteria: a shard's own rows.


def shard_seconds_last(run_id: int, shard_no: int) -> int | None:
    """The last second one shard wrote a row for (where a continuation resumes); None if it wrote none."""
    return ShardInterval.objects.filter(run_id=run_id, shard_no=shard_no).aggregate(s=Max("second"))["s"]


def shard_iterations_started(run_id: int, shard_no: int, *, since: int) -> int:
    """The iterations one shard started from second ``since`` on (what a crashed shard may have taken)."""
    started = ShardInterval.objects.filter(run_id=run_id, shard_no=shard_no, second__gte=since).aggregate(
        n=Sum("iterations_started")
    )["n"]
    return started or 0


def shards_latest(run_id: int, *, since: int) -> dict[int, int]:
    """{shard_no: its last second} over the shards that wrote a row from second ``since`` on."""
    return dict(
        ShardInterval.objects.filter(run_id=run_id, second__gte=since)
        .values("shard_no")
        .annotate(last=Max("second"))
        .values_list("shard_no", "last")
    )


def shard_window(run_id: int, *, first: int, last: int) -> list[tuple]:
    """(second, pages, errors, hist_bin) of every shard's rows of seconds first..last, newest first."""
    return list(
        ShardInterval.objects.filter(run_id=run_id, second__gte=first, second__lte=last)
        .order_by("-second")
        .values_list("second", "pages", "errors", "hist_bin")
    )


def covered_spans(run_id: int) -> dict[int, Spans]:
    """Per shard, the [start, end) seconds it wrote rows for, runs of consecutive seconds merged (one query)."""
    table = ShardInterval._meta.db_table
    # Gaps and islands: consecutive seconds share second - row_number().
    sql = (
        f"SELECT shard_no, MIN(second), MAX(second) FROM (SELECT shard_no, second, "  # noqa: S608 (a model's table)
        f"second - ROW_NUMBER() OVER (PARTITION BY shard_no ORDER BY second) AS island FROM {table} "
        "WHERE run_id = %s) AS t GROUP BY shard_no, island ORDER BY shard_no, 2"
    )
    spans: dict[int, Spans] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [run_id])
        for shard_no, first, last in cursor.fetchall():
            spans.setdefault(shard_no, []).append((first, last + 1))
    return spans


# The live page's figures and ``/metrics``: a few recent rows, never the whole run.


def users_at(run, second: int) -> int:
    """Active users summed over the shards' rows of one second."""
    return ShardInterval.objects.filter(run=run, second=second).aggregate(u=Sum("active_users"))["u"] or 0


def shard_sums(run, *, first: int, last: int) -> tuple[int, int]:
    """(pages, errors) summed over the shards' rows of seconds first..last (a few rows, no page rows)."""
    recent = ShardInterval.objects.filter(run=run, second__gte=first, second__lte=last).aggregate(
        p=Sum("pages"), e=Sum("errors")
    )
    return recent["p"] or 0, recent["e"] or 0


def running_totals(run, shard_nos, *, last: int) -> list[tuple[int, int]]:
    """(pages_total, errors_total) of each shard's latest row at or before ``last`` (shards without one left out).

    One query per shard, each a short backward walk of the (run, second, shard_no) index.
    """
    latest = ShardInterval.objects.filter(run=run, second__lte=last).order_by("-second")
    return [
        r
        for n in shard_nos
        if (r := latest.filter(shard_no=n).values_list("pages_total", "errors_total").first()) is not None
    ]


def shards_last_rows(run, *, since: int) -> dict[int, dict]:
    """{shard_no: its newest row from second ``since`` on}: second, users and running totals."""
    rows = ShardInterval.objects.filter(run=run, second__gte=since).values(
        "shard_no",
        "second",
        "active_users",
        "pages_total",
        "errors_total",
        "latency_sum_total",
        "latency_count_total",
    )
    last: dict[int, dict] = {}
    for row in rows:
        if row["shard_no"] not in last or row["second"] > last[row["shard_no"]]["second"]:
            last[row["shard_no"]] = row
    return last


def label_sums(run, *, lo: int, hi: int) -> dict[str, list]:
    """{label: [pages, hits, errors, duration sum (µs), duration count]} over the page rows of seconds lo..hi."""
    sums: dict[str, list] = defaultdict(lambda: [0, 0, 0, 0.0, 0])
    window = PageInterval.objects.filter(run=run, second__gte=lo, second__lte=hi).values_list(
        "label", "pages", "hits", "errors", "hist_bin", "hist"
    )
    for label, n_pages, n_hits, n_errors, binary, legacy in window:
        s = sums[label]
        s[0] += n_pages
        s[1] += n_hits
        s[2] += n_errors
        hist = storage.histogram(binary, legacy)
        s[3] += hist.sum
        s[4] += hist.count
    return sums
