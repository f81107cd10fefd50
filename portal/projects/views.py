"""Pages of projects, environments, test cases (with their steps) and plans (with their mix).

Each view's first line fetches its object through ``access.get_for_user``: another team's
object is a 404, and a viewer's attempt to change it a 403. Templates hide the buttons a
viewer may not use, but these checks are what counts.

Steps and the mix are edited in place with HTMX: one template per page, whose live region
is a ``partialdef`` that HTMX requests get alone. Without JavaScript the same URLs take
plain form posts and redirect back to the page.
"""

import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import reswap, retarget

from portal import limits
from portal.accounts import access
from portal.accounts.models import Membership
from portal.common import Invalid, is_fragment, plural
from portal.history.models import TuningChange
from portal.history.selectors import environment_history

from . import drift, har, selectors, services, tryit
from .forms import (
    DataSetModeForm,
    DataSetUploadForm,
    EnvironmentForm,
    HarUploadForm,
    MixAddForm,
    MixWeightForm,
    PlanForm,
    ProjectForm,
    ServerFormSet,
    StepForm,
    TestCaseForm,
    har_choices,
    server_specs,
)
from .models import DataSet, Environment, MixEntry, Plan, Project, Step, TestCase

RECENT_RUNS = 10
RECENT_EXPERIMENTS = 5
PLAN_RUNS = 20
DIRECTIONS = ("up", "down")


def _save(form, save, rows=()):
    """Runs ``save``; a name taken by a concurrent request becomes a form error, not a 500.

    The service checks the values again (the API's path has no form): what it refuses is shown
    beside the form's fields, as the form's own errors are; ``rows``: the forms of the
    service's list of rows ("servers"), in order, to show each row's errors beside it.
    """
    try:
        with transaction.atomic():
            return save()
    except IntegrityError:
        form.add_error("name", "That name was taken a moment ago; choose another.")
    except Invalid as exc:
        for field, messages in exc.errors.items():
            if field == "servers" and rows:
                for row, problems in zip(rows, messages, strict=False):
                    for name, text in (problems or {}).items():
                        row.add_error(name if name in row.fields else None, text)
            flat = [m for m in messages if isinstance(m, str)] or ["Some rows need fixing (see below)."]
            form.add_error(field if field in form.fields else None, flat)
    return None


def _confirm_delete(
    request, obj, *, kind: str, crumbs: list, cancel_url: str, consequences=(), blocker=None, note=None
):
    context = {
        "note": note,
        "object": obj,
        "kind": kind,
        "crumbs": crumbs,
        "cancel_url": cancel_url,
        "consequences": consequences,
        "blocker": blocker,
        "nav": "projects",
    }
    return render(request, "projects/confirm_delete.html", context)


# Projects


@login_required
def project_list(request):
    projects = list(selectors.project_list(user=request.user))
    context = {
        "projects": projects,
        "show_team": Membership.objects.filter(user=request.user).count() > 1,
        "can_create": access.writable_teams(request.user).exists(),
        "nav": "projects",
    }
    return render(request, "projects/project_list.html", context)


@login_required
def project_new(request):
    teams = list(access.writable_teams(request.user).order_by("name"))
    if not teams:
        raise PermissionDenied("You are a viewer in all your teams; an owner can make you an editor.")
    form = ProjectForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        team = form.cleaned_data.get("team") or form.instance.team
        project = _save(
            form,
            lambda: services.project_create(
                team=team, name=form.cleaned_data["name"], description=form.cleaned_data["description"]
            ),
        )
        if project:
            messages.success(request, f"Project “{project}” created. Next, add an environment.")
            return redirect(project)
    return render(request, "projects/project_form.html", {"form": form, "nav": "projects"})


