"""Reads for the projects pages, shaped so that a page costs the same number of queries at any size."""

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from portal.accounts.access import scoped
from portal.runs.models import Run

from .models import Environment, MixEntry, Plan, Project, TestCase


def _count(model, field: str = "project") -> Coalesce:
    rows = model.objects.filter(**{field: OuterRef("pk")}).order_by().values(field).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(rows, output_field=IntegerField()), Value(0))


def project_list(*, user) -> QuerySet[Project]:
    """The user's projects across their teams, with counts and their last run's status."""
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
