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

Either way the figures shown (before, after, the speed-up, the change) are each side's own
(`pooled_figures`): a single run's are those of its report, several runs' are pooled as one
window; the samples give only the noise. So a run's APD reads the same on its report, in every
comparison, on the journey, in its trial set, in the API and in its exports.

Runs whose validity is in doubt (`Run.counts` is False: cancelled, partial, error,
saturated generator) are shown on their side but left out of the samples, unless a
user included them anyway.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Q
from django.utils import timezone

from portal import formatting
from portal.runs.analysis import scalability_model
from portal.runs.models import Run
from portal.runs.results.batches import (  # noqa: F401  (comparisons, tests and bench read them here too)
    BATCH_FIGURES,
    BATCHES,
    WINDOW,
    BatchSampler,
    batch_bounds,
    compute_batches,
    run_batches,
)
from portal.runs.summary import RunSummary
from portal.stats import analysis, scalability
from portal.stats.quantiles import percentile_se

from .figures import (  # noqa: F401  (callers read them here too)
    CAPACITY,
    FIGURE_KEYS,
    FIGURES,
    Figure,
    pooled_figures,
    run_capacity,
    run_window,
    set_figures,
)
from .models import ExternalMeasurement, TrialSet

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
        "protocols": [row(r) for r in report.protocols],
        "models": None if report.models is None else {k: v for k, v in report.models.items() if k != "before_after"},
        "answers": [{k: v for k, v in a.items() if k != "number"} | {"run": str(a["run"])} for a in report.answers],
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
    return formatting.duration_scale(*values) if unit == "ms" else unit


def format_figure(value: float | None, unit: str, *, scale: str | None = None, spread: bool = False) -> str:
    """A figure of a comparison row, by the rules of ``portal.formatting`` ("12.3/s", "2,490 s", "0.10 %")."""
    if value is None:
        return MISSING
    if unit == "ms":
        return analysis.format_value(value, unit, scale=scale, spread=spread)
    if unit == "/s":
        return formatting.rate(value) + "/s"
    if unit == "%":
        return formatting.percent(value)
    return formatting.number(value, unit)


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
    # The sides' own figures, kept when a row has no comparison (a page measured on one side only).
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
    def change_pct(self) -> float | None:
        """The signed change in % of before ((after − before) / before), for sorting; None without both."""
        before, after = self._before, self._after
        if before is None or after is None or before == 0:
            return None
        return round(100.0 * (after - before) / abs(before), 3)

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
    # Streams, WebSocket sessions and protocols (issue 26): each run's summary total is one sample.
    protocols: list[Row] = field(default_factory=list)
    # What each counting run answered by itself (`run_answers`): a capacity search's capacity, when a drift began.
    answers: list[dict] = field(default_factory=list)

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
    def pages_by_change(self) -> list[tuple[str, list[Row]]]:
        """Every page, the one whose APD grew most first (pages without a change last, by name)."""

        def worst_first(item):
            change = item[1][0].change_pct if item[1] else None
            return (change is None, -(change or 0.0), item[0])

        return sorted(self.pages, key=worst_first)

    @property
    def rows(self) -> list[Row]:
        """Every row with a verdict, for counting ("3 better, 1 worse")."""
        return [
            *self.total,
            *(r for _, rows in self.pages for r in rows),
            *self.measurements,
            *self.servers,
            *self.protocols,
        ]


# --------------------------------------------------------------------------------------
# Samples: one figure per trial, or per batch of a run's measurement window
# --------------------------------------------------------------------------------------


def _summary_value(run: Run, page: str | None, key: str) -> float | None:
    summary = RunSummary.of(run)
    if page is None:
        return summary.totals.get(key)
    row = summary.page(page)
    return row.get(key) if row is not None else None


def _summary_pages(run: Run) -> set[str]:
    return {p["label"] for p in RunSummary.of(run).pages if p.get("label") is not None}


# --------------------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------------------


def _compare(
    before: list[float], after: list[float], fig: Figure, samples: str, values: tuple = (None, None)
) -> analysis.Comparison:
    return analysis.compare(
        before,
        after,
        lower_is_better=fig.lower_is_better,
        unit=_BASIS_UNIT.get(fig.unit, fig.unit),
        samples=samples,
        before_value=values[0],
        after_value=values[1],
    )