@login_required
def project_detail(request, code):
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code)
    context = {
        "project": project,
        "environments": project.environments.annotate(
            server_count=Count("servers", distinct=True), plan_count=Count("plans", distinct=True)
        ),
        "test_cases": project.test_cases.annotate(
            step_count=Count("steps", distinct=True), plan_count=Count("mix_entries", distinct=True)
        ),
        "plans": project.plans.select_related("environment")
        .prefetch_related("levels")
        .annotate(mix_count=Count("mix")),
        "runs": project.runs.order_by("-number")[:RECENT_RUNS],
        # The latest experiments, so the demo's ready-made one is one click from the project.
        "experiments": project.experiments.select_related("plan", "change").order_by("-created_at", "-id")[
            :RECENT_EXPERIMENTS
        ],
        "can_write": access.can_write(request.user, project),
        "nav": "projects",
    }
    return render(request, "projects/project_detail.html", context)


@login_required
def project_edit(request, code):
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    form = ProjectForm(request.POST or None, instance=project)
    if request.method == "POST" and form.is_valid() and _save(form, form.save):
        messages.success(request, "Project saved.")
        return redirect(project)
    return render(request, "projects/project_form.html", {"form": form, "project": project, "nav": "projects"})


@login_required
def project_delete(request, code):
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    if request.method == "POST":
        services.project_delete(project=project)
        messages.success(request, f"Project “{project}” deleted.")
        return redirect("projects:list")
    counts = [
        (project.environments.count(), "environment"),
        (project.test_cases.count(), "test case"),
        (project.plans.count(), "plan"),
        (project.runs.count(), "run and its results"),
        (project.experiments.count(), "experiment"),
        (TuningChange.objects.filter(environment__project=project).count(), "tuning change"),
    ]
    return _confirm_delete(
        request,
        project,
        kind="project",
        crumbs=[(str(project), project.get_absolute_url())],
        cancel_url=project.get_absolute_url(),
        consequences=[f"{n} {label}{'' if n == 1 else 's'}" for n, label in counts if n],
    )


# Environments


@login_required
@vary_on_headers("HX-Request")  # a page or its past-configuration fragment, from one URL
def environment_detail(request, code):
    from portal.metrics.selectors import prometheus_problems

    environment = access.get_for_user(request.user, Environment.objects.select_related("project__team"), code=code)
    context = {
        "environment": environment,
        "project": environment.project,
        "servers": environment.servers.all(),
        "plans": environment.plans.prefetch_related("levels"),
        "can_write": access.can_write(request.user, environment.project),
        "target_problem": selectors.target_problem(base_url=environment.base_url),
        "same_origin": drift.same_origin_environments(environment),
        "prometheus_problems": prometheus_problems(environment),
        "nav": "projects",
        # The results history: its ledger of tuning changes, a past configuration, measurements.
        **environment_history(environment, at=request.GET.get("at")),
    }
    if is_fragment(request) and "at" in request.GET:
        return render(request, "projects/environment_detail.html#config-at", context)
    return render(request, "projects/environment_detail.html", context)


@login_required
@require_POST
def environment_verify(request, code):
    """Verify: the target's actual configuration against the ledger (portal/projects/drift.py)."""
    environment = access.get_for_user(
        request.user, Environment.objects.select_related("project__team"), code=code, write=True
    )
    context = {"environment": environment, "can_write": True, "verification": drift.configuration_drift(environment)}
    return render(request, "projects/environment_detail.html#verify", context)


def _environment_form(request, project: Project, environment: Environment | None):
    form = EnvironmentForm(request.POST or None, request.FILES or None, instance=environment, project=project)
    servers = ServerFormSet(request.POST or None, instance=form.instance, prefix="servers")
    if request.method == "POST" and form.is_valid() and servers.is_valid():
        saved = _save(
            form,
            lambda: services.environment_save(
                project=project, environment=environment, **form.service_values(), servers=server_specs(servers)
            ),
            rows=[f for f in servers.forms if f.cleaned_data and not servers._should_delete_form(f)],
        )
        if saved:
            messages.success(request, f"Environment “{saved}” saved.")
            if problem := selectors.target_problem(base_url=saved.base_url):
                messages.warning(request, f"{problem} Its plans cannot run until then.")
            return redirect(saved)
    context = {"form": form, "servers": servers, "project": project, "environment": environment, "nav": "projects"}
    if environment and request.method == "GET":
        context["target_problem"] = selectors.target_problem(base_url=environment.base_url)
    return render(request, "projects/environment_form.html", context)


