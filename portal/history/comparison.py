"""The comparison of two runs or trial sets: before vs after, per page and in total.

A comparison answers the stakeholder's question "did it get better, and is that more
than luck?" for each figure people quote (APD, p95, pages/s, error rate, capacity and
any external measurement), with the speed-up (11.8 s → 4.0 s = 2.95×), the reduction
(28 → 21 ms = 25 % less) and a verdict: better, worse or within noise.

Where the noise comes from depends on what is compared, and `compare_sides` chooses:

* **trials** (≥ 2 counting runs on each side): each run's summary figure is one
  sample, so the verdict weighs the difference against the spread *between* runs
  (Welch's interval in `analysis.compare`). This is the honest test: a rerun of the
  same configuration differs by about that much.
* **batches** (one run on either side): a single run has no spread between runs, so
  its measurement window is cut into consecutive batches and each batch's figure is a
  sample (`analysis.batch_means`). Samples must be like for like, so when one side has
  a single run *both* sides use batches (a side of several runs pools the batches of
  all of them). The verdict then rests on the variation within the runs, which says
  nothing about how much a rerun would differ; `Report.basis` says so.

Runs whose validity is in doubt (`Run.counts` is False: cancelled, partial, error,
saturated generator) are shown on their side but left out of the samples, unless a
user included them anyway.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from django.db.models import Count, Max, Q
from django.urls import reverse
from django.utils import timezone

from portal.runs import columns, storage
from portal.runs.analysis import cut_windows, scalability_model
from portal.runs.models import PageInterval, Run, RunFigures, ShardInterval
from workers.engine.histogram import Histogram

from . import analysis, scalability
from .models import ExternalMeasurement, TrialSet

BATCHES = 10
"""Batches per run in batch mode: 10 to 30 is the usual compromise (see analysis.batch_means)."""

PICKER_LIMIT = 200
"""At most this many runs (and as many trial sets) in the picker, newest first."""


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

# The unit analysis.compare writes into its basis ("±3 pages/s" reads better than "±3 /s").
_BASIS_UNIT = {"/s": "pages/s"}


# --------------------------------------------------------------------------------------
# Sides
# --------------------------------------------------------------------------------------


@dataclass
class Side:
    """One side of a comparison: the runs that count, the doubtful ones left out, and measurements."""

    label: str  # "Run #12", "Baseline: Add index (3 trials)"
    runs: list[Run]  # runs that count (run.counts True), oldest first
    excluded: list[Run]  # doubtful runs left out (show them with run.doubts)
    measurements: list[ExternalMeasurement] = field(default_factory=list)
    url: str = ""  # the run's or trial set's page, when the side is one of them

    @property
    def all_runs(self) -> list[Run]:
        return sorted([*self.runs, *self.excluded], key=_run_order)


def _run_order(run: Run):
    return (run.created_at or timezone.now(), run.id or 0)


def _measurements_for(runs: list[Run]) -> list[ExternalMeasurement]:
    """Measurements attached to the runs, and those taken under the same configuration.

    "The same configuration" is the tuning change the runs ran under (None: the
    environment's initial configuration), on the runs' environment: a backup timed
    while change #3 was in effect describes the configuration those runs measured.
    """
    if not runs:
        return []
    query = Q(run__in=[r.id for r in runs])
    by_env: dict[int, set] = {}
    for run in runs:
        if run.environment_id is not None:
            by_env.setdefault(run.environment_id, set()).add(run.tuning_change_id)
    for environment_id, changes in by_env.items():
        same = Q(tuning_change_id__in=[c for c in changes if c is not None])
        if None in changes:
            same |= Q(tuning_change__isnull=True)
        query |= Q(environment_id=environment_id) & same
    return list(ExternalMeasurement.objects.filter(query).order_by("measured_at", "id"))


def side_for_runs(label: str, runs: Iterable[Run], measurements=()) -> Side:
    """A side of any runs: those that count and the doubtful ones apart, oldest first."""
    unique = {run.id: run for run in runs}
    ordered = sorted(unique.values(), key=_run_order)
    return Side(
        label=label,
        runs=[r for r in ordered if r.counts],
        excluded=[r for r in ordered if not r.counts],
        measurements=list(measurements),
    )


def side_for_run(run: Run) -> Side:
    side = side_for_runs(f"Run #{run.number}", [run], _measurements_for([run]))
    side.url = run.get_absolute_url()
    return side


def find_side(*, project, runs, trial_sets, code) -> Side | None:
    """The run or trial set of ``project`` with ``code`` among the caller's ``runs`` and ``trial_sets``
    (querysets already cut to the caller's teams), as a side; None when it is neither."""
    run = runs.filter(project=project, code=code).select_related("tuning_change").first()
    if run is not None:
        return side_for_run(run)
    trial_set = trial_sets.filter(project=project, code=code).first()
    return side_for_trialset(trial_set) if trial_set is not None else None


def report_dict(report: Report) -> dict:
    """A comparison as data: the page's rows, verdicts, basis and headline (for the API)."""

    def row(r: Row) -> dict:
        c = r.comparison
        return {
            "page": r.page,
            "figure": r.figure,
            "unit": r.unit,
            "before": r._before,
            "after": r._after,
            "verdict": r.verdict,
            "note": r.note,
            "difference": c.difference if c else None,
            "speedup": c.speedup if c else None,
            "reduction_pct": c.reduction_pct if c else None,
            "noise": getattr(c, "noise", None) if c else None,
            "method": c.method if c else None,
            "n_before": c.n_before if c else None,
            "n_after": c.n_after if c else None,
        }

    def side(s: Side) -> dict:
        return {
            "label": s.label,
            "runs": [str(r.code) for r in s.runs],
            "excluded": [{"run": str(r.code), "doubts": r.doubts} for r in s.excluded],
        }

    return {
        "title": report.title,
        "headline": report.headline,
        "verdict": report.verdict,
        "basis": report.basis,
        "samples": report.samples,
        "problems": list(report.problems),
        "before": side(report.before),
        "after": side(report.after),
        "total": [row(r) for r in report.total],
        "pages": [{"page": page, "rows": [row(r) for r in rows]} for page, rows in report.pages],
        "measurements": [row(r) for r in report.measurements],
    }


def side_for_trialset(trial_set: TrialSet) -> Side:
    runs = list(trial_set.runs.select_related("tuning_change").order_by("number"))
    n = len(runs)
    name = trial_set.label or f"Trial set of {trial_set.plan_name}"
    side = side_for_runs(f"{name} ({n} trial{'' if n == 1 else 's'})", runs, _measurements_for(runs))
    side.url = trial_set.get_absolute_url()
    return side


# --------------------------------------------------------------------------------------
# Rows and the report
# --------------------------------------------------------------------------------------

MISSING = "—"


def _scale(unit: str, *values: float | None) -> str:
    """Milliseconds read as seconds when a figure of the row reaches a second (as analysis does)."""
    present = [abs(v) for v in values if v is not None]
    return "s" if unit == "ms" and present and max(present) >= 1000 else unit


def format_figure(value: float | None, unit: str, *, scale: str | None = None, spread: bool = False) -> str:
    """analysis.format_value, plus "12.3/s" for rates and thousands separators ("2,490 s")."""
    if value is None:
        return MISSING
    if unit == "ms":
        return analysis.format_value(value, unit, scale=scale, spread=spread)
    if unit == "/s":
        return analysis.format_value(value, "", spread=spread) + "/s"
    if abs(value) >= 1000:
        return f"{value:,.0f} {unit}".rstrip()
    return analysis.format_value(value, unit, spread=spread)


def _pct(value: float) -> str:
    value = abs(value)
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


@dataclass
class Row:
    """One figure of one page (or of the total), before vs after."""

    page: str | None  # None = all pages (the total)
    figure: str  # "APD", "p95", "pages/s", "error rate", "capacity", or a measurement name
    unit: str  # "ms", "/s", "%", "users", or the measurement's unit
    comparison: analysis.Comparison | None  # None when a side has no value (`note` says why)
    note: str = ""
    # The plain means, kept when one side has no value (a page measured on one side only).
    before_value: float | None = None
    after_value: float | None = None

    @property
    def label(self) -> str:
        return self.page if self.page is not None else "All pages"

    @property
    def _before(self) -> float | None:
        return self.comparison.before_mean if self.comparison else self.before_value

    @property
    def _after(self) -> float | None:
        return self.comparison.after_mean if self.comparison else self.after_value

    @property
    def lower_is_better(self) -> bool:
        if self.comparison:
            return self.comparison.lower_is_better
        return self.unit not in ("/s", "users")

    @property
    def before_text(self) -> str:
        return format_figure(self._before, self.unit, scale=_scale(self.unit, self._before, self._after))

    @property
    def after_text(self) -> str:
        return format_figure(self._after, self.unit, scale=_scale(self.unit, self._before, self._after))

    @property
    def speedup_text(self) -> str:
        """2.95×: before/after for times and sizes, after/before for rates (above 1 is better)."""
        c = self.comparison
        if c is None or c.speedup is None:
            return MISSING
        x = c.speedup
        return f"{x:.2f}×" if x < 10 else f"{x:.1f}×" if x < 100 else f"{x:,.0f}×"

    @property
    def change_text(self) -> str:
        """ "25 % less" / "12 % more" for times and sizes; "+20 %" / "−10 %" for rates and capacity."""
        c = self.comparison
        if c is None:
            return MISSING
        if c.difference == 0:
            return "no change"
        if c.reduction_pct is None:  # before was 0
            return f"up from {format_figure(0, self.unit)}" if c.difference > 0 else MISSING
        if c.lower_is_better:
            return f"{_pct(c.reduction_pct)} % {'less' if c.reduction_pct > 0 else 'more'}"
        return f"{'+' if c.reduction_pct > 0 else '−'}{_pct(c.reduction_pct)} %"

    @property
    def noise_text(self) -> str:
        """The ± half-width of the interval, when there is one."""
        c = self.comparison
        if c is None or c.noise is None:
            return ""
        scale = _scale(self.unit, c.before_mean, c.after_mean)
        return "±" + format_figure(c.noise, self.unit, scale=scale, spread=True)

    @property
    def verdict(self) -> str:
        return self.comparison.verdict if self.comparison else ""

    @property
    def verdict_class(self) -> str:
        """CSS: verdict-better, verdict-worse, verdict-noise, verdict-none."""
        return {
            analysis.BETTER: "verdict-better",
            analysis.WORSE: "verdict-worse",
            analysis.WITHIN_NOISE: "verdict-noise",
        }.get(self.verdict, "verdict-none")

    @property
    def basis(self) -> str:
        return self.comparison.basis if self.comparison else self.note


@dataclass
class Report:
    before: Side
    after: Side
    total: list[Row]  # APD, p95, pages/s, error rate (+ capacity when both sides are step runs)
    pages: list[tuple[str, list[Row]]]  # per page label, same figures except capacity
    measurements: list[Row]  # external measurements with the same name on both sides
    headline: str  # analysis.headline for APD of the total
    basis: str  # plain words: what the verdicts rest on
    problems: list[str]
    samples: str = ""  # "trials", "batches", or "" when there is nothing to compare
    title: str = ""
    # The scalability models (USL) of both sides' steps runs and what changed (`models_compared`).
    models: dict | None = None
    servers: list[Row] = field(default_factory=list)  # server series (portal.metrics), one sample per run

    @property
    def apd(self) -> Row | None:
        return next((r for r in self.total if r.figure == "APD"), None)

    @property
    def verdict(self) -> str:
        """The verdict of the total APD ("" when there is none): the report's one-word answer."""
        return self.apd.verdict if self.apd else ""

    @property
    def capacity(self) -> Row | None:
        return next((r for r in self.total if r.figure == CAPACITY.name), None)

    @property
    def rows(self) -> list[Row]:
        """Every row with a verdict, for counting ("3 better, 1 worse")."""
        return [*self.total, *(r for _, rows in self.pages for r in rows), *self.measurements, *self.servers]


# --------------------------------------------------------------------------------------
# Samples: one figure per trial, or per batch of a run's measurement window
# --------------------------------------------------------------------------------------


def _summary_value(run: Run, page: str | None, key: str) -> float | None:
    summary = run.summary or {}
    if page is None:
        return (summary.get("totals") or {}).get(key)
    for p in summary.get("pages") or []:
        if p.get("label") == page:
            return p.get(key)
    return None


def _summary_pages(run: Run) -> set[str]:
    return {p["label"] for p in (run.summary or {}).get("pages") or [] if p.get("label") is not None}


def _window_seconds(run: Run) -> list[int]:
    """The seconds of the run's measurement windows, cut to what ran, in order."""
    last = [
        PageInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"],
        ShardInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"],
    ]
    last = [s for s in last if s is not None]
    if not last:
        return []
    windows = cut_windows(run, max(last))
    return sorted({s for w in windows for s in range(w["start"], w["end"])})


def batch_bounds(n: int, batches: int = BATCHES) -> list[int]:
    """Where n consecutive seconds are cut into batches, as analysis.batch_means cuts them.

    With fewer than 2 × `batches` seconds, fewer batches (n // 2, at least 2); one
    second gives one batch. Batch sizes differ by at most one.
    """
    if n <= 0:
        return []
    if n < 2:
        return [0, n]
    k = batches if n >= 2 * batches else max(2, n // 2)
    return [i * n // k for i in range(k + 1)]


@dataclass
class _BatchAcc:
    hist: Histogram = field(default_factory=Histogram)
    pages: int = 0
    errors: int = 0
    apd_sum: float = 0.0  # sum of the per-second APDs (ms) of the batch's seconds with a page
    apd_seconds: int = 0


def run_batches(run: Run, batches: int = BATCHES) -> dict[str | None, dict[str, list[float | None]]]:
    """A run's batch figures: stored at finalize for a finished run, else computed (``compute_batches``)."""
    if batches == BATCHES and not run.is_active:
        stored = RunFigures.objects.filter(run=run).values_list("batches", flat=True).first()
        if stored is not None:
            return {key: figures for key, figures in stored}
    return compute_batches(run, batches)


def compute_batches(run: Run, batches: int = BATCHES) -> dict[str | None, dict[str, list[float | None]]]:
    """The figures of each batch of a run's measurement window, in total (key None) and per page.

    Per batch: APD = the mean of the per-second APDs (each second's merged histograms;
    the method of batch means), p95 from the batch's merged histogram (percentiles
    are never averaged), pages/s = pages / seconds of the batch (a second without a
    page is a real 0), error rate = errors / pages. A figure without pages is None.
    Rows are read in order of seconds, so memory stays bounded for a soak of days.
    """
    sampler = BatchSampler(run, batches)
    if not sampler.seconds:
        return {}
    rows = (
        PageInterval.objects.filter(run=run, second__gte=sampler.seconds[0], second__lte=sampler.seconds[-1])
        .order_by("second")
        .values_list("second", "label", "pages", "errors", "hist_bin", "hist")
    )
    for second, label, pages, errors, hist_bin, hist in rows.iterator(chunk_size=2000):
        if second in sampler.position:
            sampler.add(second, label, pages, errors, storage.histogram(hist_bin, hist))
    return sampler.result()


class BatchSampler:
    """``compute_batches`` fed one row at a time, in order of seconds (finalize feeds it from its own pass)."""

    def __init__(self, run: Run, batches: int = BATCHES):
        self.seconds = _window_seconds(run)
        self.bounds = batch_bounds(len(self.seconds), batches)
        self.position = {s: i for i, s in enumerate(self.seconds)}
        self.accs: dict[str | None, list[_BatchAcc]] = {}
        self.current: int | None = None
        self.per_second: dict[str | None, list[int]] = {}  # key → [sum µs, count] of the current second
        self.batch: int | None = None  # the batch add_columns is filling, its histograms in groups
        self.groups = columns.Groups()

    def _flush(self) -> None:
        if self.current is None:
            return
        b = bisect.bisect_right(self.bounds, self.position[self.current]) - 1
        for key, (total_us, count) in self.per_second.items():
            if count:
                acc = self.accs[key][b]
                acc.apd_sum += total_us / count / 1000.0
                acc.apd_seconds += 1
        self.per_second.clear()

    def add_row(self, row) -> None:
        """A decoded row (portal.runs.analysis): one outside the window is skipped."""
        if row.second in self.position:
            self.add(row.second, row.label, row.pages, row.errors, row.hist)

    def add(self, second: int, label: str, pages: int, errors: int, h: Histogram) -> None:
        if second != self.current:
            self._flush()
            self.current = second
        b = bisect.bisect_right(self.bounds, self.position[second]) - 1
        k = len(self.bounds) - 1
        for key in (None, label):
            acc = self.accs.setdefault(key, [_BatchAcc() for _ in range(k)])[b]
            acc.hist.merge(h)
            acc.pages += pages
            acc.errors += errors
            sums = self.per_second.setdefault(key, [0, 0])
            sums[0] += h.sum
            sums[1] += h.count

    def cuts(self) -> list[int]:
        """The seconds where batches begin: a chunk of rows for ``add_columns`` never spans two batches."""
        return [self.seconds[i] for i in self.bounds[:-1]]

    def add_columns(self, lo: int, hi: int, c, names: list[str]) -> None:
        """The rows of seconds [lo, hi) as columns (``portal.runs.columns.Chunk``; ``names``: label by id),
        the same as ``add`` for each row: all in one batch, or none in the window."""
        if not c.size or int(c.second[0]) not in self.position:
            return
        b = bisect.bisect_right(self.bounds, self.position[int(c.second[0])]) - 1
        k = len(self.bounds) - 1
        if b != self.batch:
            self.close()
            self.batch = b
        # Keys in the order ``add`` meets them: the total, then each page at its first row.
        _, first = np.unique(c.label, return_index=True)
        order = c.label[np.sort(first)].tolist()
        for key in [None, *(names[i] for i in order)]:
            self.accs.setdefault(key, [_BatchAcc() for _ in range(k)])
        labels = len(names)
        pages = np.bincount(c.label, weights=c.pages, minlength=labels).astype(np.int64)
        errors = np.bincount(c.label, weights=c.errors, minlength=labels).astype(np.int64)
        for i in order:
            acc = self.accs[names[i]][b]
            acc.pages += int(pages[i])
            acc.errors += int(errors[i])
        total = self.accs[None][b]
        total.pages += int(pages.sum())
        total.errors += int(errors.sum())
        self.groups.add([(None, b)], np.zeros(c.size, np.int64), c.hist)
        keys, local = columns.local_keys(c.label)
        self.groups.add([(names[i], b) for i in keys], local, c.hist)
        # APD per second per key, added second by second (as ``_flush`` does, for the same sums).
        span = hi - lo
        cell = (c.second - lo) * labels + c.label
        us = np.bincount(cell, weights=c.hist.sum, minlength=span * labels).astype(np.int64).reshape(span, labels)
        n = np.bincount(cell, weights=c.hist.n, minlength=span * labels).astype(np.int64).reshape(span, labels)
        for key, key_us, key_n in [
            (None, us.sum(axis=1), n.sum(axis=1)),
            *((names[i], us[:, i], n[:, i]) for i in order),
        ]:
            acc = self.accs[key][b]
            for total_us, count in zip(key_us.tolist(), key_n.tolist(), strict=True):
                if count:
                    acc.apd_sum += total_us / count / 1000.0
                    acc.apd_seconds += 1

    def close(self) -> None:
        """Ends the batch ``add_columns`` was filling: its merged histograms become Histograms."""
        if self.batch is None:
            return
        for key, b in list(self.groups.open):
            self.accs[key][b].hist = self.groups.close((key, b))
        self.batch = None

    def result(self) -> dict[str | None, dict[str, list[float | None]]]:
        self._flush()
        self.close()
        self.current = None
        out: dict[str | None, dict[str, list[float | None]]] = {}
        for key, batch_accs in self.accs.items():
            figures: dict[str, list[float | None]] = {f.key: [] for f in FIGURES}
            for i, acc in enumerate(batch_accs):
                length = self.bounds[i + 1] - self.bounds[i]
                figures["apd_ms"].append(acc.apd_sum / acc.apd_seconds if acc.apd_seconds else None)
                figures["p95_ms"].append(acc.hist.percentile(95) / 1000.0 if acc.hist.count else None)
                figures["pages_per_s"].append(acc.pages / length)
                figures["error_rate_pct"].append(100.0 * acc.errors / acc.pages if acc.pages else None)
            out[key] = figures
        return out


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
    windows = (run.summary or {}).get("windows") or []
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
            )
        )
    limits = snapshot.get("thresholds") or {}
    thresholds = analysis.Thresholds(
        max_apd_ms=limits.get("apd_ms"),
        max_p95_ms=limits.get("p95_ms"),
        max_error_rate_pct=limits.get("error_rate_pct"),
        min_pages_per_s=limits.get("min_pages_per_s"),
    )
    try:
        return analysis.capacity(levels, thresholds)
    except ValueError:  # two levels of the same users: the capacity is not defined
        return None


# --------------------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------------------


def _compare(before: list[float], after: list[float], fig: Figure, samples: str) -> analysis.Comparison:
    return analysis.compare(
        before,
        after,
        lower_is_better=fig.lower_is_better,
        unit=_BASIS_UNIT.get(fig.unit, fig.unit),
        samples=samples,
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _row(page, fig: Figure, before: list[float], after: list[float], samples: str, missing: tuple[str, str]) -> Row:
    """A row, or a row without comparison whose note names the side without values."""
    if not before or not after:
        reasons = [why for values, why in zip((before, after), missing, strict=True) if not values and why]
        side = "before" if not before else "after"
        note = reasons[0] if reasons else f"no value on the {side} side"
        return Row(page, fig.name, fig.unit, None, note=note, **_means(before, after))
    row = Row(page, fig.name, fig.unit, _compare(before, after, fig, samples))
    if fig.key == "error_rate_pct" and not any(before) and not any(after):
        row.note = "no errors on either side"
    return row


def _means(before: list[float], after: list[float]) -> dict:
    return {"before_value": _mean(before), "after_value": _mean(after)}


class _Sampler:
    """The samples of each figure of each side, by trial or by batch (see the module's docstring)."""

    def __init__(self, before: Side, after: Side):
        self.before, self.after = before, after
        if not before.runs or not after.runs:
            self.samples = ""
        elif len(before.runs) >= 2 and len(after.runs) >= 2:
            self.samples = "trials"
        else:
            self.samples = "batches"
        self._batches: dict[int, dict] = {}

    def batches(self, run: Run) -> dict:
        if run.id not in self._batches:
            self._batches[run.id] = run_batches(run)
        return self._batches[run.id]

    def pages(self, side: Side) -> set[str]:
        if self.samples == "batches":
            return {key for run in side.runs for key in self.batches(run) if key is not None}
        return {label for run in side.runs for label in _summary_pages(run)}

    def values(self, side: Side, page: str | None, fig: Figure) -> list[float]:
        if self.samples == "trials":
            values = [_summary_value(run, page, fig.key) for run in side.runs]
        else:
            values = [v for run in side.runs for v in (self.batches(run).get(page) or {}).get(fig.key, [])]
        return [float(v) for v in values if v is not None]


def _no_value(side: str, fig: Figure) -> str:
    if fig.key in ("apd_ms", "p95_ms"):
        return f"no page succeeded on the {side} side"
    return f"no value on the {side} side"


def _missing_page(page: str, pages_b: set[str], pages_a: set[str], fig: Figure) -> tuple[str, str]:
    return tuple(
        _no_value(name, fig) if page in pages else f"not measured on the {name} side"
        for name, pages in (("before", pages_b), ("after", pages_a))
    )


def _capacity_row(before: Side, after: Side, samples: str) -> Row | None:
    """Capacity before and after, when both sides have step runs; None otherwise (row omitted)."""
    caps_b = [c for c in (run_capacity(r) for r in before.runs) if c is not None]
    caps_a = [c for c in (run_capacity(r) for r in after.runs) if c is not None]
    if not caps_b or not caps_a:
        return None
    # A run whose lowest level already broke a threshold holds fewer users than any level: 0.
    values_b = [float(c.capacity_users or 0) for c in caps_b]
    values_a = [float(c.capacity_users or 0) for c in caps_a]
    # A run has one capacity, whatever the other figures' samples: trials, or else runs.
    kind = "trials" if samples == "trials" else "runs"
    row = Row(None, CAPACITY.name, CAPACITY.unit, _compare(values_b, values_a, CAPACITY, kind))
    notes = []
    for name, caps in (("before", caps_b), ("after", caps_a)):
        below = sum(1 for c in caps if c.capacity_users is None)
        if below:
            notes.append(f"the lowest level broke a threshold in {below} run{'s' if below > 1 else ''} {name} (0)")
    knees_b = sorted({c.knee_users for c in caps_b if c.knee_users is not None})
    knees_a = sorted({c.knee_users for c in caps_a if c.knee_users is not None})
    if knees_b or knees_a:
        notes.append(f"the knee (throughput stops growing): {_knees(knees_b)} before, {_knees(knees_a)} after")
    row.note = "; ".join(notes)
    return row


def _model_levels(runs: list[Run]) -> list[dict]:
    """The measured levels of a side's steps runs (users, pages/s, APD), pooled: trials of one plan add up."""
    levels = []
    for run in runs:
        cap = (run.summary or {}).get("capacity") or {}
        levels.extend(lv for lv in cap.get("levels") or [] if lv.get("pages_per_s") is not None)
    return levels


def models_compared(before: Side, after: Side) -> dict | None:
    """σ, κ and the peak before and after, and what the change did in words; None without steps runs.

    Each side's model is fitted on the levels of all its counting steps runs together,
    so a trial set of three runs gives one model with three points per level.
    """
    levels_b, levels_a = _model_levels(before.runs), _model_levels(after.runs)
    if not levels_b or not levels_a:
        return None
    model_b, model_a = scalability_model(levels_b), scalability_model(levels_a)
    # A side that never saturated reads as σ = κ = 0 (linear); two such sides say nothing.
    comparable = all(m["fitted"] or m["linear"] for m in (model_b, model_a)) and (
        model_b["fitted"] or model_a["fitted"]
    )
    if comparable:
        sentence = scalability.change_in_words(model_b, model_a)
        peak_b, peak_a = model_b["peak_pages_per_s"], model_a["peak_pages_per_s"]
        if peak_b and peak_a:
            sentence += f" The modelled peak went from {peak_b:,.0f} to {peak_a:,.0f} pages/s."
    else:
        reasons = [f"{name}: {m['reason']}" for name, m in (("before", model_b), ("after", model_a)) if not m["fitted"]]
        sentence = "No models to compare (" + "; ".join(reasons) + ")"
    for m in (model_b, model_a):
        m.pop("curve", None)  # the comparison shows figures, not charts
    return {
        "before": model_b,
        "after": model_a,
        "sentence": sentence,
        "comparable": comparable,
        "before_after": [model_b, model_a],
    }


def _knees(users: list[int]) -> str:
    return f"{', '.join(map(str, users))} users" if users else "none"


def _measurement_rows(before: Side, after: Side) -> list[Row]:
    """One row per measurement name present on both sides; each measurement is a sample."""
    by_b: dict[str, list[ExternalMeasurement]] = {}
    by_a: dict[str, list[ExternalMeasurement]] = {}
    for side, into in ((before, by_b), (after, by_a)):
        for m in side.measurements:
            into.setdefault(m.name, []).append(m)
    rows = []
    for name in sorted(set(by_b) & set(by_a), key=str.casefold):
        mb, ma = by_b[name], by_a[name]
        values_b, values_a = [m.value for m in mb], [m.value for m in ma]
        unit_b, unit_a = mb[-1].unit, ma[-1].unit
        if {m.unit for m in mb} | {m.unit for m in ma} != {unit_b}:
            rows.append(
                Row(None, name, unit_a, None, note=f"measured in {unit_b} before and {unit_a} after: not comparable")
            )
            continue
        fig = Figure(name, unit_b, "", ma[-1].lower_is_better)
        rows.append(Row(None, name, unit_b, _compare(values_b, values_a, fig, "measurements")))
    return rows


def _server_rows(before: Side, after: Side) -> list[Row]:
    """Server series measured on both sides (portal.metrics): each run's window mean is one sample."""
    from portal.metrics.history import run_server_figures

    figs_b = [run_server_figures(r) for r in before.runs]
    figs_a = [run_server_figures(r) for r in after.runs]
    keys = {k for f in figs_b for k in f} & {k for f in figs_a for k in f}
    rows = []
    for name, unit, lower in sorted(keys):
        values_b = [f[(name, unit, lower)] for f in figs_b if (name, unit, lower) in f]
        values_a = [f[(name, unit, lower)] for f in figs_a if (name, unit, lower) in f]
        rows.append(Row(None, name, unit, _compare(values_b, values_a, Figure(name, unit, "", lower), "runs")))
    return rows


def _plan_key(run: Run):
    return run.plan_id if run.plan_id is not None else f"name:{run.plan_name}"


def _names(runs: list[Run], attr: str) -> str:
    return ", ".join(sorted({getattr(r, attr) for r in runs}))


def _problems(before: Side, after: Side) -> list[str]:
    problems = []
    for name, side in (("before", before), ("after", after)):
        if not side.runs:
            if side.excluded:
                reasons = "; ".join(f"run #{r.number}: {', '.join(r.doubts) or 'no summary'}" for r in side.excluded)
                problems.append(f"No run on the {name} side counts ({reasons}).")
            else:
                problems.append(f"The {name} side has no run.")
    runs_b, runs_a = before.runs, after.runs
    if not runs_b or not runs_a:
        return problems
    shared = sorted(r.number for r in runs_b if r.id in {a.id for a in runs_a})
    if shared:
        problems.append(
            f"The same run is on both sides (#{', #'.join(map(str, shared))}): the comparison measures nothing."
        )
    if {_plan_key(r) for r in runs_b} != {_plan_key(r) for r in runs_a}:
        problems.append(
            f"The two sides ran different plans ({_names(runs_b, 'plan_name')} before, "
            f"{_names(runs_a, 'plan_name')} after): their figures measure different loads."
        )
    elif len({json.dumps((r.plan_snapshot or {}).get("profile"), sort_keys=True) for r in [*runs_b, *runs_a]}) > 1:
        problems.append("The plan's load profile was edited between the runs: the sides did not run the same load.")
    if {r.environment_id for r in runs_b} != {r.environment_id for r in runs_a}:
        problems.append(
            f"The two sides ran on different environments ({_names(runs_b, 'environment_name')} before, "
            f"{_names(runs_a, 'environment_name')} after)."
        )
    return problems


def default_title(before: Side, after: Side) -> str:
    """The change's title when exactly one applied change separates the sides, else "B vs A"."""
    runs_b, runs_a = before.all_runs, after.all_runs
    changes_a = {r.tuning_change_id for r in runs_a}
    if runs_b and len(changes_a) == 1 and None not in changes_a:
        change = runs_a[0].tuning_change
        envs = {r.environment_id for r in [*runs_b, *runs_a]}
        numbers_b = {r.tuning_change.number if r.tuning_change else 0 for r in runs_b}
        if len(envs) == 1 and change.number is not None and numbers_b == {change.number - 1}:
            return change.title
    return f"{after.label} vs {before.label}"


def _basis(before: Side, after: Side, sampler: _Sampler, apd: Row | None) -> str:
    nb, na = len(before.runs), len(after.runs)
    if not sampler.samples:
        text = "There is nothing to compare: a side has no run that counts."
    elif sampler.samples == "trials":
        text = (
            f"Trials: {nb} runs before and {na} after, each run's figure over its measurement window one sample; "
            "a verdict is better or worse only when the 95 % confidence interval of the difference of the means "
            "(Welch) leaves out zero, i.e. the difference is larger than the spread between trials."
        )
    else:
        if nb == 1 and na == 1:
            who = "One run on each side"
        else:
            single, many, n = (before, after, na) if nb == 1 else (after, before, nb)
            who = (
                f"{single.label} is a single run, so both sides are compared on batches (the {n} runs of "
                f"{many.label} pool their batches)"
            )
        text = (
            f"{who}: each run's measurement window is cut into up to {BATCHES} consecutive batches and each "
            "batch's figure is one sample (batch means), so the verdicts weigh the difference against the "
            "variation within the runs, not between reruns; run trial sets for a firmer answer."
        )
    if apd is not None and apd.comparison is not None:
        text += f" APD: {apd.comparison.basis}."
    left_out = [*before.excluded, *after.excluded]
    if left_out:
        text += " Left out as doubtful: " + "; ".join(
            f"run #{r.number} ({', '.join(r.doubts) or 'no summary'})" for r in left_out
        )
        text += "."
    included = [r for r in [*before.runs, *after.runs] if r.doubts]
    if included:
        text += " Included although doubtful (by a user's choice): " + ", ".join(f"run #{r.number}" for r in included)
        text += "."
    return text


def compare_sides(before: Side, after: Side, *, title: str = "") -> Report:
    """Before vs after for every figure, in total and per page, with the verdicts and their basis."""
    title = title or default_title(before, after)
    sampler = _Sampler(before, after)
    samples = sampler.samples
    no_runs = tuple(
        f"no run on the {name} side counts" if not side.runs else ""
        for name, side in (("before", before), ("after", after))
    )

    total = []
    for fig in FIGURES:
        if samples:
            values_b, values_a = sampler.values(before, None, fig), sampler.values(after, None, fig)
            missing = (_no_value("before", fig), _no_value("after", fig))
        else:
            values_b, values_a, missing = [], [], no_runs
        total.append(_row(None, fig, values_b, values_a, samples, missing))
    if samples and (cap := _capacity_row(before, after, samples)):
        total.append(cap)

    pages = []
    if samples:
        pages_b, pages_a = sampler.pages(before), sampler.pages(after)
        for page in sorted(pages_b | pages_a):
            rows = [
                _row(
                    page,
                    fig,
                    sampler.values(before, page, fig),
                    sampler.values(after, page, fig),
                    samples,
                    _missing_page(page, pages_b, pages_a, fig),
                )
                for fig in FIGURES
            ]
            pages.append((page, rows))

    apd = total[0]
    if apd.comparison is not None:
        headline = analysis.headline(title, "APD", apd.comparison, "ms")
    else:
        headline = f"{title}: no comparison, {apd.note}."
    return Report(
        before=before,
        after=after,
        total=total,
        pages=pages,
        measurements=_measurement_rows(before, after),
        headline=headline,
        basis=_basis(before, after, sampler, apd),
        problems=_problems(before, after),
        samples=samples,
        servers=_server_rows(before, after),
        title=title,
        models=models_compared(before, after) if samples else None,
    )


# --------------------------------------------------------------------------------------
# What the picker offers
# --------------------------------------------------------------------------------------


def run_choice_label(run: Run) -> str:
    """ "Run #12 · Smoke · passed · 2026-11-22 10:00" """
    when = timezone.localtime(run.created_at).strftime("%Y-%m-%d %H:%M")
    return f"Run #{run.number} · {run.plan_name} · {run.status} · {when}"


def trialset_choice_label(trial_set: TrialSet, n: int) -> str:
    """ "Trial set: Baseline: Add index (3 runs) · 2026-11-22 10:00" """
    when = timezone.localtime(trial_set.created_at).strftime("%Y-%m-%d %H:%M")
    return f"Trial set: {trial_set} ({n} run{'' if n == 1 else 's'}) · {when}"


def compare_choices(project) -> dict[str, list[tuple[str, str]]]:
    """The project's finished runs and trial sets that can be compared, newest first: {runs, trial_sets}."""
    runs = project.runs.filter(status__in=Run.FINISHED).order_by("-number")[:PICKER_LIMIT]
    trial_sets = (
        project.trial_sets.exclude(status=TrialSet.Status.RUNNING)
        .annotate(n=Count("runs"))
        .filter(n__gt=0)
        .order_by("-created_at", "-id")[:PICKER_LIMIT]
    )
    return {
        "runs": [(str(r.code), run_choice_label(r)) for r in runs],
        "trial_sets": [(str(t.code), trialset_choice_label(t, t.n)) for t in trial_sets],
    }


def compare_url(project, a, b=None) -> str:
    url = reverse("history:compare", args=[project.code]) + f"?a={a}"
    return url + f"&b={b}" if b else url


def experiment_report(experiment) -> Report | None:
    """Baseline against after, once the experiment is done or both sides have a run that counts.

    Showing it before the end lets people see the trend as trials come in; the
    comparison itself says how many runs each side has.
    """
    baseline, after = experiment.baseline, experiment.after
    if baseline is None or after is None:
        return None
    ready = experiment.status == type(experiment).Status.DONE or (
        any(run.counts for run in baseline.runs.all()) and any(run.counts for run in after.runs.all())
    )
    if not ready:
        return None
    return compare_sides(side_for_trialset(baseline), side_for_trialset(after), title=experiment.change.title)
