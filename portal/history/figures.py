"""A side's own figures for a comparison: a run's from its report, several runs' pooled; a run's capacity.

Moved out of ``comparison.py`` (issue 27), which re-exports its names.
"""

from __future__ import annotations

import base64
import math
import statistics
from dataclasses import dataclass

from portal.runs.models import Run
from portal.runs.results.batches import (
    BATCH_FIGURES,
    WINDOW,
    compute_batches,
    run_batches,
)
from portal.runs.summary import RunSummary
from portal.stats import analysis
from workers.engine.histogram import Histogram


@dataclass(frozen=True)
class Figure:
    name: str  # as the report shows it
    unit: str
    key: str  # in a run summary's totals, pages and windows
    lower_is_better: bool


FIGURES = (
    Figure("APD", "ms", "apd_ms", True),
    Figure("p95", "ms", "p95_ms", True),
    Figure("pages/s", "/s", "pages_per_s", False),
    Figure("error rate", "%", "error_rate_pct", True),
)
CAPACITY = Figure("capacity", "users", "capacity_users", False)
assert tuple(f.key for f in FIGURES) == BATCH_FIGURES  # a run's stored batches carry these figures


# --------------------------------------------------------------------------------------
# A side's own figures: a run's from its report, several runs' pooled
# --------------------------------------------------------------------------------------

FIGURE_KEYS = tuple(f.key for f in FIGURES)


def run_window(run: Run) -> dict[str | None, dict] | None:
    """The run's measurement window per key (None = all pages, else a page label): pages, errors,
    seconds and the merged page-duration histogram; None when its rows are gone and nothing was stored.

    Stored at finalize with the batches; a run finalized before that is read from its rows.
    """
    batches = run_batches(run)
    if batches and any(WINDOW not in figures for figures in batches.values()):
        batches = compute_batches(run)  # stored before the window was: its rows, if they are still there
    if not batches or any(WINDOW not in figures for figures in batches.values()):
        return None
    out = {}
    for key, figures in batches.items():
        w = figures[WINDOW]
        hist = Histogram.from_bytes(base64.b64decode(w["hist"])) if w["hist"] else Histogram()
        out[key] = {"pages": w["pages"], "errors": w["errors"], "seconds": w["seconds"], "hist": hist}
    return out


def _summary_figures(run: Run) -> dict[str | None, dict]:
    """The run's own figures, as its report shows them: {None: totals, label: page row} → {figure key: value}."""
    summary = RunSummary.of(run)
    out = {None: {k: summary.totals.get(k) for k in FIGURE_KEYS}}
    for p in summary.pages:
        if p.get("label") is not None:
            out[p["label"]] = {k: p.get(k) for k in FIGURE_KEYS}
    return out


def _from_window(pages: int, errors: int, seconds: int, hist: Histogram) -> dict:
    """The four figures of a pooled window, computed as a run's summary computes them (not rounded)."""
    return {
        "apd_ms": hist.mean / 1000 if hist.count else None,
        "p95_ms": hist.percentile(95) / 1000 if hist.count else None,
        "pages_per_s": pages / seconds if seconds else None,
        "error_rate_pct": 100.0 * errors / pages if pages else 0.0,
    }


def _weighted_mean(pairs: list[tuple[float, float]]) -> float | None:
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else None


def _weighted(runs: list[Run]) -> dict[str | None, dict]:
    """Pooled figures from the runs' summaries alone, for runs whose per-second rows are gone
    (recorded before windows were stored, then rolled up): pages/s weighted by measured seconds
    and the error rate by pages (both exact), APD and p95 by successful pages (p95 cannot be
    merged without the histograms); without counts in a summary, each run weighs the same."""
    parts: dict[str | None, dict[str, list]] = {}
    for run in runs:
        summary = RunSummary.of(run)
        seconds = summary.window.get("seconds") or 1
        rows = {None: summary.totals}
        rows.update({p["label"]: p for p in summary.pages if p.get("label") is not None})
        for key, row in rows.items():
            pages, errors = row.get("pages"), row.get("errors") or 0
            ok = (pages - errors) if pages is not None else 1
            part = parts.setdefault(key, {k: [] for k in FIGURE_KEYS})
            for k, weight in (("apd_ms", ok), ("p95_ms", ok), ("pages_per_s", seconds)):
                if row.get(k) is not None:
                    part[k].append((row[k], weight))
            if row.get("error_rate_pct") is not None:
                part["error_rate_pct"].append((row["error_rate_pct"], pages if pages is not None else 1))
    return {key: {k: _weighted_mean(pairs) for k, pairs in part.items()} for key, part in parts.items()}


