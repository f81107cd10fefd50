"""Change points across a plan's history: the runs at which a figure moved to a new level and stayed,
each with what happened between that run and the one before it.

The detection is plain statistics (``portal.stats.shifts``) on one value per run; this module reads
the runs, builds the series (the run's totals and each page, per figure; for soaks, the degradation
onset and the drifts per hour) and attributes every shift:
the tuning changes applied in the ledger between the two runs, the run labels that changed
(build, commit, branch), and edits of the plan itself. Two queries for any number of plans, whatever their history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import F, Window
from django.db.models.functions import RowNumber

from portal.history.comparison import FIGURES
from portal.history.models import TuningChange, config_diff
from portal.runs.models import Run
from portal.runs.summary import RunSummary
from portal.stats import shifts

from . import soak
from .noise import MIN_PAGES
from .selectors import BASELINE_STATUSES

LAST_RUNS = 200
"""The runs read per plan (its latest): the cost stays bounded (measured: 24 series of 200 runs in ~0.15 s)."""
MIN_ERROR_POINTS = 0.5
"""An error rate moves by percentage points, not relative to a level near 0: 0.5 points at least."""
PLAN_EDITS_SHOWN = 5
SOAK_DRIFT_SHARE = 0.10
"""A soak's drift per hour is near 0: a shift of it must move by 10 % of the steady level per hour (the soak
verdict's floor with the default tolerance), not by a percentage of itself."""


@dataclass(frozen=True)
class SoakFigure:
    """A soak's figure across the plan's history (its degradation block, ``portal.schedules.soak``)."""

    name: str
    key: str  # the degradation block's key
    unit: str
    steady_key: str = ""  # for a drift: the steady level it is a share of


SOAK_FIGURES = (
    SoakFigure(soak.ONSET, "time_to_degradation_s", "s"),
    SoakFigure(soak.APD_DRIFT, "drift_ms_per_hour", "ms/h", "steady_apd_ms"),
    SoakFigure(soak.PAGES_DRIFT, "pages_per_s_drift_per_hour", "pages/s/h", "steady_pages_per_s"),
)


@dataclass(frozen=True)
class ChangeRef:
    number: int | None
    code: str
    title: str


@dataclass(frozen=True)
class ChangePoint:
    """One persistent shift of one figure (of the run's totals, or of one page), attributed."""

    figure: str  # "APD", "p95", "pages/s", "error rate"
    key: str  # the summary's key: apd_ms, p95_ms, pages_per_s, error_rate_pct
    unit: str
    page: str | None  # None: the run's totals
    before: float  # the level before (mean of the runs since the previous shift)
    after: float  # the level after
    change_pct: float | None
    p_value: float
    run_number: int  # the first run at the new level
    run_code: str
    previous_run_number: int  # the last run at the old level
    labels: dict[str, str] = field(default_factory=dict)  # the run's labels that differ from the run before
    changes: list[ChangeRef] = field(default_factory=list)  # tuning changes applied between the two runs
    plan_edits: list[str] = field(default_factory=list)  # keys of the plan that differ between the two runs
    config_edits: list[str] = field(default_factory=list)  # configuration keys that differ, no change explaining them

    @property
    def size(self) -> str:
        if self.key in DRIFT_KEYS:  # a drift near 0 has no meaningful percentage
            return f"{self.before:+.3g} → {self.after:+.3g} {self.unit}"
        if self.change_pct is not None and self.key != "error_rate_pct":
            return f"{self.change_pct:+.0f} %"
        return f"{self.after - self.before:+.2f} points" if self.key == "error_rate_pct" else f"{self.after:g}"

    @property
    def attribution(self) -> str:
        """“build 3f2a1c; after the change ‘connection pool 50 → 20’”, or "" when nothing was recorded."""
        parts = [f"{k} {v}" for k, v in self.labels.items()]
        parts += [f"after the change ‘{c.title}’" for c in self.changes]
        if self.plan_edits:
            parts.append("the plan was edited (" + ", ".join(self.plan_edits) + ")")
        if self.config_edits:
            parts.append("the configuration differed (" + ", ".join(self.config_edits) + ")")
        return "; ".join(parts)

    @property
    def text(self) -> str:
        what = f"{self.page} {self.figure}" if self.page else self.figure
        cause = self.attribution
        return f"{what} {self.size} since run #{self.run_number}" + (f" ({cause})" if cause else "")


def _start(run: Run):
    return run.start_at or run.created_at


def history_runs(*, plan_ids, last: int = LAST_RUNS) -> dict[int, list[Run]]:
    """{plan id: its latest ``last`` finished runs that count (the statuses a baseline takes, ``Run.counts``),
    oldest first}, in one query. A regressed run is kept: it is the very evidence of a shift."""
    latest = Window(RowNumber(), partition_by=[F("plan_id")], order_by=F("number").desc())
    rows = (
        Run.objects.filter(plan_id__in=set(plan_ids), status__in=BASELINE_STATUSES, summary__isnull=False)
        .exclude(start_at__isnull=True)
        .annotate(latest=latest)
        .filter(latest__lte=last)
        .order_by("plan_id", "number")
    )
    runs: dict[int, list[Run]] = {plan_id: [] for plan_id in plan_ids}
    for run in rows:
        if run.counts:
            runs[run.plan_id].append(run)
    return runs


def _value(run: Run, page: str | None, key: str) -> float | None:
    summary = RunSummary.of(run)
    if page is None:
        row = summary.totals
    else:
        row = summary.page(page) or {}
        # A page's figure joins only where the page had enough samples for it (the verdict's rule).
        if (row.get("pages") or 0) < MIN_PAGES.get(key, 0):
            return None
    value = row.get(key)
    return float(value) if isinstance(value, int | float) else None


