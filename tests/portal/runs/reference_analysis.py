"""The reference for the equality tests: summaries and series as computed before issue 9.

A copy of portal/runs/analysis.py as it was (every row loaded and merged into several
accumulators), reading rows of either format. The streaming finalize must give the same
figures from the same raw per-second rows.

Summaries, verdicts and chart series computed from a run's interval rows.

Percentiles always come from merged histograms, never from averaging percentiles.
Summaries and verdicts use the measurement windows (the hold, or each level's hold
for a steps profile); charts show the whole run.

A steps run also gets its capacity (the highest level within the thresholds, and the
knee where throughput stops growing); a single-window run gets a degradation analysis
(did throughput fall or APD rise well away from the steady state after ramp-up, and
when). The statistics themselves live in ``portal.stats.analysis``; this module
feeds them a run's figures and words their answers.
"""

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from portal import formatting
from portal.common import human_duration
from portal.projects.models import Plan
from portal.runs import analysis as current
from portal.runs.models import PageInterval, Run, ShardInterval
from portal.runs.results import storage
from portal.stats import analysis as history_analysis
from workers.engine import health
from workers.engine.histogram import Histogram
from workers.engine.schedule import whole_seconds

# The PageInterval columns a full reader needs (in both formats), in the order ``_Row`` takes them.
PAGE_ROW_FIELDS = (
    "second",
    "label",
    "pages",
    "hits",
    "errors",
    "errors_by_kind",
    "error_samples",
    "bytes_in",
    "bytes_out",
    "hist_bin",
    "hist",
    "ttfb_bin",
    "ttfb_hist",
    "connect_count",
    "connect_sum_us",
    "connect_hist",
)

PERCENTILES = (50, 90, 95, 99)
# Charts of long runs are downsampled to at most this many points.
MAX_POINTS = 720


def _hist(d: dict) -> Histogram:
    """A stored histogram; a row of errors only may carry none."""
    return Histogram.from_dict(d) if d else Histogram()


def _hist2(binary, d):
    return storage.histogram(binary, d)


def _connect(count, total, d):
    return storage.Mean.of(count, total, d)


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
    connect: storage.Mean = field(default_factory=storage.Mean)

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
    connect: storage.Mean


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
        "connect_ms": round(acc.connect.mean / 1000, 2) if acc.connect.count else None,
        **_latency(acc.hist),
    }


