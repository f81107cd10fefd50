"""The journey pages: per environment and per project, the figures of a plan's runs across tuning changes.

The page renders its tables on the server; its charts fetch the same data from the
``journey.json`` endpoint, which serves the selector's dict unchanged (also to scripts).
Both take ``?plan=<code>``; without it, the plan with the most finished runs.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.urls import reverse

from portal.accounts import access
from portal.accounts.access import get_for_user
from portal.projects.models import Environment, Project
from portal.schedules import change_points
from portal.stats.shifts import MIN_RUNS

from .. import journey


def _chosen(request, choices: list[dict]):
    """The plan named by ``?plan=``, which must be one of ``choices`` (else 404), or the default."""
    try:
        return journey.chosen_plan(choices, request.GET.get("plan"))
    except LookupError:
        raise Http404("No such plan here.") from None


def _plans(choices: list[dict]) -> list[dict]:
    return journey.plans_listed(choices)


def _change_points(plan) -> dict:
    """The chosen plan's persistent shifts across its history (templates/schedules/_change_points.html)."""
    return {
        "change_points": change_points.plan_change_points(plan=plan) if plan else [],
        "change_points_title": f"Change points of {plan.name}" if plan else "",
        "change_points_min_runs": MIN_RUNS,
    }


def _environment(request, code):
    environment = get_for_user(request.user, Environment.objects.select_related("project"), code=code)
    choices = journey.plan_choices(environment=environment)
    plan = _chosen(request, choices)
    return environment, choices, plan, journey.environment_journey(environment, plan)


def _project(request, code):
    project = get_for_user(request.user, Project.objects.all(), code=code)
    choices = journey.plan_choices(project=project)
    plan = _chosen(request, choices)
    return project, choices, plan, journey.project_journey(project, plan)


@login_required
def environment_journey(request, code):
    environment, choices, plan, data = _environment(request, code)
    data_url = reverse("history:environment-journey-data", args=[environment.code])
    context = {
        "environment": environment,
        "project": environment.project,
        "choices": choices,
        "plan": plan,
        "sections": [data],
        "data_url": f"{data_url}?plan={plan.code}" if plan else data_url,
        "can_write": access.can_write(request.user, environment.project),
        "nav": "projects",
        **_change_points(plan),
    }
    return render(request, "history/journey.html", context)


@login_required
def environment_journey_data(request, code):
    _, choices, _, data = _environment(request, code)
    return JsonResponse({**data, "plans": _plans(choices)})


@login_required
def project_journey(request, code):
    project, choices, plan, data = _project(request, code)
    data_url = reverse("history:project-journey-data", args=[project.code])
    context = {
        "project": project,
        "choices": choices,
        "plan": plan,
        "sections": data["sections"],
        "ledger": data["ledger"],
        "data_url": f"{data_url}?plan={plan.code}" if plan else data_url,
        "can_write": access.can_write(request.user, project),
        "nav": "projects",
        **_change_points(plan),
    }
    return render(request, "history/journey.html", context)


@login_required
def project_journey_data(request, code):
    _, choices, _, data = _project(request, code)
    return JsonResponse({**data, "plans": _plans(choices)})