@login_required
def environment_new(request, code):
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    return _environment_form(request, project, None)


@login_required
def environment_edit(request, code):
    environment = access.get_for_user(
        request.user, Environment.objects.select_related("project__team"), code=code, write=True
    )
    return _environment_form(request, environment.project, environment)


@login_required
def environment_delete(request, code):
    environment = access.get_for_user(
        request.user, Environment.objects.select_related("project__team"), code=code, write=True
    )
    project = environment.project
    if request.method == "POST":
        try:
            services.environment_delete(environment=environment)
        except services.InUse as refusal:
            messages.error(request, f"Not deleted: {refusal}")
            return redirect(environment)
        messages.success(request, f"Environment “{environment}” deleted.")
        return redirect(project)
    plans = list(environment.plans.values_list("name", flat=True))
    return _confirm_delete(
        request,
        environment,
        kind="environment",
        crumbs=[(str(project), project.get_absolute_url()), (str(environment), environment.get_absolute_url())],
        cancel_url=environment.get_absolute_url(),
        blocker=(
            f"It is used by the plans {', '.join(f'“{p}”' for p in plans)}; point them at another environment "
            "or delete them first."
            if plans
            else None
        ),
        consequences=["its servers and configuration (past runs keep their snapshot of it)"],
    )


# Test cases and their steps


def _testcase_context(request, test_case: TestCase, **extra) -> dict:
    steps = list(test_case.steps.all())
    data_set = selectors.data_set_head(test_case=test_case)
    can_write = access.can_write(request.user, test_case.project)
    context = {
        "test_case": test_case,
        "project": test_case.project,
        "steps": steps,
        "step_problems": test_case.placeholder_problems(steps),
        "data_set": data_set,
        "plans": Plan.objects.filter(mix__test_case=test_case).order_by("name"),
        "can_write": can_write,
        "nav": "projects",
    }
    if can_write:
        context["try_environments"] = list(test_case.project.environments.order_by("name"))
        context["try_bound_s"] = tryit.BOUND_S
        context["upload_form"] = DataSetUploadForm(initial={"mode": data_set.mode} if data_set else None)
        context["mode_form"] = DataSetModeForm(instance=data_set) if data_set else None
    return {**context, **extra}


def _steps_changed(request, test_case: TestCase):
    """After a change to the steps: the list fragment for HTMX, else back to the page."""
    if is_fragment(request):
        return render(request, "projects/testcase_detail.html#steps-list", _testcase_context(request, test_case))
    return redirect(test_case.get_absolute_url() + "#steps")


def _step_form(request, test_case: TestCase, form: StepForm, *, container: str):
    """The step form again (empty, or with its errors): in place for HTMX, else on the whole page."""
    if is_fragment(request):
        context = {"form": form, "test_case": test_case}
        response = render(request, "projects/testcase_detail.html#step-form", context)
        if request.method == "POST":
            # The form posts to replace the whole list; with errors, it replaces only itself.
            retarget(response, f"#{container}")
            reswap(response, "innerHTML")
        return response
    editing = "editing" if form.instance.pk else "adding"
    return render(request, "projects/testcase_detail.html", _testcase_context(request, test_case, **{editing: form}))


@login_required
@vary_on_headers("HX-Request")  # a page or its fragment, from one URL
def testcase_detail(request, code):
    test_case = access.get_for_user(request.user, TestCase.objects.select_related("project__team"), code=code)
    context = _testcase_context(request, test_case)
    if is_fragment(request):
        return render(request, "projects/testcase_detail.html#steps-list", context)
    return render(request, "projects/testcase_detail.html", context)