def _series(runs: list[Run]):
    pages = sorted({p["label"] for r in runs for p in RunSummary.of(r).pages if p.get("label")})
    for page in [None, *pages]:
        for fig in FIGURES:
            points = [(r, v) for r in runs if (v := _value(r, page, fig.key)) is not None]
            yield page, fig, points


DRIFT_KEYS = {f.key for f in SOAK_FIGURES if f.steady_key}


def _soak_series(runs: list[Run]):
    """The soaks' degradation onset (the runs that degraded) and drifts per hour (every soak analysed)."""
    blocks = [(r, d) for r in runs if (d := soak.analysed(RunSummary.of(r))) is not None]
    for fig in SOAK_FIGURES:
        points = []
        for r, d in blocks:
            if fig.key == "time_to_degradation_s" and not d.get("degraded"):
                continue  # a soak that held has no onset (its window bounds it, nothing more)
            value = d.get(fig.key)
            if isinstance(value, int | float):
                points.append((r, float(value)))
        yield None, fig, points, blocks


def _plan_edits(before: dict | None, after: dict | None) -> list[str]:
    """The plan snapshot's keys that differ, a nested dict's keys named inside it ("profile.users")."""
    b, a = before or {}, after or {}
    keys = []
    for k in sorted({*b, *a}):
        if b.get(k) == a.get(k):
            continue
        if isinstance(b.get(k), dict) and isinstance(a.get(k), dict):
            keys += [f"{k}.{inner}" for inner in _plan_edits(b[k], a[k])]
        else:
            keys.append(k)
    return keys[:PLAN_EDITS_SHOWN] + (["…"] if len(keys) > PLAN_EDITS_SHOWN else [])


def plans_change_points(*, plans, last: int = LAST_RUNS) -> dict[int, list[ChangePoint]]:
    """{plan id: the persistent shifts in the plan's last ``last`` runs, newest first (totals before pages)},
    in two queries for all the plans."""
    plans = {p.id: p for p in plans}
    histories = {
        plan_id: runs
        for plan_id, runs in history_runs(plan_ids=list(plans), last=last).items()
        if len(runs) >= 2 * shifts.MIN_RUNS
    }
    found: dict[int, list[ChangePoint]] = {plan_id: [] for plan_id in plans}
    if not histories:
        return found
    applied = list(
        TuningChange.objects.filter(
            environment_id__in={plans[plan_id].environment_id for plan_id in histories},
            status=TuningChange.Status.APPLIED,
            applied_at__gt=min(_start(runs[0]) for runs in histories.values()),
        )
        .exclude(category=TuningChange.Category.BASELINE)  # an accepted level explains nothing
        .order_by("applied_at")
    )
    for plan_id, runs in histories.items():
        environment_id = plans[plan_id].environment_id
        changes = [c for c in applied if c.environment_id == environment_id]
        found[plan_id] = _plan_shifts(runs, changes)
    return found


def _plan_shifts(runs: list[Run], applied: list[TuningChange]) -> list[ChangePoint]:
    found = []
    series = [(page, fig, points, None) for page, fig, points in _series(runs)]
    for page, fig, points, blocks in [*series, *_soak_series(runs)]:
        values = [v for _, v in points]
        if fig.key == "error_rate_pct":
            moved = shifts.find(values, min_change_pct=None, min_change_abs=MIN_ERROR_POINTS)
        elif fig.key in DRIFT_KEYS:
            steady = sorted(v for _, d in blocks if isinstance(v := d.get(fig.steady_key), int | float) and v > 0)
            floor = SOAK_DRIFT_SHARE * steady[len(steady) // 2] if steady else 0.0
            moved = shifts.find(values, min_change_pct=None, min_change_abs=floor) if floor else []
        else:  # durations and rates move by ratios: tested on a log scale
            moved = shifts.find(values, ratio=True)
        for shift in moved:
            prev, run = points[shift.index - 1][0], points[shift.index][0]
            changes = [c for c in applied if _start(prev) < c.applied_at <= _start(run)]
            old_labels = prev.labels or {}
            config = [] if changes else [d["key"] for d in config_diff(prev.config_snapshot, run.config_snapshot)]
            found.append(
                ChangePoint(
                    figure=fig.name,
                    key=fig.key,
                    unit=fig.unit,
                    page=page,
                    before=shift.before,
                    after=shift.after,
                    change_pct=shift.change_pct,
                    p_value=shift.p_value,
                    run_number=run.number,
                    run_code=str(run.code),
                    previous_run_number=prev.number,
                    labels={k: v for k, v in (run.labels or {}).items() if old_labels.get(k) != v},
                    changes=[ChangeRef(number=c.number, code=str(c.code), title=c.title) for c in changes],
                    plan_edits=_plan_edits(prev.plan_snapshot, run.plan_snapshot),
                    config_edits=config,
                )
            )
    found.sort(key=lambda c: (-c.run_number, c.page is not None, c.page or ""))
    return found


def plan_change_points(*, plan, last: int = LAST_RUNS) -> list[ChangePoint]:
    """One plan's change points (``plans_change_points``)."""
    return plans_change_points(plans=[plan], last=last)[plan.id]


def run_change_points(run: Run, *, last: int = LAST_RUNS) -> list[ChangePoint]:
    """The plan's change points that begin at ``run`` (what the run page lists)."""
    if run.plan_id is None:
        return []
    return [c for c in plan_change_points(plan=run.plan, last=last) if c.run_number == run.number]
