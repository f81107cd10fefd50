"""Pages of tuning changes, an environment's ledger and external measurements.

A change is recorded and applied in one go from its form: its hook (if any) is sent, and
the environment takes the new configuration only if the hook succeeded. A failed change
stays in the ledger with the hook's answer, so that what was tried is never lost.

Every object is reached through ``access.get_for_user``: another team's is a 404, and a
viewer's attempt to change something a 403.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_http_methods, require_POST

from portal.accounts import access
from portal.accounts.access import get_for_user
from portal.projects.models import Environment
from portal.runs.models import Run

from .. import services
from ..forms import ChangeForm, MeasurementForm, revert_prefill
from ..journey import change_models
from ..models import ExternalMeasurement, TuningChange, apply_edits

# --------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------


def _environment(request, code, *, write: bool = False) -> Environment:
    return get_for_user(request.user, Environment.objects.select_related("project__team"), code=code, write=write)


def _reverted(environment: Environment, code: str | None) -> TuningChange | None:
    """The applied change of this environment that ``?revert=`` names (404 for any other)."""
    if not code:
        return None
    try:
        change = environment.changes.get(code=code, status=TuningChange.Status.APPLIED)
    except (TuningChange.DoesNotExist, ValueError, ValidationError):
        raise Http404 from None
    change.environment = environment
    return change


@login_required
@require_http_methods(["GET", "POST"])
def change_new(request, code):
    """Records a tuning change and applies it: its hook first (if any), then the configuration."""
    environment = _environment(request, code, write=True)
    reverted = _reverted(environment, request.GET.get("revert"))
    prefill = revert_prefill(reverted) if reverted else None
    context = {
        "environment": environment,
        "project": environment.project,
        "reverted": reverted,
        "prefill": prefill,
        "nav": "projects",
    }
    if request.method == "POST":
        form = ChangeForm(request.POST, environment=environment)
        if form.is_valid():
            try:
                change = services.change_create(
                    environment=environment, user=request.user, edits=form.edits, **form.change_fields
                )
            except services.ChangeError as exc:
                form.add_error(None, str(exc))
            else:
                try:
                    services.change_apply(change, user=request.user)
                except services.EnvironmentBusyForChange as exc:
                    # Nothing was sent and nothing changed: no record, the user saves again later.
                    change.delete()
                    context["apply_error"] = str(exc)
                except services.ChangeError as exc:
                    context["apply_error"] = str(exc)
                    context["failed"] = change
                    context["hook_at"] = parse_datetime((change.hook_response or {}).get("at") or "")
                else:
                    messages.success(request, f"Change #{change.number} “{change.title}” applied.")
                    return redirect(change)
    elif prefill:
        form = ChangeForm(
            environment=environment,
            initial_configuration=prefill["initial_configuration"],
            initial=prefill["initial"],
        )
    else:
        form = ChangeForm(environment=environment)
    context["form"] = form
    return render(request, "history/change_form.html", context)


@login_required
def change_detail(request, code):
    change = get_for_user(
        request.user,
        TuningChange.objects.select_related("environment__project__team", "made_by", "experiment"),
        code=code,
    )
    environment = change.environment
    experiment = getattr(change, "experiment", None)
    can_write = access.can_write(request.user, change)
    response = change.hook_response or {}
    context = {
        "change": change,
        "environment": environment,
        "project": environment.project,
        "experiment": experiment,
        "diff": change.diff,
        "configuration": change.config_after
        if change.is_applied
        else apply_edits(environment.configuration, change.edits),
        "runs": change.runs.order_by("-number"),
        "models": change_models(change),
        "measurements": change.measurements.select_related("run", "created_by"),
        "response": response,
        "hook_at": parse_datetime(response.get("at") or ""),
        "verified_at": parse_datetime((change.verification or {}).get("at") or ""),
        "can_write": can_write,
        "can_apply": can_write and not change.is_applied and experiment is None,
        "nav": "projects",
    }
    return render(request, "history/change_detail.html", context)


@login_required
def change_prometheus(request, code):
    """The change's server figures before → after from the environment's Prometheus (loaded by its page)."""
    from portal.metrics.before_after import change_before_after

    change = get_for_user(request.user, TuningChange.objects.select_related("environment__project__team"), code=code)
    context = {"change": change, "figures": change_before_after(change)}
    return render(request, "history/_change_prometheus.html", context)


@login_required
@require_POST
def change_apply(request, code):
    """Applies a planned change, or tries a failed one again (its hook is sent again)."""
    change = get_for_user(
        request.user,
        TuningChange.objects.select_related("environment__project__team", "experiment"),
        code=code,
        write=True,
    )
    experiment = getattr(change, "experiment", None)
    if experiment is not None:
        messages.error(request, f"This change belongs to the experiment “{experiment}”, which applies it in its turn.")
    elif change.is_applied:
        messages.info(request, f"Change #{change.number} is already applied.")
    else:
        try:
            services.change_apply(change, user=request.user)
        except services.ChangeError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Change #{change.number} “{change.title}” applied.")
    return redirect(change)


@login_required
@require_http_methods(["GET", "POST"])
def measurement_new(request, code):
    environment = _environment(request, code, write=True)
    initial = {"tuning_change": request.GET.get("change"), "run": request.GET.get("run")}
    form = MeasurementForm(request.POST or None, environment=environment, initial=initial)
    if request.method == "POST" and form.is_valid():
        measurement = services.measurement_record(environment=environment, user=request.user, **form.measurement_fields)
        under = f"#{measurement.tuning_change.number}" if measurement.tuning_change else "the initial configuration"
        messages.success(request, f"Recorded {measurement} under {under}.")
        return redirect(environment.get_absolute_url() + "#measurements")
    context = {"form": form, "environment": environment, "project": environment.project, "nav": "projects"}
    return render(request, "history/measurement_form.html", context)


@login_required
@require_POST
def measurement_delete(request, code):
    measurement = get_for_user(
        request.user,
        ExternalMeasurement.objects.select_related("environment__project__team"),
        code=code,
        write=True,
    )
    services.measurement_delete(measurement=measurement)
    messages.success(request, f"Measurement “{measurement}” of {measurement.measured_at:%Y-%m-%d %H:%M} deleted.")
    return redirect(measurement.environment.get_absolute_url() + "#measurements")


@login_required
@require_POST
def run_include(request, code):
    """Counts a doubtful run in trends and verdicts anyway, or leaves it out again.

    The form says which (``include`` = 1 or 0), so a double submit cannot undo itself;
    without it the choice flips.
    """
    run = get_for_user(request.user, Run.objects.select_related("project__team"), code=code, write=True)
    wanted = request.POST.get("include")
    try:
        services.run_include(run=run, include={"1": True, "0": False}.get(wanted))
    except services.RunNotFinished as exc:
        messages.error(request, str(exc))
        return redirect(run)
    if run.include_anyway:
        doubts = "; ".join(run.doubts) or "nothing is in doubt"
        messages.success(request, f"Run #{run.number} now counts in trends and verdicts, although {doubts}.")
    else:
        messages.success(request, f"Run #{run.number} is left out of trends and verdicts again.")
    return redirect(run.get_absolute_url() + "#doubts")
