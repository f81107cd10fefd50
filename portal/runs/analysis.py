"""Summaries, verdicts and chart series computed from a run's interval rows.

Percentiles always come from merged histograms, never from averaging percentiles.
Summaries and verdicts use the measurement windows (the hold, or each level's hold
for a steps profile); charts show the whole run.

A steps run also gets its capacity (the highest level within the thresholds, and the
knee: the last level after which throughput grows less than half as fast as the users);
a single-window run gets a degradation analysis (did throughput fall or APD rise well
away from the steady state after ramp-up, and when). The statistics themselves live in
``portal.stats.analysis``; this module feeds them a run's figures and words their answers.
"""

import itertools
import math
import statistics
from collections import defaultdict, namedtuple

import numpy as np
from django.db import connection
from django.db.models import Max, Q

from portal import formatting
from portal.common import human_duration
from portal.projects.models import Plan
from portal.stats import analysis as history_analysis
from portal.stats import changepoint, scalability
from workers.engine import health
from workers.engine.histogram import Histogram
from workers.engine.schedule import whole_seconds

from .models import PageInterval, PageRollup, Run, RunFigures, RunShard, ShardInterval
from .results import columns, storage

PERCENTILES = (50, 90, 95, 99)
# Charts of long runs are downsampled to at most this many points.
MAX_POINTS = 720
# A live run's first chart load reads label rows (for p95, hits and bytes) for this many recent seconds:
# two minutes of 20 pages is 2,400 rows to decode, which keeps the first load near a poll's cost (issue 9).
LIVE_DETAIL_S = 120


def _hist(d: dict) -> Histogram:
    """A stored histogram; a row of errors only may carry none."""
    return Histogram.from_dict(d) if d else Histogram()


def cut_windows(run: Run, last_second: int | None) -> list[dict]:
    """The run's measurement windows in whole seconds, cut to what actually ran."""
    windows = []
    for index, (start, end, label) in enumerate(run.measurement_windows):
        lo, hi = whole_seconds(start, end)
        note = ""
        if last_second is not None and last_second + 1 < hi:
            if last_second + 1 <= lo:
                continue  # never reached
            hi = last_second + 1
            note = f"The run ended early; this window is cut to {hi - lo} s."
        windows.append(
            {"label": label, "start": lo, "end": hi, "seconds": max(hi - lo, 1), "note": note, "index": index}
        )
    if not windows:
        end = (last_second + 1) if last_second is not None else 1
        windows.append(
            {
                "label": "Whole run",
                "start": 0,
                "end": end,
                "seconds": end,
                "note": "The run ended before its measurement window; figures cover the whole run.",
            }
        )
    return windows


class _Acc:
    """Sums over some seconds of a run (of some labels)."""

    __slots__ = ("pages", "hits", "errors", "bytes_in", "bytes_out", "hist", "ttfb", "connect")

    def __init__(self) -> None:
        self.pages = self.hits = self.errors = self.bytes_in = self.bytes_out = 0
        self.hist, self.ttfb, self.connect = Histogram(), Histogram(), storage.Mean()

    def add(self, row) -> "_Acc":
        """Adds a row, or another accumulator (both have the same attributes)."""
        self.pages += row.pages
        self.hits += row.hits
        self.errors += row.errors
        self.bytes_in += row.bytes_in
        self.bytes_out += row.bytes_out
        self.hist.merge(row.hist)
        self.ttfb.merge(row.ttfb)
        self.connect.merge(row.connect)
        return self


def _latency(h: Histogram) -> dict:
    if not h.count:
        return {"apd_ms": None, "min_ms": None, "max_ms": None, **{f"p{q}_ms": None for q in PERCENTILES}}
    return {
        "apd_ms": round(h.mean / 1000, 2),
        "min_ms": round(h.min / 1000, 2),
        "max_ms": round(h.max / 1000, 2),
        **{f"p{q}_ms": round(h.percentile(q) / 1000, 2) for q in PERCENTILES},
    }


DISTRIBUTION_PERCENTILES = (
    50, 60, 70, 75, 80, 85, 90, 92.5, 95, 96, 97, 97.5, 98, 98.5, 99, 99.25, 99.5, 99.75, 99.9, 99.95, 99.99,
)  # fmt: skip
"""The percentile curve's points: denser towards the tail, where distributions differ."""


def distribution_of(h: Histogram) -> list[list[float]]:
    """The percentile curve of a merged histogram: [[percentile, ms], …], p50 to p99.99."""
    if not h.count:
        return []
    values = h.percentiles(DISTRIBUTION_PERCENTILES)
    return [[q, round(values[q] / 1000, 3)] for q in DISTRIBUTION_PERCENTILES]


def _ms(h, q: float | None = None) -> float | None:
    if not h.count:
        return None
    return round((h.mean if q is None else h.percentile(q)) / 1000, 2)


def _rate(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 3) if whole else 0.0


def _figures(acc: _Acc, seconds: int, shard_seconds: "ShardSeconds") -> dict:
    c = shard_seconds.c
    started = int(c["iterations_started"].sum())
    completed = int(c["iterations_completed"].sum())
    dropped = int(c["iterations_dropped"].sum())
    # The most users at once: each second's users summed over the shards, then the largest.
    _, at = np.unique(c["second"], return_inverse=True)
    users = np.bincount(at, weights=c["active_users"]).astype(np.int64) if len(at) else np.zeros(0, np.int64)
    return {
        "pages": acc.pages,
        "hits": acc.hits,
        "errors": acc.errors,
        "error_rate_pct": _rate(acc.errors, acc.pages),
        "bytes_in": acc.bytes_in,
        "bytes_out": acc.bytes_out,
        "transactions": completed,
        "iterations_started": started,
        "iterations_dropped": dropped,
        "users": int(users.max()) if len(users) else 0,
        "pages_per_s": round(acc.pages / seconds, 3),
        "hits_per_s": round(acc.hits / seconds, 3),
        "bytes_per_s": round(acc.bytes_in / seconds, 1),
        "transactions_per_s": round(completed / seconds, 3),
        "ttfb_ms": _ms(acc.ttfb),
        "ttfb_p95_ms": _ms(acc.ttfb, 95),
        "connect_ms": _ms(acc.connect),
        **_latency(acc.hist),
    }


_SHARD_FIELDS = (
    "second",
    "active_users",
    "iterations_started",
    "iterations_completed",
    "iterations_dropped",
    "loop_lag_p99_ms",
    "cpu_pct",
    "pages",
    "errors",
    "latency_sum_us",
    "latency_count",
)
_SHARD_NULLABLE = ("loop_lag_p99_ms", "cpu_pct")  # float columns, NaN where the row has NULL
_ShardRow = namedtuple("_ShardRow", _SHARD_FIELDS)


class ShardSeconds:
    """The shards' per-second rows as numpy columns (``_SHARD_FIELDS``): a 48 h run has 172,800
    rows per shard, which as Python tuples took 60 MB of a finalize's memory (issue 9).

    Iterating yields light named tuples a chunk at a time (None where a nullable column is NULL),
    for code that reads a row at a time; the heavy paths use the columns.
    """

    def __init__(self, columns: dict[str, np.ndarray]):
        self.c = columns

    @classmethod
    def empty(cls) -> "ShardSeconds":
        return cls({f: np.zeros(0, np.float64 if f in _SHARD_NULLABLE else np.int64) for f in _SHARD_FIELDS})

    @classmethod
    def concat(cls, parts: list["ShardSeconds"]) -> "ShardSeconds":
        if not parts:
            return cls.empty()
        return cls({f: np.concatenate([p.c[f] for p in parts]) for f in _SHARD_FIELDS})

    def __len__(self) -> int:
        return len(self.c["second"])

    def select(self, mask: np.ndarray) -> "ShardSeconds":
        return ShardSeconds({f: v[mask] for f, v in self.c.items()})

    def __iter__(self):
        for lo in range(0, len(self), 5000):
            cols = []
            for f in _SHARD_FIELDS:
                part = self.c[f][lo : lo + 5000].tolist()
                if f in _SHARD_NULLABLE:
                    part = [None if v != v else v for v in part]  # NaN is NULL
                cols.append(part)
            yield from map(_ShardRow._make, zip(*cols, strict=True))

    def per_second(self, field: str, end: int) -> np.ndarray:
        """``field`` summed over the shards for each second in [0, end) (rows at or past ``end`` left out)."""
        keep = self.c["second"] < end
        return np.bincount(self.c["second"][keep], weights=self.c[field][keep], minlength=end)[:end]