@login_required
@require_POST
def testcase_try(request, code):
    """*Try it*: one user, one iteration on the chosen environment, every exchange shown (portal/projects/tryit.py)."""
    test_case = access.get_for_user(
        request.user, TestCase.objects.select_related("project__team"), code=code, write=True
    )
    try:  # one of this project's environments, by its code; anything else is no choice
        environment = test_case.project.environments.filter(code=request.POST.get("environment", "")).first()
    except ValidationError:
        environment = None
    context = _testcase_context(request, test_case, try_environment=environment)
    if environment is None:
        context["try_error"] = "Choose one of this project's environments."
    elif why := tryit.not_ready(test_case, context["steps"]):
        context["try_error"] = why
    else:
        try:  # one of the account's try slots (PLIMSOLL_TRIES_PER_USER), given back when the try ends
            with tryit.held(user_id=request.user.pk):
                context["try_result"] = tryit.test_case_try(test_case=test_case, environment=environment)
        except limits.TooMany as exc:
            context["try_error"] = str(exc)
            context["try_retry_after"] = exc.retry_after
    status = 429 if "try_retry_after" in context else 400 if "try_error" in context else 200
    # The status is honest for HTMX too: base.html's responseHandling swaps a 4xx fragment into the panel.
    template = "projects/testcase_detail.html#try-it" if is_fragment(request) else "projects/testcase_detail.html"
    response = render(request, template, context, status=status)
    if "try_retry_after" in context:
        response["Retry-After"] = str(context["try_retry_after"])
    return response


def _testcase_form(request, project: Project, test_case: TestCase | None):
    form = TestCaseForm(request.POST or None, instance=test_case, project=project)
    if request.method == "POST" and form.is_valid():
        saved = _save(form, form.save)
        if saved:
            messages.success(request, f"Test case “{saved}” saved." + ("" if test_case else " Now add its steps."))
            return redirect(saved)
    context = {"form": form, "project": project, "test_case": test_case, "nav": "projects"}
    return render(request, "projects/testcase_form.html", context)


@login_required
def testcase_new(request, code):
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    return _testcase_form(request, project, None)


@login_required
def testcase_edit(request, code):
    test_case = access.get_for_user(
        request.user, TestCase.objects.select_related("project__team"), code=code, write=True
    )
    return _testcase_form(request, test_case.project, test_case)


@login_required
def testcase_delete(request, code):
    test_case = access.get_for_user(
        request.user, TestCase.objects.select_related("project__team"), code=code, write=True
    )
    project = test_case.project
    if request.method == "POST":
        try:
            services.test_case_delete(test_case=test_case)
        except services.InUse as refusal:
            messages.error(request, f"Not deleted: {refusal}")
            return redirect(test_case)
        messages.success(request, f"Test case “{test_case}” deleted.")
        return redirect(project)
    plans = list(Plan.objects.filter(mix__test_case=test_case).order_by("name").values_list("name", flat=True))
    return _confirm_delete(
        request,
        test_case,
        kind="test case",
        crumbs=[(str(project), project.get_absolute_url()), (str(test_case), test_case.get_absolute_url())],
        cancel_url=test_case.get_absolute_url(),
        blocker=(
            f"It is in the mix of the plans {', '.join(f'“{p}”' for p in plans)}; remove it from them first."
            if plans
            else None
        ),
        consequences=[f"its {test_case.steps.count()} steps"]
        + [
            f"its data set “{d.file_name}” ({plural(d.row_count, 'row')})"
            for d in DataSet.objects.filter(test_case=test_case).defer("rows")
        ],
    )


