"""The journey: the story of an environment's tuning changes told by the figures of its runs.

A journey answers "what did each change buy?" over the whole life of an environment:
every finished run of one plan as a point (APD, pages/s, capacity, error rate), every
applied tuning change as a marker, the external measurements alongside, and for each
change its measured effect (the counting runs under the previous change against the
counting runs under this one).

Why per plan: runs of different plans are not comparable (20 users on the home page vs
a 5-level capacity suite), so a trend line across plans would tell a false story. The
page picks one plan, by default the one with the most finished runs.

Why a project journey is a list of environment journeys: a tuning change belongs to one
environment and a run to one environment, so before/after only means something within
an environment. A plan normally has all its runs on its own environment; if it was moved
to another environment, each environment with runs of it gets its own section. The
project page adds the ledger of all the project's changes, in time order, so the whole
story reads in one place.

Everything here returns plain data (dicts, lists, numbers, datetimes): the page renders
its tables from it and the ``journey.json`` endpoints serve the same dict to the charts.
"""

from __future__ import annotations

import functools
from collections import defaultdict

from django.db.models import Count, Q
from django.urls import reverse

from portal.projects.models import Environment, Plan, Project
from portal.runs.models import Run, run_digest
from portal.runs.summary import RunSummary

from .comparison import compare_sides, models_compared, run_capacity, side_for_runs
from .models import ExternalMeasurement, TuningChange
from .payloads import EnvironmentJourney, JourneyPoint, ProjectJourney

MAX_RUNS = 1000
"""The most runs a journey loads (the latest ones): each carries its summary, and a
thousand points is already more than a chart can show one by one."""

JOURNEY_UNUSED = ("config_snapshot", "error_message", "analysis_settings", "tuning_change__hook_response")
"""Run fields a journey never reads, left in the database (2,000 runs' worth adds up)."""

NOT_MEASURED_HINT = "Run the plan before and after the change, or start an experiment."
INITIAL = "the initial configuration"


# --------------------------------------------------------------------------------------
# Which plan
# --------------------------------------------------------------------------------------


def plan_choices(*, environment: Environment | None = None, project: Project | None = None) -> list[dict]:
    """The plans a journey can show, with their finished runs: [{plan, finished}], most runs first.

    For an environment: its own plans, and any plan of its project that has runs on it
    (a plan moved to another environment keeps its history here). For a project: all
    its plans. Ties go to the plan whose name comes first.
    """
    if (environment is None) == (project is None):
        raise ValueError("give an environment or a project")
    finished = Run.objects.filter(status__in=Run.FINISHED, plan__isnull=False)
    if environment is not None:
        finished = finished.filter(environment=environment, plan__project_id=environment.project_id)
    else:
        finished = finished.filter(plan__project=project)
    counts = dict(finished.values("plan").annotate(n=Count("id")).values_list("plan", "n"))
    if environment is not None:
        plans = Plan.objects.filter(Q(environment=environment) | Q(id__in=list(counts)))
    else:
        plans = Plan.objects.filter(project=project)
    return [
        {"plan": p, "finished": counts.get(p.id, 0)}
        for p in sorted(plans, key=lambda p: (-counts.get(p.id, 0), p.name, p.id))
    ]


def default_plan(choices: list[dict]) -> Plan | None:
    """The plan with the most finished runs (``plan_choices`` puts it first)."""
    return choices[0]["plan"] if choices else None


def chosen_plan(choices: list[dict], code: str | None) -> Plan | None:
    """The plan of ``choices`` whose code is ``code`` (LookupError if none), or the default without a code."""
    if not code:
        return default_plan(choices)
    for choice in choices:
        if str(choice["plan"].code) == code:
            return choice["plan"]
    raise LookupError("No such plan here.")


def plans_listed(choices: list[dict]) -> list[dict]:
    """The choices as the journey's JSON lists them."""
    return [{"name": c["plan"].name, "code": str(c["plan"].code), "finished": c["finished"]} for c in choices]


# --------------------------------------------------------------------------------------
# Figures of one run
# --------------------------------------------------------------------------------------


