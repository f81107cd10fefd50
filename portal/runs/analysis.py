"""Summaries, verdicts and chart series computed from a run's interval rows.

Percentiles always come from merged histograms, never from averaging percentiles.
Summaries and verdicts use the measurement windows (the hold, or each level's hold
for a steps profile); charts show the whole run.
"""

import math
from collections import defaultdict
from dataclasses import dataclass, field

from workers.engine import health
from workers.engine.histogram import Histogram

from .models import PageInterval, Run, ShardInterval

PERCENTILES = (50, 90, 95, 99)
# Charts of long runs are downsampled to at most this many points.
MAX_POINTS = 720


def _hist(d: dict) -> Histogram:
    """A stored histogram; a row of errors only may carry none."""
    return Histogram.from_dict(d) if d else Histogram()


def whole_seconds(start: float, end: float) -> tuple[int, int]:
    """The whole seconds [lo, hi) that lie inside [start, end); a window shorter than that gets its cover."""
    lo, hi = math.ceil(start), math.floor(end)
    if hi <= lo:
        lo, hi = math.floor(start), math.ceil(end)
    return lo, hi


def cut_windows(run: Run, last_second: int | None) -> list[dict]:
    """The run's measurement windows in whole seconds, cut to what actually ran."""
    windows = []
    for start, end, label in run.measurement_windows:
        lo, hi = whole_seconds(start, end)
        note = ""
        if last_second is not None and last_second + 1 < hi:
            if last_second + 1 <= lo:
                continue  # never reached
            hi = last_second + 1
            note = f"The run ended early; this window is cut to {hi - lo} s."
        windows.append({"label": label, "start": lo, "end": hi, "seconds": max(hi - lo, 1), "note": note})
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


@dataclass
class _Acc:
    """Sums over some seconds of a run."""

    pages: int = 0
    hits: int = 0
    errors: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    hist: Histogram = field(default_factory=Histogram)
    ttfb: Histogram = field(default_factory=Histogram)
    connect: Histogram = field(default_factory=Histogram)

    def add(self, row) -> None:
        self.pages += row.pages
        self.hits += row.hits
        self.errors += row.errors
        self.bytes_in += row.bytes_in
        self.bytes_out += row.bytes_out
        self.hist.merge(row.h)
        self.ttfb.merge(row.ttfb)
        self.connect.merge(row.connect)


@dataclass
class _Row:
    second: int
    label: str
    pages: int
    hits: int
    errors: int
    by_kind: dict
    samples: dict
    bytes_in: int
    bytes_out: int
    h: Histogram
    ttfb: Histogram
    connect: Histogram


def _latency(h: Histogram) -> dict:
    if not h.count:
        return {"apd_ms": None, "min_ms": None, "max_ms": None, **{f"p{q}_ms": None for q in PERCENTILES}}
    return {
        "apd_ms": round(h.mean / 1000, 2),
        "min_ms": round(h.min / 1000, 2),
        "max_ms": round(h.max / 1000, 2),
        **{f"p{q}_ms": round(h.percentile(q) / 1000, 2) for q in PERCENTILES},
    }


def _ms(h: Histogram, q: float | None = None) -> float | None:
    if not h.count:
        return None
    return round((h.mean if q is None else h.percentile(q)) / 1000, 2)


def _rate(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 3) if whole else 0.0


def _figures(acc: _Acc, seconds: int, shard_seconds: list) -> dict:
    started = sum(s.iterations_started for s in shard_seconds)
    completed = sum(s.iterations_completed for s in shard_seconds)
    dropped = sum(s.iterations_dropped for s in shard_seconds)
    users = defaultdict(int)
    for s in shard_seconds:
        users[s.second] += s.active_users
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
        "users": max(users.values(), default=0),
        "pages_per_s": round(acc.pages / seconds, 3),
        "hits_per_s": round(acc.hits / seconds, 3),
        "bytes_per_s": round(acc.bytes_in / seconds, 1),
        "transactions_per_s": round(completed / seconds, 3),
        "ttfb_ms": _ms(acc.ttfb),
        "ttfb_p95_ms": _ms(acc.ttfb, 95),
        "connect_ms": _ms(acc.connect),
        **_latency(acc.hist),
    }


def _load(run: Run) -> tuple[list[_Row], list]:
    rows = [
        _Row(second, label, p, h, e, by_kind, samples, b_in, b_out, _hist(hist), _hist(ttfb), _hist(connect))
        for second, label, p, h, e, by_kind, samples, b_in, b_out, hist, ttfb, connect in PageInterval.objects.filter(
            run=run
        ).values_list(
            "second",
            "label",
            "pages",
            "hits",
            "errors",
            "errors_by_kind",
            "error_samples",
            "bytes_in",
            "bytes_out",
            "hist",
            "ttfb_hist",
            "connect_hist",
        )
    ]
    shard_rows = list(
        ShardInterval.objects.filter(run=run).only(
            "second",
            "active_users",
            "iterations_started",
            "iterations_completed",
            "iterations_dropped",
            "loop_lag_p99_ms",
            "cpu_pct",
        )
    )
    return rows, shard_rows


