import tempfile
from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models.fields.json import KeyTransform
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.accounts.access import get_for_user, membership_for, scoped
from portal.projects.models import Environment, Plan, Project

from . import result_files, selectors, services
from .forms import ResultUploadForm
from .models import Run

RUNS_PER_PAGE = 100


def _runs_table(request, runs, **context):
    # Pages of runs, newest first: a nightly soak makes thousands, and every one stays reachable.
    # A row shows four of the summary's figures and the load: only those are read, not each run's
    # whole summary (the windows, degradation series and page table of a soak) and plan snapshot.
    runs = runs.defer("summary", "plan_snapshot", "config_snapshot", "analysis_settings").annotate(
        totals=KeyTransform("totals", "summary"), profile=KeyTransform("profile", "plan_snapshot")
    )
    page = Paginator(runs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "runs/list.html", {"runs": page.object_list, "page": page, "nav": "runs", **context})


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
        "handoffs": selectors.run_handoffs(run),
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
    since = request.GET.get("since")
    if since is not None:
        if not (since.isascii() and since.isdigit() and len(since) <= 9):
            return JsonResponse({"error": "since must be a whole number of seconds (0 or more)"}, status=400)
        since = int(since)
    return JsonResponse(selectors.run_series(run, since=since))


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


@login_required
def results_import(request, code):
    """Result files of other tools into imported runs of an environment: one run per file (issue 18)."""
    environment = get_for_user(request.user, Environment.objects.select_related("project__team"), code=code, write=True)
    form = ResultUploadForm(request.POST or None, request.FILES or None, environment=environment)
    if request.method == "POST" and form.is_valid():
        for upload in form.cleaned_data["files"]:
            _import_upload(request, environment, upload, form.cleaned_data["format"] or None, form.cleaned_data["plan"])
        return redirect(environment)
    context = {"form": form, "environment": environment, "project": environment.project, "nav": "projects"}
    return render(request, "runs/results_import.html", context, status=400 if form.errors else 200)


def _import_upload(request, environment, upload, format_: str | None, plan) -> None:
    """Imports one uploaded file through a temporary copy, deleted afterwards; says what became of it."""
    with tempfile.NamedTemporaryFile(suffix=".upload") as copy:
        for chunk in upload.chunks():
            copy.write(chunk)
        copy.flush()
        try:
            run, created = services.run_import(
                environment=environment,
                user=request.user,
                path=Path(copy.name),
                file_name=upload.name,
                format=format_,
                plan=plan,
            )
        except result_files.ResultFileError as refusal:
            messages.error(request, f"{upload.name}: {refusal}")
            return
    verb = "imported as" if created else "was already imported as"
    messages.success(request, f"{upload.name} {verb} run #{run.number}.")