def run_start(run: Run):
    """When the run began: the shards' common start, or its creation if it never started."""
    return run.start_at or run.created_at


def _epoch_ms(moment) -> int:
    return int(moment.timestamp() * 1000)


_STATUS_DISPLAY = dict(Run.Status.choices)
# The fields a point and the doubtful list read (the digest stands for the summary and snapshot).
_POINT_FIELDS = (
    "id",
    "code",
    "number",
    "status",
    "start_at",
    "created_at",
    "digest",
    "kind",
    "source",
    "include_anyway",
    "config_verification",
    "tuning_change__number",
    "tuning_change__title",
    "baseline_verdict__verdict",
    "baseline_verdict__headline",
)


@functools.cache
def _run_url_parts() -> tuple[str, str]:
    marker = "00000000-0000-0000-0000-000000000000"
    prefix, suffix = reverse("runs:detail", args=[marker]).split(marker)
    return prefix, suffix


def _run_url(run: Run) -> str:
    """``run.get_absolute_url()`` without a ``reverse`` per run (a thousand points took 0.2 s)."""
    prefix, suffix = _run_url_parts()
    return f"{prefix}{run.code}{suffix}"


def run_point(run: Run, seq: int) -> JourneyPoint:
    """One run on the timeline."""
    totals = RunSummary.of(run).totals
    # Capacity as the comparisons compute it, so the chart and the effect table agree.
    capacity = run_capacity(run)
    start = run_start(run)
    return {
        "seq": seq,
        "x": _epoch_ms(start),
        "at": start,
        "number": run.number,
        "code": str(run.code),
        # Issue 18: an imported run's tool and file, shown beside it ("" for a run Plimsoll made).
        "source": run.source_label,
        "url": _run_url(run),
        "status": run.status,
        "status_display": _STATUS_DISPLAY.get(run.status, run.status),
        "apd_ms": totals.get("apd_ms"),
        "p95_ms": totals.get("p95_ms"),
        "pages_per_s": totals.get("pages_per_s"),
        "error_rate_pct": totals.get("error_rate_pct"),
        # None for a run without levels; for a step run, None when even the lowest level broke.
        "capacity_users": capacity.capacity_users if capacity else None,
        "capacity_held": capacity.capacity_users is not None if capacity else None,
        "counts": run.counts,
        "doubts": run.doubts,
        "include_anyway": run.include_anyway,
        "change": run.tuning_change.number if run.tuning_change else None,
        # i12-schedules: the verdict against the plan's baseline (scheduled plans only).
        **_baseline_verdict(run),
    }


def _baseline_verdict(run: Run) -> dict:
    verdict = getattr(run, "baseline_verdict", None) if run.pk else None
    if verdict is None:
        return {"baseline_verdict": None, "baseline_headline": ""}
    return {"baseline_verdict": verdict.verdict, "baseline_headline": verdict.headline}


# --------------------------------------------------------------------------------------
# Changes, measurements, effects
# --------------------------------------------------------------------------------------


def _between(count_before: int, index: int, of: int) -> float:
    """Where the index-th of ``of`` markers sits in the gap after ``count_before`` runs.

    Runs sit at 0, 1, 2…; markers go between the last run before them and the first run
    after, spread evenly when several changes fall in the same gap.
    """
    return count_before - 1 + (index + 1) / (of + 1)


def _marker_positions(changes: list[TuningChange], starts: list) -> dict[int, float]:
    """seq of each change's marker, from how many runs started before it was applied."""
    before = {c.id: sum(1 for s in starts if s < c.applied_at) for c in changes}
    gaps = defaultdict(list)
    for c in changes:
        gaps[before[c.id]].append(c.id)
    return {cid: _between(k, i, len(ids)) for k, ids in gaps.items() for i, cid in enumerate(ids)}


def _change_dict(change: TuningChange, seq: float | None = None) -> dict:
    return {
        "seq": seq,
        "x": _epoch_ms(change.applied_at),
        "at": change.applied_at,
        "number": change.number,
        "title": change.title,
        "url": change.get_absolute_url(),
        "category": change.category,
        "category_display": change.get_category_display(),
    }


