"""The noise a night really has, and one false-alarm budget for all the rows of a verdict (issue 24.2).

Plain statistics, no Django: the verdict service (``baselines.py``) feeds it each row's figures and
the benchmark (``bench/verdicts.py``) feeds it simulated nights, so both measure the same code.

The model. A figure of one row (a page's APD, the run's p95 …) in run *r* is, on a relative scale,
``level + drift_r + sampling_r``:

* **sampling** is the within-run noise: how much the figure would differ with other page samples
  from the same system on the same night (``v``, the squared standard error of the figure), so a page
  with 46 samples is noisier than one with 4,000 and the verdict knows it. For an APD it is the variance
  of the run's page durations / pages (from its window histogram: every page, not 10 batch means) times
  the autocorrelation factor its batch means show, pooled over the rows and runs (``autocorrelation``);
  for the other figures, and a run without the histogram, it is estimated from the run's batch means.
* **drift** is what a rerun on another night adds (caches, neighbours, the database's plan): the
  spread *between* the baseline runs' own figures beyond their sampling noise. It is pooled over
  the rows of one figure (restricted maximum likelihood, each row weighed by its precision:
  ``pooled_drift``), so three baseline runs with six rows give twelve degrees of freedom instead of two.

A row's change ``d = figure − mean(baseline figures)`` then has the variance
``σ_x² + σ_b² / N`` with ``σ_b² = τ² + v_baseline`` and ``σ_x² = τ² + v_run``; its p-value comes from
Student's t with the pooled degrees of freedom, one-sided in the direction the row moved. The rows
of a verdict (pages × figures and the totals) are one family: Holm's step-down keeps the chance that
a night with nothing changed calls any row regressed at most ``FALSE_ALARM`` (and improved, apart). The
step-down is weighted (Holm 1979, which holds the rate under any dependence between the rows): the APD rows and
the streams' time to first event, the primary figures, share ``PRIMARY_SHARE`` of the budget, the other rows the
rest.
A page's change net of the night's drift (below) has the drift estimate's noise in its variance, the page's own
weight in it counted (``drift_net_noise``).
A row moved only when it is significant after Holm *and* beyond the plan's tolerance. A page whose change is
read net of the night's common drift (below) meets the tolerance with that same net change: the tolerance is
about the page, and a night slower or faster everywhere is the totals' to tell (a page 20 % slower on a night
8 % faster everywhere is +10 % as shown, +20 % net: it regressed).

A page's streams and WebSocket sessions (issue 26) join the family where every run has them: time to first
event p95, gap between events p95 and WebSocket round trip p95, as ratios like the p95. Their runs keep no
batch figures, so their noise within a run is the standard error of a percentile (``percentile_var``: the
binomial spread of the p95's rank, turned into milliseconds by the slope between the summary's p90 and p99).

APD, p95 and pages/s are compared as ratios (their noise grows with their level); the error rate in
percentage points (it is often 0).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from portal.stats.quantiles import percentile_se

# The chance that a night with nothing changed is called regressed on any row (and, apart, improved).
FALSE_ALARM = 0.01
# With fewer baseline runs than this the spread between them is known poorly: the verdict is provisional.
PROVISIONAL_BELOW = 3
# A figure is judged only where every run on both sides has at least this many pages behind it:
# an APD (a mean of skewed durations) needs ~30 to be near-normal; a p95 rests on the slowest 5 %,
# so 100 pages put at least 5 of them above it; an error rate from fewer than 100 pages moves in
# steps of more than 1 %; pages/s, a count per second, has Poisson noise above 18 % under 30.
MIN_PAGES = {"apd_ms": 30, "p95_ms": 100, "pages_per_s": 30, "error_rate_pct": 100}
# Streams and WebSocket sessions (issue 26): a p95 again, so 100 of what it is the p95 of, counted in streams
# (time to first event; the gaps too: a stream's gaps move together, so its gaps are not independent samples)
# and in round trips.
MIN_SAMPLES = {"ttfe_p95_ms": 100, "gap_p95_ms": 100, "rtt_p95_ms": 100}
PROTOCOL_KEYS = set(MIN_SAMPLES)
RELATIVE = {"apd_ms", "p95_ms", "pages_per_s", *PROTOCOL_KEYS}
# The night's common drift is taken out of the pages' changes when at least this many pages are judged
# (the median of fewer is moved by the one page that regressed).
MIN_PAGES_FOR_DRIFT = 3
# Degrees of freedom of one run's within-run noise: its 10 batch means (portal.runs.results.batches.BATCHES).
BATCH_DF = 9.0
# The figures whose noise within a run is pooled over the runs: means and rates, whose batch means are a
# sound estimate of it. A p95's batches (each the p95 of a tenth of the pages) are not: each run keeps its own.
POOLED_NOISE = {"apd_ms", "pages_per_s", "error_rate_pct"}
# A run's own noise within it is kept instead of the pooled one above this ratio (F(9, ∞) at 99 %: 2.41).
ERRATIC = 2.41
# The figures whose noise within a run is read from all its samples (``Cell.sample_v``: a mean's s² / n), times
# the autocorrelation factor the batch means give, pooled over the figure's rows and runs (``autocorrelation``).
SAMPLE_NOISE = {"apd_ms"}
# A row keeps its own batch means when their factor is plainly above the pooled one (F test at this level).
FACTOR_LEVEL = 0.99
# No page weighs more than this share of the night's drift (a third: at least two others outweigh it).
MAX_SHARE = 1 / 3
# A page's sampling variance is floored at (1 %)² for its weight in the night's drift.
WEIGHT_FLOOR = 1e-4
# Draws of the night's drift estimate for its own noise (``drift_net_noise``), from a fixed seed.
DRAWS = 2000
DRAWS_SEED = 24
# The verdict's primary figures: a page's APD (its mean) and the totals', and a streaming page's time to first event
# (its latency, what a user waits on, as the APD is a page's). At a few hundred pages a mean is far less noisy than a
# p95 (±2.7 % against ±5.3 % at 400 log-normal pages, σ 0.5), and a page made slower moves its mean as much as its
# p95; a page's pages/s in a closed loop follows the plan's iterations (the totals'). The primary rows share this
# part of the false-alarm budget, the p95, pages/s, error-rate and other protocol rows the rest (weighted Holm):
# one page 20 % slower (400 pages) found on the first night 89.7 → 94.7 % (seed 1; 92.3 / 89.7 / 92.7 →
# 94.7 / 92.7 / 96.3 % on seeds 2–4), false alarms within 2 % (``python -m bench verdicts``, docs/verdicts.md).
PRIMARY = {"apd_ms", "ttfe_p95_ms"}
PRIMARY_SHARE = 0.75
DRIFT_OUT = (
    " (a page's change net of the night's drift, the median change over its pages, with that median's own noise)"
)
WEIGHTED = " (the APD and time-to-first-event rows, the primary figures, carrying {share:g} % of it)"
TOLERANCE_NET = " (for a page, its change net of the night's drift)"


@dataclass
class Cell:
    """One row of a verdict: a figure of a page (or of all pages, ``page`` None) on both sides."""

    page: str | None
    key: str  # apd_ms, p95_ms, pages_per_s, error_rate_pct
    lower_is_better: bool
    baseline: list[float]  # each baseline run's own figure
    value: float  # the judged run's figure
    baseline_batches: list[list[float]]  # each baseline run's batch figures (its within-run noise)
    batches: list[float]  # the judged run's batch figures
    baseline_pages: list[int]  # pages behind the figure in each baseline run
    pages: int  # and in the judged run
    # The change as the row shows it (the sides' pooled figures), for the tolerance; else from the means.
    shown_change_pct: float | None = None
    figure: str = ""  # its name as the report shows it (APD, p95 …)
    # A figure without batch figures (the protocol p95s): each run's noise within it given directly (``v``, the
    # squared relative standard error, ``percentile_var``), the baseline runs' and the judged run's.
    baseline_v: list[float | None] | None = None
    v: float | None = None
    samples: str = "pages"  # what ``pages`` counts: pages, streams or round trips
    # The squared relative standard error of the figure were the run's pages independent (APD: the variance of
    # its page durations / pages / APD², from the run's window histogram): the baseline runs' and the judged
    # run's; None where a run does not have it (finalized before its window histogram was stored).
    baseline_sample_v: list[float | None] | None = None
    sample_v: float | None = None


def percentile_var(
    p90: float | None, p95: float | None, p99: float | None, n: int | None, q: float = 0.95
) -> float | None:
    """The squared relative standard error of a p95 of ``n`` samples, from the percentiles around it
    (``portal.stats.quantiles.percentile_se``, relative to the p95). None without the figures."""
    if not n or p95 is None or p95 <= 0:
        return None
    se = percentile_se(p90, p99, n, q)
    return None if se is None else (se / p95) ** 2


@dataclass
class Judged:
    verdict: str  # regressed, improved, within_noise, none
    change_pct: float | None = None  # (figure − baseline) / baseline, in %
    p: float | None = None  # one-sided p-value of the move, in the direction it moved
    noise_pct: float | None = None  # the 95 % half-width of a night's change, in % of the baseline (pp: error rate)
    note: str = ""
    dof: float | None = None  # degrees of freedom of the t test
    tau2: float | None = None  # the drift between nights pooled for the row's figure (scaled)
    sd: float | None = None  # the standard deviation of the row's change (scaled)
    t: float | None = None  # the change in standard deviations
    # A page's change net of the night's common drift, in % (what was tested and what meets the tolerance);
    # None where the drift was not taken out (the totals, or fewer than MIN_PAGES_FOR_DRIFT pages).
    net_change_pct: float | None = None
    # The autocorrelation factor that scaled the runs' sample variance into their noise within a run (the
    # figures of ``SAMPLE_NOISE`` where every run kept it); None where the noise within a run is the batch means'.
    factor: float | None = None


@dataclass
class Family:
    """The outcome for all rows, with what the page says about how it was reached."""

    rows: list[Judged]
    n_baseline: int
    judged: int  # rows with enough samples on both sides
    provisional: bool
    provisional_reason: str
    method: str


def _within_var(batches: Sequence[float], relative: bool) -> float | None:
    """Squared standard error of a run's figure from its batch means (relative for ratios)."""
    values = [float(b) for b in batches if b is not None]
    if len(values) < 2:
        return None
    var = statistics.variance(values) / len(values)
    if relative:
        mean = statistics.fmean(values)
        if mean <= 0:
            return None
        var /= mean * mean
    return var


