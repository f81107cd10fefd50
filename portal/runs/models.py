from functools import cached_property

from django.conf import settings
from django.db import models
from django.urls import reverse

from portal.common import TimeStamped, new_code
from portal.projects.models import Environment, Plan, Project


class Run(TimeStamped):
    """One execution of a plan, with snapshots of the plan and of the environment's configuration at start."""

    team_path = "project__team"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        STARTING = "starting", "Starting"
        RUNNING = "running", "Running"
        CANCELLING = "cancelling", "Cancelling"
        FINISHING = "finishing", "Finishing"
        PASSED = "passed", "Passed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        PARTIAL = "partial", "Partial"
        ERROR = "error", "Error"

    ACTIVE = (Status.QUEUED, Status.STARTING, Status.RUNNING, Status.CANCELLING, Status.FINISHING)
    FINISHED = (Status.PASSED, Status.FAILED, Status.CANCELLED, Status.PARTIAL, Status.ERROR)

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    number = models.PositiveIntegerField(help_text="Counts the project's runs: #1, #2, …")
    plan = models.ForeignKey(Plan, on_delete=models.SET_NULL, null=True, related_name="runs")
    environment = models.ForeignKey(Environment, on_delete=models.SET_NULL, null=True, related_name="runs")
    plan_name = models.CharField(max_length=100)
    environment_name = models.CharField(max_length=100)
    plan_snapshot = models.JSONField()
    config_snapshot = models.JSONField(default=list)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    error_message = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    shard_count = models.PositiveIntegerField(default=0)
    # Wall-clock instant all shards start from; interval rows count seconds from it.
    start_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    summary = models.JSONField(null=True, blank=True)
    # The plan's analysis settings at start (degradation limits), kept apart from the engine's snapshot.
    analysis_settings = models.JSONField(default=dict, blank=True)
    # The results history: the configuration's last applied change at start (None: the initial
    # configuration), the trial set the run belongs to, and a user's choice to count a doubtful run.
    tuning_change = models.ForeignKey(
        "history.TuningChange", on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    trial_set = models.ForeignKey(
        "history.TrialSet", on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    include_anyway = models.BooleanField(
        default=False, help_text="Count this run in trends, baselines and verdicts although its validity is in doubt"
    )

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["project", "number"], name="run_number_unique_in_project"),
        ]
        indexes = [
            # The watchdog and the "active runs" lists look runs up by status.
            models.Index(fields=["status"], name="run_status_idx"),
        ]

    def __str__(self):
        return f"Run #{self.number} of {self.plan_name}"

    def get_absolute_url(self):
        return reverse("runs:detail", args=[self.code])

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @cached_property
    def engine_profile(self):
        """The snapshot's load profile as the engine reads it (the one source of its timing)."""
        from workers.engine.plan import Plan as EnginePlan

        return EnginePlan.from_dict(self.plan_snapshot).profile

    @property
    def planned_duration(self) -> float:
        from workers.engine.schedule import total_duration

        return total_duration(self.engine_profile)

    @property
    def measurement_windows(self) -> list[tuple[float, float, str]]:
        """(start, end, label) of each measured part: the hold, or each level's hold for a steps profile."""
        from workers.engine.schedule import measurement_windows

        return measurement_windows(self.engine_profile)

    @property
    def verdict(self) -> str | None:
        return (self.summary or {}).get("verdict")

    @property
    def doubts(self) -> list[str]:
        """Why this run's figures may not describe the target (empty when they can be trusted).

        A cancelled run stopped early, a partial one lost a shard, an error has no figures,
        and a saturated generator measured itself: such runs are shown, but kept out of
        trends, baselines and verdicts unless a user includes them (``include_anyway``).
        """
        if self.is_active:
            return ["the run has not finished"]
        reasons = []
        if self.status == self.Status.CANCELLED:
            reasons.append("it was cancelled")
        elif self.status == self.Status.PARTIAL:
            reasons.append("a shard was lost")
        elif self.status == self.Status.ERROR:
            reasons.append("it ended in error")
        saturated = ((self.summary or {}).get("generator") or {}).get("saturated")
        if saturated:
            reasons.append(f"the load generator was saturated ({saturated})")
        if not self.summary and self.status != self.Status.ERROR:
            reasons.append("it has no summary")
        return reasons

    @property
    def counts(self) -> bool:
        """Whether this run joins trends, baselines and verdicts."""
        if self.is_active or not self.summary:
            return False
        return not self.doubts or self.include_anyway


class RunShard(models.Model):
    """A slice of a run's virtual users that one Celery task simulates.

    A shard claims itself with a lease before it starts, so a message the broker delivers
    twice (a run can outlive the visibility timeout) runs once; its heartbeat is each
    interval flush, and a shard silent for PLIMSOLL_SHARD_TIMEOUT seconds is lost.
    """

    team_path = "run__project__team"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        LOST = "lost", "Lost"
        FAILED = "failed", "Failed"

    TERMINAL = (Status.DONE, Status.LOST, Status.FAILED)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="shards")
    shard_no = models.PositiveIntegerField()
    user_count = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    worker = models.CharField(max_length=200, blank=True, help_text="host and pid of the worker that claimed it")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error_message = models.TextField(blank=True)
    totals = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["shard_no"]
        constraints = [models.UniqueConstraint(fields=["run", "shard_no"], name="shard_unique_no")]

    def __str__(self):
        return f"shard {self.shard_no} of run {self.run_id}"


class ShardInterval(models.Model):
    """What one shard did in one second: its users and iterations (also its heartbeat)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="shard_intervals")
    shard_no = models.PositiveIntegerField()
    second = models.IntegerField(help_text="seconds since the run's start_at")
    active_users = models.PositiveIntegerField(default=0)
    iterations_started = models.PositiveIntegerField(default=0)
    iterations_completed = models.PositiveIntegerField(default=0)
    # Arrival rate: iterations that found no free user; unique data sets: no row left.
    iterations_dropped = models.PositiveIntegerField(default=0)
    # Generator health: when these are high, the figures describe the generator, not the target.
    loop_lag_p99_ms = models.FloatField(null=True, blank=True)
    loop_lag_max_ms = models.FloatField(null=True, blank=True)
    cpu_pct = models.FloatField(null=True, blank=True)

    class Meta:
        # Keyed so that a repeated flush replaces its row instead of counting twice.
        constraints = [models.UniqueConstraint(fields=["run", "shard_no", "second"], name="shardinterval_unique")]

    def __str__(self):
        return f"run {self.run_id} shard {self.shard_no} second {self.second}"


class PageInterval(models.Model):
    """One page's (label's) measurements from one shard in one second."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="page_intervals")
    shard_no = models.PositiveIntegerField()
    second = models.IntegerField()
    label = models.CharField(max_length=210)
    pages = models.PositiveIntegerField(default=0)
    hits = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    errors_by_kind = models.JSONField(default=dict)
    error_samples = models.JSONField(default=dict)
    bytes_in = models.BigIntegerField(default=0)
    bytes_out = models.BigIntegerField(default=0)
    hist = models.JSONField(default=dict)
    connect_hist = models.JSONField(default=dict)
    ttfb_hist = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "shard_no", "second", "label"], name="pageinterval_unique")
        ]

    def __str__(self):
        return f"{self.label} @ {self.second} s (run {self.run_id} shard {self.shard_no})"