def _shard_rows(run: Run, since: int | None = None) -> ShardSeconds:
    """The run's ShardInterval rows as numpy columns, read 5,000 at a time."""
    rows = ShardInterval.objects.filter(run=run)
    if since is not None:
        rows = rows.filter(second__gte=since)
    parts, chunk = [], []

    def flush():
        if chunk:
            cols = list(zip(*chunk, strict=True))
            parts.append(
                ShardSeconds(
                    {
                        f: np.array(
                            [np.nan if v is None else v for v in col] if f in _SHARD_NULLABLE else col,
                            np.float64 if f in _SHARD_NULLABLE else np.int64,
                        )
                        for f, col in zip(_SHARD_FIELDS, cols, strict=True)
                    }
                )
            )
            chunk.clear()

    for row in rows.values_list(*_SHARD_FIELDS).iterator(chunk_size=5000):
        chunk.append(row)
        if len(chunk) == 5000:
            flush()
    flush()
    return ShardSeconds.concat(parts)


def last_second(run: Run) -> int | None:
    last = [
        PageInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"],
        ShardInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"],
    ]
    last = [s for s in last if s is not None]
    return max(last) if last else None


class _PerSecond:
    """Pages, latency sum and count per second (the degradation input), in numpy arrays."""

    def __init__(self, end: int):
        self.pages = np.zeros(end, np.int64)
        self.total_us = np.zeros(end, np.int64)
        self.count = np.zeros(end, np.int64)
        self.reported = np.zeros(end, bool)

    def add_columns(self, lo: int, hi: int, c) -> None:
        """A chunk of rows with seconds in [lo, hi) (``columns.Chunk``)."""
        hi = min(hi, len(self.pages))
        if hi <= lo:
            return
        at = c.second - lo
        keep = at < hi - lo
        at = at[keep]
        for target, column in ((self.pages, c.pages), (self.total_us, c.hist.sum), (self.count, c.hist.n)):
            target[lo:hi] += np.bincount(at, weights=column[keep], minlength=hi - lo).astype(np.int64)
        self.reported[at + lo] = True


class _Series:
    """Chart buckets: counts per bucket, APD and p95 from each bucket's merged histogram (``_chart_columns``)."""

    def __init__(self, bucket: int, first: int = 0):
        self.bucket = bucket
        self.first = first
        self.pages, self.hits, self.errs, self.bytes_in = (defaultdict(int) for _ in range(4))
        self.apd: dict[int, float | None] = {}
        self.p95: dict[int, float | None] = {}
        self.last: int | None = None
        # Each bucket's extremes over its seconds (issue 15: a stall of one second must survive
        # the downsampling): the highest per-second APD and the lowest per-second pages.
        self.apd_max: dict[int, float | None] = {}
        self.pages_min: dict[int, tuple[int, int]] = {}  # bucket → (lowest pages in a second, seconds seen)
        # second → [pages, µs, count] of the seconds read but maybe not whole yet (a second's rows
        # can straddle two chunks; rows come in order of seconds, so earlier seconds are whole)
        self._seconds: dict[int, list[int]] = {}

    def add_seconds(self, seconds, pages, total_us, count) -> None:
        """One chunk's per-second totals; closes the seconds before the chunk's last."""
        for second, p, us, n in zip(seconds, pages, total_us, count, strict=True):
            acc = self._seconds.setdefault(second, [0, 0, 0])
            acc[0] += p
            acc[1] += us
            acc[2] += n
        if seconds:
            self.close_seconds(before=seconds[-1])

    def close_seconds(self, before: int | None = None) -> None:
        """Folds whole seconds (all of them when ``before`` is None) into their bucket's extremes."""
        for second in sorted(s for s in self._seconds if before is None or s < before):
            pages, total_us, count = self._seconds.pop(second)
            start = self.first + (second - self.first) // self.bucket * self.bucket
            if count:
                apd = round(total_us / count / 1000, 2)
                self.apd_max[start] = max(self.apd_max.get(start) or 0.0, apd)
            low, seen = self.pages_min.get(start, (pages, 0))
            self.pages_min[start] = (min(low, pages), seen + 1)

    def result(
        self,
        shard_rows: "ShardSeconds",
        last: int,
        *,
        totals_from: int | None = None,
        early: dict[int, tuple[int, ...]] | None = None,
    ) -> dict:
        """The buckets from ``totals_from`` (default: the first row's) to ``last``.

        Buckets before the rows read (a live run's first load reads label rows only for its
        last LIVE_DETAIL_S) come from the shards' per-second totals: pages, errors and APD,
        without hits, bytes and p95, which only label rows hold. ``early`` (``_early_buckets``)
        gives those buckets' totals ready summed; without it they are summed from ``shard_rows``.
        """
        self.close_seconds()
        # Per-bucket figures of the shards' rows, summed per second first (several shards), in numpy.
        sec = shard_rows.c["second"]
        base = int(sec.min()) if len(sec) else 0
        first_t = self.first if totals_from is None else totals_from
        n_s = max(last + 1 - base, 0)
        keep = sec <= last
        at = sec[keep] - base

        def per_second(field):
            return np.bincount(at, weights=shard_rows.c[field][keep], minlength=n_s).astype(np.int64)

        users_s, dropped_s = per_second("active_users"), per_second("iterations_dropped")
        summed: dict[int, list[int]] = {}  # bucket → pages, errors, µs, count (before self.first)
        if early is None and len(sec) and base < self.first:
            span_s = slice(0, min(self.first, last + 1) - base)
            totals = [per_second(f)[span_s] for f in ("pages", "errors", "latency_sum_us", "latency_count")]
            bucket_of = (np.arange(span_s.stop) + base) // self.bucket * self.bucket
            for b in np.unique(bucket_of).tolist():
                mask = bucket_of == b
                summed[b] = [int(t[mask].sum()) for t in totals]
        keys = ("users", "pages_per_s", "hits_per_s", "errors_per_s", "dropped_per_s", "apd_ms", "p95_ms")
        extremes = ("apd_max_ms", "pages_per_s_min")
        out = {"bucket_s": self.bucket, "t": [], **{k: [] for k in (*keys, *extremes)}, "bytes_per_s": []}
        for start in range(first_t, last + 1, self.bucket):
            stop = min(start + self.bucket, last + 1)
            n = stop - start
            lo, hi = max(start - base, 0), max(stop - base, 0)
            out["t"].append(start)
            if early is not None and start < self.first:
                pages, errors, total_us, count, users, dropped = early.get(start, (0,) * 6)
                out["users"].append(users)
                out["dropped_per_s"].append(round(dropped / n, 2))
            else:
                out["users"].append(int(users_s[lo:hi].max()) if hi > lo else 0)
                out["dropped_per_s"].append(round(int(dropped_s[lo:hi].sum()) / n, 2))
                pages, errors, total_us, count = summed.get(start, (0, 0, 0, 0))
            if start < self.first:
                out["pages_per_s"].append(round(pages / n, 2))
                out["errors_per_s"].append(round(errors / n, 2))
                out["apd_ms"].append(round(total_us / count / 1000, 2) if count else None)
                for key in ("hits_per_s", "bytes_per_s", "p95_ms", *extremes):
                    out[key].append(None)
                continue
            low, seen = self.pages_min.get(start, (0, 0))
            out["apd_max_ms"].append(self.apd_max.get(start))
            out["pages_per_s_min"].append(low if seen >= n else 0)  # a second without rows had no page
            out["pages_per_s"].append(round(self.pages[start] / n, 2))
            out["hits_per_s"].append(round(self.hits[start] / n, 2))
            out["errors_per_s"].append(round(self.errs[start] / n, 2))
            out["bytes_per_s"].append(round(self.bytes_in[start] / n, 1))
            out["apd_ms"].append(self.apd.get(start))
            out["p95_ms"].append(self.p95.get(start))
        return out