def _measurement_series(measurements: list[ExternalMeasurement]) -> list[dict]:
    """Per name, its values in time order: [{name, unit, lower_is_better, values}]."""
    by_name: dict[str, list[ExternalMeasurement]] = defaultdict(list)
    for m in sorted(measurements, key=lambda m: (m.measured_at, m.id)):
        by_name[m.name].append(m)
    return [
        {
            "name": name,
            "unit": items[-1].unit,
            "lower_is_better": items[-1].lower_is_better,
            "values": [
                {
                    "x": _epoch_ms(m.measured_at),
                    "at": m.measured_at,
                    "value": m.value,
                    "change": m.tuning_change.number if m.tuning_change else None,
                    "note": m.note,
                }
                for m in items
            ],
        }
        for name, items in sorted(by_name.items())
    ]


def _figure(report, figure: str) -> dict | None:
    """One total row of a comparison report as plain data (None when the report has no such row)."""
    row = next((r for r in report.total if r.figure == figure and r.page is None), None)
    if row is None:
        return None
    return _row_dict(row)


def _row_dict(row) -> dict:
    """A comparison row as plain data, with the texts the comparison page shows too."""
    c = row.comparison
    return {
        "figure": row.figure,
        "unit": row.unit,
        "note": row.note,
        "before": c.before_mean if c else row.before_value,
        "after": c.after_mean if c else row.after_value,
        "before_text": row.before_text,
        "after_text": row.after_text,
        "n_before": c.n_before if c else None,
        "n_after": c.n_after if c else None,
        "speedup": c.speedup if c else None,
        "speedup_text": row.speedup_text,
        "reduction_pct": c.reduction_pct if c else None,
        "change_text": row.change_text,
        "verdict": row.verdict or None,
        "basis": row.basis,
    }


def change_effect(
    change: TuningChange,
    previous: TuningChange | None,
    runs_by_change: dict,
    measurements_by_change: dict,
) -> dict:
    """What ``change`` bought for the plan: counting runs under ``previous`` vs under ``change``.

    ``runs_by_change`` and ``measurements_by_change`` map a change id (None: the initial
    configuration) to the finished runs of the plan and the measurements made under it.
    A side without a counting run is "not measured": no verdict can rest on nothing.
    """
    prev_key = previous.id if previous else None
    before_label = f"#{previous.number} {previous.title}" if previous else INITIAL
    before = side_for_runs(
        f"Before: {before_label}", runs_by_change.get(prev_key, []), measurements_by_change.get(prev_key, [])
    )
    after = side_for_runs(
        f"After: #{change.number} {change.title}",
        runs_by_change.get(change.id, []),
        measurements_by_change.get(change.id, []),
    )
    measured = bool(before.runs) and bool(after.runs)
    effect = {
        **_change_dict(change),
        "before_label": before_label,
        "before_url": previous.get_absolute_url() if previous else None,
        "n_before": len(before.runs),
        "n_after": len(after.runs),
        "excluded_before": len(before.excluded),
        "excluded_after": len(after.excluded),
        "measured": measured,
        "hint": "" if measured else NOT_MEASURED_HINT,
        "apd": None,
        "pages_per_s": None,
        "capacity": None,
        "headline": "",
        "basis": "",
        "problems": [],
        "measurements": [],
        "models": None,
        "servers": [],
    }
    if not measured and not (before.measurements and after.measurements):
        return effect
    report = compare_sides(before, after, title=change.title)
    effect["measurements"] = [_row_dict(row) for row in report.measurements]
    effect["servers"] = [_row_dict(row) for row in report.servers]
    if measured:
        effect.update(
            apd=_figure(report, "APD"),
            pages_per_s=_figure(report, "pages/s"),
            capacity=_figure(report, "capacity"),
            headline=report.headline,
            basis=report.basis,
            problems=list(report.problems),
            models=report.models,
        )
    return effect


# --------------------------------------------------------------------------------------
# The journeys
# --------------------------------------------------------------------------------------


def _plan_dict(plan: Plan | None) -> dict | None:
    if plan is None:
        return None
    return {"name": plan.name, "code": str(plan.code), "url": plan.get_absolute_url()}