def _within_noise(cell: Cell, relative: bool) -> tuple[float, float, float]:
    """(v of a baseline run, v of the judged run, degrees of freedom): each run's noise within it, pooled.

    A page's noise within a run is the same from run to run once its sample count is taken into account
    (``v ∝ 1 / pages``): ten batch means give one run's only 9 degrees of freedom, so the rows' noise is
    pooled over the baseline runs and the judged run (9 each). The judged run's own, when plainly larger (a
    run whose pages became erratic: ``ERRATIC`` times the pooled, which 9 degrees of freedom pass by chance
    about 1 time in 100), is kept: a move is not weighed against a noise much smaller than its own.
    """
    if cell.baseline_v is not None:  # given per run (no batch figures): each run keeps its own
        own_b = [v for v in cell.baseline_v if v is not None]
        run_v = cell.v if cell.v is not None else (statistics.fmean(own_b) if own_b else 0.0)
        return (statistics.fmean(own_b) if own_b else run_v), run_v, BATCH_DF
    own = [_within_var(b, relative) for b in cell.baseline_batches]
    run_v = _within_var(cell.batches, relative)
    sides = [(v, p) for v, p in zip([*own, run_v], [*cell.baseline_pages, cell.pages], strict=False) if v is not None]
    if not sides:
        return 0.0, 0.0, BATCH_DF
    per_page = statistics.fmean(v * max(p, 1) for v, p in sides)
    df = BATCH_DF * len(sides)
    v_b = statistics.fmean(per_page / max(p, 1) for p in cell.baseline_pages) if cell.baseline_pages else 0.0
    v_r = per_page / max(cell.pages, 1)
    if run_v is not None and (cell.key not in POOLED_NOISE or run_v > v_r * ERRATIC):
        own_b = [v for v in own if v is not None]
        return (statistics.fmean(own_b) if own_b else run_v), run_v, BATCH_DF
    return v_b, v_r, df


