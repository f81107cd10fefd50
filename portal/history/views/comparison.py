"""The comparison page: any two runs or trial sets of a project, before (a) vs after (b).

``?a=<code>&b=<code>``: each code is a run's or a trial set's. Without both, the page
is a picker (a plain GET form), with the one given preselected. The figures and the
verdicts come from ``portal.history.comparison``; this view only finds the two sides
through the tenancy gate.

``?a=<baseline>&b=<code>&b=<code>…`` (up to MAX_COMPARED): several runs or trial sets
against one baseline, as Gatling does: a table of each one's figures and verdicts against
the baseline. ``curves.json`` takes the same query and serves the overlaid curves.
"""

import uuid
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.urls import reverse

from portal.accounts.access import get_for_user, scoped
from portal.projects.models import Project
from portal.runs.models import Run

from .. import comparison, curves
from ..choices import compare_choices, compare_url
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


MAX_COMPARED = 5
"""Runs or trial sets compared against one baseline at most."""


def _compared_codes(request) -> tuple[str, list[str], str]:
    """The baseline's code, the compared codes (each once, in order, at most MAX_COMPARED) and a refusal."""
    a = request.GET.get("a", "").strip()
    bs = []
    for b in request.GET.getlist("b"):
        b = b.strip()
        if b and b not in bs and b != a:
            bs.append(b)
    refusal = ""
    if len(bs) > MAX_COMPARED:
        refusal = (
            f"At most {MAX_COMPARED} runs or trial sets are compared against a baseline; "
            f"the first {MAX_COMPARED} are shown."
        )
        bs = bs[:MAX_COMPARED]
    return a, bs, refusal


@login_required
def compare_curves(request, code):
    """The overlaid curves of the baseline and the compared sides (portal.history.curves)."""
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    a, bs, _ = _compared_codes(request)
    if not a or not bs:
        return JsonResponse(
            {"error": "give a (the baseline) and at least one b, each a run's or trial set's code"}, status=400
        )
    sides = [("before", _side(request, project, a))] + [("after", _side(request, project, b)) for b in bs]
    return JsonResponse(curves.sides_curves(sides))


@login_required
def compare(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    a, bs, refusal = _compared_codes(request)
    b = bs[0] if bs else ""
    before = _side(request, project, a) if a else None
    after = _side(request, project, b) if b else None
    more = [(code_, _side(request, project, code_)) for code_ in bs[1:]]
    choices = compare_choices(project)
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
        "more": [code_ for code_, _ in more],
        "max_more": MAX_COMPARED - 1,
        "refusal": refusal,
    }
    if before is not None and after is not None:
        query = urlencode([("a", a), *(("b", code_) for code_ in bs)])
        context["curves_url"] = reverse("history:compare-curves", args=[project.code]) + "?" + query
        if more:
            # Several against one baseline: each one's figures and verdicts, one row each.
            context["multi"] = [
                {
                    "code": code_,
                    "side": side,
                    "report": comparison.compare_sides(before, side),
                    "url": compare_url(project, a, code_),
                }
                for code_, side in [(b, after), *more]
            ]
        else:
            context["report"] = comparison.compare_sides(before, after)
            context["swap_url"] = compare_url(project, b, a)
    return render(request, "history/compare.html", context)