@login_required
@vary_on_headers("HX-Request")  # a page or its fragment, from one URL
def step_new(request, code):
    test_case = access.get_for_user(
        request.user, TestCase.objects.select_related("project__team"), code=code, write=True
    )
    form = StepForm(request.POST or None, test_case=test_case)
    if request.method == "POST" and form.is_valid():
        services.step_create(test_case=test_case, step=form.save(commit=False))
        return _steps_changed(request, test_case)
    return _step_form(request, test_case, form, container="step-new-slot")


@login_required
@vary_on_headers("HX-Request")  # a page or its fragment, from one URL
def step_edit(request, code):
    step = access.get_for_user(
        request.user, Step.objects.select_related("test_case__project__team"), code=code, write=True
    )
    form = StepForm(request.POST or None, instance=step, test_case=step.test_case)
    if request.method == "POST" and form.is_valid():
        form.save()
        return _steps_changed(request, step.test_case)
    return _step_form(request, step.test_case, form, container=f"step-{step.code}")


@login_required
def step_delete(request, code):
    step = access.get_for_user(
        request.user, Step.objects.select_related("test_case__project__team"), code=code, write=True
    )
    test_case = step.test_case
    if request.method == "POST":
        services.step_delete(step=step)
        return _steps_changed(request, test_case)
    project = test_case.project
    return _confirm_delete(
        request,
        step,
        kind="step",
        crumbs=[(str(project), project.get_absolute_url()), (str(test_case), test_case.get_absolute_url())],
        cancel_url=test_case.get_absolute_url() + "#steps",
    )


@login_required
@require_POST
def step_move(request, code, direction):
    step = access.get_for_user(
        request.user, Step.objects.select_related("test_case__project__team"), code=code, write=True
    )
    if direction not in DIRECTIONS:
        raise Http404
    services.step_move(step=step, direction=direction)
    return _steps_changed(request, step.test_case)


# A test case's data set


@login_required
def data_set_upload(request, code):
    """Sets or replaces the data set from a CSV; GET (without JavaScript) is the page with the upload form."""
    test_case = access.get_for_user(
        request.user, TestCase.objects.select_related("project__team"), code=code, write=True
    )
    form = DataSetUploadForm(*((request.POST, request.FILES) if request.method == "POST" else ()))
    if request.method == "POST" and form.is_valid():
        data_set = services.data_set_save(
            test_case=test_case,
            file_name=form.cleaned_data["file"].name,
            columns=form.cleaned_data["columns"],
            rows=form.cleaned_data["rows"],
            mode=form.cleaned_data["mode"],
        )
        messages.success(
            request,
            f"Data set “{data_set}” saved: {plural(data_set.row_count, 'row')} of {', '.join(data_set.columns)}.",
        )
        return redirect(test_case.get_absolute_url() + "#data-set")
    return render(request, "projects/testcase_detail.html", _testcase_context(request, test_case, upload_form=form))


@login_required
@require_POST
def data_set_mode(request, code):
    data_set = access.get_for_user(
        request.user,
        DataSet.objects.select_related("test_case__project__team").defer("rows"),
        test_case__code=code,
        write=True,
    )
    form = DataSetModeForm(request.POST, instance=data_set)
    if form.is_valid():
        form.save()  # only the loaded fields: the rows stay as they are
        messages.success(request, f"Rows are now taken: {data_set.get_mode_display()}.")
    else:
        messages.error(request, f"Mode not changed: {' '.join(form.errors['mode'])}")
    return redirect(data_set.test_case.get_absolute_url() + "#data-set")