def _sample_sides(cell: Cell, relative: bool) -> list[tuple[float, float, int]] | None:
    """Each run's (batch-means v, sample v, batch df) where every run of the row has both; else None."""
    if cell.key not in SAMPLE_NOISE or cell.sample_v is None or cell.baseline_sample_v is None:
        return None
    sample = [*cell.baseline_sample_v, cell.sample_v]
    batches = [*cell.baseline_batches, cell.batches]
    if len(sample) != len(batches) or any(v is None or v <= 0 for v in sample):
        return None
    sides = []
    for v_s, b in zip(sample, batches, strict=True):
        v_bm = _within_var(b, relative)
        if v_bm is None:
            return None
        sides.append((v_bm, float(v_s), len([x for x in b if x is not None]) - 1))
    return sides


def autocorrelation(rows: Sequence[Sequence[tuple[float, float, int]]]) -> tuple[float, float]:
    """The factor by which a run's batch means vary more than its pages taken as independent would
    (1 + 2 Σ of the durations' autocorrelations: the inflation of a mean's variance), and its degrees of freedom.

    Each run's ratio ``v_batches / v_samples`` estimates it with the batch means' degrees of freedom; they are
    pooled over the runs and the rows of a figure (the load's pattern is the night's, not a page's), each
    weighed by its degrees of freedom. Not floored at 1: independent pages give about 1 either way.
    """
    pairs = [(v_bm / v_s, df) for sides in rows for v_bm, v_s, df in sides if df > 0]
    df = float(sum(d for _, d in pairs))
    if df <= 0:
        return 1.0, 0.0
    return sum(r * d for r, d in pairs) / df, df


