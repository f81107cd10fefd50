from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.accounts.access import get_for_user, membership_for, scoped
from portal.projects.models import Plan, Project

from . import analysis, selectors, services
from .models import Run

RUN_LIST_LIMIT = 200


def _runs_table(request, runs, **context):
    return render(request, "runs/list.html", {"runs": runs[:RUN_LIST_LIMIT], "nav": "runs", **context})


@login_required
def run_list(request):
    runs = scoped(Run.objects.select_related("project", "project__team"), request.user)
    return _runs_table(request, runs)


@login_required
def project_runs(request, code):
    project = get_for_user(request.user, Project.objects.all(), code=code)
    return _runs_table(request, project.runs.select_related("project"), project=project)


@login_required
@require_POST
def run_start(request, code):
    plan = get_for_user(request.user, Plan.objects.select_related("project", "environment"), code=code, write=True)
    try:
        run = services.run_create(plan=plan, user=request.user)
    except services.RunError as exc:
        messages.error(request, str(exc))
        return redirect(plan)
    return redirect(run)


@login_required
def run_detail(request, code):
    run = get_for_user(request.user, Run.objects.select_related("project", "plan", "environment"), code=code)
    membership = membership_for(request.user, run.project.team)
    context = {
        "run": run,
        "nav": "runs",
        "live": selectors.run_live_figures(run),
        "can_write": membership is not None and membership.can_write,
        "shards": run.shards.all(),
    }
    if request.htmx and not request.htmx.boosted:
        response = render(request, "runs/detail.html#live", context)
        if not run.is_active:
            # The run has ended: reload the page to show the report instead of the live view.
            response["HX-Refresh"] = "true"
        return response
    return render(request, "runs/detail.html", context)


@login_required
def run_series(request, code):
    run = get_for_user(request.user, Run.objects.all(), code=code)
    data = analysis.series(run)
    data.update(
        {
            "status": run.status,
            "active": run.is_active,
            "windows": [[start, end, label] for start, end, label in run.measurement_windows],
            "duration_s": run.planned_duration,
        }
    )
    return JsonResponse(data)


@login_required
@require_POST
def run_stop(request, code):
    run = get_for_user(request.user, Run.objects.all(), code=code, write=True)
    if run.is_active:
        services.run_cancel(run=run)
        messages.info(request, "Stopping: the workers end the run within a second or two.")
    if request.htmx:
        return run_detail(request, code)
    return redirect(run)