@login_required
def data_set_delete(request, code):
    data_set = access.get_for_user(
        request.user,
        DataSet.objects.select_related("test_case__project__team").defer("rows"),
        test_case__code=code,
        write=True,
    )
    test_case = data_set.test_case
    if request.method == "POST":
        services.data_set_delete(data_set=data_set)
        messages.success(request, f"Data set “{data_set}” removed.")
        return redirect(test_case.get_absolute_url() + "#data-set")
    project = test_case.project
    return _confirm_delete(
        request,
        data_set,
        kind="data set",
        crumbs=[(str(project), project.get_absolute_url()), (str(test_case), test_case.get_absolute_url())],
        cancel_url=test_case.get_absolute_url() + "#data-set",
        consequences=[f"its {plural(data_set.row_count, 'row')} (past runs keep their snapshot of them)"],
        note="Steps that use its columns as {{column}} will need another data set before their plans can run.",
    )


# Plans and their mix


def _preview(plan: Plan) -> dict | None:
    """The profile's preview for a page, or None when the engine can't draw it (the page says so)."""
    try:
        return selectors.profile_preview(plan=plan)
    except (selectors.PreviewUnavailable, ValueError):
        return None


def _target_problems(base_url: str) -> list[str]:
    problem = selectors.target_problem(base_url=base_url)
    return [problem] if problem else []


def _plan_context(request, plan: Plan, **extra) -> dict:
    can_write = access.can_write(request.user, plan.project)
    context = {
        "plan": plan,
        "project": plan.project,
        "levels": plan.get_levels(),
        "mix": selectors.plan_mix(plan=plan),
        "problems": plan.problems()
        + _target_problems(plan.environment.base_url)
        + selectors.websocket_target_problems(plan=plan),
        "runs": plan.runs.order_by("-number")[:PLAN_RUNS],
        "can_write": can_write,
        "nav": "projects",
    }
    if can_write and "add_form" not in extra:
        context["add_form"] = MixAddForm(plan=plan)
    return {**context, **extra}


def _mix_changed(request, plan: Plan, *, status_ok: bool = True, **extra):
    """After a change to the mix: the mix fragment (with the run box out of band) for HTMX, else the page."""
    status = 200 if status_ok else 400  # a refused change: 400, its message in the mix (HTMX swaps 4xx fragments)
    if is_fragment(request):
        context = _plan_context(request, plan, oob=True, **extra)
        return render(request, "projects/plan_detail.html#mix", context, status=status)
    if status_ok:
        return redirect(plan.get_absolute_url() + "#mix")
    return render(request, "projects/plan_detail.html", _plan_context(request, plan, **extra), status=status)


@login_required
@vary_on_headers("HX-Request")  # a page or its fragment, from one URL
def plan_detail(request, code):
    plan = access.get_for_user(request.user, Plan.objects.select_related("project__team", "environment"), code=code)
    if is_fragment(request):
        return render(request, "projects/plan_detail.html#mix", _plan_context(request, plan, oob=True))
    return render(request, "projects/plan_detail.html", _plan_context(request, plan, preview=_preview(plan)))


def _plan_form(request, project: Project, plan: Plan | None):
    form = PlanForm(request.POST or None, instance=plan, project=project)
    if request.method == "POST" and form.is_valid():
        saved = _save(form, lambda: services.plan_save(project=project, plan=plan, **form.service_values()))
        if saved:
            messages.success(request, f"Plan “{saved}” saved." + ("" if plan else " Now choose its mix of test cases."))
            return redirect(saved)
    context = {
        "form": form,
        "project": project,
        "plan": plan,
        "has_environments": project.environments.exists(),
        # The chart as saved; the page's script asks plan-preview again as the form changes.
        "preview": _preview(plan or Plan()) if request.method == "GET" else None,
        "nav": "projects",
    }
    return render(request, "projects/plan_form.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def plan_preview(request, code):
    """Users (or rate) over time for the plan form's values, or the form's errors about the profile.

    It validates with the plan form itself, so the chart shows only what would be saved and run.
    """
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code)
    data = (request.POST if request.method == "POST" else request.GET).copy()
    # Level rows are drawn as they are on the page: as new rows of a new plan, without database ids.
    data["levels-INITIAL_FORMS"] = "0"
    for key in [k for k in data if k.startswith("levels-") and k.endswith(("-id", "-plan"))]:
        del data[key]
    form = PlanForm(data, project=project)
    form.is_valid()
    if errors := form.profile_errors():
        return JsonResponse({"errors": errors}, status=400)
    try:
        return JsonResponse(selectors.profile_preview(plan=form.instance))
    except selectors.PreviewUnavailable as exc:
        return JsonResponse({"errors": {"__all__": [str(exc)]}}, status=501)
    except ValueError as exc:  # the engine's PlanError: a profile it would refuse to run
        return JsonResponse({"errors": {"__all__": [str(exc)]}}, status=400)