def environment_journey(environment: Environment, plan: Plan | None) -> EnvironmentJourney:
    """The journey of one environment for one plan (None: no plan yet; changes and measurements only).

    Points are the plan's finished runs on the environment in start order (at most
    MAX_RUNS, the latest), counting or not: doubtful runs are drawn but kept out of the
    trend and the effects (``counts``). Changes are the applied ones in ledger order,
    each placed between the runs before and after it (``seq``) and at its time (``x``).
    """
    runs: list[Run] = []
    truncated = False
    changes = list(
        environment.changes.filter(status=TuningChange.Status.APPLIED).select_related("made_by").order_by("number")
    )
    if plan is not None:
        qs = (
            Run.objects.filter(environment=environment, plan=plan, status__in=Run.FINISHED)
            .select_related("tuning_change", "baseline_verdict")
            # What a point reads is the run's digest: a soak's summary is kilobytes of JSON, and
            # reading a thousand of them was most of the journey's time (``bench store --many``).
            .only(*_POINT_FIELDS)
            .order_by("-created_at", "-number")  # never null, unlike start_at; start order follows
        )
        runs = _with_digests(list(qs[: MAX_RUNS + 1]))
        truncated = len(runs) > MAX_RUNS
        runs = sorted(runs[:MAX_RUNS], key=lambda r: (run_start(r), r.number))
        runs = _whole_where_compared(runs, changes)

    measurements = list(environment.measurements.select_related("tuning_change"))

    with_figures = [r for r in runs if RunSummary.of(r).totals]
    points = [run_point(r, seq) for seq, r in enumerate(with_figures)]
    positions = _marker_positions(changes, [run_start(r) for r in with_figures])

    runs_by_change: dict = defaultdict(list)
    for r in runs:
        runs_by_change[r.tuning_change_id].append(r)
    measurements_by_change: dict = defaultdict(list)
    for m in measurements:
        measurements_by_change[m.tuning_change_id].append(m)
    effects = [
        change_effect(c, changes[i - 1] if i else None, runs_by_change, measurements_by_change)
        for i, c in enumerate(changes)
    ]

    doubtful = [
        {
            "number": r.number,
            "url": r.get_absolute_url(),
            "status": r.status,
            "status_display": r.get_status_display(),
            "at": run_start(r),
            "doubts": r.doubts,
            "counts": r.counts,
            "include_anyway": r.include_anyway,
        }
        for r in runs
        if r.doubts
    ]
    return {
        "environment": {
            "name": environment.name,
            "code": str(environment.code),
            "url": environment.get_absolute_url(),
            "journey_url": reverse("history:environment-journey", args=[environment.code]),
        },
        "plan": _plan_dict(plan),
        "points": points,
        "counting": sum(1 for p in points if p["counts"]),
        "has_capacity": any(p["capacity_held"] is not None for p in points),
        "truncated": truncated,
        "changes": [_change_dict(c, positions[c.id]) for c in changes],
        "measurements": _measurement_series(measurements),
        "effects": effects,
        "doubtful": doubtful,
    }


def _with_digests(runs: list[Run]) -> list[Run]:
    """``runs`` as light runs (``_light``); a run whose digest was never written (its summary was
    set by an UPDATE that bypassed ``Run.save``) gets one from its summary, in one more query."""
    missing = [r.id for r in runs if r.digest is None]
    if missing:
        whole = Run.objects.filter(id__in=missing).exclude(summary=None).values_list("id", "summary", "plan_snapshot")
        digests = {run_id: run_digest(RunSummary.from_json(summary), snapshot) for run_id, summary, snapshot in whole}
        for r in runs:
            if r.digest is None:
                r.digest = digests.get(r.id)
    return [_light(r) for r in runs]


def _light(run: Run) -> Run:
    """A run whose summary and plan snapshot are its digest (``portal.runs.models.run_digest``).

    The digest holds what a point, its capacity and the run's doubts read, under the same
    keys, so the run reads as it would whole. The journey only reads these runs; it never
    saves them, and the runs a change's effect compares are loaded whole.
    """
    digest = run.digest or {}
    summary = {k: digest[k] for k in ("totals", "verdict", "generator", "handoffs", "windows") if k in digest}
    run.summary = summary or None
    run.plan_snapshot = {k: digest[k] for k in ("profile", "thresholds") if k in digest}
    return run


