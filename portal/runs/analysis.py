"""Summaries, verdicts and chart series computed from a run's interval rows.

Percentiles always come from merged histograms, never from averaging percentiles.
Summaries and verdicts use the measurement window (after ramp-up, before ramp-down);
charts show the whole run.
"""

import math
from collections import defaultdict

from workers.engine.histogram import Histogram

from .models import PageInterval, Run, ShardInterval

PERCENTILES = (50, 90, 95, 99)


def _hist(d: dict) -> Histogram:
    """A stored histogram; a row of errors only may carry none."""
    return Histogram.from_dict(d) if d else Histogram()


# Charts of long runs are downsampled to at most this many points.
MAX_POINTS = 720


def window_seconds(run: Run, last_second: int | None) -> tuple[int, int, str]:
    """The whole seconds [lo, hi) that count, and a note when they differ from the plan's window."""
    start, end = run.measurement_window
    lo, hi = math.ceil(start), math.floor(end)
    if hi <= lo:
        lo, hi = math.floor(start), math.ceil(end)
    note = ""
    if last_second is not None and last_second + 1 < hi:
        if last_second + 1 <= lo:
            return 0, last_second + 1, "The run ended before its measurement window; figures cover the whole run."
        hi = last_second + 1
        note = f"The run ended early; the window is cut to {hi - lo} s."
    return lo, hi, note


def _latency(h: Histogram) -> dict:
    if not h.count:
        return {"apd_ms": None, "min_ms": None, "max_ms": None, **{f"p{q}_ms": None for q in PERCENTILES}}
    return {
        "apd_ms": round(h.mean / 1000, 2),
        "min_ms": round(h.min / 1000, 2),
        "max_ms": round(h.max / 1000, 2),
        **{f"p{q}_ms": round(h.percentile(q) / 1000, 2) for q in PERCENTILES},
    }


def _rate(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 3) if whole else 0.0


def summarize(run: Run) -> dict:
    rows = list(
        PageInterval.objects.filter(run=run).values_list(
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
        )
    )
    shard_rows = list(ShardInterval.objects.filter(run=run).values_list("second", "iterations_completed"))
    seconds = [r[0] for r in rows] + [r[0] for r in shard_rows]
    last_second = max(seconds) if seconds else None
    lo, hi, note = window_seconds(run, last_second)
    length = max(hi - lo, 1)

    total = Histogram()
    per_label: dict[str, dict] = defaultdict(lambda: {"pages": 0, "errors": 0, "bytes_in": 0, "hist": Histogram()})
    counts = defaultdict(int)
    errors: dict[str, dict] = {}
    whole = defaultdict(int)
    for second, label, pages, hits, errs, by_kind, samples, b_in, b_out, hist in rows:
        whole["pages"] += pages
        whole["hits"] += hits
        whole["errors"] += errs
        whole["bytes_in"] += b_in
        if not lo <= second < hi:
            continue
        h = _hist(hist)
        total.merge(h)
        entry = per_label[label]
        entry["pages"] += pages
        entry["errors"] += errs
        entry["bytes_in"] += b_in
        entry["hist"].merge(h)
        counts["pages"] += pages
        counts["hits"] += hits
        counts["errors"] += errs
        counts["bytes_in"] += b_in
        counts["bytes_out"] += b_out
        for kind, n in by_kind.items():
            e = errors.setdefault(kind, {"kind": kind, "count": 0, "sample": samples.get(kind, ""), "pages": set()})
            e["count"] += n
            e["pages"].add(label)
    transactions = sum(n for second, n in shard_rows if lo <= second < hi)

    totals = {
        "pages": counts["pages"],
        "hits": counts["hits"],
        "errors": counts["errors"],
        "error_rate_pct": _rate(counts["errors"], counts["pages"]),
        "bytes_in": counts["bytes_in"],
        "bytes_out": counts["bytes_out"],
        "transactions": transactions,
        "pages_per_s": round(counts["pages"] / length, 3),
        "hits_per_s": round(counts["hits"] / length, 3),
        "bytes_per_s": round(counts["bytes_in"] / length, 1),
        "transactions_per_s": round(transactions / length, 3),
        **_latency(total),
    }
    pages = [
        {
            "label": label,
            "pages": e["pages"],
            "errors": e["errors"],
            "error_rate_pct": _rate(e["errors"], e["pages"]),
            "pages_per_s": round(e["pages"] / length, 3),
            "bytes_in": e["bytes_in"],
            **_latency(e["hist"]),
        }
        for label, e in sorted(per_label.items())
    ]
    error_groups = sorted(({**e, "pages": sorted(e["pages"])} for e in errors.values()), key=lambda e: -e["count"])
    thresholds = judge(run.plan_snapshot.get("thresholds") or {}, totals)
    verdict = None
    if thresholds:
        verdict = "passed" if all(t["passed"] for t in thresholds) else "failed"
    return {
        "window": {"start": lo, "end": hi, "seconds": length, "note": note},
        "totals": totals,
        "pages": pages,
        "errors": error_groups,
        "whole_run": dict(whole) | {"pages": whole["pages"], "seconds": (last_second + 1) if seconds else 0},
        "thresholds": thresholds,
        "verdict": verdict,
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


def series(run: Run) -> dict:
    """Per-second (or per-bucket, for long runs) figures over the whole run, for the charts."""
    users = defaultdict(int)
    for second, active in ShardInterval.objects.filter(run=run).values_list("second", "active_users"):
        users[second] += active
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
    if not seconds:
        return {
            "bucket_s": 1,
            "t": [],
            "users": [],
            "pages_per_s": [],
            "hits_per_s": [],
            "errors_per_s": [],
            "apd_ms": [],
            "p95_ms": [],
            "bytes_per_s": [],
        }
    last = max(seconds)
    bucket = max(1, math.ceil((last + 1) / MAX_POINTS))
    out = {
        "bucket_s": bucket,
        "t": [],
        "users": [],
        "pages_per_s": [],
        "hits_per_s": [],
        "errors_per_s": [],
        "apd_ms": [],
        "p95_ms": [],
        "bytes_per_s": [],
    }
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
        out["bytes_per_s"].append(round(sum(bytes_in[s] for s in span) / n, 1))
        out["apd_ms"].append(round(merged.mean / 1000, 2) if merged.count else None)
        out["p95_ms"].append(round(merged.percentile(95) / 1000, 2) if merged.count else None)
    return out
