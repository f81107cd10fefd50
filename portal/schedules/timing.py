"""The scheduler's decisions as plain functions of explicit clocks (no Django, no Celery).

Cron is parsed and evaluated by cronsim (time-zone and DST aware), described in words by
cron-descriptor; nothing here parses cron by hand. The beat task only asks these
functions what to do and records the answer, so every rule is tested with a fixed ``now``.
"""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import cron_descriptor
from cronsim import CronSim, CronSimError

# A schedule left behind for a year must not make one tick loop over every minute of it.
MAX_INSTANTS = 2000
# Missed fires recorded one row each, at most this many per tick (the oldest are counted in a reason).
MAX_MISSED_ROWS = 24

KINDS = ("daily", "weekdays", "hours", "cron")


class ScheduleSpecError(ValueError):
    """The schedule cannot be evaluated; the message is for the user."""


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleSpecError(f"“{name}” is not a time zone name (e.g. Europe/Berlin, UTC).") from None


def time_zone_names() -> list[str]:
    return sorted(available_timezones())


def cron_for(*, kind: str, at: time | None = None, every_hours: int | None = None, cron: str = "") -> str:
    """The cron expression of a simple form (daily at HH:MM, weekdays at HH:MM, every N hours), or ``cron`` itself."""
    if kind in ("daily", "weekdays"):
        if at is None:
            raise ScheduleSpecError("Give the time of day (HH:MM).")
        days = "*" if kind == "daily" else "1-5"
        return f"{at.minute} {at.hour} * * {days}"
    if kind == "hours":
        if not every_hours or not 1 <= every_hours <= 23:
            raise ScheduleSpecError("Every N hours takes N from 1 to 23.")
        minute = at.minute if at else 0
        return f"{minute} */{every_hours} * * *"
    if kind == "cron":
        expression = " ".join(cron.split())
        check_cron(expression)
        return expression
    raise ScheduleSpecError(f"Unknown kind of schedule “{kind}”.")


def check_cron(expression: str) -> None:
    if len(expression.split()) != 5:
        raise ScheduleSpecError("A cron expression has five fields: minute hour day-of-month month day-of-week.")
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC")))
    except CronSimError as exc:
        raise ScheduleSpecError(f"Not a valid cron expression: {exc}") from None


def describe(expression: str, tz_name: str) -> str:
    """'At 02:00, Monday through Friday (Europe/Berlin)'."""
    options = cron_descriptor.Options()
    options.use_24hour_time_format = True
    options.verbose = False
    try:
        words = cron_descriptor.ExpressionDescriptor(expression, options).get_description()
    except Exception as exc:  # cron-descriptor raises its own FormatException family
        raise ScheduleSpecError(f"Not a valid cron expression: {exc}") from None
    return f"{words} ({tz_name})"


def instants_after(expression: str, tz_name: str, after: datetime, *, limit: int) -> list[datetime]:
    """Up to ``limit`` fire times strictly after ``after``, aware, in the schedule's time zone."""
    it = CronSim(expression, after.astimezone(zone(tz_name)))
    return [next(it) for _ in range(limit)]


def next_fires(expression: str, tz_name: str, now: datetime, count: int = 5) -> list[datetime]:
    return instants_after(expression, tz_name, now, limit=count)


@dataclass(frozen=True)
class Due:
    """One fire the tick must record: ``run`` it, or record it ``missed`` with the reason."""

    due_at: datetime
    action: str  # "run" | "missed"
    reason: str = ""


@dataclass(frozen=True)
class TickDecision:
    """What a tick does with one schedule: the fires to record and the new ``last_due_at`` (None: unchanged)."""

    fires: list[Due]
    last_due_at: datetime | None
    ended: bool = False


def plan_tick(
    *,
    expression: str,
    tz_name: str,
    last_due_at: datetime,
    now: datetime,
    catch_up: timedelta,
    ends_on: date | None = None,
) -> TickDecision:
    """What is due between ``last_due_at`` (already handled) and ``now``.

    Normally one instant has passed since the last tick: it runs. When beat (or the whole
    site) was down across fire times, only the latest instant may still run, and only if it
    is less than ``catch_up`` late; every earlier one, and a latest one too late, is recorded
    as missed: a schedule never fires a burst of catch-up runs. Instants after the end date
    are never due, and the schedule ends once its next instant is past that date.
    """
    tz = zone(tz_name)
    instants = []
    it = CronSim(expression, last_due_at.astimezone(tz))
    for _ in range(MAX_INSTANTS):
        instant = next(it)
        if instant > now:
            break
        instants.append(instant)
    else:
        # Further behind than MAX_INSTANTS fires: skip ahead to the recent past.
        instants = instants[-MAX_MISSED_ROWS - 1 :]
    ended = False
    if ends_on is not None:
        kept = [i for i in instants if i.astimezone(tz).date() <= ends_on]
        # The last fire on the end date still runs: the schedule ends on the tick after it.
        ended = not kept and (len(kept) < len(instants) or _next_after_end(expression, tz, now, ends_on))
        instants = kept
    if not instants:
        return TickDecision(fires=[], last_due_at=None, ended=ended)
    *earlier, latest = instants
    late = now - latest
    fires = []
    dropped = max(0, len(earlier) - MAX_MISSED_ROWS)
    for n, instant in enumerate(earlier[dropped:]):
        reason = "Beat (the scheduler) was not running at this time; only the latest missed fire may run."
        if n == 0 and dropped:
            reason += f" {dropped} earlier fires were missed too."
        fires.append(Due(instant, "missed", reason))
    if late <= catch_up:
        fires.append(Due(latest, "run"))
    else:
        fires.append(
            Due(
                latest,
                "missed",
                f"Beat (the scheduler) came back {_human(late)} after this fire, more than the "
                f"{_human(catch_up)} a late fire may still run.",
            )
        )
    return TickDecision(fires=fires, last_due_at=latest, ended=ended)


def _next_after_end(expression: str, tz: ZoneInfo, now: datetime, ends_on: date) -> bool:
    upcoming = next(CronSim(expression, now.astimezone(tz)))
    return upcoming.date() > ends_on


def busy_decision(*, due_at: datetime, now: datetime, busy_wait: timedelta) -> str:
    """A fire whose environment is busy: ``wait`` for it, or ``skip`` once it waited ``busy_wait``."""
    return "wait" if now - due_at < busy_wait else "skip"


def _human(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes < 120:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"
