"""Summaries, verdicts and chart series computed from a run's interval rows.

Percentiles always come from merged histograms, never from averaging percentiles.
Summaries and verdicts use the measurement windows (the hold, or each level's hold
for a steps profile); charts show the whole run.

A steps run also gets its capacity (the highest level within the thresholds, and the
knee: the last level after which throughput grows less than half as fast as the users);
a single-window run gets a degradation analysis (did throughput fall or APD rise well
away from the steady state after ramp-up, and when). The statistics themselves live in
``portal.stats.analysis``; this module feeds them a run's figures and words their answers.

By concern: the capacity of a steps run in ``capacity.py``, the degradation of a single-window run
in ``degradation.py``, handoffs in ``handoffs.py``; the rows are read through the results store
(``portal.runs.results``).
"""

import math
from collections import defaultdict

import numpy as np

from workers.engine import health
from workers.engine.histogram import Histogram
from workers.engine.schedule import whole_seconds

# Re-exported: callers, tests and the reference analysis read them here.
from .capacity import _breaks, _fmt_ms, _search_answer, capacity_of, scalability_model  # noqa: F401
from .degradation import began_of, degradation_defaults, degradation_of  # noqa: F401
from .handoffs import handoff_seconds, handoff_timeline  # noqa: F401
from .models import Run, RunFigures
from .results import columns, protocols, read, shards, storage
from .results.read import last_second  # noqa: F401 (re-exported: callers and tests read it here)
from .results.shards import ShardSeconds

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
        without hits, bytes and p95, which only label rows hold. ``early`` (``results.shards.early_buckets``)
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
    for label, by_kind, samples in read.error_rows(run, windows):
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
    shard_rows = shards.shard_rows(run)
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
    # Streams, WebSocket sessions and protocols (issue 26): their threshold-able totals join the totals.
    proto = protocols.summary_of(
        run, windows, {label: acc.hits for label, acc in per_label.items()}, [acc.hits for acc in per_window]
    )
    window_protocols = proto.pop("window_totals") if proto is not None else [{} for _ in windows]
    if proto is not None:
        totals.update({k: v for k, v in proto["totals"].items() if k in protocols.TOTAL_KEYS})
    for w, acc, w_shards, w_proto in zip(windows, per_window, window_shards, window_protocols, strict=True):
        w["totals"] = _figures(acc, w["seconds"], w_shards) | w_proto
        w["thresholds"] = judge(limits, w["totals"], imported=run.is_imported)
        w["verdict"] = _verdict(w["thresholds"])
    thresholds = judge(limits, totals, imported=run.is_imported) if len(windows) == 1 else []
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
        **({"protocols": proto} if proto is not None else {}),
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
    # Seconds above the limits too few to call it saturated (a 74 ms lag p99 in 2 s of 60) still carry the
    # doubt: ``saturated`` is never None beside a loop-lag p99 over the limit, and says which it was.
    # ``lagged`` marks that short case, whose run still counts in trends and baselines (Run.doubts).
    lagged = health.strain(lag, cpu)
    return {
        "loop_lag_p99_ms": float(lag_v.max()) if len(lag_v) else None,
        "cpu_pct_max": float(cpu_v.max()) if len(cpu_v) else None,
        "saturated": health.saturation(lag, cpu, first_second=first) or lagged,
        "lagged": lagged,
    }


THRESHOLDS = (
    # (key in the plan, name, key in totals, unit, "≤" for a ceiling or "≥" for a floor)
    ("apd_ms", "APD", "apd_ms", "ms", "≤"),
    ("p95_ms", "p95", "p95_ms", "ms", "≤"),
    ("error_rate_pct", "Error rate", "error_rate_pct", "%", "≤"),
    ("min_pages_per_s", "Pages/s", "pages_per_s", "pages/s", "≥"),
    # Streams and WebSocket sessions (issue 26; docs/protocols.md)
    ("ttfe_p95_ms", "Time to first event p95", "ttfe_p95_ms", "ms", "≤"),
    ("gap_p95_ms", "Gap between events p95", "gap_p95_ms", "ms", "≤"),
    ("rtt_p95_ms", "WebSocket round trip p95", "rtt_p95_ms", "ms", "≤"),
    ("min_h2_share_pct", "HTTP/2 share", "h2_share_pct", "%", "≥"),
)


# The thresholds on figures only the engine measures (streams, WebSocket sessions, protocols): a result
# file of another tool (an imported run, docs/imports.md) cannot carry them.
ENGINE_ONLY_THRESHOLDS = frozenset(("ttfe_p95_ms", "gap_p95_ms", "rtt_p95_ms", "min_h2_share_pct"))
NOT_CARRIED = "not judged: the imported file has no such figure"


def judge(limits: dict, totals: dict, *, imported: bool = False) -> list[dict]:
    """Each threshold set on the plan, with the measured value and whether it held.

    Pages/s is a floor ("at least"), the others are ceilings ("at most"). ``passed`` is None, with a
    ``not_judged`` reason, for a threshold on a figure an imported run's file cannot carry (time to
    first event, gaps, WebSocket round trips, HTTP/2 share) when the run has no such figure: the file
    says nothing about it, which is neither held nor failed. A native run without the figure still fails.
    """
    results = []
    for key, name, total_key, unit, op in THRESHOLDS:
        limit = limits.get(key)
        if limit is None:
            continue
        actual = totals.get(total_key)
        if actual is None and imported and key in ENGINE_ONLY_THRESHOLDS:
            results.append(
                {
                    "name": name,
                    "limit": limit,
                    "actual": None,
                    "unit": unit,
                    "op": op,
                    "passed": None,
                    "not_judged": NOT_CARRIED,
                }
            )
            continue
        if actual is None:  # No successful page means no latency: a latency threshold cannot hold on nothing.
            passed = key == "error_rate_pct"
        elif op == "≤":
            passed = actual <= limit
        else:
            passed = actual >= limit
        results.append({"name": name, "limit": limit, "actual": actual, "unit": unit, "op": op, "passed": passed})
    return results


def _verdict(thresholds: list[dict]) -> str | None:
    """Passed when every judged threshold held; None when none was judged (a threshold not judged counts for
    neither)."""
    judged = [t for t in thresholds if t["passed"] is not None]
    if not judged:
        return None
    return "passed" if all(t["passed"] for t in judged) else "failed"


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
    early = shards.early_buckets(run, bucket, before=detail) if since is None and detail > start else None
    shard_rows = shards.shard_rows(run, since=detail if early is not None else start)
    seconds = ([int(shard_rows.c["second"].max())] if len(shard_rows) else []) + (
        [chart.last] if chart.last is not None else []
    )
    last = max(seconds, default=start - 1)
    result = chart.result(shard_rows, last, totals_from=start, early=early)
    return {**result, "since": None if since is None else start}
