"""The comparison page: any two runs or trial sets of a project, before (a) vs after (b).

``?a=<code>&b=<code>``: each code is a run's or a trial set's. Without both, the page
is a picker (a plain GET form), with the one given preselected. The figures and the
verdicts come from ``portal.history.comparison``; this view only finds the two sides
through the tenancy gate.
"""

import uuid

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render

from portal.accounts.access import get_for_user, scoped
from portal.projects.models import Project
from portal.runs.models import Run

from .. import comparison
from ..models import TrialSet


def _side(request, project: Project, code: str) -> comparison.Side:
    """The run or trial set of this project with ``code``, as a side; 404 when neither is the user's."""
    try:
        code = uuid.UUID(code)
    except ValueError:
        raise Http404 from None
    side = comparison.find_side(
        project=project,
        runs=scoped(Run.objects.all(), request.user),
        trial_sets=scoped(TrialSet.objects.all(), request.user),
        code=code,
    )
    if side is None:
        raise Http404
    return side


@login_required
def compare(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    a, b = request.GET.get("a", "").strip(), request.GET.get("b", "").strip()
    before = _side(request, project, a) if a else None
    after = _side(request, project, b) if b else None
    choices = comparison.compare_choices(project)
    listed = {code for group in choices.values() for code, _ in group}
    context = {
        "project": project,
        "nav": "projects",
        "a": a,
        "b": b,
        "before": before,
        "after": after,
        "choices": choices,
        # A side given by its code but not in the picker's lists (a run still going) is offered on its own.
        "a_listed": a in listed,
        "b_listed": b in listed,
    }
    if before is not None and after is not None:
        context["report"] = comparison.compare_sides(before, after)
        context["swap_url"] = comparison.compare_url(project, b, a)
    return render(request, "history/compare.html", context)