def _row(
    page,
    fig: Figure,
    before: list[float],
    after: list[float],
    samples: str,
    missing: tuple[str, str],
    figures: tuple[float | None, float | None] = (None, None),
) -> Row:
    """A row, or a row without comparison whose note names the side without values.

    ``figures`` are the sides' own figures (``pooled_figures``): what the row shows; the
    samples (``before``, ``after``) only give the noise the verdict weighs the difference against.
    """
    if None in figures:
        reasons = [why for value, why in zip(figures, missing, strict=True) if value is None and why]
        side = "before" if figures[0] is None else "after"
        note = reasons[0] if reasons else f"no value on the {side} side"
        return Row(page, fig.name, fig.unit, None, note=note, before_value=figures[0], after_value=figures[1])
    if not before or not after:
        side = "before" if not before else "after"
        note = f"no {samples} on the {side} side to estimate the noise from (its per-second rows are gone)"
        return Row(page, fig.name, fig.unit, None, note=note, before_value=figures[0], after_value=figures[1])
    row = Row(page, fig.name, fig.unit, _compare(before, after, fig, samples, figures))
    if fig.key == "error_rate_pct" and not any(before) and not any(after):
        row.note = "no errors on either side"
    return row


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
        self._figures = {id(side): pooled_figures(side.runs) for side in (before, after)}

    def figure(self, side: Side, page: str | None, fig: Figure) -> float | None:
        """The side's own figure (one run's, or several runs' pooled): what the comparison shows."""
        value = (self._figures[id(side)].get(page) or {}).get(fig.key)
        return None if value is None else float(value)

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
        notes.append(
            f"the knee (after it throughput {analysis.KNEE_WORDS}): {_knees(knees_b)} before, {_knees(knees_a)} after"
        )
    row.note = "; ".join(notes)
    return row


def _model_levels(runs: list[Run]) -> list[dict]:
    """The measured levels of a side's steps runs (users, pages/s, APD), pooled: trials of one plan add up."""
    levels = []
    for run in runs:
        cap = RunSummary.of(run).capacity
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
    elif model_b.get("ceiling_pages_per_s") and model_a.get("ceiling_pages_per_s"):
        # Both sides rose to a sharp ceiling (a pool, a fixed number of slots): no model, but the measured
        # ceilings compare, and a change that widened the pool shows there.
        b, a = model_b["ceiling_pages_per_s"], model_a["ceiling_pages_per_s"]
        change = ("+" if a >= b else "") + formatting.percent(100 * (a / b - 1))
        sentence = (
            f"No scalability model on either side: both levels rise to a sharp ceiling, which went from "
            f"{formatting.rate(b)} pages/s (reached at {model_b['ceiling_users']:g} users) to {formatting.rate(a)} "
            f"pages/s (at {model_a['ceiling_users']:g} users): {change}."
        )
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


# The summary totals of streams, WebSocket sessions and protocols a comparison weighs
# (portal/runs/results/protocols.py).
PROTOCOL_FIGURES = (
    Figure("Time to first event p95", "ms", "ttfe_p95_ms", True),
    Figure("Gap between events p95", "ms", "gap_p95_ms", True),
    Figure("WebSocket round trip p95", "ms", "rtt_p95_ms", True),
    Figure("HTTP/2 share", "%", "h2_share_pct", False),
)


def _protocol_rows(before: Side, after: Side) -> list[Row]:
    """A row per stream, WebSocket or protocol figure that runs of both sides have; each run's total is a sample.

    Two single runs: a p95 (time to first event, gap, round trip) is weighed against its own sampling noise, the
    standard error of the p95 of each run's streams, gaps or round trips (``_p95_noise``), as a verdict against a
    baseline weighs it (portal.stats.quantiles.percentile_se): a rerun of the same plan whose 40 streams' p95 moved
    7 % is within that noise, where a 5 % tolerance called it worse. The HTTP/2 share (a count, no percentile), or
    a run without the figures, keeps the tolerance (within noise unless the change exceeds 5 %)."""
    rows = []
    for fig in PROTOCOL_FIGURES:
        values_b = [float(v) for r in before.runs if (v := _summary_value(r, None, fig.key)) is not None]
        values_a = [float(v) for r in after.runs if (v := _summary_value(r, None, fig.key)) is not None]
        if not (values_b and values_a):
            continue
        c = _compare(values_b, values_a, fig, "runs")
        if len(values_b) == len(values_a) == 1 and fig.key in _P95_SOURCES:
            c = _weighed_by_p95_noise(c, fig, _p95_noise(before.runs[0], fig.key), _p95_noise(after.runs[0], fig.key))
        rows.append(Row(None, fig.name, fig.unit, c))
    return rows


