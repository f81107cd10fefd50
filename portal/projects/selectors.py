"""Reads for the projects pages, shaped so that a page costs the same number of queries at any size."""

import typing

from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce

from portal.accounts.access import scoped

from .models import PLACEHOLDER, DataSet, Environment, MixEntry, Plan, Project, Step, TestCase
from .payloads import ProfilePreview

DATA_SET_HEAD = 10


def target_problem(*, base_url: str) -> str | None:
    """Why a run against ``base_url`` would be refused (outside PLIMSOLL_ALLOWED_TARGETS), or None.

    Shown on the environment and plan pages so that nobody learns it from a run ending in
    error. A name that does not resolve now is not reported: that may pass, and the run says so.
    """
    from portal import outbound

    try:
        outbound.check(base_url, outbound.targets_allowlist(), timeout=2)
    except outbound.OutboundRefused as exc:
        return (
            f"The target {base_url} is not allowed: {exc} Runs send load only to the targets in "
            "PLIMSOLL_ALLOWED_TARGETS; point the environment at an allowed target, or ask the "
            "administrator to add this one."
        )
    except OSError:
        return None
    return None


def websocket_target_problems(*, plan: Plan) -> list[str]:
    """Why a run of ``plan`` would be refused for a WebSocket step's own ws:// or wss:// origin (the allowlist
    changed since the step was saved), one message per step; shown with the base URL's problem."""
    from .services import allowed_target

    problems = []
    steps = (
        Step.objects.filter(test_case__mix_entries__plan=plan, kind=Step.Kind.WEBSOCKET)
        .filter(Q(path__istartswith="ws://") | Q(path__istartswith="wss://"))
        .select_related("test_case")
        .order_by("test_case__name", "position")
    )
    for step in steps:
        if refusal := allowed_target(PLACEHOLDER.sub("x", step.path)):
            problems.append(
                f"The WebSocket step “{step.name}” of “{step.test_case}” connects to {step.path}, which is {refusal}: "
                "runs of this plan will be refused."
            )
    return problems


class PreviewUnavailable(Exception):
    """The engine in this version cannot draw a profile (no ``schedule.preview``)."""


def _count(model, field: str = "project") -> Coalesce:
    rows = model.objects.filter(**{field: OuterRef("pk")}).order_by().values(field).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(rows, output_field=IntegerField()), Value(0))


def project_list(*, user) -> QuerySet[Project]:
    """The user's projects across their teams, with counts and their last run's status."""
    # Runs sit above projects: their model is reached through the reverse relation, not imported.
    Run = Project._meta.get_field("runs").related_model
    last_run = Run.objects.filter(project=OuterRef("pk")).order_by("-number")
    return (
        scoped(Project.objects.select_related("team"), user)
        .annotate(
            environment_count=_count(Environment),
            test_case_count=_count(TestCase),
            plan_count=_count(Plan),
            last_run_status=Subquery(last_run.values("status")[:1]),
            last_run_number=Subquery(last_run.values("number")[:1]),
            last_run_code=Subquery(last_run.values("code")[:1]),
        )
        .order_by("team__name", "name")
    )


def plan_mix(*, plan: Plan) -> list[MixEntry]:
    """The plan's mix in order, each entry with ``share``: its percentage of iterations."""
    entries = list(plan.mix.select_related("test_case").order_by("position", "id"))
    total = sum(e.weight for e in entries)
    for entry in entries:
        entry.share = 100 * entry.weight / total if total else 0
    return entries


def data_set_head(*, test_case: TestCase) -> DataSet | None:
    """The test case's data set with ``head``, its first rows, instead of all (up to 100,000) of them."""
    first = {f"row_{i}": KeyTransform(str(i), "rows") for i in range(DATA_SET_HEAD)}
    data_set = DataSet.objects.defer("rows").filter(test_case=test_case).annotate(**first).first()
    if data_set is not None:
        data_set.head = [row for i in range(DATA_SET_HEAD) if (row := getattr(data_set, f"row_{i}")) is not None]
    return data_set


# A plan around the profile alone: Plan.from_dict is the engine's one way in, and the preview
# needs the engine's parsed Profile (defaults filled, every field checked).
_PREVIEW_PLAN = {
    "base_url": "http://preview.invalid",
    "test_cases": [{"name": "preview", "steps": [{"name": "preview", "path": "/"}]}],
}


def profile_preview(*, plan: Plan) -> ProfilePreview:
    """Users (or rate) over time and the measured windows of the plan's profile, as the engine will run it.

    The engine computes it (``workers.engine.schedule.preview``), so the chart cannot differ from the run.
    Raises PlanError (a ValueError) for a profile the engine refuses, PreviewUnavailable without the function.
    """
    from workers.engine import schedule
    from workers.engine.plan import Plan as EnginePlan

    preview = getattr(schedule, "preview", None)
    if preview is None:
        raise PreviewUnavailable("This version of the engine cannot preview load profiles yet.")
    profile = EnginePlan.from_dict({**_PREVIEW_PLAN, "profile": plan.profile_dict()}).profile
    result = dict(preview(profile))
    result["description"] = plan.profile_description
    return typing.cast(ProfilePreview, result)
