"""Reads of schedules and their fires, and which runs a plan's baseline may take."""

from datetime import timedelta

from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone

from portal.runs.models import Run
from portal.runs.summary import RunSummary

from .models import RunVerdict, Schedule, ScheduleFire

# Which runs may be a plan's baseline, in one place: extend with one line.
# (issue 25: an *incomplete* run is never listed; issue 28.5: a run without thresholds ends *finished*.)
BASELINE_STATUSES = ("passed", "failed", "done", "finished")
# A run judged regressed stays out until its level is accepted (or explained by a tuning change).
UNACCEPTED_REGRESSION = Q(
    baseline_verdict__verdict=RunVerdict.Verdict.REGRESSED,
    baseline_verdict__accepted_at__isnull=True,
    baseline_verdict__accepted_change__isnull=True,
)


def baseline_eligible(runs: QuerySet) -> QuerySet:
    """The runs of ``runs`` that may be a baseline: a status that counts, and no regression nobody accepted.

    Runs whose validity is in doubt (``Run.counts``: a saturated generator …) are left out by the caller.
    """
    return runs.filter(status__in=BASELINE_STATUSES).exclude(UNACCEPTED_REGRESSION)


def baseline_candidates(*, plan_id: int, before_number: int) -> QuerySet:
    """The plan's runs before run #before_number that may be its rolling baseline, newest first."""
    return baseline_eligible(Run.objects.filter(plan_id=plan_id, number__lt=before_number)).order_by("-number")


def regression_streaks(*, plan_ids) -> dict[int, dict]:
    """{plan id: {"since": the first run of an unaccepted regression, "runs": how many judged runs since,
    "latest": the latest of them}} for the plans whose latest judged runs are regressed (one query).

    Per plan, newest first: the streak goes back while each judged run is regressed and not accepted
    ("regressed since run #41 (3 nights)"); a run judged within noise or improved ends it. Only the
    last STREAK_DAYS are read.
    """
    since = timezone.now() - timedelta(days=STREAK_DAYS)
    verdicts = (
        RunVerdict.objects.filter(run__plan_id__in=set(plan_ids), run__created_at__gte=since)
        .exclude(verdict__in=(RunVerdict.Verdict.PENDING, RunVerdict.Verdict.NO_BASELINE))
        .select_related("run")
        .only("verdict", "accepted_at", "accepted_change_id", "run__number", "run__code", "run__plan_id")
        .order_by("run__plan_id", "-run__number")
    )
    streaks: dict[int, list] = {}
    ended: set[int] = set()
    for verdict in verdicts:
        plan_id = verdict.run.plan_id
        if plan_id in ended:
            continue
        if verdict.verdict != RunVerdict.Verdict.REGRESSED or verdict.is_accepted:
            ended.add(plan_id)
            continue
        streaks.setdefault(plan_id, []).append(verdict.run)
    return {plan_id: {"since": runs[-1], "runs": len(runs), "latest": runs[0]} for plan_id, runs in streaks.items()}


def regression_streak(*, plan_id: int) -> dict | None:
    """One plan's streak (``regression_streaks``), or None."""
    return regression_streaks(plan_ids=[plan_id]).get(plan_id)


RECENT_FIRES = 5
# "Regressed since run #41": the morning view looks back this far for the start of a regression.
STREAK_DAYS = 90
FIRE_LOG = 100
SPARK_FIRES = 30


def schedules_with_fires(schedules: QuerySet) -> QuerySet:
    """``schedules`` with their last RECENT_FIRES fires as ``recent_fires`` (one query more)."""
    return schedules.prefetch_related(_recent_fires())


def _recent_fires() -> Prefetch:
    # A sliced prefetch: Django takes each schedule's last fires with a window function.
    return Prefetch(
        "fires",
        queryset=ScheduleFire.objects.select_related("run__baseline_verdict").order_by("-due_at")[:RECENT_FIRES],
        to_attr="recent_fires",
    )


def project_schedules(*, project) -> QuerySet:
    """The project's schedules with their last fires (and those fires' runs), in a fixed number of queries."""
    return project.schedules.select_related("plan__environment").prefetch_related(
        _recent_fires(),
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
        totals = RunSummary.of(fire.run).totals
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
