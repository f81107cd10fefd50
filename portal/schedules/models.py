from datetime import timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

from portal.common import TimeStamped, new_code
from portal.projects.models import Plan, Project

from . import timing


class Schedule(TimeStamped):
    """When a plan runs by itself: a cron expression (or a simple form of one) in a time zone.

    The row is the one source of truth: the beat tick reads it on every tick, so an edit
    takes effect without restarting anything. ``last_due_at`` is the latest fire time
    already handled; the tick advances it with a conditional UPDATE, which is also what
    makes two beats (or a tick delivered twice) handle each fire once.
    """

    team_path = "project__team"

    class Kind(models.TextChoices):
        DAILY = "daily", "Every day at"
        WEEKDAYS = "weekdays", "Weekdays (Monday to Friday) at"
        HOURS = "hours", "Every N hours"
        CRON = "cron", "Cron expression"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="schedules")
    # SET_NULL: a deleted plan leaves its schedule behind, disabled, with the reason shown.
    plan = models.ForeignKey(Plan, on_delete=models.SET_NULL, null=True, related_name="schedules")
    plan_name = models.CharField(max_length=100, help_text="The plan's name, kept when the plan is deleted")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.DAILY)
    at_time = models.TimeField(null=True, blank=True)
    every_hours = models.PositiveSmallIntegerField(null=True, blank=True)
    cron = models.CharField(
        max_length=100, help_text="The cron expression the scheduler evaluates (also for simple forms)"
    )
    time_zone = models.CharField(max_length=64, default="UTC")
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True, help_text="Why the scheduler paused this schedule by itself")
    ends_on = models.DateField(null=True, blank=True, help_text="No fire after this day (in the schedule's time zone)")
    busy_wait_minutes = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(0), MaxValueValidator(24 * 60)],
        help_text="When another run is on the environment, wait this long for it, then skip the fire",
    )
    catch_up_hours = models.FloatField(
        default=2.0,
        validators=[MinValueValidator(0), MaxValueValidator(48)],
        help_text="A fire missed while the scheduler was down still runs once if less late than this",
    )
    last_due_at = models.DateTimeField(help_text="The latest fire time already handled")

    class Meta:
        ordering = ["plan_name", "id"]
        indexes = [models.Index(fields=["enabled"], name="schedule_enabled_idx")]

    def __str__(self):
        return f"{self.plan_name}: {self.description}"

    def get_absolute_url(self):
        return reverse("schedules:edit", args=[self.code])

    @property
    def description(self) -> str:
        try:
            return timing.describe(self.cron, self.time_zone)
        except timing.ScheduleSpecError as exc:
            return str(exc)

    @property
    def busy_wait(self) -> timedelta:
        return timedelta(minutes=self.busy_wait_minutes)

    @property
    def catch_up(self) -> timedelta:
        return timedelta(hours=self.catch_up_hours)


class ScheduleFire(models.Model):
    """One fire time of a schedule and what became of it: "did last night's soak run?" has an answer.

    Unique on (schedule, due_at): a fire is recorded once whatever the number of beats;
    starting its run is claimed with a conditional UPDATE from ``due``/``waiting``.
    """

    team_path = "schedule__project__team"

    class Outcome(models.TextChoices):
        DUE = "due", "Due"
        WAITING = "waiting", "Waiting for the environment"
        STARTING = "starting", "Starting"
        STARTED = "started", "Started"
        SKIPPED = "skipped", "Skipped"
        MISSED = "missed", "Missed"

    OPEN = (Outcome.DUE, Outcome.WAITING)

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="fires")
    due_at = models.DateTimeField()
    outcome = models.CharField(max_length=10, choices=Outcome.choices, default=Outcome.DUE)
    reason = models.TextField(blank=True)
    # The run this fire started; also how a run tells that a schedule started it.
    run = models.OneToOneField(
        "runs.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="schedule_fire"
    )
    recorded_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-due_at"]
        constraints = [models.UniqueConstraint(fields=["schedule", "due_at"], name="schedulefire_unique_due")]
        indexes = [models.Index(fields=["outcome"], name="schedulefire_outcome_idx")]

    def __str__(self):
        return f"{self.schedule_id} @ {self.due_at:%Y-%m-%d %H:%M}: {self.outcome}"