def _load(run: Run) -> tuple[list[_Row], list]:
    rows = [
        _Row(s, label, p, h, e, kinds, samples, b_in, b_out, _hist2(hb, hj), _hist2(tb, tj), _connect(cn, cs, cj))
        for s, label, p, h, e, kinds, samples, b_in, b_out, hb, hj, tb, tj, cn, cs, cj in PageInterval.objects.filter(
            run=run
        ).values_list(*PAGE_ROW_FIELDS)
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
            "connect_ms": round(acc.connect.mean / 1000, 2) if acc.connect.count else None,
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
        "distribution": current.distribution_of(total.hist),
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
        "handoffs": current.handoff_timeline(run, windows),  # issue 17, by the live code
        "thresholds": thresholds,
        "verdict": verdict,
        **_capacity_or_degradation(run, windows, limits, rows, shard_rows),
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
        return {"loop_lag_p99_ms": None, "cpu_pct_max": None, "saturated": None, "lagged": None}
    first = measured[0]
    span = range(first, measured[-1] + 1)
    return {
        "loop_lag_p99_ms": max(lag.values(), default=None),
        "cpu_pct_max": max(cpu.values(), default=None),
        # Issue 28 item 20: seconds above the limits, too few to call it saturated, still carry the doubt.
        "saturated": health.saturation([lag.get(t) for t in span], [cpu.get(t) for t in span], first_second=first)
        or health.strain([lag.get(t) for t in span], [cpu.get(t) for t in span]),
        "lagged": health.strain([lag.get(t) for t in span], [cpu.get(t) for t in span]),
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


def _capacity_or_degradation(run: Run, windows: list[dict], limits: dict, rows: list, shard_rows: list) -> dict:
    """A steps run with several measured levels gets its capacity; a single-window run its degradation."""
    if len(windows) > 1:
        return {"capacity": capacity_of(run, windows, limits)}
    if len(windows) == 1:
        # Issue 15: no degradation on steps runs, nor on runs shorter than the steady state.
        if (run.plan_snapshot.get("profile") or {}).get("kind") == "steps":
            return {}
        window, settings = windows[0], (run.analysis_settings or {}).get("degradation") or {}
        steady_s = settings.get("steady_s") or degradation_defaults()["steady_s"]
        if window.get("index") is not None and window["end"] - window["start"] < steady_s:
            return {}
        return {"degradation": degradation_of(run, window, rows, shard_rows)}
    return {}


def _fmt_ms(value: float) -> str:
    """412 ms, 1 s, 1.42 s: as every page writes a duration (portal.formatting)."""
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
        # Issue 19's additions, computed by the same functions as the live code (they read the
        # levels, which this reference computes the old way).
        "search": bool((run.analysis_settings or {}).get("capacity_search")),
        "capacity_users": result.capacity_users,
        "capacity_pages_per_s": held_level["pages_per_s"] if held_level else None,
        "capacity_apd_ms": held_level["apd_ms"] if held_level else None,
        "next_level_broke": current._breaks(failed_level, limits) if failed_level else None,
        "first_failure_users": result.first_failure_users,
        "knee_users": result.knee_users,
        "broken": {str(u): [_THRESHOLD_NAME[a] for a in attrs] for u, attrs in result.broken.items()},
        "thresholds_set": any(limits.get(key) is not None for key in CAPACITY_THRESHOLDS),
        "levels": rows,
    }
    out["sentence"] = _capacity_sentence(out, limits)
    out["model"] = current.scalability_model(rows, open_model=getattr(run.engine_profile, "open_model", False))
    for r, predicted in zip(rows, out["model"].get("predicted_pages_per_s") or [], strict=False):
        r["predicted_pages_per_s"] = predicted
    if out["search"]:
        out["answer"] = current._search_answer(out)
    for r in rows:
        del r["broken_fields"]
    return out


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
    # Issue 28: the knee's words follow its rule (the figures are what this reference checks).
    knee = history_analysis.knee_sentence([(r["users"], r["pages_per_s"] or 0.0) for r in levels], cap["knee_users"])
    return f"{words} {knee}"


def per_second(rows: list, shard_rows: list, end: int) -> tuple[list[float | None], list[float | None]]:
    """Pages/s and APD (ms) for each second in [0, end), shards and pages added up.

    A second some shard reported with no page in it is 0 pages/s, a real stall; a second
    nobody reported is None (no data). APD is None where no page succeeded.
    """
    reported = {s.second for s in shard_rows if s.second < end}
    pages = [0] * end
    total_us = [0] * end
    count = [0] * end
    for r in rows:
        if 0 <= r.second < end:
            reported.add(r.second)
            pages[r.second] += r.pages
            total_us[r.second] += r.h.sum
            count[r.second] += r.h.count
    throughput = [float(pages[s]) if s in reported else None for s in range(end)]
    apd = [round(total_us[s] / count[s] / 1000, 3) if count[s] else None for s in range(end)]
    return throughput, apd


def _median_from(values: list[float | None], lo: int, hi: int) -> float | None:
    part = [v for v in values[lo:hi] if v is not None]
    return statistics.median(part) if part else None


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def degradation_of(run: Run, window: dict, rows: list, shard_rows: list) -> dict:
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
    for second in current.handoff_seconds(run):  # issue 17: a handoff's gap is not degradation
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
        # issue 12's soak verdicts: the throughput slope and both slopes' standard errors, by the live helpers
        "pages_per_s_drift_per_hour": _round(history_analysis.drift_per_hour(throughput[:end], start), 3),
        "drift_ms_per_hour_se": _round(history_analysis.drift_error_per_hour(apd[:end], start), 2),
        "pages_per_s_drift_per_hour_se": _round(history_analysis.drift_error_per_hour(throughput[:end], start), 3),
    }
    if d.throughput_onset_s is not None and d.throughput_onset_s == d.apd_onset_s:
        out["kind"] = "throughput drop and APD rise"  # both at once: naming one would hide the other
    out["sentence"] = _degradation_sentence(out)
    out.update(current.began_of(out, throughput, apd, start=start, end=end, sustain_s=settings["sustain_s"]))
    return out


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
    rows = PageInterval.objects.filter(run=run).values_list(
        "second", "pages", "hits", "errors", "bytes_in", "hist_bin", "hist"
    )
    seconds = set(users)
    for second, p, h, e, b, hist_bin, hist in rows:
        seconds.add(second)
        pages[second] += p
        hits[second] += h
        errs[second] += e
        bytes_in[second] += b
        hists[second].merge(_hist2(hist_bin, hist))
    keys = ("users", "pages_per_s", "hits_per_s", "errors_per_s", "dropped_per_s", "apd_ms", "p95_ms", "bytes_per_s")
    keys += ("apd_max_ms", "pages_per_s_min")  # each bucket's worst second (issue 15)
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
        apds = [round(hists[s].mean / 1000, 2) for s in span if s in hists and hists[s].count]
        out["apd_max_ms"].append(max(apds) if apds else None)
        out["pages_per_s_min"].append(min(pages[s] for s in span))
    return out