@login_required
def plan_new(request, code):
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    return _plan_form(request, project, None)


@login_required
def plan_edit(request, code):
    plan = access.get_for_user(request.user, Plan.objects.select_related("project__team"), code=code, write=True)
    return _plan_form(request, plan.project, plan)


@login_required
def plan_delete(request, code):
    plan = access.get_for_user(request.user, Plan.objects.select_related("project__team"), code=code, write=True)
    project = plan.project
    if request.method == "POST":
        try:
            services.plan_delete(plan=plan)
        except services.InUse as refusal:
            messages.error(request, f"Not deleted: {refusal}")
            return redirect(plan)
        messages.success(request, f"Plan “{plan}” deleted.")
        return redirect(project)
    runs = plan.runs.count()
    return _confirm_delete(
        request,
        plan,
        kind="plan",
        crumbs=[(str(project), project.get_absolute_url()), (str(plan), plan.get_absolute_url())],
        cancel_url=plan.get_absolute_url(),
        blocker=services.plan_delete_refusal(plan),
        consequences=["its mix"],
        note=f"Its {runs} run{'' if runs == 1 else 's'} and their results stay in the project's history."
        if runs
        else None,
    )


@login_required
@require_POST
def mix_add(request, code):
    plan = access.get_for_user(request.user, Plan.objects.select_related("project__team"), code=code, write=True)
    form = MixAddForm(request.POST, plan=plan)
    if not form.is_valid():
        return _mix_changed(request, plan, status_ok=False, add_form=form)
    services.mix_entry_add(plan=plan, test_case=form.cleaned_data["test_case"], weight=form.cleaned_data["weight"])
    return _mix_changed(request, plan)


def _get_entry(request, pk) -> MixEntry:
    return access.get_for_user(
        request.user, MixEntry.objects.select_related("plan__project__team", "test_case"), pk=pk, write=True
    )


@login_required
@require_POST
def mix_update(request, pk):
    entry = _get_entry(request, pk)
    form = MixWeightForm(request.POST, instance=entry)
    if not form.is_valid():
        error = f"Weight of “{entry.test_case}”: {' '.join(form.errors['weight'])}"
        return _mix_changed(request, entry.plan, status_ok=False, mix_error=error)
    form.save()
    return _mix_changed(request, entry.plan)


@login_required
@require_POST
def mix_delete(request, pk):
    entry = _get_entry(request, pk)
    services.mix_entry_remove(entry=entry)
    return _mix_changed(request, entry.plan)


@login_required
@require_POST
def mix_move(request, pk, direction):
    entry = _get_entry(request, pk)
    if direction not in DIRECTIONS:
        raise Http404
    services.mix_entry_move(entry=entry, direction=direction)
    return _mix_changed(request, entry.plan)


# HAR imports (issue 18)


@login_required
def har_import(request, code):
    """Upload a HAR; a recording that cannot be imported is refused here, with the reason, and nothing kept."""
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    form = HarUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            token = services.har_upload_store(
                project=project, user_id=request.user.pk, upload=form.cleaned_data["file"]
            )
        except har.HarError as refusal:
            form.add_error("file", str(refusal))
        else:
            name = form.cleaned_data["file"].name.rsplit("/", 1)[-1].removesuffix(".har")[:100]
            url = reverse("projects:har-import-preview", args=[project.code, token])
            return redirect(f"{url}?{urlencode({'name': name})}")
    context = {"form": form, "project": project, "nav": "projects", "ttl_min": _har_ttl_minutes()}
    return render(request, "projects/har_upload.html", context)


