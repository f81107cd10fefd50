"""The curves of a comparison: each side's runs overlaid on the same axes.

For every run that counts on a side: its page duration (APD, p95) and throughput over its
measurement window, with the time axis starting at the window's start (so runs with a
different ramp-up line up); its latency distribution over the window (the merged histogram
as a percentile curve, ``portal.runs.results.drilldown``); and, for a steps run, pages/s and APD
against users, one point per level. The series are the runs' own (``selectors.run_series``,
what each run's page charts), cut to the window, never resampled, so a comparison's curve
is exactly the run's.
"""

from __future__ import annotations

from portal.runs import selectors
from portal.runs.models import Run
from portal.runs.results import drilldown
from portal.runs.summary import RunSummary

from .comparison import Side
from .payloads import ComparisonCurves, CurveSeries, RunCurves

MAX_RUNS_PER_SIDE = 10
"""A trial set of more runs draws its first ten: beyond that the chart is a blur."""


def run_curves(run: Run) -> RunCurves:
    """One run's window series (aligned at the window's start), distribution and levels."""
    summary = RunSummary.of(run)
    window = summary.window
    start, end = window.get("start", 0), window.get("end")
    data = selectors.run_series(run)
    keep = [i for i, t in enumerate(data["t"]) if t >= start and (end is None or t < end)]
    series: CurveSeries = {
        "t": [data["t"][i] - start for i in keep],
        "bucket_s": data["bucket_s"],
        "window_start": start,
        "apd_ms": [data["apd_ms"][i] for i in keep],
        "p95_ms": [data["p95_ms"][i] for i in keep],
        "pages_per_s": [data["pages_per_s"][i] for i in keep],
    }
    levels = []
    capacity = summary.capacity
    if capacity.get("levels"):
        levels = [
            {"users": lv["users"], "pages_per_s": lv.get("pages_per_s"), "apd_ms": lv.get("apd_ms")}
            for lv in capacity["levels"]
        ]
    elif len(summary.windows) > 1:
        levels = [
            {"users": w["totals"]["users"], "pages_per_s": w["totals"]["pages_per_s"], "apd_ms": w["totals"]["apd_ms"]}
            for w in summary.windows
        ]
    return {
        "code": str(run.code),
        "number": run.number,
        "series": series,
        "distribution": drilldown.window_distribution(run)["distribution"],
        "levels": levels,
    }


def sides_curves(sides: list[tuple[str, Side]]) -> ComparisonCurves:
    """{"sides": [{"role", "label", "runs": [run_curves, …]}, …]} for the comparison's charts."""
    return {
        "sides": [
            {"role": role, "label": side.label, "runs": [run_curves(run) for run in side.runs[:MAX_RUNS_PER_SIDE]]}
            for role, side in sides
        ]
    }
