"""Schedules: saving them, and the beat tick that turns due fire times into runs.

Why our own tick and not django-celery-beat: the existing beat already ticks every 10 s
for the watchdog, and a fire must be *claimed in the database* anyway (two beats by
mistake, a tick delivered twice), as shards are. With a ``Schedule`` row that the tick
reads, the row is the only source of truth: no ``PeriodicTask`` to keep in step with
it, no beat restart or DatabaseScheduler reload after an edit, and the rules that
matter overnight (busy environment, beat down, end date) live in plain functions
(``timing.py``) that the tests drive with explicit clocks. A second beat costs nothing
but a lost conditional UPDATE.
"""

import logging
from datetime import date, datetime, time

from django.db import transaction
from django.utils import timezone

from portal.common import task
from portal.projects.models import Plan, Project
from portal.runs.services import EnvironmentBusy, RunError, check_targets, run_create
from workers.engine.targets import TargetNotAllowed

from . import timing
from .models import Schedule, ScheduleFire

log = logging.getLogger(__name__)
Outcome = ScheduleFire.Outcome


def schedule_save(
    *,
    project: Project,
    plan: Plan,
    kind: str,
    at_time: time | None,
    every_hours: int | None,
    cron: str,
    time_zone: str,
    enabled: bool,
    ends_on: date | None,
    busy_wait_minutes: int,
    catch_up_hours: float,
    schedule: Schedule | None = None,
    now: datetime | None = None,
) -> Schedule:
    """Creates or updates a schedule; raises timing.ScheduleSpecError with a message for the user.

    A new, re-enabled or re-timed schedule counts fires from ``now``: fire times that
    passed while it did not exist, was paused or had another timing are not "missed".
    """
    now = now or timezone.now()
    if plan.project_id != project.id:
        raise timing.ScheduleSpecError("The plan belongs to another project.")
    timing.zone(time_zone)
    expression = timing.cron_for(kind=kind, at=at_time, every_hours=every_hours, cron=cron)
    timing.check_cron(expression)
    if schedule is None:
        schedule = Schedule(project=project, last_due_at=now)
    restart = not schedule.enabled or schedule.cron != expression or schedule.time_zone != time_zone
    if enabled and (schedule.pk is None or restart):
        schedule.last_due_at = now
    schedule.plan = plan
    schedule.plan_name = plan.name
    schedule.kind = kind
    schedule.at_time = at_time if kind != "cron" else None
    schedule.every_hours = every_hours if kind == "hours" else None
    schedule.cron = expression
    schedule.time_zone = time_zone
    schedule.enabled = enabled
    if enabled:
        schedule.disabled_reason = ""
    schedule.ends_on = ends_on
    schedule.busy_wait_minutes = busy_wait_minutes
    schedule.catch_up_hours = catch_up_hours
    schedule.save()
    return schedule


def schedule_set_enabled(*, schedule: Schedule, enabled: bool, now: datetime | None = None) -> None:
    """Pauses or enables; enabling counts fires from now (the paused nights are not missed)."""
    now = now or timezone.now()
    if enabled:
        Schedule.objects.filter(id=schedule.id, enabled=False).update(
            enabled=True, disabled_reason="", last_due_at=now, updated_at=now
        )
    else:
        Schedule.objects.filter(id=schedule.id).update(enabled=False, updated_at=now)


def schedule_disable(*, schedule_id: int, reason: str) -> None:
    """The scheduler pauses a schedule that cannot run any more, and says why on the schedule."""
    Schedule.objects.filter(id=schedule_id, enabled=True).update(enabled=False, disabled_reason=reason)
    log.warning("schedule %s disabled: %s", schedule_id, reason)


def schedules_tick(*, now: datetime | None = None) -> None:
    """One beat tick: record the fires that came due, then try to start every open fire.

    Safe to run twice at once (two beats): advancing a schedule is a conditional UPDATE on
    the ``last_due_at`` it read, fire rows are unique on (schedule, due_at), and starting a
    fire's run is claimed with a conditional UPDATE.
    """
    now = now or timezone.now()
    for schedule in Schedule.objects.filter(enabled=True):
        schedule_advance(schedule=schedule, now=now)
    open_fires = ScheduleFire.objects.filter(outcome__in=ScheduleFire.OPEN).order_by("due_at")
    for fire_id in open_fires.values_list("id", flat=True):
        fire_process(fire_id=fire_id, now=now)