def chart_bucket(last: int) -> int:
    """Seconds per chart point of a finished run: at most MAX_POINTS points."""
    return max(1, math.ceil((last + 1) / MAX_POINTS))


def summarize(run: Run) -> dict:
    """The run's summary in one pass over its rows in order of seconds (``summarize_with_series``)."""
    return summarize_with_series(run)[0]


def _chart_columns(chart: _Series, buckets: columns.Groups, c) -> None:
    """Adds a chunk's rows to the chart: counts per bucket, page durations merged per bucket."""
    start = chart.first + (c.second - chart.first) // chart.bucket * chart.bucket
    keys, local = columns.local_keys(start)
    _close_buckets(chart, buckets, lambda s: s < keys[0])  # a chunk starts where earlier buckets ended
    sel = local >= 0
    for name, target in (
        ("pages", chart.pages),
        ("hits", chart.hits),
        ("errors", chart.errs),
        ("bytes_in", chart.bytes_in),
    ):
        sums = np.bincount(local[sel], weights=getattr(c, name)[sel], minlength=len(keys)).astype(np.int64).tolist()
        for key, n in zip(keys, sums, strict=True):
            target[key] += n
    buckets.add(keys, local, c.hist)
    # Per-second totals, for each bucket's worst second (its highest APD, its fewest pages)
    seconds, at = np.unique(c.second, return_inverse=True)
    chart.add_seconds(
        seconds.tolist(),
        *(
            np.bincount(at, weights=col, minlength=len(seconds)).astype(np.int64).tolist()
            for col in (c.pages, c.hist.sum, c.hist.n)
        ),
    )
    last = int(c.second.max())
    chart.last = last if chart.last is None else max(chart.last, last)


def _close_buckets(chart: _Series, buckets: columns.Groups, done) -> None:
    """Closes the chart buckets ``done`` says are complete: their APD and p95 from the merged histogram.

    A bucket without a page duration (errors only) never opened a group: its APD and p95 stay None.
    """
    for start in [key for key in buckets.open if done(key)]:
        h = buckets.close(start)
        chart.apd[start] = round(h.mean / 1000, 2)
        chart.p95[start] = round(h.percentile(95) / 1000, 2)


def _errors(run: Run, windows: list[dict]) -> dict[str, dict]:
    """Errors by kind in the measurement windows: counts, the first sample, and the pages they hit."""
    errors: dict[str, dict] = {}
    in_windows = Q()
    for w in windows:
        in_windows |= Q(second__gte=w["start"], second__lt=w["end"])
    rows = (
        PageInterval.objects.filter(in_windows, run=run, errors__gt=0)
        .order_by("second", "shard_no", "label")
        .values_list("label", "errors_by_kind", "error_samples")
    )
    # Spans rolled up while the run was live (earlier than every per-second row left), first.
    rolled = (
        PageRollup.objects.filter(in_windows, run=run, errors__gt=0, seconds_bin__isnull=False)
        .order_by("second", "label")
        .values_list("label", "errors_by_kind", "error_samples")
    )
    for label, by_kind, samples in itertools.chain(rolled.iterator(chunk_size=2000), rows.iterator(chunk_size=2000)):
        for kind, n in (by_kind or {}).items():
            e = errors.setdefault(
                kind, {"kind": kind, "count": 0, "sample": (samples or {}).get(kind, ""), "pages": set()}
            )
            e["count"] += n
            e["pages"].add(label)
    return errors