def summarize(run: Run) -> dict:
    rows, shard_rows = _load(run)
    seconds = [r.second for r in rows] + [s.second for s in shard_rows]
    last_second = max(seconds) if seconds else None
    windows = cut_windows(run, last_second)
    in_window = {s for w in windows for s in range(w["start"], w["end"])}
    limits = run.plan_snapshot.get("thresholds") or {}

    total, per_label = _Acc(), defaultdict(_Acc)
    errors: dict[str, dict] = {}
    whole = _Acc()
    per_window = [_Acc() for _ in windows]
    for row in rows:
        whole.add(row)
        if row.second not in in_window:
            continue
        total.add(row)
        per_label[row.label].add(row)
        for acc, w in zip(per_window, windows, strict=True):
            if w["start"] <= row.second < w["end"]:
                acc.add(row)
        for kind, n in row.by_kind.items():
            e = errors.setdefault(kind, {"kind": kind, "count": 0, "sample": row.samples.get(kind, ""), "pages": set()})
            e["count"] += n
            e["pages"].add(row.label)

    measured_seconds = sum(w["seconds"] for w in windows)
    totals = _figures(total, measured_seconds, [s for s in shard_rows if s.second in in_window])
    for w, acc in zip(windows, per_window, strict=True):
        w_shards = [s for s in shard_rows if w["start"] <= s.second < w["end"]]
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
    return {
        "window": {
            "start": windows[0]["start"],
            "end": windows[-1]["end"],
            "seconds": measured_seconds,
            "note": " ".join(w["note"] for w in windows if w["note"]),
        },
        "windows": windows,
        "totals": totals,
        "pages": pages,
        "errors": sorted(({**e, "pages": sorted(e["pages"])} for e in errors.values()), key=lambda e: -e["count"]),
        "whole_run": {
            "pages": whole.pages,
            "hits": whole.hits,
            "errors": whole.errors,
            "bytes_in": whole.bytes_in,
            "seconds": (last_second + 1) if seconds else 0,
        },
        "generator": generator_health(shard_rows, in_window),
        "thresholds": thresholds,
        "verdict": verdict,
    }


def generator_health(shard_rows: list, seconds: set[int]) -> dict:
    """The load generator's own state in the measured seconds; saturated means its figures are suspect.

    Per second, the worst shard counts: the run's figures are suspect if any shard's generator was.
    """
    lag: dict[int, float] = {}
    cpu: dict[int, float] = {}
    for s in shard_rows:
        if s.second not in seconds:
            continue
        if s.loop_lag_p99_ms is not None:
            lag[s.second] = max(lag.get(s.second, 0.0), s.loop_lag_p99_ms)
        if s.cpu_pct is not None:
            cpu[s.second] = max(cpu.get(s.second, 0.0), s.cpu_pct)
    measured = sorted(set(lag) | set(cpu))
    if not measured:
        return {"loop_lag_p99_ms": None, "cpu_pct_max": None, "saturated": None}
    first = measured[0]
    span = range(first, measured[-1] + 1)
    return {
        "loop_lag_p99_ms": max(lag.values(), default=None),
        "cpu_pct_max": max(cpu.values(), default=None),
        "saturated": health.saturation([lag.get(t) for t in span], [cpu.get(t) for t in span], first_second=first),
    }


THRESHOLDS = (
    # (key in the plan, name, key in totals, unit)
    ("apd_ms", "APD", "apd_ms", "ms"),
    ("p95_ms", "p95", "p95_ms", "ms"),
    ("error_rate_pct", "Error rate", "error_rate_pct", "%"),
)


def judge(limits: dict, totals: dict) -> list[dict]:
    """Each threshold set on the plan, with the measured value and whether it held."""
    results = []
    for key, name, total_key, unit in THRESHOLDS:
        limit = limits.get(key)
        if limit is None:
            continue
        actual = totals.get(total_key)
        # No successful page means no latency: a latency threshold cannot hold on nothing.
        passed = actual is not None and actual <= limit
        if actual is None and key == "error_rate_pct":
            passed = True
        results.append({"name": name, "limit": limit, "actual": actual, "unit": unit, "passed": passed})
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


def series(run: Run) -> dict:
    """Per-second (or per-bucket, for long runs) figures over the whole run, for the charts."""
    users = defaultdict(int)
    dropped = defaultdict(int)
    for second, active, drop in ShardInterval.objects.filter(run=run).values_list(
        "second", "active_users", "iterations_dropped"
    ):
        users[second] += active
        dropped[second] += drop
    pages, hits, errs, bytes_in = defaultdict(int), defaultdict(int), defaultdict(int), defaultdict(int)
    hists: dict[int, Histogram] = defaultdict(Histogram)
    rows = PageInterval.objects.filter(run=run).values_list("second", "pages", "hits", "errors", "bytes_in", "hist")
    seconds = set(users)
    for second, p, h, e, b, hist in rows:
        seconds.add(second)
        pages[second] += p
        hits[second] += h
        errs[second] += e
        bytes_in[second] += b
        hists[second].merge(_hist(hist))
    keys = ("users", "pages_per_s", "hits_per_s", "errors_per_s", "dropped_per_s", "apd_ms", "p95_ms", "bytes_per_s")
    out = {"bucket_s": 1, "t": [], **{k: [] for k in keys}}
    if not seconds:
        return out
    last = max(seconds)
    bucket = out["bucket_s"] = max(1, math.ceil((last + 1) / MAX_POINTS))
    for start in range(0, last + 1, bucket):
        span = range(start, min(start + bucket, last + 1))
        merged = Histogram()
        for s in span:
            if s in hists:
                merged.merge(hists[s])
        n = len(span)
        out["t"].append(start)
        out["users"].append(max((users.get(s, 0) for s in span), default=0))
        out["pages_per_s"].append(round(sum(pages[s] for s in span) / n, 2))
        out["hits_per_s"].append(round(sum(hits[s] for s in span) / n, 2))
        out["errors_per_s"].append(round(sum(errs[s] for s in span) / n, 2))
        out["dropped_per_s"].append(round(sum(dropped[s] for s in span) / n, 2))
        out["bytes_per_s"].append(round(sum(bytes_in[s] for s in span) / n, 1))
        out["apd_ms"].append(round(merged.mean / 1000, 2) if merged.count else None)
        out["p95_ms"].append(round(merged.percentile(95) / 1000, 2) if merged.count else None)
    return out