def schedule_advance(*, schedule: Schedule, now: datetime) -> list[ScheduleFire]:
    """Records the fires of ``schedule`` that came due by ``now`` (see timing.plan_tick)."""
    if schedule.plan_id is None:
        schedule_disable(
            schedule_id=schedule.id,
            reason=f"Its plan “{schedule.plan_name}” was deleted; choose another plan to enable it again.",
        )
        return []
    try:
        decision = timing.plan_tick(
            expression=schedule.cron,
            tz_name=schedule.time_zone,
            last_due_at=schedule.last_due_at,
            now=now,
            catch_up=schedule.catch_up,
            ends_on=schedule.ends_on,
        )
    except timing.ScheduleSpecError as exc:
        schedule_disable(schedule_id=schedule.id, reason=str(exc))
        return []
    fires = []
    if decision.last_due_at is not None:
        with transaction.atomic():
            won = Schedule.objects.filter(id=schedule.id, enabled=True, last_due_at=schedule.last_due_at).update(
                last_due_at=decision.last_due_at
            )
            if won:
                fires = ScheduleFire.objects.bulk_create(
                    [
                        ScheduleFire(
                            schedule=schedule,
                            due_at=due.due_at,
                            outcome=Outcome.DUE if due.action == "run" else Outcome.MISSED,
                            reason=due.reason,
                            decided_at=None if due.action == "run" else now,
                        )
                        for due in decision.fires
                    ],
                    ignore_conflicts=True,
                )
    for fire in fires:
        if fire.outcome == Outcome.MISSED:
            _notify_fire_later(fire.due_at, schedule.id)
    if decision.ended:
        schedule_disable(schedule_id=schedule.id, reason=f"Its end date ({schedule.ends_on:%Y-%m-%d}) has passed.")
    return fires


def fire_process(*, fire_id: int, now: datetime) -> None:
    """Starts the run of one open fire, or lets it wait for a busy environment, or skips it with the reason.

    The claim (``due``/``waiting`` → ``starting``) and the run's creation share one
    transaction: a process that dies in between leaves the fire open, not half started,
    and a second beat's claim waits for the first to commit and then finds nothing to do.
    """
    with transaction.atomic():
        if not ScheduleFire.objects.filter(id=fire_id, outcome__in=ScheduleFire.OPEN).update(
            outcome=Outcome.STARTING, decided_at=now
        ):
            return
        fire = ScheduleFire.objects.select_related("schedule__plan__environment").get(id=fire_id)
        outcome, reason, run = _fire_decide(fire, now)
        ScheduleFire.objects.filter(id=fire_id).update(outcome=outcome, reason=reason, run=run, decided_at=now)
        if outcome == Outcome.SKIPPED:
            _notify_fire_later(fire.due_at, fire.schedule_id)


def _fire_decide(fire: ScheduleFire, now: datetime):
    """(outcome, reason, run) of an open fire; disables the schedule when it cannot run any more."""
    schedule = fire.schedule
    if not schedule.enabled:
        why = schedule.disabled_reason or "the schedule was paused"
        return Outcome.SKIPPED, f"Not started: {why}", None
    plan = schedule.plan
    if plan is None:
        reason = f"Its plan “{schedule.plan_name}” was deleted."
        schedule_disable(schedule_id=schedule.id, reason=reason)
        return Outcome.SKIPPED, reason, None
    try:
        check_targets(plan.environment.base_url, plan.to_engine_dict())
    except TargetNotAllowed as exc:
        reason = f"The target is no longer allowed ({exc}); no request was sent."
        schedule_disable(schedule_id=schedule.id, reason=reason)
        return Outcome.SKIPPED, reason, None
    try:
        run = run_create(plan=plan, user=None)
    except EnvironmentBusy as exc:
        busy = exc.run
        if timing.busy_decision(due_at=fire.due_at, now=now, busy_wait=schedule.busy_wait) == "wait":
            return (
                Outcome.WAITING,
                f"Run #{busy.number} is on the environment; waiting up to {schedule.busy_wait_minutes} min for it.",
                None,
            )
        return (
            Outcome.SKIPPED,
            f"The environment “{busy.environment_name}” was still busy with run #{busy.number} "
            f"{schedule.busy_wait_minutes} min after the fire time.",
            None,
        )
    except RunError as exc:
        return Outcome.SKIPPED, f"The run could not be created: {exc}", None
    return Outcome.STARTED, "", run


def _notify_fire_later(due_at: datetime, schedule_id: int) -> None:
    """Tells the project's channels about a skipped or missed fire, once the row is committed."""

    def send():
        fire_notify_task = task("fire_notify_task")

        fire_id = ScheduleFire.objects.filter(schedule_id=schedule_id, due_at=due_at).values_list("id", flat=True)
        for fid in fire_id:
            try:
                fire_notify_task.delay(fid)
            except Exception:  # the broker is down: the fire row still says what happened
                log.exception("fire %s: could not enqueue its notification", fid)

    transaction.on_commit(send)