def _whole_where_compared(runs: list[Run], changes: list[TuningChange]) -> list[Run]:
    """``runs`` with those that a change's effect compares loaded whole (one query), in the same order.

    An effect compares the runs under a change with those under the change before it (the
    initial configuration for the first), so only the runs under an applied change, or
    under none, when there are changes at all.
    """
    if not changes:
        return runs
    keys = {None, *(c.id for c in changes)}
    ids = [r.id for r in runs if r.tuning_change_id in keys]
    whole = (
        Run.objects.filter(id__in=ids).select_related("tuning_change", "baseline_verdict").defer(*JOURNEY_UNUSED)
        if ids
        else []
    )
    by_id = {r.id: r for r in whole}
    return [by_id.get(r.id, r) for r in runs]


def project_journey(project: Project, plan: Plan | None) -> ProjectJourney:
    """The journey of a project for one plan: a section per environment the plan ran on, and the ledger.

    The sections are ``environment_journey`` for each environment with finished runs of
    the plan (normally just the plan's own environment; with no run yet, that one, so its
    changes show as "not measured"). The ledger lists every applied change of every
    environment of the project in time order, with the effect on this plan where the
    plan ran on that environment.
    """
    sections = []
    if plan is not None:
        environments = list(
            Environment.objects.filter(project=project, runs__plan=plan, runs__status__in=Run.FINISHED).distinct()
        ) or [plan.environment]
        sections = [environment_journey(env, plan) for env in environments]

    effects = {(s["environment"]["code"], e["number"]): e for s in sections for e in s["effects"]}
    ledger = []
    for change in (
        TuningChange.objects.filter(environment__project=project, status=TuningChange.Status.APPLIED)
        .select_related("environment")
        .order_by("applied_at", "number")
    ):
        env = change.environment
        effect = effects.get((str(env.code), change.number))
        ledger.append(
            {
                **_change_dict(change),
                "environment": env.name,
                "environment_journey_url": reverse("history:environment-journey", args=[env.code]),
                "measured": bool(effect and effect["measured"]),
                "headline": effect["headline"] if effect else "",
                "verdict": (effect["apd"] or {}).get("verdict") if effect and effect["apd"] else None,
            }
        )
    return {
        "project": {"name": project.name, "code": str(project.code), "url": project.get_absolute_url()},
        "plan": _plan_dict(plan),
        "sections": sections,
        "ledger": ledger,
    }


def change_models(change: TuningChange) -> list[dict]:
    """The scalability models each steps plan had before ``change`` and under it (the ledger's change page).

    Before is the counting runs under the previous applied change (or the initial configuration),
    after those under this change, plan by plan; a plan without steps runs on both sides is left out.
    """
    if not change.is_applied:
        return []
    previous = (
        TuningChange.objects.filter(
            environment_id=change.environment_id, status=TuningChange.Status.APPLIED, number__lt=change.number
        )
        .order_by("-number")
        .first()
    )
    runs = Run.objects.filter(
        environment_id=change.environment_id,
        status__in=Run.FINISHED,
        tuning_change_id__in=[change.id] if previous is None else [change.id, previous.id],
        plan__isnull=False,
        plan_snapshot__profile__kind="steps",
    ).select_related("plan")
    if previous is None:
        runs = runs | Run.objects.filter(
            environment_id=change.environment_id,
            status__in=Run.FINISHED,
            tuning_change__isnull=True,
            plan__isnull=False,
            plan_snapshot__profile__kind="steps",
        ).select_related("plan")
    by_plan: dict = defaultdict(lambda: ([], []))
    for run in runs:
        by_plan[run.plan][1 if run.tuning_change_id == change.id else 0].append(run)
    out = []
    for plan, (before, after) in sorted(by_plan.items(), key=lambda kv: kv[0].name):
        models = models_compared(side_for_runs("Before", before), side_for_runs("After", after))
        if models is not None:
            out.append({"plan": plan, "models": models})
    return out
