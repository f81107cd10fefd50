"""The analysis core of the results history: improvement, capacity and degradation.

Plain functions over plain numbers, with no Django (and no numpy/scipy) so that the
rules can be read, tested and reused by the run finaliser, the history pages and the
reports alike.

The three questions answered here are the ones stakeholders ask (see DESIGN.md):

* **improvement** (`compare`, `batch_means`, `headline`): did the change make the
  figure better, and is the difference larger than the noise between trials?  The TFS
  team ran 3 trials each and averaged (11.8 s → 4.0 s); averages alone cannot say
  whether 412 ms → 405 ms is a gain or luck, so every comparison carries a Welch
  confidence interval and a verdict in plain words.
* **capacity** (`capacity`, `knee_sentence`): the highest load at which the thresholds
  hold, and the knee: the last level after which throughput grows less than half as
  fast as the users.
* **degradation** (`degradation`, `drift_per_hour`): in a long run, when did throughput
  fall or response time rise well away from the steady state (the SharePoint site after
  ~80 min), does it oscillate, and does response time trend up.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from portal import formatting

__all__ = [
    "BETTER",
    "WORSE",
    "WITHIN_NOISE",
    "CapacityResult",
    "Comparison",
    "Degradation",
    "Level",
    "Thresholds",
    "batch_means",
    "capacity",
    "compare",
    "degradation",
    "drift_per_hour",
    "drift_error_per_hour",
    "format_value",
    "headline",
    "t_critical",
]

BETTER = "better"
WORSE = "worse"
WITHIN_NOISE = "within noise"
Verdict = Literal["better", "worse", "within noise"]


# --------------------------------------------------------------------------------------
# Student t quantiles
# --------------------------------------------------------------------------------------
#
# Welch's degrees of freedom are fractional (2.02 for the TFS trials), so a table for
# integer df would have to be interpolated.  Instead the exact quantile is found by
# bisection on the Student t tail, which is a regularised incomplete beta function:
#
#     P(|T| > t) = I_x(df/2, 1/2)   with   x = df / (df + t²)
#
# I_x is evaluated with the continued fraction of Numerical Recipes (§6.4, modified
# Lentz).  Beyond _NORMAL_DF degrees of freedom the t and normal quantiles agree to
# better than 1e-6, so the normal quantile is used.

_NORMAL_DF = 1e6
_CF_MAX_ITER = 10_000
_CF_EPS = 3e-16
_TINY = 1e-300


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _CF_MAX_ITER + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            break
    return h


def _reg_inc_beta(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) for a, b > 0 and 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    # The continued fraction converges fast only on this side of the mean; use the
    # symmetry I_x(a, b) = 1 − I_{1−x}(b, a) on the other.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def _bisect_decreasing(tail, target: float) -> float:
    """The t ≥ 0 where the decreasing function `tail` equals `target`."""
    lo, hi = 0.0, 1.0
    while tail(hi) > target:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if tail(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def t_critical(confidence: float, df: float) -> float:
    """Two-sided Student t critical value: P(|T| ≤ t) = confidence for T ~ t(df).

    t_critical(0.95, 2) = 4.303, (0.95, 10) = 2.228, (0.95, math.inf) = 1.960.
    `df` may be fractional (Welch–Satterthwaite); it must be > 0.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence!r}")
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, not {df!r}")
    alpha = 1.0 - confidence
    if df > _NORMAL_DF:
        return _bisect_decreasing(lambda z: math.erfc(z / math.sqrt(2.0)), alpha)
    return _bisect_decreasing(lambda t: _reg_inc_beta(df / 2.0, 0.5, df / (df + t * t)), alpha)