# A protocol p95 total → (its figures in summary.protocols.totals, what its samples are called).
_P95_SOURCES = {
    "ttfe_p95_ms": ("ttfe_ms", "streams"),
    "gap_p95_ms": ("gap_ms", "gaps"),
    "rtt_p95_ms": ("rtt_ms", "round trips"),
}


def _p95_noise(run: Run, key: str) -> tuple[float, int] | None:
    """(the standard error in ms, the number of samples) of a run's p95 total of ``key``, or None without the
    figures (``portal.stats.quantiles.percentile_se``, the rule the nightly verdicts use)."""
    summary = RunSummary.of(run)
    totals = summary.protocol_totals
    figures = totals.get(_P95_SOURCES[key][0]) or {}
    if key == "ttfe_p95_ms":
        n = totals.get("streams") or 0
    elif key == "gap_p95_ms":  # each response of e events has e − 1 gaps
        n = (totals.get("events") or 0) - (totals.get("streams") or 0)
    else:
        n = summary.ws_round_trips
    se = percentile_se(figures.get("p90"), figures.get("p99"), n) if n >= 2 else None
    return None if se is None else (se, n)


def _weighed_by_p95_noise(c: analysis.Comparison, fig: Figure, b, a) -> analysis.Comparison:
    """The tolerance comparison of two single runs' p95, decided instead by the p95s' sampling noise (95 %)."""
    from dataclasses import replace

    if b is None or a is None:
        return c
    (se_b, n_b), (se_a, n_a) = b, a
    half = 1.96 * (se_b**2 + se_a**2) ** 0.5
    diff = c.difference
    if half <= 0:
        return c
    verdict = analysis.WITHIN_NOISE if abs(diff) <= half else (analysis.BETTER if diff < 0 else analysis.WORSE)
    noise = formatting.duration_ms(half)
    basis = (
        f"one run on each side; the difference is {abs(diff) / half:.1f}× the sampling noise of a p95 of "
        f"{n_b:,} and {n_a:,} {_P95_SOURCES[fig.key][1]} (±{noise} at 95 %, from each run's p90 to p99)"
    )
    if verdict == analysis.WITHIN_NOISE:
        basis += ", so it could be noise"
    return replace(
        c, verdict=verdict, method="percentile", basis=basis, noise=half, ci_low=diff - half, ci_high=diff + half
    )


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


FIGURES_SHOWN = (
    "The figures shown are each side's own: a single run's are those of its report; several runs "
    "(a trial set) are pooled, as one window (APD and p95 from all their pages together, pages/s = all "
    "pages / all measured seconds). The samples only estimate the noise the verdicts weigh the difference against."
)


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
    if sampler.samples:
        text += " " + FIGURES_SHOWN
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
            figures = (sampler.figure(before, None, fig), sampler.figure(after, None, fig))
        else:
            values_b, values_a, missing, figures = [], [], no_runs, (None, None)
        total.append(_row(None, fig, values_b, values_a, samples, missing, figures))
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
                    (sampler.figure(before, page, fig), sampler.figure(after, page, fig)),
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
        protocols=_protocol_rows(before, after),
        title=title,
        models=models_compared(before, after) if samples else None,
        answers=run_answers(before, after),
    )


def run_answers(before: Side, after: Side) -> list[dict]:
    """What each counting run answered on its own page, in its own words (issue 19).

    A capacity search's answer ("Capacity: 4 users, 167 pages/s; at 6 users APD breaks …")
    and, for a run that degraded, when the drift began and when it crossed its limit. A
    comparison's rows say how the figures moved; these say what each run found, so a
    capacity or an onset that moved can be read in words beside them. Runs with neither
    are left out.
    """
    out = []
    for name, side in (("before", before), ("after", after)):
        for run in side.runs:
            summary = RunSummary.of(run)
            cap = summary.capacity
            d = summary.degradation
            capacity = cap.get("answer") if cap.get("search") else None
            degradation = None
            if d.get("degraded"):
                degradation = d.get("began_sentence") or d.get("sentence")
            if capacity or degradation:
                out.append(
                    {
                        "side": name,
                        "run": run.code,
                        "number": run.number,
                        "capacity": capacity,
                        "degradation": degradation,
                        "began_s": d.get("began_s") if d.get("degraded") else None,
                        "crossed_s": d.get("crossed_s") if d.get("degraded") else None,
                    }
                )
    return out
