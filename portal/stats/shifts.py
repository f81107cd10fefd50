"""Persistent shifts in a plan's history: the runs at which a figure moved to a new level and stayed.

Plain functions over plain lists, with no Django (``changepoint.py`` is the other kind: when a
degradation began *within* one run). One value per finished run, oldest first.

Method: binary segmentation (``ruptures.Binseg``: split where the two sides' means differ most,
then split each side again, as E-Divisive does) on the values scaled by a robust estimate of the
run-to-run noise, stopped by a BIC-like penalty; then every break is tested as
Otava and MongoDB's E-Divisive do it: a two-sample test between the segments on either side
(Welch's t, at ``ALPHA``), and a shift smaller than ``MIN_CHANGE_PCT`` is dropped as not worth
a reader's time. A break that fails either test is removed and its neighbours merged, until
every remaining break passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# SciPy (and ruptures, which imports it) are imported where they are used, not with the module: this module
# is imported by every process that loads the portal's URLs or tasks (each Celery worker, gunicorn, manage.py),
# and scipy.stats alone takes about a second of CPU to import, for figures only a few pages compute.

MIN_RUNS = 5
"""Runs on each side of a shift: fewer cannot tell a new level from a bad night or two."""
ALPHA = 0.001
"""A shift is kept when the two sides differ at this level (Welch): a plan checked every night for a
year over four figures and a few pages makes thousands of looks, so the bar is high."""
MIN_CHANGE_PCT = 10.0
"""A shift smaller than this (relative to the level before) is left out, however certain."""
PENALTY_PER_BREAK = 3.0
"""The penalty per break, times log(n), on values scaled to unit noise (BIC's 2·log n, a little stricter)."""


@dataclass(frozen=True)
class Shift:
    """The value at ``index`` (and after it) moved from ``before`` to ``after`` (segment means)."""

    index: int
    before: float
    after: float
    change_pct: float | None  # None when the level before was 0 (an error rate from nothing)
    p_value: float


def _noise(values: np.ndarray) -> float:
    """The run-to-run noise: the MAD of consecutive differences / √2, robust to the shifts themselves."""
    diffs = np.diff(values)
    mad = float(np.median(np.abs(diffs - np.median(diffs)))) * 1.4826 / math.sqrt(2)
    if mad > 0:
        return mad
    spread = float(np.std(values))
    return spread if spread > 0 else 1.0


def _test(left: np.ndarray, right: np.ndarray, *, ratio: bool = False) -> tuple[float, float | None]:
    """Welch's p-value between two segments, and the relative change of their means (%).

    ``ratio``: the test compares the logarithms (a figure whose noise grows with its level, such as a page 4×
    slower that also varies 4× more from run to run: on a log scale both levels have the same spread)."""
    before, after = float(left.mean()), float(right.mean())
    if np.ptp(left) == 0 and np.ptp(right) == 0:
        p = 0.0 if before != after else 1.0
    else:
        from scipy import stats

        a, b = (np.log(left), np.log(right)) if ratio else (left, right)
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    change = (after - before) / abs(before) * 100 if before else None
    return p, change


def find(
    values: Sequence[float],
    *,
    min_runs: int = MIN_RUNS,
    alpha: float = ALPHA,
    min_change_pct: float | None = MIN_CHANGE_PCT,
    min_change_abs: float = 0.0,
    ratio: bool = False,
) -> list[Shift]:
    """The persistent shifts in ``values`` (one per run, oldest first), oldest first; [] when none.

    A shift must move by ``min_change_pct`` of the level before (None: no relative bar, for a figure
    near 0 such as an error rate) and by ``min_change_abs`` in the values' own unit. ``ratio``: the values
    are positive and move by ratios (durations, rates): the two sides are tested on a log scale.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2 * min_runs or not np.all(np.isfinite(x)):
        return []
    import ruptures

    scaled = (x - x.mean()) / _noise(x)
    algo = ruptures.Binseg(model="l2", min_size=min_runs, jump=1).fit(scaled)
    breaks = [b for b in algo.predict(pen=PENALTY_PER_BREAK * math.log(n)) if b < n]
    while True:
        bounds = [0, *breaks, n]
        tested = []
        for i, b in enumerate(breaks):
            left, right = x[bounds[i] : b], x[b : bounds[i + 2]]
            p, change = _test(left, right, ratio=ratio and bool(np.all(x > 0)))
            small = abs(float(right.mean()) - float(left.mean())) < min_change_abs or (
                min_change_pct is not None and change is not None and abs(change) < min_change_pct
            )
            tested.append((p if not small else 1.0, b, float(left.mean()), float(right.mean()), change, p))
        weakest = max(tested, default=None, key=lambda t: t[0])
        if weakest is None or weakest[0] < alpha:
            return [Shift(index=b, before=lo, after=hi, change_pct=c, p_value=p) for _, b, lo, hi, c, p in tested]
        breaks.remove(weakest[1])
