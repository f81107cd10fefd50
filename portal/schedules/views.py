import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.accounts import access
from portal.accounts.access import get_for_user
from portal.projects.models import Project
from portal.stats.shifts import MIN_RUNS

from . import baselines, change_points, selectors, services, timing
from .forms import BaselineForm, ScheduleForm
from .models import Schedule

# The morning view lists each plan's newest change points, this many.
MORNING_CHANGE_POINTS = 3


def _save(form: ScheduleForm, project, schedule=None) -> Schedule | None:
    data = form.cleaned_data
    try:
        return services.schedule_save(
            project=project,
            plan=data["plan"],
            kind=data["kind"],
            at_time=data.get("at_time"),
            every_hours=data.get("every_hours"),
            cron=data.get("cron") or "",
            time_zone=data["time_zone"],
            enabled=data["enabled"],
            ends_on=data.get("ends_on"),
            busy_wait_minutes=data["busy_wait_minutes"],
            catch_up_hours=data["catch_up_hours"],
            schedule=schedule,
        )
    except timing.ScheduleSpecError as exc:
        form.add_error(None, str(exc))
        return None


def _form_context(form, project):
    return {"form": form, "project": project, "time_zones": timing.time_zone_names(), "nav": "projects"}


@login_required
def project_schedules(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    can_write = access.can_write(request.user, project)
    form = None
    if can_write:
        form = ScheduleForm(initial={"kind": "daily", "time_zone": "UTC", "enabled": True}, project=project)
    schedules = list(selectors.project_schedules(project=project))
    now = timezone.now()
    for s in schedules:  # the saved schedule's next fire, under its name
        s.next_fire = next(iter(timing.next_fires(s.cron, s.time_zone, now, count=1)), None) if s.enabled else None
    # "Regressed since run #41 (3 nights)": until the level is accepted or the regression goes away.
    streaks = selectors.regression_streaks(plan_ids=[s.plan_id for s in schedules if s.plan_id])
    # The plans' latest persistent shifts: two queries for all, ~0.1 s of arithmetic per plan (its last 200 runs).
    shifts = change_points.plans_change_points(plans={s.plan for s in schedules if s.plan_id})
    for schedule in schedules:
        schedule.regression = streaks.get(schedule.plan_id)
        schedule.change_points = shifts.get(schedule.plan_id, [])[:MORNING_CHANGE_POINTS]
    context = {
        "schedules": schedules,
        # The morning view: each schedule's trend over its last 30 fires (static/js/charts/schedule-sparklines.js).
        "sparklines": {str(s.code): selectors.sparkline(s) for s in schedules},
        "can_write": can_write,
        "change_points_min_runs": MIN_RUNS,
        **_form_context(form, project),
    }
    return render(request, "schedules/list.html", context)


@login_required
@require_POST
def schedule_new(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    form = ScheduleForm(request.POST, project=project)
    if form.is_valid() and (schedule := _save(form, project)):
        messages.success(request, f"Schedule saved: {schedule.description}.")
        return redirect("schedules:project", project.code)
    context = {"schedules": selectors.project_schedules(project=project), "can_write": True}
    return render(request, "schedules/list.html", {**context, **_form_context(form, project)}, status=400)


@login_required
def schedule_edit(request, code):
    schedule = get_for_user(request.user, Schedule.objects.select_related("project__team", "plan"), code=code)
    project = schedule.project
    can_write = access.can_write(request.user, project)
    if request.method == "POST":
        get_for_user(request.user, Schedule.objects.all(), code=code, write=True)
        form = ScheduleForm(request.POST, project=project)
        if form.is_valid() and _save(form, project, schedule):
            messages.success(request, "Schedule saved.")
            return redirect(schedule)
    else:
        form = ScheduleForm(initial=ScheduleForm.initial_for(schedule), project=project)
    context = {
        "schedule": schedule,
        "fires": selectors.schedule_fires(schedule=schedule),
        "next_fires": _next_fires(schedule.cron, schedule.time_zone) if schedule.enabled else [],
        "baseline": baselines.baseline_of(schedule.plan) if schedule.plan else None,
        "baseline_form": _baseline_form(schedule) if can_write and schedule.plan else None,
        "can_write": can_write,
        **_form_context(form if can_write else None, project),
    }
    return render(request, "schedules/detail.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def schedule_toggle(request, code):
    schedule = get_for_user(request.user, Schedule.objects.all(), code=code, write=True)
    services.schedule_set_enabled(schedule=schedule, enabled=not schedule.enabled)
    messages.success(request, "Schedule paused." if schedule.enabled else "Schedule enabled: it fires from now on.")
    return redirect(schedule)


@login_required
@require_POST
def schedule_delete(request, code):
    schedule = get_for_user(request.user, Schedule.objects.select_related("project"), code=code, write=True)
    project = schedule.project
    schedule.delete()
    messages.success(request, "Schedule deleted.")
    return redirect("schedules:project", project.code)


def _baseline_form(schedule):
    baseline = baselines.baseline_of(schedule.plan)
    initial = {
        "kind": baseline.kind,
        "last_n": baseline.last_n,
        "run": baseline.run_id,
        "trial_set": baseline.trial_set_id,
        "tolerance_pct": baseline.tolerance_pct,
    }
    return BaselineForm(initial=initial, plan=schedule.plan)


def _next_fires(expression, tz_name):
    return [t for t in timing.next_fires(expression, tz_name, timezone.now())]


@login_required
def schedule_preview(request, code):
    """The form's reading as you type: the schedule in words and its next five fire times (an HTMX partial)."""
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    form = ScheduleForm(request.GET, project=project)
    # Only the timing matters here: a preview before a plan is chosen is still useful.
    form.fields["plan"].required = False
    context = {"preview_error": None, "reading": None, "next_fires": []}
    if form.is_valid():
        data = form.cleaned_data
        context["reading"] = timing.describe(data["expression"], data["time_zone"])
        context["next_fires"] = _next_fires(data["expression"], data["time_zone"])
        context["time_zone"] = data["time_zone"]
    else:
        errors = [e for field_errors in form.errors.values() for e in field_errors]
        context["preview_error"] = " ".join(errors)
    return render(request, "schedules/_preview.html", context)


@login_required
@require_POST
def baseline_edit(request, code):
    """Pins the baseline of the schedule's plan (the form sits on the schedule's page)."""
    schedule = get_for_user(request.user, Schedule.objects.select_related("plan", "project"), code=code, write=True)
    if schedule.plan is None:
        messages.error(request, "The schedule's plan was deleted: there is nothing to pin a baseline for.")
        return redirect(schedule)
    form = BaselineForm(request.POST, plan=schedule.plan)
    if form.is_valid():
        data = form.cleaned_data
        try:
            baselines.baseline_save(
                plan=schedule.plan,
                kind=data["kind"],
                last_n=data["last_n"],
                run=data.get("run"),
                trial_set=data.get("trial_set"),
                tolerance_pct=data["tolerance_pct"],
            )
        except baselines.BaselineError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, "Baseline saved: the plan's next finished runs are judged against it.")
    else:
        messages.error(request, " ".join(e for errors in form.errors.values() for e in errors))
    return redirect(schedule)


@login_required
@require_POST
def regression_accept(request, code):
    """Accepts a regressed run's level as the new normal (the form sits in the run page's verdict)."""
    from portal.history.models import TuningChange
    from portal.runs.models import Run

    run = get_for_user(request.user, Run.objects.select_related("project", "environment"), code=code, write=True)
    change = None
    if change_code := request.POST.get("change", "").strip():
        try:
            change_code = uuid.UUID(change_code)
        except ValueError:  # a malformed code names no change: the same answer as an unknown one
            change_code = None
        change = TuningChange.objects.filter(environment_id=run.environment_id, code=change_code).first()
        if change is None:
            messages.error(request, "Link a tuning change applied on the run's environment.")
            return redirect(run)
    try:
        accepted = baselines.regression_accept(
            run=run, user=request.user, reason=request.POST.get("reason", ""), change=change
        )
    except baselines.BaselineError as exc:
        messages.error(request, str(exc))
    else:
        numbers = ", ".join(f"#{v.run.number}" for v in accepted)
        messages.success(request, f"Accepted as the new normal: run{'s' if len(accepted) > 1 else ''} {numbers}.")
    return redirect(run)
