from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import F
from django.db.models.functions import Coalesce
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.accounts import access
from portal.accounts.access import get_for_user, scoped
from portal.common import is_fragment
from portal.projects.models import Environment, Plan, Project
from portal.schedules import change_points
from portal.stats.shifts import MIN_RUNS

from . import selectors, services
from .forms import ResultUploadForm, RunFilterForm
from .models import Run
from .results import drilldown

RUNS_PER_PAGE = 100
# What a row of the runs list never shows: a run's summary holds its pages, windows, errors and
# analyses (tens of kB for a steps run), its snapshots the plan and configuration. The list
# reads the four figures and the load profile out of them in SQL instead (``list_rows``).
RUN_LIST_UNUSED = ("summary", "plan_snapshot", "config_snapshot", "analysis_settings", "error_message")


def ordered_runs(runs):
    """``runs`` in the list's order: the start time, newest first (a queued run, not started yet, by
    its creation), so a new run of any project comes first. Only ids and the sort key: filters and
    paging run on this, and only the page's rows are read in full (``list_rows``)."""
    return runs.annotate(started=Coalesce("start_at", "created_at")).order_by("-started", "-id")


def list_rows(ids: list[int]) -> list[Run]:
    """The runs of one page of the list (``ids`` in order), with what a row shows, in one query.

    Related rows (project, plan, environment, tuning change, who started it, a schedule's fire,
    the baseline verdict) are joined; the four figures and the load profile come out of the
    summary's and snapshot's JSON in the database, never the whole summary (tens of kB for a
    steps run). Reading them for the page's ids only matters: PostgreSQL would otherwise extract
    them from every matching run before sorting (0.55 s at 10,000 runs; bench/run_list.py).
    """
    rows = (
        Run.objects.filter(id__in=ids)
        .select_related(
            "project",
            "plan",
            "environment",
            "tuning_change",
            "created_by",
            "baseline_verdict",
            "schedule_fire__schedule",
        )
        .defer(*RUN_LIST_UNUSED, "baseline_verdict__rows", "baseline_verdict__basis", "tuning_change__hook_response")
        .annotate(
            started=Coalesce("start_at", "created_at"),
            apd_ms=F("summary__totals__apd_ms"),
            p95_ms=F("summary__totals__p95_ms"),
            pages_per_s=F("summary__totals__pages_per_s"),
            error_rate_pct=F("summary__totals__error_rate_pct"),
            summary_verdict=F("summary__verdict"),
            profile=F("plan_snapshot__profile"),
        )
    )
    position = {run_id: i for i, run_id in enumerate(ids)}
    return sorted(rows, key=lambda run: position[run.id])


def _runs_table(request, runs, *, project=None):
    # Pages of runs, newest first: a nightly soak makes thousands, and every one stays reachable.
    form = RunFilterForm(request.GET, user=request.user, project=project)
    runs = form.filter(ordered_runs(runs))
    page = Paginator(runs.values_list("id", flat=True), RUNS_PER_PAGE).get_page(request.GET.get("page"))
    rows = list_rows(list(page.object_list))
    context = {"runs": rows, "page": page, "nav": "runs", "form": form, "project": project}
    return render(request, "runs/list.html", context)


@login_required
def run_list(request):
    return _runs_table(request, scoped(Run.objects.all(), request.user))


@login_required
def capacity(request):
    """The generator pools (slots, use, workers) and, for each of the user's teams, its usage, limits and queue."""
    from portal.accounts.models import Team

    teams = scoped(Team.objects.order_by("name"), request.user)
    context = {
        "nav": "runs",
        "overview": services.pool_overview(),
        "teams": [{"team": team, **services.pool_overview(team.id)} for team in teams],
    }
    return render(request, "runs/capacity.html", context)


