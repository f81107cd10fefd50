"""Soak verdicts: a run's degradation judged against its baseline runs' (issue 12).

A nightly soak is not only "was it slower": it is "did it start to degrade earlier than
usual, and does it drift faster". Each run's summary already holds its degradation
analysis (portal/runs/analysis.py ``degradation_of``): when throughput or APD crossed its
limit after ramp-up (``time_to_degradation_s``), and the least-squares drift of APD (ms
per hour) and of throughput (pages/s per hour) over the measurement window. Here those
figures of the run are compared with the baseline runs', three rows in the verdict:

* **Degradation onset**: the run degraded *earlier* than the baseline runs did, by more
  than their spread (2 standard deviations of their onsets) and more than the plan's
  tolerance, is *regressed*; a baseline that never degraded in a window at least as long
  as the run's onset makes any degradation of the run a regression. A run that held
  where every baseline run degraded is *improved*.
* **APD drift per hour** and **pages/s drift per hour**: the run drifts the wrong way
  faster than the baseline runs, by more than the noise: the larger of 2 standard
  deviations of the baseline runs' drifts, 3 standard errors of the slopes themselves
  (the run's and the baseline mean's: a slope read from a short window is unsure), and
  the tolerance taken of the baseline's steady level per hour (10 % of the steady APD per
  hour, with the default 10 %). A drift has no meaningful percentage of its own (the
  baseline's is near zero), so the floor is a share of the steady level.

Plain functions over the summaries' dicts: no Django, tested with explicit figures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from portal.common import human_duration
from portal.runs.summary import RunSummary

ONSET = "Degradation onset"
APD_DRIFT = "APD drift per hour"
PAGES_DRIFT = "Pages/s drift per hour"
FIGURES = (ONSET, APD_DRIFT, PAGES_DRIFT)
SPREAD_SDS = 2.0  # how many standard deviations of the baseline runs count as their noise
# How many standard errors of the slopes: 3, not 2, because a nightly alarm at 2 would ring
# falsely about once in 20 nights per figure; 3 makes it once in a year or so.
SLOPE_SES = 3.0


def analysed(summary: RunSummary | dict | None) -> dict | None:
    """The summary's degradation block when the run was analysed for degradation (a soak), else None.

    ``summary``: a run's ``RunSummary``, or its stored form."""
    if not isinstance(summary, RunSummary):
        summary = RunSummary.from_json(summary)
    d = summary.degradation
    return d if d.get("analysed") else None


def _spread(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) >= 2 else 0.0


def _row(figure, verdict, before, after, change, noise, basis) -> dict:
    return {
        "page": None,
        "soak": True,
        "figure": figure,
        "verdict": verdict,
        "before": before,
        "after": after,
        "change": change,
        "noise": noise,
        "basis": basis,
    }


def _window(d: dict) -> int:
    start, end = d.get("window") or (0, 0)
    return int(end - start)


