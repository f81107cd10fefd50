"""Pages of trial sets and experiments.

A trial set is N runs of a plan in a row; an experiment is a seed story automated
(baseline trials, the change, trials after, the comparison). Both move on their own
(``services.trialset_advance``/``experiment_advance``, on each run's end and from the
watchdog), so these pages only start, stop or confirm, and show where things are: their
live region is a ``partialdef`` that polls itself every 2 s while something runs.

Each view's first line fetches its object through ``access.get_for_user``: another team's
object is a 404, and a viewer's attempt to change it a 403.
"""

import statistics

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from portal.accounts.access import get_for_user, membership_for
from portal.projects.models import Plan, Project
from portal.runs.models import Run
from portal.runs.selectors import run_live_figures
from portal.runs.services import RunError, active_run_on

from .. import comparison, services
from ..experiment_forms import CHANGE_PREFIX, ExperimentForm, PlanChoiceForm, TrialSetForm, TrialSetFromRunsForm
from ..models import Experiment, TrialSet, TuningChange

# The figures of a trial's summary shown per run, and pooled (± sd between trials) for the set.
FIGURES = [
    ("apd", "apd_ms", "APD"),
    ("p95", "p95_ms", "p95"),
    ("pages_per_s", "pages_per_s", "pages/s"),
    ("error_rate", "error_rate_pct", "error rate"),
]
# The reason services.trialset_stop and experiment_stop record.
STOPPED_BY_USER = "Stopped by a user."


def _fragment(request) -> bool:
    """HTMX asks for a page region (a boosted link wants the whole page)."""
    return bool(request.htmx) and not request.htmx.boosted


def _can_write(user, project: Project) -> bool:
    membership = membership_for(user, project.team)
    return membership is not None and membership.can_write


# --------------------------------------------------------------------------------------
# What a trial set looks like now
# --------------------------------------------------------------------------------------


def trial_rows(runs: list[Run]) -> list[dict]:
    """One row per trial: its run, its figures (from the summary's totals) and its doubts."""
    rows = []
    for position, run in enumerate(runs, start=1):
        totals = (run.summary or {}).get("totals") or {}
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
        values = [float(v) for run in counting if (v := ((run.summary or {}).get("totals") or {}).get(key)) is not None]
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


def _trialset_context(request, trial_set: TrialSet) -> dict:
    runs = list(trial_set.runs.order_by("id"))
    project = trial_set.project
    compare_url = reverse("history:compare", args=[project.code])
    experiment = trial_set.experiment
    if experiment and trial_set.role == TrialSet.Role.AFTER and experiment.baseline:
        compare_url += f"?a={experiment.baseline.code}&b={trial_set.code}"
    else:
        compare_url += f"?a={trial_set.code}"
    return {
        "trial_set": trial_set,
        "project": project,
        "experiment": experiment,
        "rows": trial_rows(runs),
        "spread": spread(runs),
        "progress": trialset_progress(trial_set, runs),
        # A stopped set keeps polling until its cancelled trial has really ended.
        "polling": trial_set.is_active or any(run.is_active for run in runs),
        "compare_url": compare_url,
        # A set a person stopped is a notice; one a failed trial stopped is an error.
        "stopped_by_user": trial_set.error_message == STOPPED_BY_USER,
        "can_write": _can_write(request.user, project),
        "nav": "projects",
    }


# --------------------------------------------------------------------------------------
# Trial sets
# --------------------------------------------------------------------------------------


@login_required
@require_POST
def trialset_from_runs(request, code):
    """A trial set of runs that already exist, imported ones above all (POST from the import page; issue 18)."""
    from portal.projects.models import Environment

    environment = get_for_user(request.user, Environment.objects.select_related("project__team"), code=code, write=True)
    form = TrialSetFromRunsForm(request.POST, environment=environment)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, f"No trial set was made: {error}")
        return redirect("runs:import", code=environment.code)
    try:
        trial_set = services.trialset_from_runs(
            runs=list(form.cleaned_data["runs"]), user=request.user, label=form.cleaned_data["label"]
        )
    except services.TrialSetRefused as exc:
        messages.error(request, f"No trial set was made: {exc}")
        return redirect("runs:import", code=environment.code)
    messages.success(request, f"A trial set of {trial_set.size} runs: compare it with another set or run.")
    return redirect(trial_set)