def _sample_noise(sides, factor: float, df: float) -> tuple[float, float, float] | None:
    """(v of a baseline run, v of the judged run, degrees of freedom) from the runs' samples times the pooled
    autocorrelation factor; None (the row keeps its batch means, ``_within_noise``) when the row's own factor is
    plainly above the pooled one (its pages' load pattern is not the night's: F test at ``FACTOR_LEVEL``)."""
    from scipy.stats import f as fisher_f  # here, not with the module: see portal/stats/scalability.py

    own, own_df = autocorrelation([sides])
    if own_df <= 0 or df <= 0 or own > factor * float(fisher_f.ppf(FACTOR_LEVEL, own_df, df)):
        return None
    *base, (run_bm, run_s, run_df) = sides
    v_b = factor * statistics.fmean(v_s for _, v_s, _ in base)
    v_r = factor * run_s
    if run_df > 0 and run_bm > v_r * float(fisher_f.ppf(FACTOR_LEVEL, run_df, df)):
        return v_b, run_bm, float(run_df)  # the judged run plainly noisier than its samples say: its own
    return v_b, v_r, df


def _scaled(values: Sequence[float], relative: bool) -> list[float] | None:
    if relative:
        if any(v <= 0 for v in values):
            return None
        return [math.log(v) for v in values]
    return [float(v) for v in values]


def _too_few(cell: Cell) -> str:
    need = MIN_PAGES.get(cell.key, MIN_SAMPLES.get(cell.key, 0))
    fewest = min([*cell.baseline_pages, cell.pages])
    if fewest < need:
        return f"too few {cell.samples} to judge ({fewest} < {need} in a run)"
    return ""


def _weighted_median(pairs: list[tuple[float, float]]) -> float:
    pairs = sorted(pairs)
    half = sum(w for _, w in pairs) / 2.0
    seen = 0.0
    for value, weight in pairs:
        seen += weight
        if seen >= half:
            return value
    return pairs[-1][0]


def capped(weights: dict, share: float = MAX_SHARE) -> dict:
    """The weights with none above ``share`` of their (capped) total: the largest are cut to a common cap.

    Capping each weight at a share of the *uncapped* total is not enough: with two precise pages, cutting the
    first leaves the second above half of what remains, and a page that regressed then sets the night's drift.
    """
    values = list(weights.values())
    if not values or share * len(values) < 1 or max(values) <= share * sum(values):
        return dict(weights)
    lo, hi = 0.0, max(values)
    for _ in range(100):  # the cap c with c = share × Σ min(w, c)
        cap = (lo + hi) / 2
        if cap > share * sum(min(w, cap) for w in values):
            hi = cap
        else:
            lo = cap
    return {k: min(w, lo) for k, w in weights.items()}