# The rolling baseline's default number of runs: a week of nightly runs. The verdict weighs a run against the
# spread between its baseline runs (``noise.judge_cells``); seven give that spread 6 degrees of freedom per row
# where three gave 2, the baseline's mean a third of the noise of one run's instead of two thirds, and a week
# holds each weekday once. Search (400 pages) 20 % slower, found on the first night, seeds 1–4: 94.7 / 94.7 /
# 92.7 / 96.3 % with N = 3, 99.7 / 97.3 / 96.0 / 98.3 % with N = 7, false alarms within 2 % on every mix
# (``python -m bench verdicts --last-n N``; docs/verdicts.md, "A week of baseline runs").
DEFAULT_LAST_N = 7


class Baseline(models.Model):
    """What a plan's scheduled runs are judged against, and how much worse counts as a regression.

    One row per plan (absent: the last 3 valid runs, 10 % tolerance). Kept in this app, off
    the Plan model, so the plan form and its migrations stay as they are.
    """

    team_path = "plan__project__team"

    class Kind(models.TextChoices):
        LAST_N = "last_n", "The last N valid runs before the run"
        RUN = "run", "A pinned run"
        TRIAL_SET = "trial_set", "A pinned trial set"

    plan = models.OneToOneField(Plan, on_delete=models.CASCADE, related_name="baseline")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.LAST_N)
    last_n = models.PositiveSmallIntegerField(
        default=DEFAULT_LAST_N,
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        help_text="For the last N valid runs",
    )
    run = models.ForeignKey("runs.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    trial_set = models.ForeignKey(
        "history.TrialSet", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    tolerance_pct = models.FloatField(
        default=10.0,
        validators=[MinValueValidator(0), MaxValueValidator(1000)],
        help_text="Regressed (or improved) only when beyond the noise AND more than this many percent worse (better)",
    )

    def __str__(self):
        return f"baseline of plan {self.plan_id}: {self.kind}"


# A verdict row's own verdict: "none" when a figure could not be compared (e.g. no capacity measured).
ROW_VERDICTS = ("regressed", "improved", "within_noise", "none")


class RunVerdict(models.Model):
    """A finished run of a plan judged against its plan's baseline (one row per run, whoever started it).

    Written *pending* when the run ends (``portal.schedules.baselines.on_run_finished``), then
    judged on the bookkeeping queue. ``rows`` keeps every figure in total and per page:
    [{page, figure, verdict, before, after, change, noise, basis}], so the run page, the journey
    and the API read it without recomputing.
    """

    team_path = "run__project__team"

    class Verdict(models.TextChoices):
        REGRESSED = "regressed", "Regressed"
        IMPROVED = "improved", "Improved"
        WITHIN_NOISE = "within_noise", "Within noise"
        NO_BASELINE = "no_baseline", "No baseline"
        PENDING = "pending", "Being judged"

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="baseline_verdict")
    verdict = models.CharField(max_length=12, choices=Verdict.choices)
    provisional = models.BooleanField(
        default=False, help_text="Judged against too few baseline runs to know their spread well"
    )
    provisional_reason = models.TextField(blank=True)
    method = models.TextField(blank=True, help_text="One sentence: how the verdict was reached")
    # A regressed run stays out of the rolling baseline until someone accepts its level.
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    accept_reason = models.TextField(blank=True)
    # Or explained by a tuning change in the environment's ledger (the new level is intended).
    accepted_change = models.ForeignKey(
        "history.TuningChange", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    headline = models.TextField()
    basis = models.TextField(blank=True)
    baseline_label = models.CharField(max_length=300, blank=True)
    tolerance_pct = models.FloatField(default=10.0)
    rows = models.JSONField(default=list)
    computed_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"run {self.run_id}: {self.verdict}"

    @property
    def is_accepted(self) -> bool:
        return self.accepted_at is not None or self.accepted_change_id is not None

    @property
    def can_be_accepted(self) -> bool:
        return self.verdict == self.Verdict.REGRESSED and not self.is_accepted

    @property
    def moved_rows(self) -> list[dict]:
        return [r for r in self.rows if r["verdict"] in ("regressed", "improved")]

    @property
    def soak_rows(self) -> list[dict]:
        """Degradation onset and drifts per hour against the baseline's (soak runs only)."""
        return [r for r in self.rows if r.get("soak")]

    @property
    def soak_regressed(self) -> list[dict]:
        return [r for r in self.soak_rows if r["verdict"] == "regressed"]
