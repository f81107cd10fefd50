"""Reads of the results history: what the pages, the API and share links show.

The views, the API (portal.history.api) and shared pages (portal.sharing) read through
these, so a figure cannot be computed two ways.
"""

import statistics
import uuid

from django.db.models import Count, Q

from portal.projects.models import Environment
from portal.runs.models import Run
from portal.runs.selectors import run_live_figures
from portal.runs.services import active_run_on
from portal.runs.summary import RunSummary

from . import comparison
from .models import Experiment, TrialSet, TuningChange, config_dict

INITIAL = "initial"  # ?at=initial: the configuration before the first change


def ledger(environment: Environment) -> list[TuningChange]:
    """Every change of the environment, newest first: applied ones by when they took effect, failed
    and planned ones by when they were written down (a failed attempt stays where it happened)."""
    changes = list(environment.changes.select_related("made_by", "experiment").annotate(run_count=Count("runs")).all())
    for change in changes:
        change.environment = environment  # a planned change's diff reads the current configuration
    return sorted(changes, key=lambda c: (c.applied_at or c.created_at, c.number or 0), reverse=True)


def initial_configuration(environment: Environment) -> list[dict]:
    """The configuration before the first applied change (the current one when there is none)."""
    first = environment.changes.filter(status=TuningChange.Status.APPLIED).order_by("number").first()
    return first.config_before if first else list(environment.configuration)


def configuration_at(environment: Environment, at: str | None) -> dict | None:
    """The configuration after the change ``at`` (a change's code, or "initial"), beside today's.

    Returns None when the environment has no applied change (then there is no past to
    show). ``rows`` are [{key, then, now, same}], ``then``/``now`` None where the key was
    not set; keys set only today come last.
    """
    applied = list(environment.changes.filter(status=TuningChange.Status.APPLIED).order_by("-number"))
    if not applied:
        return None
    change = None
    if at and at != INITIAL:
        change = next((c for c in applied if str(c.code) == at), None)
    configuration = change.config_after if change else applied[-1].config_before
    now = config_dict(environment.configuration)
    then = config_dict(configuration)
    rows = [{"key": k, "then": v, "now": now.get(k), "same": now.get(k) == v} for k, v in then.items()]
    rows += [{"key": k, "then": None, "now": v, "same": False} for k, v in now.items() if k not in then]
    return {
        "changes": applied,
        "change": change,
        "selected": str(change.code) if change else INITIAL,
        "rows": rows,
        "differs": any(not row["same"] for row in rows),
        "latest": change is not None and change.id == applied[0].id,
    }


def environment_history(environment: Environment, *, at: str | None = None) -> dict:
    """The environment page's history part: ledger, configuration at a past change, measurements."""
    return {
        "ledger": ledger(environment),
        "config_at": configuration_at(environment, at),
        "measurements": environment.measurements.select_related("tuning_change", "run", "created_by"),
    }


# The figures of a trial's summary shown per run, and pooled (± sd between trials) for the set.
FIGURES = [
    ("apd", "apd_ms", "APD"),
    ("p95", "p95_ms", "p95"),
    ("pages_per_s", "pages_per_s", "pages/s"),
    ("error_rate", "error_rate_pct", "error rate"),
]


def trial_rows(runs: list[Run]) -> list[dict]:
    """One row per trial: its run, its figures (from the summary's totals) and its doubts."""
    rows = []
    for position, run in enumerate(runs, start=1):
        totals = RunSummary.of(run).totals
        rows.append(
            {
                "trial": position,
                "run": run,
                **{name: totals.get(key) for name, key, _ in FIGURES},
                "counts": run.counts,
                # An active run is not doubtful, only unfinished.
                "doubts": [] if run.is_active else run.doubts,
            }
        )
    return rows


def spread(runs: list[Run]) -> dict:
    """The set's own figures (``comparison.pooled_figures``: its counting trials pooled, as its
    comparisons, the journey and the API show them), with the sample standard deviation of
    the trials' own figures beside them (the spread the comparisons weigh differences against).

    Only counting runs join (``run.counts``): a cancelled trial or one measured by a
    saturated generator would widen or shift the spread that comparisons weigh
    differences against.
    """
    counting = [run for run in runs if run.counts]
    pooled = comparison.pooled_figures(counting).get(None) or {}
    out = {"n": len(counting)}
    for name, key, label in FIGURES:
        values = [float(v) for run in counting if (v := RunSummary.of(run).totals.get(key)) is not None]
        out[name] = {
            "label": label,
            "value": pooled.get(key),
            "sd": statistics.stdev(values) if len(values) >= 2 else None,
            "n": len(values),
        }
    return out