# --------------------------------------------------------------------------------------
# Improvement: before vs after
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Before vs after for one figure, with the noise that decides whether it matters.

    `difference` is after − before in the figure's unit.  `ci_low`/`ci_high` bound that
    difference at `confidence`; `noise` is the half-width of the interval (the "±" people
    quote).  With one sample on a side, or no spread at all, there is no interval: then
    `method` is "tolerance", `ci_*`, `noise` and `df` are None, and the verdict only asks
    whether the relative difference exceeds `tolerance_pct`.
    """

    n_before: int
    n_after: int
    before_mean: float
    after_mean: float
    before_sd: float
    after_sd: float
    difference: float
    speedup: float | None
    reduction_pct: float | None
    verdict: Verdict
    method: Literal["welch", "tolerance", "percentile"]  # percentile: a p95 against its sampling noise (history)
    basis: str
    lower_is_better: bool
    confidence: float
    tolerance_pct: float
    ci_low: float | None = None
    ci_high: float | None = None
    noise: float | None = None
    df: float | None = None
    unit: str = ""
    samples: str = "trials"

    @property
    def improved(self) -> bool:
        return self.verdict == BETTER


def _finite(values: Sequence[float], side: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise ValueError(f"no {side} values to compare")
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{side} values must be finite numbers")
    return out


def _count_phrase(n_before: int, n_after: int, samples: str) -> str:
    singular = samples[:-1] if samples.endswith("s") else samples
    if n_before == n_after:
        return f"{n_before} {singular if n_before == 1 else samples} each"
    return f"{n_before} {singular if n_before == 1 else samples} before, {n_after} after"


def compare(
    before: Sequence[float],
    after: Sequence[float],
    *,
    lower_is_better: bool = True,
    confidence: float = 0.95,
    tolerance_pct: float = 5.0,
    unit: str = "",
    samples: str = "trials",
    before_value: float | None = None,
    after_value: float | None = None,
) -> Comparison:
    """Compare the samples of one figure before and after a change.

    Each sample is one independent measurement of the figure: the APD of each trial of
    a trial set, or, for two single runs, the batch means of each run (`batch_means`).

    Why Welch: the two sides rarely have the same spread (a tuned system is often also
    steadier: 14.2/11.0/10.1 s vs 3.95/3.9/4.2 s) nor the same number of trials, and
    Welch's interval stays honest in both cases where the pooled t-test does not.

    * `speedup`: before/after when lower is better (11.8 s → 4.0 s = 2.95×), after/before
      when higher is better (pages/s); above 1 means better.  None if undefined (a zero
      or negative denominator, or a sign change) or meaningless: a side at zero (an error
      rate going 0 % → 20 % is not "0.00× faster").
    * `reduction_pct`: the relative change in the good direction, in % of before:
      (28 − 21) / 28 = 25 % for a lower-is-better figure, (after − before) / before for a
      higher-is-better one; negative when worse.  None when before is 0.
    * `verdict`: "better"/"worse" when the confidence interval of the difference excludes
      0, else "within noise".  With n = 1 on a side or zero spread on both sides there is
      no interval, and the verdict is "within noise" unless |difference| exceeds
      `tolerance_pct` % of the before mean; `basis` says so.
    * `unit` (e.g. "ms") and `samples` (e.g. "trials", "batches") only shape `basis`.
    * `before_value`/`after_value`: each side's own figure, when it is not the mean of its
      samples (a run's APD over its whole window is not the mean of its batch means, and a
      trial set's figure is pooled over its trials). Then the figures, their difference,
      the speed-up and the reduction are those values, and the samples only give the
      spread (the interval is centred on the difference of the figures): one figure, one
      value, wherever it is shown. `before_mean`/`after_mean` hold them.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence!r}")
    if tolerance_pct < 0:
        raise ValueError("tolerance_pct must not be negative")
    b = _finite(before, "before")
    a = _finite(after, "after")
    nb, na = len(b), len(a)
    mb = statistics.fmean(b) if before_value is None else float(before_value)
    ma = statistics.fmean(a) if after_value is None else float(after_value)
    if not (math.isfinite(mb) and math.isfinite(ma)):
        raise ValueError("the figures compared must be finite numbers")
    sb = statistics.stdev(b) if nb > 1 else 0.0
    sa = statistics.stdev(a) if na > 1 else 0.0
    diff = ma - mb

    good, bad = (mb, ma) if lower_is_better else (ma, mb)
    speedup = good / bad if bad > 0 and good > 0 else None
    gain = mb - ma if lower_is_better else ma - mb
    reduction = None if mb == 0 else gain / abs(mb) * 100.0

    improving = diff < 0 if lower_is_better else diff > 0
    direction: Verdict = BETTER if improving else WORSE
    counts = _count_phrase(nb, na, samples)
    scale = _scale(unit, mb, ma)
    common = {
        "n_before": nb,
        "n_after": na,
        "before_mean": mb,
        "after_mean": ma,
        "before_sd": sb,
        "after_sd": sa,
        "difference": diff,
        "speedup": speedup,
        "reduction_pct": reduction,
        "lower_is_better": lower_is_better,
        "confidence": confidence,
        "tolerance_pct": tolerance_pct,
        "unit": unit,
        "samples": samples,
    }

    if nb < 2 or na < 2 or (sb == 0 and sa == 0):
        # A zero baseline makes any change infinitely large in relative terms.
        rel = abs(diff) / abs(mb) * 100.0 if mb != 0 else (0.0 if diff == 0 else math.inf)
        verdict: Verdict = direction if rel > tolerance_pct else WITHIN_NOISE
        why = "no spread to measure" if nb > 1 and na > 1 else "one value on a side gives no spread"
        rel_txt = "an infinite" if math.isinf(rel) else f"a {rel:.1f} %"
        basis = (
            f"{counts}; {why}, so the verdict only asks whether the difference "
            f"({rel_txt} change) exceeds the {tolerance_pct:g} % tolerance"
        )
        return Comparison(verdict=verdict, method="tolerance", basis=basis, **common)

    vb, va = sb * sb / nb, sa * sa / na
    se = math.sqrt(vb + va)
    df = (vb + va) ** 2 / (vb * vb / (nb - 1) + va * va / (na - 1))
    half = t_critical(confidence, df) * se
    lo, hi = diff - half, diff + half
    verdict = WITHIN_NOISE if lo <= 0.0 <= hi else direction
    ratio = abs(diff) / half
    pct = f"{confidence * 100:g} %"
    basis = (
        f"{counts}; the difference is {ratio:.1f}× the spread between {samples} "
        f"(±{format_value(half, unit, scale=scale, spread=True)} at {pct})"
    )
    if verdict == WITHIN_NOISE:
        basis += ", so it could be noise"
    return Comparison(verdict=verdict, method="welch", basis=basis, ci_low=lo, ci_high=hi, noise=half, df=df, **common)