def _har_ttl_minutes() -> int:
    return settings.PLIMSOLL_HAR_UPLOAD_TTL_S // 60


@login_required
def har_import_preview(request, code, token):
    """The preview of an uploaded HAR: update it with the user's choices, create the test case, or discard."""
    project = access.get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    upload = {"project": project, "user_id": request.user.pk, "token": token}
    action = request.POST.get("action") if request.method == "POST" else None
    name = (request.POST.get("name") if request.method == "POST" else request.GET.get("name")) or "Recorded journey"
    try:
        state = services.har_analysis_state(**upload)  # None: a small HAR, analysed here
        raw = services.har_upload_read(**upload) if state is None else None
    except services.HarUploadGone as gone:
        messages.error(request, str(gone))
        return redirect("projects:har-import", project.code)
    if action == "discard":
        services.har_upload_discard(**upload)
        messages.success(request, "Recording discarded: the uploaded file is deleted and nothing was saved.")
        return redirect(project)
    choices = har_choices(request.POST) if request.method == "POST" else har.Choices()
    try:
        if state is None:
            preview = har.analyze(services.har_entries(raw), allowed=services.allowed_target, choices=choices)
        else:
            if state["state"] == "refused":
                raise har.HarError(state["error"])
            if request.method == "POST" and (action != "create" or choices != state["choices"]):
                # other choices: the task analyses again; this page waits for it
                services.har_analysis_request(**upload, choices=choices)
                url = reverse("projects:har-import-preview", args=[project.code, token])
                return redirect(f"{url}?{urlencode({'name': name})}")
            if state["state"] == "analysing":
                context = {
                    "project": project,
                    "seconds": max(0, round(time.time() - state["since"])),
                    "nav": "projects",
                }
                return render(request, "projects/har_analysing.html", context)
            preview, choices = services.har_preview_kept(**upload), state["choices"]
    except har.HarError as refusal:  # the allowlist changed since the upload, or the task refused it
        services.har_upload_discard(**upload)
        messages.error(request, f"Not imported: {refusal}")
        return redirect("projects:har-import", project.code)
    except services.HarUploadGone as gone:
        messages.error(request, str(gone))
        return redirect("projects:har-import", project.code)
    error = None
    if action == "create":
        try:
            test_case = services.test_case_import(
                project=project, name=name, steps=preview.step_fields(), description=_har_description(preview)
            )
        except services.ImportRefused as refusal:
            error = str(refusal)
        else:
            services.har_upload_discard(**upload)
            needed = ", ".join(f"{{{{{v}}}}}" for v in preview.variables_needed())
            more = f" It posts {needed}: upload a data set with that column before running it." if needed else ""
            messages.success(request, f"Test case “{test_case}” created; the uploaded file is deleted.{more}")
            return redirect(test_case)
    secret_headers = sorted(
        {r.name.lower() for s in preview.steps for r in s.header_rules if r.name.lower() in har.SECRET_HEADERS}
    )
    context = {
        "project": project,
        "preview": preview,
        "name": name,
        "error": error,
        "secret_headers": [(h, h in choices.keep_headers) for h in secret_headers],
        "variables_needed": preview.variables_needed(),
        "ttl_min": _har_ttl_minutes(),
        "nav": "projects",
    }
    return render(request, "projects/har_preview.html", context)


def _har_description(preview: har.Preview) -> str:
    accepted = [c.name for c in preview.correlations if c.accepted]
    text = f"Imported from a HAR recording of {preview.base_url}: {len(preview.steps)} pages."
    if accepted:
        text += f" Correlated: {', '.join(accepted)}."
    return text