def trialset_progress(trial_set: TrialSet, runs: list[Run]) -> dict:
    """Trials finished of the set's size, the running trial's own progress, and what it waits for.

    The bar counts each finished trial as one part and the running one by its elapsed
    share of its planned duration, so the set's bar moves while a trial runs. A running
    set with no active trial is either starting its next trial or waiting for another
    run to leave the environment (one run per environment): ``waiting_for`` names it.
    """
    finished = sum(1 for run in runs if not run.is_active)
    current = next((run for run in runs if run.is_active), None)
    current_pct = run_live_figures(current)["progress_pct"] if current and current.start_at else 0.0
    if trial_set.status == TrialSet.Status.DONE:
        pct = 100.0
    else:
        pct = round(min(100.0, 100 * (finished + current_pct / 100) / max(trial_set.size, 1)), 1)
    waiting_for = None
    if trial_set.is_active and current is None and trial_set.environment_id:
        busy = active_run_on(trial_set.environment_id)
        if busy is not None and busy.trial_set_id != trial_set.id:
            waiting_for = busy
    return {
        "finished": finished,
        "size": trial_set.size,
        "current": current,
        "current_number": len(runs) if current else None,
        "current_pct": current_pct,
        "pct": pct,
        "waiting_for": waiting_for,
    }


DONE, CURRENT, WAITING, FAILED = "done", "current", "waiting", "failed"
STEP_MARKS = {DONE: "✓", CURRENT: "●", WAITING: "○", FAILED: "✕"}


def _set_state(trial_set: TrialSet | None, *, running_status: str, experiment: Experiment) -> str:
    if trial_set is None:
        return WAITING
    if trial_set.status == TrialSet.Status.DONE:
        return DONE
    if trial_set.status == TrialSet.Status.STOPPED:
        return FAILED
    return CURRENT if experiment.status == running_status else WAITING


def experiment_steps(experiment: Experiment) -> list[dict]:
    """The four steps with their state (done ✓, current ●, waiting ○, failed or stopped ✕).

    Read from the trial sets and the change themselves rather than from the experiment's
    status alone, so a stopped experiment shows where it stopped and why.
    """
    Status = Experiment.Status
    change = experiment.change
    baseline, after = experiment.baseline, experiment.after
    sets = {}
    for role, trial_set in (("baseline", baseline), ("after", after)):
        runs = list(trial_set.runs.order_by("id")) if trial_set else []
        sets[role] = {"set": trial_set, "finished": sum(1 for r in runs if not r.is_active), "runs": runs}

    baseline_state = _set_state(baseline, running_status=Status.BASELINE, experiment=experiment)
    if change.status == TuningChange.Status.APPLIED:
        apply_state = DONE
    elif change.status == TuningChange.Status.FAILED or (
        experiment.status in (Status.FAILED, Status.STOPPED) and baseline_state == DONE
    ):
        apply_state = FAILED
    elif experiment.status in (Status.APPLYING, Status.AWAITING):
        apply_state = CURRENT
    else:
        apply_state = WAITING
    after_state = _set_state(after, running_status=Status.AFTER, experiment=experiment)
    if experiment.status == Status.DONE:
        compare_state = DONE
    elif experiment.status in (Status.FAILED, Status.STOPPED):
        compare_state = FAILED if after_state == FAILED else WAITING
    else:
        compare_state = WAITING

    def progress(role: str) -> dict:
        info = sets[role]
        trial_set = info["set"]
        return trialset_progress(trial_set, info["runs"]) if trial_set else {"finished": 0, "pct": 0}

    steps = [
        {"key": "baseline", "title": "Baseline trials", "state": baseline_state, "set": baseline},
        {"key": "apply", "title": "Apply the change", "state": apply_state},
        {"key": "after", "title": "Trials after the change", "state": after_state, "set": after},
        {"key": "compare", "title": "Comparison", "state": compare_state},
    ]
    for number, step in enumerate(steps, start=1):
        step["number"] = number
        step["mark"] = STEP_MARKS[step["state"]]
        if step["key"] in sets:
            step["progress"] = progress(step["key"])
    return steps


def experiment_waiting_for(experiment: Experiment) -> Run | None:
    """The run that keeps a hook from being sent (the change waits for the environment to be free)."""
    if experiment.status != Experiment.Status.APPLYING:
        return None
    return active_run_on(experiment.environment_id)


def experiments_related(queryset):
    """Experiments with what their pages and the API show of each, in a fixed number of queries."""
    return queryset.select_related("project__team", "plan", "environment", "change", "created_by").prefetch_related(
        "trial_sets"
    )


def annotations(*, runs, changes, start, end, project: str | None = None):
    """Runs that overlap ``start``–``end`` and tuning changes applied within it, oldest first (Grafana's markers).

    ``runs`` and ``changes`` come already scoped to the caller; ``project`` is a project's name or code.
    """
    runs = (
        runs.filter(start_at__lt=end, start_at__isnull=False)
        .filter(Q(finished_at__gte=start) | Q(finished_at__isnull=True))
        .select_related("project", "baseline_verdict")
        .order_by("start_at")
    )
    changes = (
        changes.filter(applied_at__gte=start, applied_at__lt=end)
        .select_related("environment__project")
        .order_by("applied_at")
    )
    if project:
        by = Q(project__name=project)
        by_change = Q(environment__project__name=project)
        try:
            code = uuid.UUID(project)
        except ValueError:
            pass
        else:
            by |= Q(project__code=code)
            by_change |= Q(environment__project__code=code)
        runs, changes = runs.filter(by), changes.filter(by_change)
    return runs, changes