def drift_net_noise(
    v_new: Sequence[float], v_base: Sequence[float], weights: Sequence[float], runs: int, tau2: float = 0.0
) -> tuple[list[float], list[float]]:
    """How much the pages' changes net of the night's drift vary, the drift estimate's own noise included.

    The pages' figures (scaled) of ``runs`` baseline runs and the judged run vary by their noise within a run
    (``v_base``, ``v_new``) plus a page's drift ``tau2``; the common drift cancels. Each run's drift is the weighted
    median (``weights``) of the pages' figures less their baseline mean, and a page's change is read net of it, as
    ``judge_cells`` does. The median of a few pages of very different precision is far from normal (of three, it is
    often the noisy page), so its variance is not taken from a formula but from ``DRAWS`` sets of normal draws
    of the whole estimate (a parametric bootstrap, the same draws every time: a verdict is reproducible). That
    counts the page's own noise, the drift estimate's, and their covariance (the page's own weight in it).

    Returns, per page, the variance of its net change and the expected variance of its net figure over the
    baseline runs (what their spread shows without a drift between nights).
    """
    import numpy as np  # here, not with the module, as SciPy (portal/stats/scalability.py)

    sd = np.sqrt(np.maximum(np.asarray([[vn, *([vb] * runs)] for vn, vb in zip(v_new, v_base, strict=True)]), 0.0))
    sd = np.sqrt(sd * sd + max(tau2, 0.0))  # (pages, 1 + runs)
    z = np.random.default_rng(DRAWS_SEED).standard_normal((DRAWS, *sd.shape)) * sd
    z = z - z[:, :, 1:].mean(axis=2, keepdims=True)  # less each page's baseline level
    w = np.asarray(weights, dtype=float)
    order = np.argsort(z, axis=1, kind="stable")
    cum = np.cumsum(w[order], axis=1)
    first = np.argmax(cum >= w.sum() / 2.0, axis=1)  # (draws, runs): the first page past half the weight
    median = np.take_along_axis(np.take_along_axis(z, order, axis=1), first[:, None, :], axis=1)
    net = z - median
    change = net[:, :, 0] - net[:, :, 1:].mean(axis=2)
    spread = net[:, :, 1:].var(axis=2, ddof=1).mean(axis=0) if runs >= 2 else np.zeros(len(w))
    # A page that is the judged run's median has no net change there and cannot be called: its change is
    # weighed by the nights where it is not (of three pages, a third or more of the draws; of many, few).
    median_page = np.take_along_axis(order, first[:, None, :], axis=1)[:, 0, 0]
    var = []
    for k in range(len(w)):
        apart = change[median_page != k, k]
        var.append(float((apart * apart).mean()) if len(apart) else float((change[:, k] ** 2).mean()))
    return var, [float(x) for x in spread]