def summarize_with_series(run: Run, *, sampler=None) -> tuple[dict, dict]:
    """The summary and the chart series, from one streaming pass over the run's rows.

    ``sampler``: a ``portal.history.comparison.BatchSampler`` fed from the same pass (finalize's
    comparison batches), so no row is read or decoded twice.

    The rows are read a chunk of seconds at a time as numpy columns (``columns``): each
    histogram is decoded once, in bulk, and merged into its (label, window) cell, its chart
    bucket and its batch; a group becomes a ``Histogram`` when the pass leaves it. The per-label,
    per-window and total figures are merges of the cells, so memory depends on the number of
    labels and windows, not on the run's length (besides the per-second lists the degradation
    analysis takes, a few integers per second).
    """
    shard_rows = _shard_rows(run)
    last = last_second(run)
    windows = cut_windows(run, last)
    limits = run.plan_snapshot.get("thresholds") or {}
    end = (last + 1) if last is not None else 0

    cells: dict[tuple[str, int], _Acc] = {}
    whole = _Acc()
    per_second = _PerSecond(end)
    bucket = chart_bucket(last) if last is not None else 1
    chart = _Series(bucket)
    window_of = np.full(end + 1, -1, np.int64)  # +1: a row past ``end`` cannot exist, but stays safe
    for i, w in enumerate(windows):
        window_of[w["start"] : min(w["end"], end)] = i
    labels: dict[str, int] = {}
    names: list[str] = []
    cuts = [w[k] for w in windows for k in ("start", "end")] + (sampler.cuts() if sampler else [])
    hists, ttfbs, buckets = columns.Groups(), columns.Groups(), columns.Groups()
    for lo, hi, c in columns.chunks(run, labels, align=bucket, cuts=cuts, rolled=True):
        if not c.size:
            continue
        names.extend(list(labels)[len(names) :])
        whole.pages += int(c.pages.sum())
        whole.hits += int(c.hits.sum())
        whole.errors += int(c.errors.sum())
        whole.bytes_in += int(c.bytes_in.sum())
        per_second.add_columns(lo, hi, c)
        _chart_columns(chart, buckets, c)
        if sampler is not None:
            sampler.add_columns(lo, hi, c, names)
        w_rows = window_of[np.minimum(c.second, end)]
        cell_of = np.where(w_rows >= 0, c.label * len(windows) + w_rows, -1)
        keys, local = columns.local_keys(cell_of)
        sums = {
            name: np.bincount(local[local >= 0], weights=getattr(c, name)[local >= 0], minlength=len(keys))
            for name in ("pages", "hits", "errors", "bytes_in", "bytes_out", "connect_count", "connect_sum")
        }
        hists.add(keys, local, c.hist)
        ttfbs.add(keys, local, c.ttfb)
        for i, key in enumerate(keys):
            cell = cells.get(key)
            if cell is None:
                cell = cells[key] = _Acc()
            cell.pages += int(sums["pages"][i])
            cell.hits += int(sums["hits"][i])
            cell.errors += int(sums["errors"][i])
            cell.bytes_in += int(sums["bytes_in"][i])
            cell.bytes_out += int(sums["bytes_out"][i])
            cell.connect.merge(storage.Mean(int(sums["connect_count"][i]), int(sums["connect_sum"][i])))
    _close_buckets(chart, buckets, lambda start: True)
    if sampler is not None:
        sampler.close()
    for key, cell in cells.items():
        cell.hist, cell.ttfb = hists.close(key), ttfbs.close(key)
    cells = {(names[key // len(windows)], key % len(windows)): cell for key, cell in sorted(cells.items())}
    errors = _errors(run, windows)

    per_label: dict[str, _Acc] = defaultdict(_Acc)
    per_window = [_Acc() for _ in windows]
    for (label, w), acc in cells.items():
        per_label[label].add(acc)
        per_window[w].add(acc)
    total = _Acc()
    for acc in per_window:
        total.add(acc)

    measured_seconds = sum(w["seconds"] for w in windows)
    window_shards = [
        shard_rows.select((shard_rows.c["second"] >= w["start"]) & (shard_rows.c["second"] < w["end"])) for w in windows
    ]
    totals = _figures(total, measured_seconds, ShardSeconds.concat(window_shards))
    for w, acc, w_shards in zip(windows, per_window, window_shards, strict=True):
        w["totals"] = _figures(acc, w["seconds"], w_shards)
        w["thresholds"] = judge(limits, w["totals"])
        w["verdict"] = _verdict(w["thresholds"])
    thresholds = judge(limits, totals) if len(windows) == 1 else []
    verdict = _verdict(thresholds) if len(windows) == 1 else _combined([w["verdict"] for w in windows])
    pages = [
        {
            "label": label,
            "pages": acc.pages,
            "errors": acc.errors,
            "error_rate_pct": _rate(acc.errors, acc.pages),
            "pages_per_s": round(acc.pages / measured_seconds, 3),
            "bytes_in": acc.bytes_in,
            "ttfb_ms": _ms(acc.ttfb),
            "connect_ms": _ms(acc.connect),
            **_latency(acc.hist),
        }
        for label, acc in sorted(per_label.items())
    ]
    summary = {
        "window": {
            "start": windows[0]["start"],
            "end": windows[-1]["end"],
            "seconds": measured_seconds,
            "note": " ".join(w["note"] for w in windows if w["note"]),
        },
        "windows": windows,
        "totals": totals,
        # The window's page durations by percentile (issue 15: the report's distribution chart),
        # from the same merged histogram as the totals: [[percentile, ms], …], p50 to p99.99.
        "distribution": distribution_of(total.hist),
        "pages": pages,
        "errors": sorted(({**e, "pages": sorted(e["pages"])} for e in errors.values()), key=lambda e: -e["count"]),
        "whole_run": {
            "pages": whole.pages,
            "hits": whole.hits,
            "errors": whole.errors,
            "bytes_in": whole.bytes_in,
            "seconds": end,
        },
        "generator": generator_health(shard_rows, windows),
        "handoffs": handoff_timeline(run, windows),
        "thresholds": thresholds,
        "verdict": verdict,
        **_capacity_or_degradation(run, windows, limits, per_second, shard_rows),
    }
    series = chart.result(shard_rows, last) if last is not None else _Series(1).result(ShardSeconds.empty(), -1)
    return summary, series


def generator_health(shard_rows: ShardSeconds, windows: list[dict]) -> dict:
    """The load generator's own state in the measured seconds; saturated means its figures are suspect.

    Per second, the worst shard counts: the run's figures are suspect if any shard's generator was.
    """
    sec = shard_rows.c["second"]
    inside = np.zeros(len(sec), bool)
    for w in windows:
        inside |= (sec >= w["start"]) & (sec < w["end"])

    def worst_per_second(field: str) -> tuple[np.ndarray, np.ndarray]:
        """(seconds, the highest value any shard reported in each) over the measured rows with a value."""
        values = shard_rows.c[field]
        ok = inside & ~np.isnan(values)
        seconds, at = np.unique(sec[ok], return_inverse=True)
        worst = np.full(len(seconds), -np.inf)
        np.maximum.at(worst, at, values[ok])
        return seconds, np.maximum(worst, 0.0)  # as before: a max starting from 0

    lag_s, lag_v = worst_per_second("loop_lag_p99_ms")
    cpu_s, cpu_v = worst_per_second("cpu_pct")
    if not len(lag_s) and not len(cpu_s):
        return {"loop_lag_p99_ms": None, "cpu_pct_max": None, "saturated": None, "lagged": None}
    first = int(min(lag_s[:1].tolist() + cpu_s[:1].tolist()))
    last = int(max(lag_s[-1:].tolist() + cpu_s[-1:].tolist()))

    def spread(seconds: np.ndarray, values: np.ndarray) -> list[float | None]:
        out: list[float | None] = [None] * (last - first + 1)
        for t, v in zip((seconds - first).tolist(), values.tolist(), strict=True):
            out[t] = v
        return out

    lag, cpu = spread(lag_s, lag_v), spread(cpu_s, cpu_v)
    return {
        "loop_lag_p99_ms": float(lag_v.max()) if len(lag_v) else None,
        "cpu_pct_max": float(cpu_v.max()) if len(cpu_v) else None,
        "saturated": health.saturation(lag, cpu, first_second=first),
        # Seconds above the limits too few to call it saturated (a 74 ms lag p99 in 2 s of 60): the
        # report and the API still say so, since the highest percentiles may hold the generator's delay.
        "lagged": health.strain(lag, cpu),
    }


THRESHOLDS = (
    # (key in the plan, name, key in totals, unit, "≤" for a ceiling or "≥" for a floor)
    ("apd_ms", "APD", "apd_ms", "ms", "≤"),
    ("p95_ms", "p95", "p95_ms", "ms", "≤"),
    ("error_rate_pct", "Error rate", "error_rate_pct", "%", "≤"),
    ("min_pages_per_s", "Pages/s", "pages_per_s", "pages/s", "≥"),
)


def judge(limits: dict, totals: dict) -> list[dict]:
    """Each threshold set on the plan, with the measured value and whether it held.

    Pages/s is a floor ("at least"), the others are ceilings ("at most").
    """
    results = []
    for key, name, total_key, unit, op in THRESHOLDS:
        limit = limits.get(key)
        if limit is None:
            continue
        actual = totals.get(total_key)
        if actual is None:  # No successful page means no latency: a latency threshold cannot hold on nothing.
            passed = key == "error_rate_pct"
        elif op == "≤":
            passed = actual <= limit
        else:
            passed = actual >= limit
        results.append({"name": name, "limit": limit, "actual": actual, "unit": unit, "op": op, "passed": passed})
    return results


def _verdict(thresholds: list[dict]) -> str | None:
    if not thresholds:
        return None
    return "passed" if all(t["passed"] for t in thresholds) else "failed"


def _combined(verdicts: list[str | None]) -> str | None:
    """A run with several windows passes when every window held its thresholds."""
    judged = [v for v in verdicts if v is not None]
    if not judged:
        return None
    return "passed" if all(v == "passed" for v in judged) else "failed"


# --------------------------------------------------------------------------------------
# Capacity (steps runs) and degradation (single-window runs)
# --------------------------------------------------------------------------------------

# The plan's threshold keys (as in the snapshot) → portal.stats.analysis.Thresholds, and
# the names the report gives them (the same as judge's).
CAPACITY_THRESHOLDS = {
    "apd_ms": ("max_apd_ms", "APD"),
    "p95_ms": ("max_p95_ms", "p95"),
    "error_rate_pct": ("max_error_rate_pct", "Error rate"),
    "min_pages_per_s": ("min_pages_per_s", "Pages/s"),
}
_THRESHOLD_NAME = {attr: name for attr, name in CAPACITY_THRESHOLDS.values()}
_THRESHOLD_KEY = {attr: key for key, (attr, _) in CAPACITY_THRESHOLDS.items()}

DEGRADATION_SETTINGS = ("drop_pct", "rise_pct", "sustain_s", "steady_s")


def degradation_defaults() -> dict:
    """The plan's defaults, for runs whose analysis settings predate them (or were never copied)."""
    return {name: Plan._meta.get_field(f"degradation_{name}").default for name in DEGRADATION_SETTINGS}


def _capacity_or_degradation(run: Run, windows: list[dict], limits: dict, rows, shard_rows: ShardSeconds) -> dict:
    """A steps run with several measured levels gets its capacity; a single-window run its degradation."""
    if len(windows) > 1:
        return {"capacity": capacity_of(run, windows, limits)}
    if len(windows) == 1:
        if (run.plan_snapshot.get("profile") or {}).get("kind") == "steps":
            return {}  # a steps run is read for its capacity; one level is no soak
        window, settings = windows[0], (run.analysis_settings or {}).get("degradation") or {}
        steady_s = settings.get("steady_s") or degradation_defaults()["steady_s"]
        if window.get("index") is not None and window["end"] - window["start"] < steady_s:
            # Shorter than the steady state itself: a smoke test, nobody expected a look for
            # degradation, so the report says nothing about it rather than "too short" on every such run.
            return {}
        return {"degradation": degradation_of(run, window, rows, shard_rows)}
    return {}


def _fmt_ms(value: float) -> str:
    """412 ms, 1.00 s, 1.42 s: as every page writes a duration (portal.formatting)."""
    return formatting.duration_ms(value)


def _fmt_rate(value: float) -> str:
    return formatting.rate(value)


def _fmt_limit(key: str, value: float) -> str:
    if key in ("apd_ms", "p95_ms"):
        return _fmt_ms(value)
    if key == "error_rate_pct":
        return formatting.percent(value)
    return f"{_fmt_rate(value)} pages/s"


def _breaks(level: dict, limits: dict) -> str:
    """ "APD breaks 1 s (1.42 s) and the error rate breaks 0.1 % (2.3 %)" for one failing level."""
    parts = []
    for attr in level["broken_fields"]:
        key = _THRESHOLD_KEY[attr]
        limit = _fmt_limit(key, limits[key])
        actual = level.get(key if key != "min_pages_per_s" else "pages_per_s")
        measured = "no successful page" if actual is None else _fmt_limit(key, actual)
        if key == "min_pages_per_s":
            parts.append(f"pages/s fall below {limit} ({measured})")
        elif key == "error_rate_pct":
            parts.append(f"the error rate breaks {limit} ({measured})")
        else:
            parts.append(f"{_THRESHOLD_NAME[attr]} breaks {limit} ({measured})")
    return " and ".join(parts)


def capacity_of(run: Run, windows: list[dict], limits: dict) -> dict:
    """The capacity and knee of a steps run, from each level's measured window.

    A level's users are the plan's (what the level asked for), not the active users
    counted, so a level reads as "40 users" even if a shard was lost. Levels whose
    window was cut short still count: they are what the run measured, and the table
    shows their note. With two levels of the same users the capacity is not defined
    (which one would hold?), so the report says so instead.
    """
    planned = [lv.users for lv in getattr(run.engine_profile, "levels", None) or []]
    rows = []
    for w in windows:
        t = w["totals"]
        index = w.get("index")
        users = planned[index] if index is not None and index < len(planned) else t["users"]
        rows.append(
            {
                "label": w["label"],
                "users": users,
                "start": w["start"],
                "end": w["end"],
                "note": w["note"],
                "apd_ms": t["apd_ms"],
                "p95_ms": t["p95_ms"],
                "pages_per_s": t["pages_per_s"],
                "error_rate_pct": t["error_rate_pct"],
            }
        )
    users = [r["users"] for r in rows]
    if len(set(users)) != len(users) or min(users) <= 0:
        return {
            "analysed": False,
            "reason": "Two levels have the same number of users, so the highest level that holds is not defined.",
            "levels": rows,
        }

    thresholds = history_analysis.Thresholds(
        **{attr: limits.get(key) for key, (attr, _) in CAPACITY_THRESHOLDS.items()}
    )
    levels = [
        history_analysis.Level(
            users=r["users"],
            # No successful page: no latency, and a latency threshold cannot hold on nothing (as judge).
            apd_ms=math.inf if r["apd_ms"] is None else r["apd_ms"],
            p95_ms=math.inf if r["p95_ms"] is None else r["p95_ms"],
            pages_per_s=r["pages_per_s"],
            error_rate_pct=r["error_rate_pct"],
        )
        for r in rows
    ]
    result = history_analysis.capacity(levels, thresholds)
    for r in rows:
        r["broken_fields"] = result.broken.get(r["users"], [])
        r["broken"] = [_THRESHOLD_NAME[f] for f in r["broken_fields"]]
        r["held"] = not r["broken"]
        r["capacity"] = r["users"] == result.capacity_users
        r["knee"] = r["users"] == result.knee_users
    rows.sort(key=lambda r: r["users"])
    held_level = next((r for r in rows if r["capacity"]), None)
    failed_level = next((r for r in rows if r["users"] == result.first_failure_users), None)
    out = {
        "analysed": True,
        # A capacity search ends "done" with this answer (run_finalize); later comparisons read a
        # lower capacity than the baseline's as a regression, so the figures are kept with it.
        "search": bool((run.analysis_settings or {}).get("capacity_search")),
        "capacity_users": result.capacity_users,
        "capacity_pages_per_s": held_level["pages_per_s"] if held_level else None,
        "capacity_apd_ms": held_level["apd_ms"] if held_level else None,
        "next_level_broke": _breaks(failed_level, limits) if failed_level else None,
        "first_failure_users": result.first_failure_users,
        "knee_users": result.knee_users,
        "broken": {str(u): [_THRESHOLD_NAME[a] for a in attrs] for u, attrs in result.broken.items()},
        "thresholds_set": any(limits.get(key) is not None for key in CAPACITY_THRESHOLDS),
        "levels": rows,
    }
    out["sentence"] = _capacity_sentence(out, limits)
    out["model"] = scalability_model(rows, open_model=getattr(run.engine_profile, "open_model", False))
    for r, predicted in zip(rows, out["model"].get("predicted_pages_per_s") or [], strict=False):
        r["predicted_pages_per_s"] = predicted
    if out["search"]:
        out["answer"] = _search_answer(out)
    for r in rows:
        del r["broken_fields"]
    return out


def scalability_model(levels: list[dict], *, open_model: bool = False) -> dict:
    """The Universal Scalability Law fitted to a steps run's levels, as the summary keeps it.

    Closed model (users loop iterations): N is each level's users. Open model (arrivals):
    N is the concurrency by Little's law, pages/s × APD. Keys ``lambda``, ``sigma``,
    ``kappa``, ``peak_users``, ``peak_pages_per_s`` and ``r2`` are None when there is no
    model; ``reason`` then says why in words.
    """
    measured = [lv for lv in levels if lv["pages_per_s"] is not None]
    if open_model:
        n = [scalability.littles_law(lv["pages_per_s"], (lv["apd_ms"] or 0) / 1000) for lv in measured]
    else:
        n = [float(lv["users"]) for lv in measured]
    x = [lv["pages_per_s"] for lv in measured]
    m = scalability.fit(n, x)
    top = max(n, default=0.0)

    def r(value, digits=4):
        return None if value is None else round(value, digits)

    out = {
        "fitted": m.fitted,
        # Levels that never saturated: no σ, κ or peak to print, but a comparison may say "σ fell to about 0".
        "linear": not m.fitted and m.lam is not None and m.r2 is not None and m.r2 >= scalability.MIN_R2,
        "reason": m.reason,
        "concurrency": "Little's law (pages/s × APD)" if open_model else "users",
        "lambda": r(m.lam) if m.fitted else None,
        "sigma": r(m.sigma, 5) if m.fitted else None,
        "kappa": r(m.kappa, 7) if m.fitted else None,
        "lambda_ci": [r(v) for v in m.lam_ci] if m.fitted else None,
        "sigma_ci": [r(v, 5) for v in m.sigma_ci] if m.fitted else None,
        "kappa_ci": [r(v, 7) for v in m.kappa_ci] if m.fitted else None,
        "peak_users": r(m.peak_users, 1),
        "peak_pages_per_s": r(m.peak_throughput, 2),
        "r2": r(m.r2),
        "levels": [
            {"n": round(ni, 2), "measured_pages_per_s": xi, "predicted_pages_per_s": round(pi, 2)}
            for ni, xi, pi in zip(n, x, m.predicted, strict=False)
        ],
        "predicted_pages_per_s": [round(p, 2) for p in m.predicted] if m.fitted else [],
        "curve": scalability.curve(m, top),
        "last_level": top,
        "sentence": scalability.interpretation(m, top),
    }
    return out


def _search_answer(cap: dict) -> str:
    """A capacity search's answer: "Capacity: 40 users, 190 pages/s; at 60 users APD breaks 1 s (1.5 s)"."""
    if cap["capacity_users"] is None:
        return f"No capacity found: even the first level, {cap['first_failure_users']} users, broke its thresholds."
    words = f"Capacity: {cap['capacity_users']} users, {_fmt_rate(cap['capacity_pages_per_s'])} pages/s"
    if cap["first_failure_users"] is None:
        top = cap["levels"][-1]["users"]
        return words + f"; every level held, so the capacity is at least {top} users: add higher levels to find it."
    return words + f"; at {cap['first_failure_users']} users {cap['next_level_broke']}."


def _capacity_sentence(cap: dict, limits: dict) -> str:
    levels = cap["levels"]
    top = levels[-1]["users"]
    by_users = {r["users"]: r for r in levels}
    if not cap["thresholds_set"]:
        words = (
            f"The plan sets no thresholds, so every level counts as held, up to {top} users; "
            "set thresholds on the plan to find the capacity."
        )
    elif cap["capacity_users"] is None:
        first = by_users[cap["first_failure_users"]]
        words = f"Even the lowest level, {first['users']} users, breaks its thresholds: {_breaks(first, limits)}."
    elif cap["first_failure_users"] is None:
        words = f"Holds every level within its thresholds, up to {top} users."
    else:
        first = by_users[cap["first_failure_users"]]
        words = (
            f"Holds {cap['capacity_users']} users within its thresholds; "
            f"at {first['users']} users {_breaks(first, limits)}."
        )
    knee = history_analysis.knee_sentence([(r["users"], r["pages_per_s"] or 0.0) for r in levels], cap["knee_users"])
    return f"{words} {knee}"


def _handoffs(run: Run) -> list[dict]:
    return [
        {**h, "shard": shard_no}
        for shard_no, handoffs in RunShard.objects.filter(run=run).values_list("shard_no", "handoffs")
        for h in handoffs or []
    ]


def _gap(h: dict) -> range:
    """The seconds a handoff left with reduced load: from the stopping worker's last (partial)
    second to the resuming worker's first (partial) one; to the run's end if nobody resumed."""
    end = h.get("resumed_at_s")
    return range(max(0, h["stopped_at_s"] - 1), (end + 1) if end is not None else 10**9)


def handoff_seconds(run: Run) -> set[int]:
    """Every second some shard was handing off (stopping, waiting for a worker, resuming)."""
    out: set[int] = set()
    for h in _handoffs(run):
        gap = _gap(h)
        out.update(range(gap.start, min(gap.stop, gap.start + 100_000)))
    return out


def handoff_timeline(run: Run, windows: list[dict]) -> list[dict]:
    """Each handoff for the timeline, with the measured window it fell in; the windows count them.

    A window that had a handoff says so in its note, with its seconds of reduced load, so that
    they are not silently averaged into its figures. The seconds from the one the stopping (or
    crashed) worker did not flush to the one the next worker resumed at have no rows of that shard:
    they are counted as missing (``missing_s``; a window's ``missing_seconds``), not as zero.
    """
    out = []
    for w in windows:
        w.setdefault("handoffs", 0)
        w.setdefault("reduced_seconds", 0)
        w.setdefault("missing_seconds", 0)
    for h in sorted(_handoffs(run), key=lambda h: h["stopped_at_s"]):
        gap = _gap(h)
        window = next((w for w in windows if w["start"] <= h["stopped_at_s"] < w["end"]), None)
        resumed = h.get("resumed_on")
        missing = range(h["stopped_at_s"], h["resumed_at_s"]) if resumed else range(0)
        what = "stopped" if h["kind"] == "stopped" else "went silent"
        text = f"worker {h.get('worker', '?')} {what} at {h['stopped_at_s']} s; " + (
            f"shard {h['shard']} resumed on {resumed} after {h.get('gap_s')} s"
            + (f" ({len(missing)} s missing)" if len(missing) else "")
            if resumed
            else f"no worker took shard {h['shard']} over"
        )
        out.append(
            {
                **h,
                "text": text,
                "window": window["label"] if window else None,
                "missing_s": len(missing) if resumed else None,
            }
        )
        for w in windows:
            reduced = len(range(max(gap.start, w["start"]), min(gap.stop, w["end"])))
            if reduced > 0:
                w["handoffs"] += 1
                w["reduced_seconds"] += reduced
                w["missing_seconds"] += len(range(max(missing.start, w["start"]), min(missing.stop, w["end"])))
                w["note"] = (w["note"] + " " if w["note"] else "") + (
                    f"A handoff ({text}) reduced the load for {reduced} s of this window."
                )
    return out


def per_second(rows: _PerSecond, shard_rows: ShardSeconds, end: int) -> tuple[list[float | None], list[float | None]]:
    """Pages/s and APD (ms) for each second in [0, end), shards and pages added up.

    A second some shard reported with no page in it is 0 pages/s, a real stall; a second
    nobody reported is None (no data). APD is None where no page succeeded.
    """
    reported = np.zeros(end, bool)
    reported[: len(rows.reported)] = rows.reported[:end]
    sec = shard_rows.c["second"]
    reported[sec[(sec >= 0) & (sec < end)]] = True
    pages = np.zeros(end, np.int64)
    pages[: len(rows.pages)] = rows.pages[:end]
    throughput = [float(p) if r else None for p, r in zip(pages.tolist(), reported.tolist(), strict=True)]
    total_us, count = np.zeros(end, np.int64), np.zeros(end, np.int64)
    total_us[: len(rows.total_us)], count[: len(rows.count)] = rows.total_us[:end], rows.count[:end]
    apd = [round(us / n / 1000, 3) if n else None for us, n in zip(total_us.tolist(), count.tolist(), strict=True)]
    return throughput, apd


def _median_from(values: list[float | None], lo: int, hi: int) -> float | None:
    part = [v for v in values[lo:hi] if v is not None]
    return statistics.median(part) if part else None


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def degradation_of(run: Run, window: dict, rows: _PerSecond, shard_rows: ShardSeconds) -> dict:
    """Did the run leave its steady state during its measurement window, and when?

    Only the window is analysed: ramp-up is not steady yet, and a ramp-down is a drop
    by design. A window shorter than the steady state plus the sustain time cannot say
    anything (there would be no seconds left to see a sustained change), so it is
    reported as not analysed, with the reason.
    """
    settings = {**degradation_defaults(), **((run.analysis_settings or {}).get("degradation") or {})}
    start, end = window["start"], window["end"]
    needed = settings["steady_s"] + settings["sustain_s"]
    base = {"settings": settings, "window": [start, end]}
    if window.get("index") is None:  # cut_windows' stand-in for a run that never reached its window
        return {**base, "analysed": False, "reason": "The run ended before its measurement window began."}
    if end - start < needed:
        return {
            **base,
            "analysed": False,
            "reason": (
                f"The measurement window ({human_duration(end - start)}) is too short to look for degradation: "
                f"it takes the steady state ({human_duration(settings['steady_s'])}) plus a sustained change "
                f"({human_duration(settings['sustain_s'])}). Hold longer, or shorten these on the plan."
            ),
        }
    throughput, apd = per_second(rows, shard_rows, end)
    for second in handoff_seconds(run):  # a handoff's gap is reduced load by design, not degradation
        if second < end:
            throughput[second] = apd[second] = None
    d = history_analysis.degradation(
        throughput,
        apd,
        start=start,
        drop_pct=settings["drop_pct"],
        rise_pct=settings["rise_pct"],
        sustain_s=settings["sustain_s"],
        steady_s=settings["steady_s"],
    )
    out = {
        **base,
        "analysed": True,
        "degraded": d.degraded,
        "kind": d.kind,
        "onset_s": d.onset_s,
        "time_to_degradation_s": None if d.onset_s is None else d.onset_s - start,
        "throughput_onset_s": d.throughput_onset_s,
        "apd_onset_s": d.apd_onset_s,
        "steady_pages_per_s": _round(d.steady_throughput),
        "steady_apd_ms": _round(d.steady_apd_ms),
        "steady_window": list(d.steady_window),
        # What the figures became: the median from the onset to the window's end.
        "degraded_pages_per_s": _round(
            None if d.throughput_onset_s is None else _median_from(throughput, d.throughput_onset_s, end)
        ),
        "degraded_apd_ms": _round(None if d.apd_onset_s is None else _median_from(apd, d.apd_onset_s, end)),
        "oscillation": d.oscillation,
        "excursions": d.excursions,
        "excursions_per_10_min": _round(d.excursions_per_10_min),
        "drift_ms_per_hour": _round(d.drift_ms_per_hour, 1),
        # The same least-squares slope over the window's throughput: a soak judged against its
        # baseline compares both drifts (portal/schedules/soak.py).
        "pages_per_s_drift_per_hour": _round(history_analysis.drift_per_hour(throughput[:end], start), 3),
        # Their standard errors: how sure each slope is (a short window's slope is not).
        "drift_ms_per_hour_se": _round(history_analysis.drift_error_per_hour(apd[:end], start), 2),
        "pages_per_s_drift_per_hour_se": _round(history_analysis.drift_error_per_hour(throughput[:end], start), 3),
    }
    if d.throughput_onset_s is not None and d.throughput_onset_s == d.apd_onset_s:
        out["kind"] = "throughput drop and APD rise"  # both at once: naming one would hide the other
    out["sentence"] = _degradation_sentence(out)
    out.update(began_of(out, throughput, apd, start=start, end=end, sustain_s=settings["sustain_s"]))
    return out


def began_of(d: dict, throughput: list, apd: list, *, start: int, end: int, sustain_s: int) -> dict:
    """When each drift that crossed its limit began (portal.stats.changepoint), from the per-second series.

    The search looks from the window's start up to the second the drift crossed (it began
    by then at the latest), over the seconds up to as long again after it, so the fit sees
    the new level or slope but not what the run did much later. ``began_s``,
    ``began_interval_s`` and ``crossed_s`` describe the earliest drift (``onset_s``).
    """
    found = {}
    for key, series, crossed in (
        ("throughput", throughput, d["throughput_onset_s"]),
        ("apd", apd, d["apd_onset_s"]),
    ):
        if crossed is None:
            continue
        stop = min(end, crossed + max(sustain_s, crossed - start))
        cp = changepoint.find(range(start, stop), series[start:stop], last_break=crossed)
        if cp is not None:
            found[key] = {
                "began_s": cp.began_s,
                "began_interval_s": [cp.low_s, cp.high_s],
                "crossed_s": crossed,
                "shape": cp.shape,
            }
    out = {"change_points": found, "crossed_s": d["onset_s"], "began_s": None, "began_interval_s": None}
    first = min(found.items(), key=lambda kv: (kv[1]["crossed_s"], kv[1]["began_s"]), default=None)
    if first is not None:
        key, cp = first
        out.update(began_s=cp["began_s"], began_interval_s=cp["began_interval_s"], began_metric=key)
        out["began_sentence"] = _began_sentence(key, cp, d)
    return out


def _began_sentence(key: str, cp: dict, d: dict) -> str:
    """ "APD has been rising since 2 min 30 s (between 2 min 20 s and 2 min 40 s), a slope as a leak makes; …"."""
    low, high = cp["began_interval_s"]
    where = human_duration(low) if low == high else f"between {human_duration(low)} and {human_duration(high)}"
    if key == "apd":
        what, limit = "APD", f"{d['settings']['rise_pct']:g} %"
        verb = "jumped up" if cp["shape"] == "step" else "has been rising"
    else:
        what, limit = "Throughput", f"{d['settings']['drop_pct']:g} %"
        verb = "fell at once" if cp["shape"] == "step" else "has been falling"
    since = "at" if cp["shape"] == "step" else "since"
    shape = "a step, as a stall makes" if cp["shape"] == "step" else "a slope, as a leak makes"
    return (
        f"{what} {verb} {since} {human_duration(cp['began_s'])} ({where}), {shape}; "
        f"it crossed the {limit} limit at {human_duration(cp['crossed_s'])}."
    )


def _when(onset: int, start: int) -> str:
    if start > 0:
        return f"at {human_duration(onset)}, {human_duration(onset - start)} after ramp-up"
    return f"{human_duration(onset)} into the run"


def _signed_ms(value: float) -> str:
    return ("+" if value >= 0 else "−") + _fmt_ms(abs(value))


def _degradation_sentence(d: dict) -> str:
    """ "Throughput fell 58 % below its steady 212 pages/s (to 89) at 6 min 10 s, 5 min 10 s after ramp-up; …"."""
    s = d["settings"]
    start = d["window"][0]
    found = []  # (onset, what changed)
    tp = d["throughput_onset_s"], d["steady_pages_per_s"], d["degraded_pages_per_s"]
    if tp[0] is not None and tp[1]:
        fell = 100 * (1 - (tp[2] or 0) / tp[1])
        to = _fmt_rate(tp[2] or 0)
        found.append((tp[0], f"throughput fell {fell:.0f} % below its steady {_fmt_rate(tp[1])} pages/s (to {to})"))
    ap = d["apd_onset_s"], d["steady_apd_ms"], d["degraded_apd_ms"]
    if ap[0] is not None and ap[1]:
        rose = 100 * ((ap[2] or 0) / ap[1] - 1)
        found.append((ap[0], f"APD rose {rose:.0f} % above its steady {_fmt_ms(ap[1])} (to {_fmt_ms(ap[2] or 0)})"))
    found.sort(key=lambda f: f[0])  # the earliest first (stable: throughput first on a tie)
    if len(found) == 2 and found[0][0] == found[1][0]:
        words = f"{found[0][1]} and {found[1][1]} {_when(found[0][0], start)}."
    elif found:
        words = "; ".join(f"{what} {_when(onset, start)}" for onset, what in found) + "."
    else:
        steady = []
        if d["steady_pages_per_s"] is not None:
            tp_steady = _fmt_rate(d["steady_pages_per_s"])
            steady.append(f"throughput stayed within {s['drop_pct']:g} % of its steady {tp_steady} pages/s")
        if d["steady_apd_ms"] is not None:
            steady.append(f"APD within {s['rise_pct']:g} % of its steady {_fmt_ms(d['steady_apd_ms'])}")
        words = (
            "No degradation: "
            + (" and ".join(steady) or "no figures to compare")
            + (f" (a change had to last {human_duration(s['sustain_s'])} to count).")
        )
    words = words[0].upper() + words[1:]
    if d["oscillation"]:
        words += (
            f" Throughput oscillates: it left the ±{history_analysis.OSCILLATION_BAND_PCT:g} % band around its "
            f"steady state {d['excursions']} times ({d['excursions_per_10_min']:.1f} per 10 min)."
        )
    drift = d["drift_ms_per_hour"]
    if drift is not None:
        length = d["window"][1] - start
        # An hour's trend read from a few minutes is an extrapolation, and the reader should know it.
        over = f" (the trend over {human_duration(length)})" if length < 3600 else ""
        words += " APD shows no drift." if abs(drift) < 0.05 else f" APD drifts {_signed_ms(drift)} per hour{over}."
    return words


def series(run: Run, *, since: int | None = None) -> dict:
    """Per-second (or per-bucket) figures for the charts.

    A finished run reads what its finalize stored (RunFigures); one recorded before that
    existed is computed from its rows. A live run's buckets are fixed by its planned
    duration, so that a poll with ``since`` (the start of the client's last bucket) reads
    only the rows from there on and the client replaces its points from that bucket on:
    a poll costs in proportion to the new seconds, not to the run's length.
    """
    if not run.is_active:
        stored = RunFigures.objects.filter(run=run).values_list("series", flat=True).first()
        if stored is not None:
            return {**stored, "since": None}
        return {**summarize_with_series(run)[1], "since": None}
    # Fixed by the plan's length (or the run's, if it overran), so a poll's buckets line up.
    last_seen = last_second(run)
    bucket = chart_bucket(max(math.ceil(run.planned_duration), last_seen or 0))
    start = 0 if since is None else max(0, since // bucket * bucket)
    # A first load reads label rows only for the recent seconds; earlier buckets come from the
    # shards' per-second totals, so opening the page of a 47 h soak costs no more than a 1 h one.
    detail = start if since is not None else max(0, ((last_seen or 0) - LIVE_DETAIL_S) // bucket * bucket)
    chart = _Series(bucket, first=detail)
    buckets = columns.Groups()
    # The shards' rows (all labels merged) when they carry the merged durations; else the label rows.
    if columns.shards_merged(run, since=detail):
        spans = columns.shard_chunks(run, since=detail, align=bucket)
    else:
        spans = columns.chunks(run, {}, since=detail, align=bucket, ttfb=False)
    for _, _, c in spans:
        if c.size:
            _chart_columns(chart, buckets, c)
    _close_buckets(chart, buckets, lambda start: True)
    # The buckets before the detail, summed by the database (at most MAX_POINTS rows come back).
    early = _early_buckets(run, bucket, before=detail) if since is None and detail > start else None
    shard_rows = _shard_rows(run, since=detail if early is not None else start)
    seconds = ([int(shard_rows.c["second"].max())] if len(shard_rows) else []) + (
        [chart.last] if chart.last is not None else []
    )
    last = max(seconds, default=start - 1)
    result = chart.result(shard_rows, last, totals_from=start, early=early)
    return {**result, "since": None if since is None else start}


# A first load whose boundary rows are missing for more (shard, second) pairs than this (a shard
# lost for hours) sums the rows instead of looking up each pair's latest row.
EARLY_LOOKUPS_MAX = 50


def _early_buckets(run: Run, bucket: int, *, before: int) -> dict[int, tuple[int, ...]]:
    """Per chart bucket of the seconds before ``before``: pages, errors, latency sum and count, users
    and dropped iterations, in a number of row reads that does not grow with the run's length.

    Each shard's row holds running totals (``ShardInterval.pages_total`` …), so a bucket's sums are
    the difference between the totals at its last second and at the previous bucket's last, summed
    over the shards: about two rows per shard per bucket (at most MAX_POINTS buckets) whatever the
    run's length. The users are the larger of the bucket's first and last seconds' (summed over the
    shards): its peak whenever users only rise or only fall within it (ramps, steps, a steady hold);
    a spike shorter than a bucket shows only in the finished run's chart, which is exact.

    Rows without running totals (written before they existed) are summed by the database instead
    (``_early_buckets_summed``), as are runs whose shards miss too many boundary rows.
    """
    starts = list(range(0, before, bucket))
    if not starts:
        return {}
    ends = [min(b + bucket, before) - 1 for b in starts]
    wanted = sorted({*starts, *ends})
    totals = ("pages_total", "errors_total", "latency_sum_total", "latency_count_total", "dropped_total")
    rows = ShardInterval.objects.filter(run=run, second__in=wanted).values_list(
        "shard_no", "second", "active_users", *totals
    )
    at: dict[tuple[int, int], tuple] = {}  # (shard, second) → (users, *totals)
    for shard_no, second, users, *sums in rows:
        at[shard_no, second] = (users, *sums)
    shards = sorted(set(RunShard.objects.filter(run=run).values_list("shard_no", flat=True)) | {k[0] for k in at})
    # The running totals at each bucket's last second: that second's row, or the shard's latest before it.
    missing = [(n, e) for n in shards for e in ends if (n, e) not in at]
    if len(missing) > EARLY_LOOKUPS_MAX:
        return _early_buckets_summed(run, bucket, before=before)
    cumulative = {key: value[1:] for key, value in at.items()}
    for shard_no, end in missing:
        latest = (
            ShardInterval.objects.filter(run=run, shard_no=shard_no, second__lte=end)
            .order_by("-second")
            .values_list(*totals)
            .first()
        )
        cumulative[shard_no, end] = latest or (0,) * len(totals)
    if any(v is None for key in cumulative for v in cumulative[key]):
        return _early_buckets_summed(run, bucket, before=before)
    out = {}
    previous = {n: (0,) * len(totals) for n in shards}
    for first, last in zip(starts, ends, strict=True):
        sums = [0] * len(totals)
        for n in shards:
            now = cumulative[n, last]
            sums = [s + a - b for s, a, b in zip(sums, now, previous[n], strict=True)]
            previous[n] = now
        users = max(sum(at.get((n, second), (0,))[0] for n in shards) for second in (first, last))
        pages, errors, total_us, count, dropped = sums
        out[first] = (pages, errors, total_us, count, users, dropped)
    return out


def _early_buckets_summed(run: Run, bucket: int, *, before: int) -> dict[int, tuple[int, ...]]:
    """``_early_buckets`` summed by the database from the shards' per-second rows (each second over the
    shards, then each bucket: at most MAX_POINTS rows come back, but every row is read). The users are
    the bucket's peak second."""
    table = ShardInterval._meta.db_table
    sql = (
        "SELECT second / %s, SUM(pages), SUM(errors), SUM(us), SUM(n), MAX(users), SUM(dropped) FROM ("
        "SELECT second, SUM(pages) AS pages, SUM(errors) AS errors, SUM(latency_sum_us) AS us, "
        "SUM(latency_count) AS n, SUM(active_users) AS users, SUM(iterations_dropped) AS dropped "
        f"FROM {table} WHERE run_id = %s AND second >= 0 AND second < %s GROUP BY second"
        ") AS per_second GROUP BY second / %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [bucket, run.id, before, bucket])
        return {int(b) * bucket: tuple(int(v or 0) for v in rest) for b, *rest in cursor.fetchall()}