def pooled_figures(runs: list[Run]) -> dict[str | None, dict]:
    """The figures of a set of runs, in total (key None) and per page: APD, p95, pages/s, error rate.

    One run: its own figures, exactly as its report shows them. Several runs (a trial set, the
    runs of one configuration): **pooled**, as if their measurement windows were one window:
    APD and p95 from the merged page-duration histograms of all their windows, pages/s = all
    their pages / all their measured seconds, error rate = all errors / all pages. A page
    measured in some runs only still counts over every run's seconds. This is the trial set's
    figure wherever it is shown (its page, comparisons, the journey, the API); the spread
    *between* trials is reported beside it, never instead of it.
    """
    runs = [r for r in runs if r.summary]
    if not runs:
        return {}
    if len(runs) == 1:
        return _summary_figures(runs[0])
    windows = [run_window(r) for r in runs]
    if any(w is None for w in windows):
        return _weighted(runs)
    seconds = sum((w.get(None) or {}).get("seconds") or 0 for w in windows)
    merged: dict[str | None, dict] = {}
    for w in windows:
        for key, part in w.items():
            m = merged.setdefault(key, {"pages": 0, "errors": 0, "hist": Histogram()})
            m["pages"] += part["pages"]
            m["errors"] += part["errors"]
            m["hist"].merge(part["hist"])
    return {key: _from_window(m["pages"], m["errors"], seconds, m["hist"]) for key, m in merged.items()}


def set_figures(runs: list[Run]) -> dict:
    """A trial set's (or any runs') figures for the API: the counting runs pooled (``pooled_figures``),
    in total and per page, with the sample standard deviation of the runs' own figures."""
    counting = [run for run in runs if run.counts]
    pooled = pooled_figures(counting)
    sd = {}
    for key in FIGURE_KEYS:
        values = [float(v) for r in counting if (v := RunSummary.of(r).totals.get(key)) is not None]
        sd[key] = statistics.stdev(values) if len(values) >= 2 else None
    return {
        "counted": [str(r.code) for r in counting],
        "totals": pooled.get(None) or dict.fromkeys(FIGURE_KEYS),
        "sd_between_runs": sd,
        "pages": [
            {"label": label, **figures}
            for label, figures in sorted(pooled.items(), key=lambda kv: str(kv[0]))
            if label is not None
        ],
    }


# --------------------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------------------


def run_capacity(run: Run) -> analysis.CapacityResult | None:
    """The capacity of a steps run from its summary's windows; None for a run without levels.

    A level's users are the plan's (what the level asked for); a level without a
    successful page has an infinite APD and p95, so a latency threshold cannot hold on
    it (as the run's own judgement).
    """
    snapshot = run.plan_snapshot or {}
    profile = snapshot.get("profile") or {}
    windows = RunSummary.of(run).windows
    if profile.get("kind") != "steps" or not windows:
        return None
    planned = [lv.get("users") for lv in profile.get("levels") or []]
    levels = []
    for i, w in enumerate(windows):
        t = w.get("totals") or {}
        index = w.get("index", i)
        users = planned[index] if index is not None and index < len(planned) else t.get("users")
        if not users:
            return None
        levels.append(
            analysis.Level(
                users=int(users),
                apd_ms=math.inf if t.get("apd_ms") is None else t["apd_ms"],
                p95_ms=math.inf if t.get("p95_ms") is None else t["p95_ms"],
                pages_per_s=t.get("pages_per_s") or 0.0,
                error_rate_pct=t.get("error_rate_pct") or 0.0,
                **{key: t.get(key) for key in ("ttfe_p95_ms", "gap_p95_ms", "rtt_p95_ms", "h2_share_pct")},
            )
        )
    limits = snapshot.get("thresholds") or {}
    thresholds = analysis.Thresholds(
        max_apd_ms=limits.get("apd_ms"),
        max_p95_ms=limits.get("p95_ms"),
        max_error_rate_pct=limits.get("error_rate_pct"),
        min_pages_per_s=limits.get("min_pages_per_s"),
        max_ttfe_p95_ms=limits.get("ttfe_p95_ms"),
        max_gap_p95_ms=limits.get("gap_p95_ms"),
        max_rtt_p95_ms=limits.get("rtt_p95_ms"),
        min_h2_share_pct=limits.get("min_h2_share_pct"),
    )
    try:
        return analysis.capacity(levels, thresholds)
    except ValueError:  # two levels of the same users: the capacity is not defined
        return None
