"""When a degradation *began*: the change point of a per-second series, with an interval.

Plain functions over plain lists, with no Django. The degradation analysis finds when a
drift *crossed* its limit (APD 50 % above the steady state for a sustained time); the
engineer who opens the server's logs needs the moment it *began*, and how sure we are.

Method: segmented regression with one break. Before the break the series is flat (the
steady state); after it, a straight line, so one model covers a step (a stall: the line
starts away from the steady level) and a slope (a leak: the line starts at it and climbs).
For every candidate break the two least-squares fits come from prefix and suffix sums, so
the whole search costs time linear in the number of seconds (a 48-hour run is 172,800
points: a few vectorised numpy passes). The interval is the set of breaks whose fit is
not significantly worse than the best one (profile likelihood, `CUT`), with the
noise variance inflated for the autocorrelation of consecutive seconds, which would
otherwise make it far too narrow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_SEGMENT = 5
"""Seconds on either side of a break: fewer cannot tell a level or a slope from noise."""
CUT = 7.7
"""The profile-likelihood cut for the interval. A break's location is not a regular parameter, so
χ²₁'s 3.84 gives intervals that are too narrow (87–90 % coverage measured on noisy synthetic slopes);
7.7 gave 97–100 % on steps and slopes with white and autocorrelated noise."""


@dataclass(frozen=True)
class ChangePoint:
    """The second the drift began, the interval it lies in (seconds, inclusive), and its shape."""

    began_s: int
    low_s: int
    high_s: int
    shape: str  # "step" (a sudden change: a stall) or "slope" (a trend: a leak)
    before: float  # the level before the break
    after_start: float  # the fitted line just after the break
    slope_per_s: float  # the fitted line's slope after the break


def _suffix(values: np.ndarray) -> np.ndarray:
    """s[k] = sum of values[k:], with s[n] = 0."""
    return np.concatenate([np.cumsum(values[::-1])[::-1], [0.0]])


def find(
    seconds: Sequence[int], values: Sequence[float | None], *, last_break: int | None = None
) -> ChangePoint | None:
    """The most likely single break in `values` (at `seconds`), or None when there are too few points.

    `last_break` bounds the search: the drift must have begun by the time it crossed its
    limit. Seconds without a value (None) are left out, their time still counts.
    """
    pts = [(float(t), float(v)) for t, v in zip(seconds, values, strict=True) if v is not None and math.isfinite(v)]
    n = len(pts)
    if n < 2 * MIN_SEGMENT:
        return None
    t = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    # Centre time and values: the sums of squares below subtract large numbers otherwise.
    t = t - t[0]
    y0 = y.mean()
    y = y - y0

    # Prefix sums for the flat part before the break (points [0, k)).
    cy = np.concatenate([[0.0], np.cumsum(y)])
    cyy = np.concatenate([[0.0], np.cumsum(y * y)])
    k = np.arange(n + 1, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        sse_before = cyy - np.where(k > 0, cy * cy / k, 0.0)
    # Suffix sums for the line after it (points [k, n)).
    s1 = _suffix(np.ones(n))
    st = _suffix(t)
    stt = _suffix(t * t)
    sy = _suffix(y)
    sty = _suffix(t * y)
    syy = _suffix(y * y)
    with np.errstate(divide="ignore", invalid="ignore"):
        sxx = stt - st * st / s1
        sxy = sty - st * sy / s1
        slope = np.where(sxx > 0, sxy / sxx, 0.0)
        sse_after = syy - sy * sy / s1 - slope * sxy
    sse = sse_before + sse_after

    candidates = np.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
    if last_break is not None:
        # A break at `last_break` itself is allowed: a clean step begins in the second it crosses.
        limit = last_break - pts[0][0]
        candidates = candidates[t[candidates] <= limit]
    if len(candidates) == 0:
        return None
    costs = sse[candidates]
    best = int(candidates[int(np.argmin(costs))])
    sse_min = float(sse[best])

    # Interval: breaks whose fit is not significantly worse. The variance of one second's noise,
    # inflated by (1 + ρ)/(1 − ρ) for the lag-1 autocorrelation ρ of the best fit's residuals.
    residuals = np.empty(n)
    before = y[:best].mean()
    residuals[:best] = y[:best] - before
    intercept = (sy[best] - slope[best] * st[best]) / s1[best]
    residuals[best:] = y[best:] - (intercept + slope[best] * t[best:])
    rho = 0.0
    if np.var(residuals) > 0:
        rho = float(np.corrcoef(residuals[:-1], residuals[1:])[0, 1])
        rho = min(max(rho if math.isfinite(rho) else 0.0, 0.0), 0.95)
    variance = max(sse_min / n, 1e-12) * (1 + rho) / (1 - rho)
    inside = candidates[(costs - sse_min) / variance <= CUT]
    low, high = int(inside.min()), int(inside.max())

    began = pts[best][0]
    after_start = intercept + slope[best] * t[best]
    span = t[-1] - t[best]
    step = abs(after_start - before)
    trend = abs(slope[best] * span)
    return ChangePoint(
        began_s=int(began),
        low_s=int(pts[low][0]),
        high_s=int(pts[high][0]),
        shape="step" if step >= trend else "slope",
        before=float(before + y0),
        after_start=float(after_start + y0),
        slope_per_s=float(slope[best]),
    )