@login_required
def trialset_new(request, code):
    """Runs a plan N times in a row (POST from the plan page); GET shows the same form on its own page."""
    plan = get_for_user(
        request.user, Plan.objects.select_related("project__team", "environment"), code=code, write=True
    )
    form = TrialSetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            trial_set = services.trialset_start(
                plan=plan, size=form.cleaned_data["size"], user=request.user, label=form.cleaned_data["label"]
            )
        except RunError as exc:
            messages.error(request, f"The trials did not start: {exc}")
            return redirect(plan)
        messages.success(request, f"{trial_set.size} trials of “{plan.name}” started: they run one after the other.")
        return redirect(trial_set)
    context = {
        "form": form,
        "plan": plan,
        "project": plan.project,
        "problems": plan.problems(),
        "nav": "projects",
    }
    return render(request, "history/trialset_form.html", context, status=400 if request.method == "POST" else 200)


@login_required
@vary_on_headers("HX-Request")  # a page or its live region, from one URL
def trialset_detail(request, code):
    trial_set = get_for_user(
        request.user,
        TrialSet.objects.select_related("project__team", "plan", "environment", "experiment", "created_by"),
        code=code,
    )
    context = _trialset_context(request, trial_set)
    if _fragment(request):
        return render(request, "history/trialset_detail.html#live", context)
    return render(request, "history/trialset_detail.html", context)


@login_required
@require_POST
def trialset_stop(request, code):
    trial_set = get_for_user(request.user, TrialSet.objects.select_related("project__team"), code=code, write=True)
    if trial_set.is_active:
        services.trialset_stop(trial_set)
        messages.info(request, "Stopped: the running trial ends within a second or two, and no other starts.")
    return redirect(trial_set)


# --------------------------------------------------------------------------------------
# What an experiment looks like now
# --------------------------------------------------------------------------------------

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


# The badge colour of each experiment status (the run statuses' colours).
EXPERIMENT_BADGES = {
    Experiment.Status.DRAFT: "",
    Experiment.Status.DONE: "passed",
    Experiment.Status.FAILED: "failed",
    Experiment.Status.STOPPED: "cancelled",
}


def _with_badge(experiment: Experiment) -> Experiment:
    experiment.badge = EXPERIMENT_BADGES.get(experiment.status, "running")
    return experiment


def _experiment_context(request, experiment: Experiment) -> dict:
    _with_badge(experiment)
    return {
        "experiment": experiment,
        "project": experiment.project,
        "change": experiment.change,
        "steps": experiment_steps(experiment),
        "waiting_for": experiment_waiting_for(experiment),
        "report": comparison.experiment_report(experiment),
        "can_write": _can_write(request.user, experiment.project),
        "nav": "projects",
    }


def _experiments(queryset):
    return queryset.select_related("project__team", "plan", "environment", "change", "created_by").prefetch_related(
        "trial_sets"
    )


# --------------------------------------------------------------------------------------
# Experiments
# --------------------------------------------------------------------------------------