def holm(pvalues: Sequence[float], alpha: float, weights: Sequence[float] | None = None) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected with a family-wise error rate of at most alpha.

    With ``weights`` (positive), the weighted step-down (Holm 1979): in order of ``p / w``, a hypothesis is
    rejected while ``p ≤ alpha × w / Σ w of those not yet rejected``; equal weights give the plain rule.
    """
    w = [1.0] * len(pvalues) if weights is None else [float(x) for x in weights]
    if any(x <= 0 for x in w) or len(w) != len(pvalues):
        raise ValueError("holm: one positive weight per p-value")
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i] / w[i])
    rejected = [False] * len(pvalues)
    remaining = sum(w)
    for i in order:
        if pvalues[i] > alpha * w[i] / remaining:
            break
        rejected[i] = True
        remaining -= w[i]
    return rejected


def row_weights(keys: Sequence[str], primary_share: float | None = PRIMARY_SHARE) -> list[float] | None:
    """Each row's share of the false-alarm budget: the primary figures (``PRIMARY``: the APD of the totals and
    of each page, a streaming page's time to first event) share ``primary_share`` of it, the other rows the rest,
    equally within each; None (equal weights, plain Holm) where the rows are all primary or none is, or
    ``primary_share`` is None."""
    if primary_share is None:
        return None
    if not 0 < primary_share < 1:
        raise ValueError(f"primary_share must be between 0 and 1 (exclusive), not {primary_share}")
    primary = sum(1 for key in keys if key in PRIMARY)
    rest = len(keys) - primary
    if not primary or not rest:
        return None
    return [primary_share / primary if key in PRIMARY else (1 - primary_share) / rest for key in keys]


def pooled_drift(rows: Sequence[tuple[float, float, int]]) -> tuple[float, float]:
    """The drift between nights pooled over rows, and its degrees of freedom.

    ``rows``: each row's sum of squares of its baseline runs' figures about their mean, the runs' own noise
    ``v`` (squared standard error) and the number of runs. The variance of a run's figure is ``τ² + v``; τ²
    is the restricted maximum likelihood estimate (the rows' means unknown), found by its fixed point
    ``τ² = Σ w²(n−1)(s² − v) / Σ w²(n−1)`` with ``w = 1 / (τ² + v)``: rows whose runs' own noise is small
    weigh most (the plain mean of ``s² − v`` is ruled by the noisiest rows' chance spread). Its degrees of
    freedom are the rows' ``Σ (n−1)``; ``python -m bench.verdicts`` measures the false alarms that gives.
    """
    rows = [(ss, max(v, 0.0), n) for ss, v, n in rows if n >= 2]
    if not rows:
        return 0.0, 1.0
    total_df = float(sum(n - 1 for _, _, n in rows))
    t2 = max(0.0, sum(ss - (n - 1) * v for ss, v, n in rows) / total_df)  # unweighted start
    for _ in range(100):
        weights = [(n - 1) / (t2 + v) ** 2 if t2 + v > 0 else 0.0 for _, v, n in rows]
        if not any(weights):
            break
        new = sum(w * (ss / (n - 1) - v) for w, (ss, v, n) in zip(weights, rows, strict=True)) / sum(weights)
        new = max(0.0, new)
        if abs(new - t2) <= 1e-12 + 1e-9 * t2:
            t2 = new
            break
        t2 = new
    return t2, total_df


def _change_pct(base: float, value: float) -> float | None:
    if base == 0:
        return None if value == 0 else math.inf
    return (value - base) / abs(base) * 100.0


def judge_cells(
    cells: Sequence[Cell],
    *,
    tolerance_pct: float,
    false_alarm: float = FALSE_ALARM,
    primary_share: float | None = PRIMARY_SHARE,
) -> Family:
    from scipy.stats import t as student_t  # here, not with the module: see portal/stats/scalability.py

    n = min((len(c.baseline) for c in cells), default=0)
    prepared = []  # (index, cell, scaled baseline, scaled value, v_base, v_run)
    out: list[Judged] = [Judged("none") for _ in cells]
    for i, cell in enumerate(cells):
        relative = cell.key in RELATIVE
        base_mean = statistics.fmean(cell.baseline) if cell.baseline else None
        out[i].change_pct = None if base_mean is None else _change_pct(base_mean, cell.value)
        if not cell.baseline:
            out[i].note = "no baseline figure"
            continue
        if why := _too_few(cell):
            out[i].note = why
            continue
        scaled = _scaled([*cell.baseline, cell.value], relative)
        if scaled is None:
            out[i].note = "a run without a value"
            continue
        v_base = [v for b in cell.baseline_batches if (v := _within_var(b, relative)) is not None]
        v_run = _within_var(cell.batches, relative)
        if cell.baseline_v is not None:
            v_base, v_run = [v for v in cell.baseline_v if v is not None], cell.v
        if not v_base and v_run is None and len(cell.baseline) < 2:
            out[i].note = "no batches and a single baseline run: nothing to estimate the noise from"
            continue
        v_b, v_r, df_v = _within_noise(cell, relative)
        prepared.append((i, cell, scaled[:-1], scaled[-1], v_b, v_r, df_v))

    # Where every run keeps its samples' variance (a mean's), the noise within a run is that variance / n, known
    # from all the pages rather than 10 batch means, times the autocorrelation factor of the batch means
    # pooled over the figure's rows and runs (9 degrees of freedom per row and run instead of 9 per run).
    sample_sides = {k: s for k, (_, c, *_) in enumerate(prepared) if (s := _sample_sides(c, c.key in RELATIVE))}
    for key in SAMPLE_NOISE:
        rows = [k for k in sample_sides if prepared[k][1].key == key]
        factor, df_factor = autocorrelation([sample_sides[k] for k in rows])
        for k in rows:
            if (noise_k := _sample_noise(sample_sides[k], factor, df_factor)) is not None:
                prepared[k] = (*prepared[k][:4], *noise_k)
                out[prepared[k][0]].factor = factor

    # A page's change is read against the night's common drift (the median change of the figure over the
    # pages, robust to the one page that really moved): a night 4 % slower everywhere is not a page's
    # regression, and a page 20 % slower stands out of a 4 % night. The totals keep the drift in, so a
    # night slower everywhere is the totals' to tell, against the spread of the drift between nights.
    adjusted = {}  # index in prepared → (baseline, value) with the common drift taken out
    drift_rows: dict[str, dict[int, float]] = {}  # figure → {index in prepared: its weight in the night's drift}
    for key in RELATIVE:
        rows = [k for k, (_, c, base, *_) in enumerate(prepared) if c.key == key and c.page is not None]
        n_runs = min((len(prepared[k][2]) for k in rows), default=0)
        if len(rows) < MIN_PAGES_FOR_DRIFT or n_runs < 1:
            continue
        levels = {k: statistics.fmean(prepared[k][2]) for k in rows}
        # Weighted by each page's precision (a 46-page APD says little about the night), capped so that
        # no page outweighs the others: the median stays on the pages that did not move.
        weights = capped({k: 1.0 / (prepared[k][4] + prepared[k][5] + WEIGHT_FLOOR) for k in rows})
        common_new = _weighted_median([(prepared[k][3] - levels[k], weights[k]) for k in rows])
        common_base = [
            _weighted_median([(prepared[k][2][j] - levels[k], weights[k]) for k in rows]) for j in range(n_runs)
        ]
        for k in rows:
            base = [prepared[k][2][j] - common_base[j] for j in range(n_runs)]
            adjusted[k] = (base, prepared[k][3] - common_new)
        drift_rows[key] = weights

    def groups(k: int, c: Cell) -> tuple[str, bool]:
        return c.key, k in adjusted

    # The drift between nights beyond each run's own noise, per figure (and apart for drift-adjusted pages),
    # pooled over its rows, each weighted by its precision (a restricted maximum likelihood): a 46-page row
    # whose three runs differ by chance says little about the drift, a 4,000-page row much.
    # A drift-adjusted page's baseline runs spread by their own noise within a run net of the night's drift (the
    # drift estimate's noise in, the page's own share of it out: ``median_net_var``), beyond which is the drift.
    # A drift-adjusted page's net figures spread by the noise within the runs and by the drift estimate's
    # (``drift_net_noise``), and a page's drift between nights shows in them scaled by ``unit`` (their spread
    # for a drift of 1): the drift is what their spread has beyond the first, divided by the second.
    def simulated(key: str, tau2: float = 0.0, within: bool = True) -> dict[int, tuple[float, float]]:
        rows = list(drift_rows[key])
        zero = [0.0] * len(rows)
        change, spread = drift_net_noise(
            [prepared[j][5] for j in rows] if within else zero,
            [prepared[j][4] for j in rows] if within else zero,
            [drift_rows[key][j] for j in rows],
            len(prepared[rows[0]][2]),
            tau2,
        )
        return {j: (change[m], spread[m]) for m, j in enumerate(rows)}

    net_within = {key: simulated(key) for key in drift_rows}
    unit = {key: simulated(key, 1.0, within=False) for key in drift_rows}
    spreads: dict[tuple, list[tuple[float, float, int]]] = {}  # group → [(sum of squares, v, runs)]
    for k, (_, c, base, _, v_b, *_) in enumerate(prepared):
        scale = 1.0
        if k in adjusted:
            base = adjusted[k][0]
            scale = max(unit[c.key][k][1], 1e-6)
            v_b = net_within[c.key][k][1] / scale
        if len(base) >= 2:
            ss = statistics.variance(base) * (len(base) - 1) / scale
            spreads.setdefault(groups(k, c), []).append((ss, v_b, len(base)))
    tau2, df_tau = {}, {}
    for g, rows in spreads.items():
        tau2[g], df_tau[g] = pooled_drift(rows)

    net_whole = {key: simulated(key, tau2.get((key, True), 0.0)) for key in drift_rows}

    pvalues, directions = [], []
    for k, (i, c, base, value, v_b, v_r, df_v) in enumerate(prepared):
        g = groups(k, c)
        n_b = len(base)
        t2 = tau2.get(g, 0.0)
        # Three parts, each with its own degrees of freedom (Welch–Satterthwaite): the drift between nights,
        # the judged run's noise within it and the baseline runs' (batch means: BATCHES − 1 each).
        parts = [(t2 * (1 + 1 / n_b), df_tau.get(g, 1.0)), (v_r + v_b / n_b, df_v)]
        if k in adjusted:
            base, value = adjusted[k]
            # Net of the night's drift, whose estimate has noise of its own (each part as its share of it).
            within, whole = net_within[c.key][k][0], net_whole[c.key][k][0]
            parts = [(max(whole - within, 0.0), df_tau.get(g, 1.0)), (within, df_v)]
        var = sum(v for v, _ in parts)
        denominator = sum(v * v / d for v, d in parts if v > 0)
        dof = max(1.0, var * var / denominator) if denominator > 0 else BATCH_DF
        d = value - statistics.fmean(base)
        if var <= 0 and d == 0:
            out[i].note = "no variation and no change: nothing to test"
            continue
        t = abs(d) / math.sqrt(var) if var > 0 else math.inf
        # One-sided, in the direction the row moved: the chance of a move at least this large that way on a
        # night with nothing changed. Regressions and improvements are two families of their own, each held at
        # the false-alarm rate (a night called regressed by chance at most FALSE_ALARM).
        p = min(1.0, float(student_t.sf(t, dof)))
        half = float(student_t.ppf(0.975, dof)) * math.sqrt(max(var, 0.0))
        out[i].noise_pct = (math.expm1(half) * 100.0) if c.key in RELATIVE else half
        out[i].p = p
        out[i].dof, out[i].tau2, out[i].sd, out[i].t = dof, t2, math.sqrt(max(var, 0.0)), t
        worse = (d > 0) == c.lower_is_better
        pvalues.append((k, p))
        directions.append(worse)

    # The APD and time-to-first-event rows are the primary figures: PRIMARY_SHARE of the budget (weighted Holm).
    weights = row_weights([prepared[k][1].key for k, _ in pvalues], primary_share)
    significant = set()
    for worse in (True, False):
        # Holm over all the rows tested; a row that moved the other way is not rejected in this direction.
        family = [p if w == worse else 1.0 for (_, p), w in zip(pvalues, directions, strict=True)]
        moved = holm(family, false_alarm, weights)
        significant |= {k for (k, _), rejected in zip(pvalues, moved, strict=True) if rejected}
    for k, (i, c, *_) in enumerate(prepared):
        if out[i].p is None:
            out[i].verdict = "within_noise"
            continue
        change = c.shown_change_pct if c.shown_change_pct is not None else out[i].change_pct
        if k in adjusted:  # the change that was tested: net of the night's drift (a ratio of geometric means)
            net_base, net_value = adjusted[k]
            change = out[i].net_change_pct = math.expm1(net_value - statistics.fmean(net_base)) * 100.0
        beyond = change is not None and abs(change) > tolerance_pct
        if k in significant and beyond:
            worse = (change > 0) == c.lower_is_better
            out[i].verdict = "regressed" if worse else "improved"
        else:
            out[i].verdict = "within_noise"

    judged = len(prepared)
    provisional = 0 < n < PROVISIONAL_BELOW
    reason = ""
    if n == 1:
        reason = (
            "Only one baseline run: the spread between nights is unknown, so only the noise within the runs is "
            f"weighed; it becomes a full verdict from {PROVISIONAL_BELOW} baseline runs."
        )
    elif provisional:
        reason = (
            f"Only {n} baseline runs: their spread is known poorly; it becomes a full verdict from "
            f"{PROVISIONAL_BELOW} baseline runs."
        )
    method = (
        f"Each of the {judged} figures with enough pages was weighed against the spread between the "
        f"{n} baseline run{'s' if n != 1 else ''}' own figures plus each run's noise within it"
        f"{DRIFT_OUT if adjusted else ''}; Holm's correction "
        f"over all {judged}{WEIGHTED.format(share=primary_share * 100) if weights else ''} keeps the chance of "
        "a false alarm on a night with nothing changed at "
        f"{false_alarm * 100:g} %, and a figure moved only beyond the {tolerance_pct:g} % tolerance"
        f"{TOLERANCE_NET if adjusted else ''}."
    )
    return Family(out, n, judged, provisional, reason, method)