@login_required
def project_runs(request, code):
    project = get_for_user(request.user, Project.objects.all(), code=code)
    return _runs_table(request, project.runs.all(), project=project)


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
    context = {
        "run": run,
        "nav": "runs",
        "live": selectors.run_live_figures(run),
        "can_write": access.can_write(request.user, run),
        "shards": selectors.run_shards(run),
        "handoffs": selectors.run_handoffs(run),
        "queue": services.run_queue(run),
        # Its stop criteria as they stand now (each rule's window figure), while it runs.
        "criteria": services.criteria_state(run) if run.status == Run.Status.RUNNING else [],
    }
    if is_fragment(request):
        response = render(request, "runs/detail.html#live", context)
        if not run.is_active:
            # The run has ended: reload the page to show the report instead of the live view.
            response["HX-Refresh"] = "true"
        return response
    if not run.is_active:
        # The plan's persistent shifts that begin at this run (its last 200 runs read: two queries).
        context["change_points"] = change_points.run_change_points(run)
        context["change_points_title"] = "Change points: the plan's figures moved to a new level at this run"
        context["change_points_min_runs"] = MIN_RUNS
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
def run_protocol_series(request, code):
    """Per chart bucket: p95 time to first event, gap and WebSocket round trip, WebSocket messages/s, h2 share.

    ``?since=<s>`` (live polls): the bucket holding that second and the newer ones.
    """
    run = get_for_user(request.user, Run.objects.all(), code=code)
    since = request.GET.get("since")
    if since is not None:
        if not (since.isascii() and since.isdigit() and len(since) <= 9):
            return JsonResponse({"error": "since must be a whole number of seconds (0 or more)"}, status=400)
        since = int(since)
    return JsonResponse(selectors.run_protocol_series(run, since=since))


@login_required
def run_detail_data(request, code):
    """A page's (or all pages') series, figures, distribution and errors, of the run or of a range.

    ``?page=<name>&from=<s>&to=<s>``: the drill-down and the zoom of the run page (portal.runs.results.drilldown).
    """
    run = get_for_user(request.user, Run.objects.all(), code=code)
    try:
        return JsonResponse(selectors.run_detail(run, request.GET))
    except drilldown.RangeError as refusal:
        return JsonResponse({"error": str(refusal)}, status=400)


@login_required
@require_POST
def run_stop(request, code):
    run = get_for_user(request.user, Run.objects.all(), code=code, write=True)
    if run.is_active:
        # No flash message: it outlived the stop (shown on the next page, or left on screen after the run
        # ended). The live section says "Stopping…" while the run is cancelling, and only then.
        services.run_cancel(run=run)
    if request.htmx:
        return run_detail(request, code)
    return redirect(run)


@login_required
def results_import(request, code):
    """Result files of other tools into imported runs of an environment: one run per file (issue 18).

    A POST keeps each file and queues its import (a background task reads it, in bounded memory);
    the page then lists the environment's imports with their progress, polled by HTMX while one
    is under way, and each one's run or error.
    """
    environment = get_for_user(request.user, Environment.objects.select_related("project__team"), code=code, write=True)
    form = ResultUploadForm(request.POST or None, request.FILES or None, environment=environment)
    if request.method == "POST" and form.is_valid():
        for upload in form.cleaned_data["files"]:
            services.result_import_create(
                environment=environment,
                user=request.user,
                chunks=upload.chunks(),
                file_name=upload.name,
                format=form.cleaned_data["format"],
                plan=form.cleaned_data["plan"],
            )
        count = len(form.cleaned_data["files"])
        messages.info(request, f"{count} file{'s' if count > 1 else ''} queued for import: progress below.")
        return redirect("runs:import", code=environment.code)
    from portal.history.experiment_forms import TrialSetFromRunsForm

    imports = list(selectors.result_imports(environment)[:20])
    context = {
        "form": form,
        "environment": environment,
        "project": environment.project,
        "nav": "projects",
        "imports": imports,
        "polling": any(i.is_active for i in imports),
        "trial_form": TrialSetFromRunsForm(environment=environment),
    }
    if request.htmx and request.method == "GET":
        return render(request, "runs/results_import.html#imports", context)
    return render(request, "runs/results_import.html", context, status=400 if form.errors else 200)