def batch_means(series: Sequence[float | None], batches: int = 10) -> list[float]:
    """Means of consecutive batches of a single run's per-second values.

    Why: consecutive seconds of a load test are autocorrelated (a slow second is
    followed by slow seconds while a queue drains), so treating 3,600 per-second values
    as 3,600 independent samples understates the variance many times over and makes
    every small difference look significant.  Means of long consecutive batches are
    much closer to independent and close to normal, so `compare` on the batch means of
    two runs gives an honest interval (the method of batch means; 10 to 30 batches is
    the usual compromise between too few samples and batches too short to decorrelate).

    Pass only the measurement window (after ramp-up).  None (seconds without data) and
    NaN values are dropped.  With fewer than 2 × `batches` values, fewer batches are
    made (len // 2, at least 2).  Batch sizes differ by at most one so every value is
    used.  Raises ValueError with fewer than 2 values.
    """
    if batches < 2:
        raise ValueError("need at least 2 batches")
    values = [float(v) for v in series if v is not None and not math.isnan(v)]
    n = len(values)
    if n < 2:
        raise ValueError(f"need at least 2 values for batch means, got {n}")
    k = batches if n >= 2 * batches else max(2, n // 2)
    bounds = [i * n // k for i in range(k + 1)]
    return [statistics.fmean(values[bounds[i] : bounds[i + 1]]) for i in range(k)]


# --------------------------------------------------------------------------------------
# Headline
# --------------------------------------------------------------------------------------


def _scale(unit: str, *values: float) -> str:
    """Show milliseconds as seconds when the figures themselves reach a second."""
    if unit == "ms":
        return formatting.duration_scale(*values)
    return unit


def format_value(value: float, unit: str, *, scale: str | None = None, spread: bool = False) -> str:
    """A figure as people read it, by the rules of ``portal.formatting``: 412 ms, 11.8 s, 12.5 %.

    `scale="s"` forces seconds for a value given in ms (so that the noise of 11.8 s
    figures reads ±0.600 s, not ±600 ms). `spread` (a "±" half-width) is written like
    the figure it qualifies, so both read with the same rules.
    """
    scale = scale if scale is not None else _scale(unit, value)
    if unit == "ms":
        return formatting.duration_ms(value, "s" if scale == "s" else "ms")
    if unit == "%":
        return formatting.percent(value)
    return formatting.number(value, unit)


def _factor(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.2f}".rstrip("0").rstrip(".")


def headline(title: str, figure: str, comparison: Comparison, unit: str) -> str:
    """The stakeholder sentence for one comparison.

    "Enable -T1118: APD 11.8 s → 4.0 s (2.95× faster), well beyond the noise between
    trials (±0.6 s)"; "Add index: APD 412 ms → 405 ms, within the noise between trials
    (±30 ms)".  "well beyond" when |difference| ≥ 3 × noise, "beyond" otherwise.  The
    factor says faster/slower for lower-is-better figures (times) and higher/lower for
    the others (throughput).  Without a noise estimate the sentence names the tolerance.
    """
    c = comparison
    scale = _scale(unit, c.before_mean, c.after_mean)
    text = (
        f"{title}: {figure} {format_value(c.before_mean, unit, scale=scale)} → "
        f"{format_value(c.after_mean, unit, scale=scale)}"
    )
    if c.verdict != WITHIN_NOISE and c.speedup is not None and c.speedup > 0:
        up, down = ("faster", "slower") if c.lower_is_better else ("higher", "lower")
        factor, word = (c.speedup, up) if c.verdict == BETTER else (1.0 / c.speedup, down)
        text += f" ({_factor(factor)}× {word})"

    if c.noise is None:
        single = "one value on a side" if min(c.n_before, c.n_after) < 2 else "no spread between " + c.samples
        where = "within" if c.verdict == WITHIN_NOISE else "beyond"
        return f"{text}, {where} the {c.tolerance_pct:g} % tolerance ({single}, so no noise estimate)"

    noise = f"±{format_value(c.noise, unit, scale=scale, spread=True)}"
    if c.verdict == WITHIN_NOISE:
        where = "within"
    elif abs(c.difference) >= 3 * c.noise:
        where = "well beyond"
    else:
        where = "beyond"
    return f"{text}, {where} the noise between {c.samples} ({noise})"


# --------------------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """The summary of one load level (a step of a stepped run, or one run)."""

    users: int
    apd_ms: float
    p95_ms: float
    pages_per_s: float
    error_rate_pct: float
    # Streams and WebSocket sessions (issue 26): None when the level has no such figure.
    ttfe_p95_ms: float | None = None
    gap_p95_ms: float | None = None
    rtt_p95_ms: float | None = None
    h2_share_pct: float | None = None


# (threshold, the level's figure, "≤" a ceiling or "≥" a floor) for the stream, WebSocket and protocol figures.
PROTOCOL_LIMITS = (
    ("max_ttfe_p95_ms", "ttfe_p95_ms", "≤"),
    ("max_gap_p95_ms", "gap_p95_ms", "≤"),
    ("max_rtt_p95_ms", "rtt_p95_ms", "≤"),
    ("min_h2_share_pct", "h2_share_pct", "≥"),
)


@dataclass(frozen=True)
class Thresholds:
    """Pass conditions for a level; None means "not set" and is not checked.

    A stream, WebSocket or protocol threshold breaks on a level that has no such figure (a level
    without a stream has no time to first event: a limit cannot hold on nothing, as a run's judgement).
    """

    max_apd_ms: float | None = None
    max_p95_ms: float | None = None
    max_error_rate_pct: float | None = None
    min_pages_per_s: float | None = None
    max_ttfe_p95_ms: float | None = None
    max_gap_p95_ms: float | None = None
    max_rtt_p95_ms: float | None = None
    min_h2_share_pct: float | None = None

    def broken(self, level: Level) -> list[str]:
        """Names of the thresholds this level breaks (empty when it holds)."""
        out = []
        if self.max_apd_ms is not None and level.apd_ms > self.max_apd_ms:
            out.append("max_apd_ms")
        if self.max_p95_ms is not None and level.p95_ms > self.max_p95_ms:
            out.append("max_p95_ms")
        if self.max_error_rate_pct is not None and level.error_rate_pct > self.max_error_rate_pct:
            out.append("max_error_rate_pct")
        if self.min_pages_per_s is not None and level.pages_per_s < self.min_pages_per_s:
            out.append("min_pages_per_s")
        for name, figure, op in PROTOCOL_LIMITS:
            limit, actual = getattr(self, name), getattr(level, figure)
            if limit is None:
                continue
            if actual is None or (actual > limit if op == "≤" else actual < limit):
                out.append(name)
        return out


@dataclass(frozen=True)
class CapacityResult:
    """Capacity and knee of a set of load levels.

    `capacity_users` is None when even the lowest level breaks a threshold.
    `first_failure_users` is the lowest level that broke one (None if all held) and
    `broken` maps the users of every failing level to the thresholds it broke.
    `knee_users` is None with fewer than 2 levels or when throughput keeps growing at least
    half as fast as the users.
    """

    capacity_users: int | None
    capacity_level: Level | None
    first_failure_users: int | None
    broken: dict[int, list[str]] = field(default_factory=dict)
    knee_users: int | None = None


def capacity(levels: Sequence[Level], thresholds: Thresholds, *, knee_gain: float = 0.5) -> CapacityResult:
    """The highest load the system carries within its thresholds, and its knee.

    Capacity rule: levels are taken in increasing users; capacity is the last level
    before the first one that breaks any set threshold.  A higher level that happens to
    pass again after a failure does not count: capacity is load the system carries
    reliably, and a pass above a failure is noise or a recovering system, not headroom.
    With no threshold set every level holds and capacity is the highest level.

    Knee rule: the first level i where the throughput gain to level i+1 is less than
    `knee_gain` of the gain the user increase alone would give, i.e.
    (pages[i+1]/pages[i] − 1) < knee_gain × (users[i+1]/users[i] − 1); e.g. users ×2 but
    pages/s ×1.2 gives 0.2 / 1.0 = 0.2 < 0.5.  The knee is level i's users (the last
    level that still scaled).  Levels with zero throughput count as not growing.
    """
    ordered = sorted(levels, key=lambda lv: lv.users)
    users = [lv.users for lv in ordered]
    if len(set(users)) != len(users):
        raise ValueError("two levels have the same number of users")
    if any(u <= 0 for u in users):
        raise ValueError("levels must have a positive number of users")

    broken = {lv.users: b for lv in ordered if (b := thresholds.broken(lv))}
    cap: Level | None = None
    first_failure: int | None = None
    for lv in ordered:
        if lv.users in broken:
            first_failure = lv.users
            break
        cap = lv

    knee: int | None = None
    for lo, hi in zip(ordered, ordered[1:], strict=False):
        expected = hi.users / lo.users - 1.0
        if lo.pages_per_s <= 0:
            grew = hi.pages_per_s > 0
        else:
            grew = hi.pages_per_s / lo.pages_per_s - 1.0 >= knee_gain * expected
        if not grew:
            knee = lo.users
            break

    return CapacityResult(
        capacity_users=cap.users if cap else None,
        capacity_level=cap,
        first_failure_users=first_failure,
        broken=broken,
        knee_users=knee,
    )


KNEE_WORDS = "grows less than half as fast as the users"
"""The knee rule of `capacity` in words (knee_gain 0.5), for every page, note and hint that names the knee."""


def _gain(ratio: float) -> str:
    """+30 %, +4.5 %, −2 %: a change in percent with its sign."""
    text = formatting.percent(100 * ratio)
    return text if text.startswith("−") else "+" + text


def _users(n: int) -> str:
    return f"{n} user" if n == 1 else f"{n} users"


def knee_sentence(levels: Sequence[tuple[int, float]], knee_users: int | None) -> str:
    """The knee in the words of its rule, with the figures that place it.

    ``levels`` are (users, pages/s) of every level. "Throughput stops growing" is said only
    when it did not grow; otherwise the sentence gives the gain beside the users' gain, so a
    reader sees why 8 users is the knee when 8 → 16 users still added 30 %.
    """
    ordered = sorted(levels)
    if not ordered:
        return ""
    if knee_users is None:
        return (
            f"Throughput grows at least half as fast as the users up to {ordered[-1][0]} users: "
            "no knee within these levels."
        )
    at = next(i for i, (users, _) in enumerate(ordered) if users == knee_users)
    (lo_users, lo_x), (hi_users, hi_x) = ordered[at], ordered[at + 1]
    users_gain = hi_users / lo_users - 1.0
    if lo_x <= 0 or hi_x <= lo_x:
        change = "no gain" if lo_x <= 0 or hi_x == lo_x else _gain(hi_x / lo_x - 1.0)
        return (
            f"Throughput stops growing after {_users(knee_users)} (the knee): {change} from {lo_users} to "
            f"{hi_users} users."
        )
    return (
        f"After {_users(knee_users)} (the knee) throughput {KNEE_WORDS}: {_gain(hi_x / lo_x - 1.0)} from "
        f"{lo_users} to {hi_users} users ({_gain(users_gain)} users)."
    )


# --------------------------------------------------------------------------------------
# Degradation in long runs
# --------------------------------------------------------------------------------------

SMOOTH_S = 11
"""Width of the centred rolling median: odd, so a clean step is located to the second,
and wide enough (±5 s) that dips shorter than 6 s never reach the median."""

OSCILLATION_BAND_PCT = 20.0
OSCILLATION_PER_10_MIN = 4
"""Oscillation: the rolling throughput leaves the ±20 % band around steady state (an
"excursion": entering "high" or "low" from any other state) more than 4 times per
10 minutes of analysed run, i.e. on average more often than every 2.5 min, and at
least 5 times in all so a short run with one dip is not called oscillating.  A single
sustained drop is one excursion; noise that stays inside the band is none."""


@dataclass(frozen=True)
class Degradation:
    """What happened to a long run after its steady state.

    Seconds are indices into the given series (seconds since the run began).
    `degraded` is True when a sustained throughput drop or APD rise was found; `kind`
    and `onset_s` describe the earliest, the per-kind onsets are kept too.  Oscillation
    and drift are reported separately so the reader can weigh them.
    """

    degraded: bool
    kind: Literal["throughput drop", "APD rise"] | None
    onset_s: int | None
    throughput_onset_s: int | None
    apd_onset_s: int | None
    steady_throughput: float | None
    steady_apd_ms: float | None
    steady_window: tuple[int, int]
    oscillation: bool
    excursions: int
    excursions_per_10_min: float
    drift_ms_per_hour: float | None


def _rolling_median(values: Sequence[float | None], width: int = SMOOTH_S) -> list[float | None]:
    """Centred rolling median ignoring None; None where a window has no data."""
    half = width // 2
    n = len(values)
    out: list[float | None] = []
    for i in range(n):
        window = [v for v in values[max(0, i - half) : min(n, i + half + 1)] if v is not None]
        out.append(statistics.median(window) if window else None)
    return out


def _first_sustained(flags: Sequence[bool], sustain: int) -> int | None:
    """Index where the first run of at least `sustain` consecutive True values begins."""
    run = 0
    for i, flag in enumerate(flags):
        run = run + 1 if flag else 0
        if run >= max(1, sustain):
            return i - run + 1
    return None


def _steady(values: Sequence[float | None], length: int) -> float | None:
    window = [v for v in values[:length] if v is not None]
    return statistics.median(window) if window else None


def degradation(
    throughput: Sequence[float | None],
    apd_ms: Sequence[float | None],
    *,
    start: int,
    drop_pct: float = 30,
    rise_pct: float = 50,
    sustain_s: int = 60,
    steady_s: int = 300,
) -> Degradation:
    """Find when a long run left its steady state.

    * Steady state: the median of the first `steady_s` seconds from `start` (the end of
      ramp-up).  When fewer than 3 × `steady_s` seconds follow `start`, the first third
      of them is used instead, so that two thirds remain to look for degradation.
    * Both series are smoothed by a centred rolling median over `SMOOTH_S` seconds so
      that single-second dips (a GC pause, one slow page) are ignored.
    * Throughput drop: smoothed throughput below (100 − drop_pct) % of steady for at
      least `sustain_s` consecutive seconds.  APD rise: smoothed APD above
      (100 + rise_pct) % of steady likewise.  Seconds without data break a stretch.
      `onset_s` is the first second of the earliest such stretch (searched from `start`).
    * Oscillation: see OSCILLATION_PER_10_MIN.
    * `drift_ms_per_hour`: `drift_per_hour(apd_ms, start)`.
    """
    if start < 0:
        raise ValueError("start must not be negative")
    tp = list(throughput[start:])
    apd = list(apd_ms[start:])
    length = max(len(tp), len(apd))
    steady_len = min(steady_s, length // 3) if length < 3 * steady_s else steady_s
    steady_len = max(1, steady_len)
    steady_tp = _steady(tp, steady_len)
    steady_apd = _steady(apd, steady_len)

    tp_smooth = _rolling_median(tp)
    apd_smooth = _rolling_median(apd)

    tp_onset = apd_onset = None
    if steady_tp is not None and steady_tp > 0:
        floor = steady_tp * (100.0 - drop_pct) / 100.0
        idx = _first_sustained([v is not None and v < floor for v in tp_smooth], sustain_s)
        tp_onset = None if idx is None else start + idx
    if steady_apd is not None and steady_apd > 0:
        ceiling = steady_apd * (100.0 + rise_pct) / 100.0
        idx = _first_sustained([v is not None and v > ceiling for v in apd_smooth], sustain_s)
        apd_onset = None if idx is None else start + idx

    candidates = [(s, k) for s, k in ((tp_onset, "throughput drop"), (apd_onset, "APD rise")) if s is not None]
    onset, kind = min(candidates) if candidates else (None, None)

    excursions = 0
    if steady_tp is not None and steady_tp > 0:
        high = steady_tp * (1 + OSCILLATION_BAND_PCT / 100.0)
        low = steady_tp * (1 - OSCILLATION_BAND_PCT / 100.0)
        state = "in"
        for v in tp_smooth:
            if v is None:
                continue
            new = "high" if v > high else "low" if v < low else "in"
            if new != state and new != "in":
                excursions += 1
            state = new
    minutes_10 = len(tp) / 600.0
    rate = excursions / minutes_10 if minutes_10 > 0 else 0.0
    oscillation = excursions > OSCILLATION_PER_10_MIN and rate > OSCILLATION_PER_10_MIN

    return Degradation(
        degraded=onset is not None,
        kind=kind,
        onset_s=onset,
        throughput_onset_s=tp_onset,
        apd_onset_s=apd_onset,
        steady_throughput=steady_tp,
        steady_apd_ms=steady_apd,
        steady_window=(start, start + steady_len),
        oscillation=oscillation,
        excursions=excursions,
        excursions_per_10_min=rate,
        drift_ms_per_hour=drift_per_hour(apd_ms, start),
    )


def drift_error_per_hour(values: Sequence[float | None], start: int = 0) -> float | None:
    """The standard error of `drift_per_hour`'s slope (same units per hour), from the fit's residuals.

    Why: a slope read from a short window of noisy seconds is itself noisy; comparing two
    runs' drifts (a soak against its baseline) needs to know by how much. Consecutive
    seconds are correlated, so this is a lower bound; the baseline runs' spread covers the rest.
    """
    points = [(float(t), float(v)) for t, v in enumerate(values) if t >= start and v is not None]
    if len(points) < 3:
        return None
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    sxx = math.fsum((t - mt) ** 2 for t, _ in points)
    if sxx == 0:
        return None
    slope = math.fsum((t - mt) * (v - mv) for t, v in points) / sxx
    sse = math.fsum((v - mv - slope * (t - mt)) ** 2 for t, v in points)
    return math.sqrt(sse / (len(points) - 2) / sxx) * 3600.0


def drift_per_hour(apd_ms: Sequence[float | None], start: int = 0) -> float | None:
    """Least-squares slope of APD against time from `start`, in ms per hour.

    Why: a slow leak (Exchange queues building for hours) shows as a steady upward
    trend long before any threshold breaks.  None values are skipped (their seconds
    still count as time); None with fewer than 2 values or no spread in time.
    """
    points = [(float(t), float(v)) for t, v in enumerate(apd_ms) if t >= start and v is not None]
    if len(points) < 2:
        return None
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    sxx = math.fsum((t - mt) ** 2 for t, _ in points)
    if sxx == 0:
        return None
    sxy = math.fsum((t - mt) * (v - mv) for t, v in points)
    return sxy / sxx * 3600.0
