"""Reads of schedules and their fires."""

from django.db.models import Prefetch, QuerySet

from .models import Schedule, ScheduleFire

RECENT_FIRES = 5
FIRE_LOG = 100
SPARK_FIRES = 30


def project_schedules(*, project) -> QuerySet:
    """The project's schedules with their last fires (and those fires' runs), in a fixed number of queries."""
    return project.schedules.select_related("plan__environment").prefetch_related(
        Prefetch(
            "fires",
            # A sliced prefetch: Django takes each schedule's last fires with a window function.
            queryset=ScheduleFire.objects.select_related("run__baseline_verdict").order_by("-due_at")[:RECENT_FIRES],
            to_attr="recent_fires",
        ),
        Prefetch(
            "fires",
            queryset=ScheduleFire.objects.filter(run__isnull=False)
            .select_related("run")
            .order_by("-due_at")[:SPARK_FIRES],
            to_attr="spark_fires",
        ),
    )


def sparkline(schedule: Schedule) -> list[dict]:
    """APD and pages/s of the runs of the schedule's last fires (``spark_fires``), oldest first, for the chart."""
    points = []
    for fire in reversed(schedule.spark_fires):
        totals = (fire.run.summary or {}).get("totals") or {}
        points.append(
            {
                "due": fire.due_at.isoformat(),
                "run": fire.run.number,
                "apd_ms": totals.get("apd_ms"),
                "pages_per_s": totals.get("pages_per_s"),
            }
        )
    return points


def schedule_fires(*, schedule: Schedule) -> QuerySet:
    return schedule.fires.select_related("run__baseline_verdict").order_by("-due_at")[:FIRE_LOG]