@login_required
def experiment_list(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    experiments = [_with_badge(e) for e in _experiments(project.experiments.all())]
    context = {
        "project": project,
        "experiments": experiments,
        "can_write": _can_write(request.user, project),
        "nav": "projects",
    }
    return render(request, "history/experiment_list.html", context)


def _change_form(data, environment):
    from portal.history.forms import ChangeForm

    return ChangeForm(data, environment=environment, prefix=CHANGE_PREFIX)


@login_required
def experiment_new(request, code):
    """A new experiment in two steps: the plan first (``?plan=<code>``), then the experiment and its change.

    The change form is written against the plan's environment (its configuration text
    starts as that environment's), so the plan is fixed before the change is described;
    choosing another plan reloads the page rather than leaving a change aimed at the
    wrong configuration.
    """
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    plan_code = request.GET.get("plan")
    if not plan_code:
        context = {"project": project, "plan_form": PlanChoiceForm(project=project), "nav": "projects"}
        return render(request, "history/experiment_form.html", context)
    plan = get_for_user(
        request.user,
        Plan.objects.select_related("project__team", "environment").filter(project=project),
        code=plan_code,
    )
    form = ExperimentForm(request.POST or None)
    change_form = _change_form(request.POST or None, plan.environment)
    if request.method == "POST" and form.is_valid() and change_form.is_valid():
        form.check_with_change(change_form)
    if request.method == "POST" and not form.errors and not change_form.errors:
        experiment = _experiment_save(request, plan, form, change_form)
        if experiment is not None:
            messages.success(request, "Experiment saved. Press Start when the environment is ready.")
            return redirect(experiment)
    fields = list(change_form.visible_fields())
    context = {
        "project": project,
        "plan": plan,
        "plan_form": PlanChoiceForm(project=project, initial={"plan": plan}),
        "form": form,
        "change_form": change_form,
        "change_fields": [f for f in fields if not f.name.startswith("hook_")],
        "hook_fields": [f for f in fields if f.name.startswith("hook_")],
        "problems": plan.problems(),
        "nav": "projects",
    }
    return render(request, "history/experiment_form.html", context, status=400 if request.method == "POST" else 200)


def _experiment_save(request, plan: Plan, form: ExperimentForm, change_form) -> Experiment | None:
    """The planned change and its experiment, together or not at all; a refusal becomes a form error."""
    try:
        with transaction.atomic():
            change = services.change_create(
                environment=plan.environment, user=request.user, edits=change_form.edits, **change_form.change_fields
            )
            return services.experiment_create(
                plan=plan,
                user=request.user,
                title=form.cleaned_data["title"],
                description=form.cleaned_data["description"],
                trials=form.cleaned_data["trials"],
                apply_mode=form.cleaned_data["apply_mode"],
                change=change,
            )
    except services.ChangeError as exc:
        form.add_error(None, str(exc))
        return None


@login_required
@vary_on_headers("HX-Request")  # a page or its live region, from one URL
def experiment_detail(request, code):
    experiment = get_for_user(request.user, _experiments(Experiment.objects.all()), code=code)
    context = _experiment_context(request, experiment)
    if _fragment(request):
        response = render(request, "history/experiment_detail.html#live", context)
        if not experiment.is_active:
            # It has ended: reload the whole page (the comparison and its charts, no more polling).
            response["HX-Refresh"] = "true"
        return response
    return render(request, "history/experiment_detail.html", context)


@login_required
@require_POST
def experiment_start(request, code):
    experiment = get_for_user(request.user, _experiments(Experiment.objects.all()), code=code, write=True)
    try:
        services.experiment_start(experiment, user=request.user)
    except (services.ChangeError, RunError) as exc:
        messages.error(request, f"Not started: {exc}")
    else:
        messages.success(request, f"Started: {experiment.trials} baseline trials run first.")
    return redirect(experiment)


@login_required
@require_POST
def experiment_confirm(request, code):
    """A person says the change has been made by hand: it is recorded and the trials after start."""
    experiment = get_for_user(request.user, _experiments(Experiment.objects.all()), code=code, write=True)
    try:
        services.experiment_confirm(experiment, user=request.user)
    except (services.ChangeError, RunError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "The change is recorded; the trials after it have started.")
    return redirect(experiment)


@login_required
@require_POST
def experiment_stop(request, code):
    experiment = get_for_user(request.user, _experiments(Experiment.objects.all()), code=code, write=True)
    if experiment.is_active:
        services.experiment_stop(experiment)
        messages.info(request, "Stopped: the running trial ends within a second or two, and nothing else starts.")
    return redirect(experiment)
