"""Pages of trial sets and experiments.

A trial set is N runs of a plan in a row; an experiment is a seed story automated
(baseline trials, the change, trials after, the comparison). Both move on their own
(``services.trialset_advance``/``experiment_advance``, on each run's end and from the
watchdog), so these pages only start, stop or confirm, and show where things are: their
live region is a ``partialdef`` that polls itself every 2 s while something runs.

Each view's first line fetches its object through ``access.get_for_user``: another team's
object is a 404, and a viewer's attempt to change it a 403.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from portal.accounts import access
from portal.accounts.access import get_for_user
from portal.common import is_fragment
from portal.projects.models import Plan, Project
from portal.runs.services import RunError

from .. import choices, selectors, services
from ..experiment_forms import CHANGE_PREFIX, ExperimentForm, PlanChoiceForm, TrialSetForm, TrialSetFromRunsForm
from ..models import Experiment, TrialSet
from ..selectors import experiment_steps, experiment_waiting_for, spread, trial_rows, trialset_progress

# The reason services.trialset_stop and experiment_stop record.
STOPPED_BY_USER = "Stopped by a user."


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
        "can_write": access.can_write(request.user, project),
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
    if is_fragment(request):
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
        "report": choices.experiment_report(experiment),
        "can_write": access.can_write(request.user, experiment.project),
        "nav": "projects",
    }


# --------------------------------------------------------------------------------------
# Experiments
# --------------------------------------------------------------------------------------


@login_required
def experiment_list(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    experiments = [_with_badge(e) for e in selectors.experiments_related(project.experiments.all())]
    context = {
        "project": project,
        "experiments": experiments,
        "can_write": access.can_write(request.user, project),
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
    experiment = get_for_user(request.user, selectors.experiments_related(Experiment.objects.all()), code=code)
    context = _experiment_context(request, experiment)
    if is_fragment(request):
        response = render(request, "history/experiment_detail.html#live", context)
        if not experiment.is_active:
            # It has ended: reload the whole page (the comparison and its charts, no more polling).
            response["HX-Refresh"] = "true"
        return response
    return render(request, "history/experiment_detail.html", context)


@login_required
@require_POST
def experiment_start(request, code):
    experiment = get_for_user(
        request.user, selectors.experiments_related(Experiment.objects.all()), code=code, write=True
    )
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
    experiment = get_for_user(
        request.user, selectors.experiments_related(Experiment.objects.all()), code=code, write=True
    )
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
    experiment = get_for_user(
        request.user, selectors.experiments_related(Experiment.objects.all()), code=code, write=True
    )
    if experiment.is_active:
        services.experiment_stop(experiment)
        messages.info(request, "Stopped: the running trial ends within a second or two, and nothing else starts.")
    return redirect(experiment)