def onset_row(run: dict, baseline: list[dict], tolerance_pct: float) -> dict:
    """Degradation onset (time from ramp-up to the crossing) of the run against the baseline runs'."""
    r = run.get("time_to_degradation_s") if run.get("degraded") else None
    onsets = [b["time_to_degradation_s"] for b in baseline if b.get("degraded")]
    held = [_window(b) for b in baseline if not b.get("degraded")]  # held this long without degrading
    n = len(baseline)
    after = human_duration(r) if r is not None else f"none in {human_duration(_window(run))}"
    if onsets:
        mean = statistics.fmean(onsets)
        before = f"{human_duration(mean)}" + (f" (mean of {len(onsets)})" if len(onsets) > 1 else "")
        if held:
            before += f"; {len(held)} of {n} held"
    else:
        before = f"none in {human_duration(min(held))}" + (f" ({n} runs)" if n > 1 else "")
    basis = (
        f"Time from the end of ramp-up to the sustained drop or rise (the degradation analysis), "
        f"against {n} baseline run{'s' if n != 1 else ''}; noise: {SPREAD_SDS:g} SD of their onsets "
        f"and {tolerance_pct:g} %."
    )
    if r is None:
        if onsets and not held and max(onsets) < _window(run):
            change = f"held {human_duration(_window(run))}; the baseline degraded after {human_duration(mean)}"
            return _row(ONSET, "improved", before, after, change, "—", basis)
        return _row(ONSET, "within_noise", before, after, "no degradation", "—", basis)
    if not onsets:
        if min(held) > r:
            change = f"degraded {human_duration(r)} after ramp-up; the baseline never did"
            return _row(ONSET, "regressed", before, after, change, "—", basis)
        change = "the baseline's window was too short to tell"
        return _row(ONSET, "none", before, after, change, "—", basis)
    noise = max(SPREAD_SDS * _spread(onsets), mean * tolerance_pct / 100)
    diff = r - mean
    change = f"{human_duration(abs(diff))} {'earlier' if diff < 0 else 'later'}" if round(diff) else "same time"
    noise_text = f"± {human_duration(noise)}"
    if diff < -noise:
        return _row(ONSET, "regressed", before, after, change, noise_text, basis)
    if diff > noise and not held:
        return _row(ONSET, "improved", before, after, change, noise_text, basis)
    return _row(ONSET, "within_noise", before, after, change, noise_text, basis)


def _drift_row(
    figure: str, key: str, steady_key: str, unit: str, worse: int, run: dict, baseline: list[dict], tol: float
) -> dict | None:
    """A drift per hour against the baseline runs'; ``worse`` is +1 when rising is worse (APD), -1 (pages/s)."""
    r = run.get(key)
    values = [b[key] for b in baseline if b.get(key) is not None]
    steadies = [b[steady_key] for b in baseline if b.get(steady_key)]
    if r is None or not values:
        return None
    mean = statistics.fmean(values)
    floor = statistics.fmean(steadies) * tol / 100 if steadies else 0.0
    # The slopes' own uncertainty: the run's and the baseline mean's standard errors combined.
    errors = [b[f"{key}_se"] for b in baseline if b.get(f"{key}_se") is not None]
    own = run.get(f"{key}_se")
    fit = 0.0
    if own is not None and errors:
        fit = SLOPE_SES * math.sqrt(own**2 + statistics.fmean(e**2 for e in errors) / len(errors))
    noise = max(SPREAD_SDS * _spread(values), fit, floor)
    digits = 1 if unit == "ms" else 2

    def fmt(v: float) -> str:
        return f"{v:+.{digits}f} {unit}/h"

    diff = r - mean
    basis = (
        f"Least-squares slope over the measurement window, against {len(values)} baseline run"
        f"{'s' if len(values) != 1 else ''}; noise: the larger of {SPREAD_SDS:g} SD of theirs, "
        f"{SLOPE_SES:g} standard errors of the slopes, and {tol:g} % of the baseline's steady level per hour."
    )
    before = fmt(mean) + (f" (mean of {len(values)})" if len(values) > 1 else "")
    verdict = "within_noise"
    if abs(diff) > noise:
        verdict = "regressed" if diff * worse > 0 else "improved"
    return _row(figure, verdict, before, fmt(r), fmt(diff), f"± {noise:.{digits}f} {unit}/h", basis)


def soak_rows(
    run_summary: RunSummary | dict | None, baseline_summaries: list[RunSummary | dict | None], tolerance_pct: float
) -> list[dict]:
    """The soak rows of a run's verdict; none when the run or every baseline run was not analysed for degradation."""
    run = analysed(run_summary)
    baseline = [d for d in (analysed(s) for s in baseline_summaries) if d is not None]
    if run is None or not baseline:
        return []
    rows = [onset_row(run, baseline, tolerance_pct)]
    for figure, key, steady, unit, worse in (
        (APD_DRIFT, "drift_ms_per_hour", "steady_apd_ms", "ms", +1),
        (PAGES_DRIFT, "pages_per_s_drift_per_hour", "steady_pages_per_s", "pages/s", -1),
    ):
        row = _drift_row(figure, key, steady, unit, worse, run, baseline, tolerance_pct)
        if row is not None:
            rows.append(row)
    return rows
