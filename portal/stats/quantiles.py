"""The sampling noise of a percentile, from the percentiles a run's summary keeps.

The p95 of ``n`` samples is the order statistic of rank ≈ ``q·n``; how far that rank moves from sample to sample is
binomial, with a standard deviation of ``√(n·q·(1−q))`` ranks. A rank is turned into a duration by the slope of the
quantile function there, read from the figures the summary keeps (p90 and p99: ``(p99 − p90) / 0.09``). So
``se ≈ slope · √(q(1−q)/n)``: the asymptotic (sparsity) standard error of a sample quantile, the same interval as the
order-statistic (binomial) one, mapped linearly. Used by the nightly verdicts (``portal.schedules.noise``) and by
comparisons of two single runs (``portal.history.comparison``).
"""

from __future__ import annotations

import math


def percentile_se(p90: float | None, p99: float | None, n: int | None, q: float = 0.95) -> float | None:
    """The standard error (in the figures' unit) of the ``q`` percentile of ``n`` samples; None without them."""
    if not n or p90 is None or p99 is None:
        return None
    slope = max(p99 - p90, 0.0) / (0.99 - 0.90)
    return slope * math.sqrt(q * (1 - q) / n)
