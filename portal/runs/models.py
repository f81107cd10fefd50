from functools import cached_property

from django.conf import settings
from django.db import models
from django.urls import reverse

from portal.common import TimeStamped, new_code
from portal.projects.models import Environment, Plan, Project

from .summary import RunSummary

# A finished run of a plan is judged against its baseline on the bookkeeping queue (portal.schedules.baselines);
# until then every reader says so.
VERDICT_PENDING_HEADLINE = "Being judged against the plan's baseline."


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
        # Ran to its end with no threshold to judge (none on the plan, or an import none applied to):
        # no pass/fail verdict to claim, so neither passed nor failed (issue 28).
        FINISHED = "finished", "Finished"
        # A capacity search that found its capacity: upper levels broke the thresholds, as they were meant to.
        DONE = "done", "Done"
        CANCELLED = "cancelled", "Cancelled"
        PARTIAL = "partial", "Partial"
        # Achieved materially less load than planned (a shard late, never started or lost):
        # never judged on its thresholds (portal.runs.services.load states the rule).
        INCOMPLETE = "incomplete", "Incomplete"
        # Ended early by one of its plan's stop criteria: the target was plainly broken (issue 24). Never
        # passed, never judged against its thresholds or baseline; ``stopped_by`` holds the rule and its window.
        STOPPED = "stopped", "Stopped by its criteria"
        ERROR = "error", "Error"

    ACTIVE = (Status.QUEUED, Status.STARTING, Status.RUNNING, Status.CANCELLING, Status.FINISHING)
    FINISHED = (
        Status.PASSED,
        Status.FAILED,
        Status.FINISHED,
        Status.DONE,
        Status.CANCELLED,
        Status.PARTIAL,
        Status.INCOMPLETE,
        Status.STOPPED,
        Status.ERROR,
    )

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    number = models.PositiveIntegerField(help_text="Counts the project's runs: #1, #2, …")
    plan = models.ForeignKey(Plan, on_delete=models.SET_NULL, null=True, related_name="runs")
    environment = models.ForeignKey(Environment, on_delete=models.SET_NULL, null=True, related_name="runs")
    plan_name = models.CharField(max_length=100)
    environment_name = models.CharField(max_length=100)
    plan_snapshot = models.JSONField()
    config_snapshot = models.JSONField(default=list)
    # The target's own configuration read as the run started, against config_snapshot, where the
    # environment names where the target reports it (portal/projects/drift.py): None when not read.
    config_verification = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    # Started through the API: the token it came with (never its secret). The label keeps the
    # token's name and prefix even when the token is deleted with its user.
    api_token = models.ForeignKey(
        "accounts.ApiToken", on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    api_token_label = models.CharField(
        max_length=120, blank=True, help_text="The API token that started the run: its name and prefix"
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    error_message = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    # A stop criterion that ended the run (portal.runs.services.criteria): {"rule", "text", "window": the
    # figures of the window that broke it, "sentence", "at"}; set with cancel_requested, in one UPDATE.
    stopped_by = models.JSONField(null=True, blank=True)
    shard_count = models.PositiveIntegerField(default=0)
    # Wall-clock instant all shards start from; interval rows count seconds from it.
    start_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    summary = models.JSONField(null=True, blank=True)
    # What a journey point and the runs list read of the summary and the plan snapshot
    # (``run_digest``), written with the summary. Small enough to stay in the table row:
    # a soak's summary is kilobytes that the database must decompress to read any key of it.
    digest = models.JSONField(null=True, blank=True, editable=False)
    # The plan's analysis settings at start (degradation limits), kept apart from the engine's snapshot.
    analysis_settings = models.JSONField(default=dict, blank=True)
    # What the starter said about the run (issue 24): {"build": "3f2a1c", "branch": "main"} and a note;
    # shown wherever the run is, filterable in the API (?label=build:3f2a1c). Rules: services/labels.py.
    labels = models.JSONField(default=dict, blank=True)
    note = models.TextField(blank=True)
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
    # Recovery of a finalize that crashed or ran out of memory: the watchdog retries a run
    # left in *finishing* a bounded number of times (services.finalize_stuck).
    finishing_at = models.DateTimeField(null=True, blank=True)
    finalize_attempts = models.PositiveSmallIntegerField(default=0)
    # Planned against achieved load, per shard and in total, written at finalize
    # (portal.runs.services.load.run_load): an incomplete run's reason, the report's shard table.
    load = models.JSONField(null=True, blank=True)
    # Admission (issue 25): the generator pool its shards need ("" the default pool: workers on the
    # ``engine`` queue), when it was admitted (all its shards could start together), and why it waits.
    pool = models.CharField(max_length=60, blank=True, default="")
    admitted_at = models.DateTimeField(null=True, blank=True)

    class Kind(models.TextChoices):
        NATIVE = "native", "Run by Plimsoll"
        IMPORTED = "imported", "Imported from a result file"

    # Issue 18: a run whose figures came from another tool's result file (portal.runs.result_files).
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.NATIVE)
    # {"tool", "version", "format", "file_name", "sha256", "lines"} of an imported run's file.
    source = models.JSONField(null=True, blank=True)
    source_sha256 = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["project", "number"], name="run_number_unique_in_project"),
            # Importing the same file twice into an environment finds the first run.
            models.UniqueConstraint(
                fields=["environment", "source_sha256"],
                condition=models.Q(kind="imported"),
                name="run_import_once_per_environment",
            ),
        ]
        indexes = [
            # The watchdog and the "active runs" lists look runs up by status.
            models.Index(fields=["status"], name="run_status_idx"),
        ]

    @property
    def source_label(self) -> str:
        """An imported run's source in words (tool and version, file name), "" for a native run."""
        if self.kind != self.Kind.IMPORTED or not self.source:
            return ""
        tool = " ".join(filter(None, (self.source.get("tool"), self.source.get("version"))))
        approximate = " (approximate: from percentiles)" if self.source.get("approximate") else ""
        return f"{tool} · {self.source.get('file_name', '')}{approximate}"

    def __str__(self):
        return f"Run #{self.number} of {self.plan_name}"

    def get_absolute_url(self):
        return reverse("runs:detail", args=[self.code])

    def save(self, *args, **kwargs):
        # The digest follows the summary wherever a run is saved with one (finalize's UPDATE sets both).
        deferred = self.get_deferred_fields()
        if "summary" not in deferred and "plan_snapshot" not in deferred:
            self.digest = run_digest(RunSummary.of(self), self.plan_snapshot)
            update_fields = kwargs.get("update_fields")
            if update_fields is not None and {"summary", "plan_snapshot"} & set(update_fields):
                kwargs["update_fields"] = {*update_fields, "digest"}
        super().save(*args, **kwargs)

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def is_imported(self) -> bool:
        return self.kind == self.Kind.IMPORTED

    @property
    def started_by(self) -> str:
        """Who started the run, in words: a schedule, a person via an API token, or a person."""
        fire = getattr(self, "schedule_fire", None)
        if fire is not None:
            return f"the schedule “{fire.schedule.description}” (due {fire.due_at:%Y-%m-%d %H:%M} UTC)"
        who = self.created_by.get_username() if self.created_by_id else "—"
        if self.api_token_label:
            return f"{who} via token {self.api_token_label}"
        return who

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
    def typed_summary(self) -> RunSummary:
        """The summary as a ``RunSummary`` (templates: ``run.typed_summary.capacity.analysed``), empty without one."""
        return RunSummary.of(self)

    @property
    def verdict(self) -> str | None:
        """passed, failed, or None: no threshold judged, or the run was cancelled before its window ended."""
        if self.status == self.Status.CANCELLED:
            return None  # runs finalized before issue 28 kept the verdict of the part that ran
        return RunSummary.of(self).verdict

    @property
    def not_judged(self) -> list[str]:
        """The thresholds that could not be judged (an imported run's file has no stream, WebSocket or HTTP/2
        figure), by name, once each."""
        names = [t["name"] for t in RunSummary.of(self).threshold_rows() if t.get("passed") is None]
        return list(dict.fromkeys(names))

    @property
    def verdict_clause(self) -> str:
        """What its thresholds claim, as the clause after a run's figures ("every threshold held", "its thresholds
        (Time to first event p95) were not judged: …"), for the share page's sentence and notifications; "" for a
        run that ended otherwise (cancelled, stopped, incomplete, partial, in error: each says why elsewhere)."""
        from .analysis import NOT_CARRIED

        not_judged = self.not_judged
        why = NOT_CARRIED.removeprefix("not judged: ")  # "the imported file has no such figure"
        names = ", ".join(not_judged)
        if self.verdict == "passed":
            if not_judged:
                return f"every threshold it could judge held; {names} {_were(not_judged)} not judged: {why}"
            return "every threshold held"
        if self.verdict == "failed":
            failed = list(dict.fromkeys(t["name"] for t in RunSummary.of(self).thresholds if t.get("passed") is False))
            return f"thresholds failed ({', '.join(failed)})" if failed else "thresholds failed"
        if self.status != self.Status.FINISHED:
            return ""
        if not_judged:
            return (
                f"its thresholds ({names}) were not judged: {why} (no other tool's result file carries stream, "
                "WebSocket or HTTP/2 figures), so there is no pass/fail verdict"
            )
        if self.is_imported and self.plan_id is None:
            return "it was imported without a plan, so no threshold applied and there is no pass/fail verdict"
        return "the plan sets no thresholds, so there is no pass/fail verdict"

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
            if any(h.get("kind") == "stopped" and not h.get("resumed_on") for h in RunSummary.of(self).handoffs):
                # Told apart from a lost shard: its worker was stopped on purpose (DESIGN, shard continuation).
                reasons.append("a shard was interrupted: its worker stopped and no worker took over")
            else:
                reasons.append("a shard was lost")
        elif self.status == self.Status.INCOMPLETE:
            reasons.append(f"it is incomplete: it {self.load_sentence or 'ran less load than planned'}")
        elif self.status == self.Status.STOPPED:
            reasons.append(f"it was stopped by its criteria ({self.stop_sentence or 'a stop criterion broke'})")
        elif self.status == self.Status.ERROR:
            reasons.append("it ended in error")
        if drifted := (self.config_verification or {}).get("drifted"):
            keys = "; ".join(f"{d['key']} {d['ledger']} in the ledger, {d['actual']} on the target" for d in drifted)
            reasons.append(f"the target did not have the configuration it names when it started ({keys})")
        if (summary := RunSummary.of(self)).saturation_sustained:
            reasons.append(f"the load generator was saturated ({summary.saturated})")
        if not self.summary and self.status != self.Status.ERROR:
            reasons.append("it has no summary")
        return reasons

    @property
    def stop_sentence(self) -> str:
        """``error rate 100 % > 50 % over the last 60 s (seconds 40–100: …)``: why its criteria stopped it, or ""."""
        if "stopped_by" in self.get_deferred_fields():
            return ""
        return (self.stopped_by or {}).get("sentence", "")

    @property
    def load_sentence(self) -> str:
        """``ran 20 of 100 users for 30 s: …``, or "" when the run has no load record (or it was not loaded:
        a journey's points read only a few fields, and must not query once per run)."""
        if "load" in self.get_deferred_fields():
            return ""
        return (self.load or {}).get("sentence", "")

    @property
    def counts(self) -> bool:
        """Whether this run joins trends, baselines and verdicts."""
        if self.is_active or not self.summary:
            return False
        return not self.doubts or self.include_anyway


def _were(names: list[str]) -> str:
    return "was" if len(names) == 1 else "were"


_WINDOW_DIGEST_KEYS = ("users", "apd_ms", "p95_ms", "pages_per_s", "error_rate_pct")
# A level's stream, WebSocket and protocol figures, which its thresholds may judge (issue 26): kept only where the
# window has them, so a journey's capacity of a steps run with a time-to-first-event threshold is the run's own
# (without them every level read "no such figure" and broke it).
_WINDOW_DIGEST_PROTOCOL_KEYS = ("ttfe_p95_ms", "gap_p95_ms", "rtt_p95_ms", "h2_share_pct")


def _window_digest(totals: dict) -> dict:
    return {
        **{k: totals.get(k) for k in _WINDOW_DIGEST_KEYS},
        **{k: totals[k] for k in _WINDOW_DIGEST_PROTOCOL_KEYS if k in totals},
    }


def run_digest(summary: RunSummary, plan_snapshot: dict | None) -> dict | None:
    """The few parts of a run's summary and plan snapshot that a journey point and the runs list read.

    Its keys mirror the summary's (``totals``, ``verdict``, ``generator.saturated``,
    ``handoffs``, a steps run's ``windows``) and the snapshot's (``profile``,
    ``thresholds``), so that a run holding the digest in place of both reads as the whole
    run would for its point, its capacity and its doubts (portal.history.journey).
    """
    if not summary:
        return None
    snapshot = plan_snapshot or {}
    profile = snapshot.get("profile") or {}
    steps = profile.get("kind") == "steps"
    saturated, lagged = summary.generator.get("saturated"), summary.generator.get("lagged")
    return {
        "totals": summary.totals,
        "verdict": summary.verdict,
        "generator": {"saturated": saturated, **({"lagged": lagged} if lagged else {})} if saturated else {},
        "handoffs": [{"kind": h.get("kind"), "resumed_on": h.get("resumed_on")} for h in summary.handoffs],
        "windows": [{"index": w.get("index"), "totals": _window_digest(w.get("totals") or {})} for w in summary.windows]
        if steps
        else [],
        "profile": {
            "kind": profile.get("kind"),
            "levels": [{"users": lv.get("users")} for lv in profile.get("levels") or []],
        },
        "thresholds": snapshot.get("thresholds") or {},
    }


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
        # Its worker stopped and handed it on, but no worker took it over within the grace period.
        INTERRUPTED = "interrupted", "Interrupted"

    TERMINAL = (Status.DONE, Status.LOST, Status.FAILED, Status.INTERRUPTED)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="shards")
    shard_no = models.PositiveIntegerField()
    user_count = models.PositiveIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    worker = models.CharField(max_length=200, blank=True, help_text="host and pid of the worker that claimed it")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error_message = models.TextField(blank=True)
    totals = models.JSONField(null=True, blank=True)
    # Shard continuation: the Celery node running it (its warm shutdown asks for a handoff), the
    # request, the second the next claimant resumes at, when it was released, and each handoff:
    # {"kind": "stopped"|"lost", "worker", "stopped_at_s", "released_at", "resumed_on", "resumed_at_s", "gap_s"}.
    worker_node = models.CharField(max_length=200, blank=True)
    # That worker's labels as it claimed the shard (PLIMSOLL_WORKER_LABELS): the report names them
    # after the worker has left the registry, and not another set it registered with later.
    worker_labels = models.JSONField(default=dict, blank=True)
    handoff_requested = models.BooleanField(default=False)
    resume_second = models.PositiveIntegerField(default=0)
    released_at = models.DateTimeField(null=True, blank=True)
    handoffs = models.JSONField(default=list, blank=True)
    # The watchdog sent its task once more (its first message was lost): never a second time (issue 25).
    resent = models.BooleanField(default=False)

    class Meta:
        ordering = ["shard_no"]
        constraints = [models.UniqueConstraint(fields=["run", "shard_no"], name="shard_unique_no")]

    def __str__(self):
        return f"shard {self.shard_no} of run {self.run_id}"


class GeneratorWorker(models.Model):
    """A Celery worker that runs shards, as it registered itself: its slots, labels and queues (issue 25).

    Each worker writes its row when it is ready and every PLIMSOLL_WORKER_HEARTBEAT seconds
    after (a thread of its main process), and deletes it on shutdown; a row whose heartbeat is
    older than PLIMSOLL_WORKER_TTL is a dead worker and its slots no longer count. Admission
    counts the pool's slots from these rows (Celery's own inspection is slow under load).
    """

    node = models.CharField(max_length=200, unique=True, help_text="the Celery node name, name@host")
    host = models.CharField(max_length=200, blank=True)
    slots = models.PositiveIntegerField(help_text="shards it runs at once (its concurrency)")
    labels = models.JSONField(default=dict, blank=True, help_text='e.g. {"zone": "eu-west", "pool": "private"}')
    queues = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()

    class Meta:
        ordering = ["node"]

    def __str__(self):
        return f"{self.node} ({self.slots} slots)"

    @property
    def pools(self) -> list[str]:
        """The pools whose shards it takes: ``""`` for the ``engine`` queue, ``P`` for ``engine.P``."""
        return sorted(
            {"" if q == "engine" else q.removeprefix("engine.") for q in self.queues if q.startswith("engine")}
        )


class TeamQuota(models.Model):
    """A team's own limits, set by an operator in the admin; empty fields take the settings' defaults
    (PLIMSOLL_TEAM_MAX_RUNS, _MAX_USERS, _MAX_USER_HOURS; 0 there: no limit)."""

    team = models.OneToOneField("accounts.Team", on_delete=models.CASCADE, related_name="quota")
    max_runs = models.PositiveIntegerField(null=True, blank=True, help_text="runs active at once, waiting included")
    max_users = models.PositiveIntegerField(null=True, blank=True, help_text="peak users of one run")
    max_user_hours = models.PositiveIntegerField(null=True, blank=True, help_text="user-hours per calendar month")

    def __str__(self):
        return f"limits of {self.team}"


class AdmissionPass(models.Model):
    """One row, locked by each admission pass so that two passes never admit the same free slots twice."""

    last_pass_at = models.DateTimeField()

    def __str__(self):
        return f"admission, last pass {self.last_pass_at}"


class WatchdogView(models.Model):
    """The watchdog's own view of the database: one row, written by every watchdog pass.

    A watchdog that could not reach the database (or did not run) saw no heartbeats in that
    time, so it judges a shard's silence only after it has watched for a whole timeout again.
    """

    last_pass_at = models.DateTimeField()
    watching_since = models.DateTimeField(help_text="start of the current run of passes without a gap")

    def __str__(self):
        return f"watchdog watching since {self.watching_since}"


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
    # The shard's per-second totals over all labels, written by the sink with the row: live
    # figures, live charts and the degradation inputs read these few rows, never PageInterval.
    pages = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    latency_sum_us = models.BigIntegerField(default=0)
    latency_count = models.PositiveIntegerField(default=0)
    # Running totals of this shard up to and including this second (the previous row's plus
    # this second's), so the live page reads one row per shard whatever the run's length.
    pages_total = models.BigIntegerField(default=0)
    errors_total = models.BigIntegerField(default=0)
    # The same for latency and dropped iterations, so that a live chart's first load sums any
    # stretch of seconds as the difference of two rows (``results.shards.early_buckets``). Null in
    # rows written before they existed (and after such a row): readers then sum the rows.
    latency_sum_total = models.BigIntegerField(null=True, blank=True)
    latency_count_total = models.BigIntegerField(null=True, blank=True)
    dropped_total = models.BigIntegerField(null=True, blank=True)
    # The second's hits and bytes over all labels, and its page durations over all labels merged
    # (``Histogram.to_bytes``): a live chart reads these few rows, not one row per label, so a poll
    # costs the same whatever the width of its bucket (issue 9). Null in rows written before.
    hits = models.PositiveIntegerField(default=0)
    bytes_in = models.BigIntegerField(default=0)
    hist_bin = models.BinaryField(null=True, blank=True)

    class Meta:
        # Keyed so that a repeated flush replaces its row instead of counting twice; second before
        # shard so that the run's last second and its latest rows are one index descent away.
        constraints = [models.UniqueConstraint(fields=["run", "second", "shard_no"], name="shardinterval_unique")]

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
    # Rows written before issue 9 hold JSON histograms (hist, connect_hist, ttfb_hist); newer rows
    # the compact binary form (Histogram.to_bytes) and connect times as count and sum, the only
    # figure read from them (their mean). Readers take either: portal/runs/results/storage.py.
    hist = models.JSONField(default=dict)
    connect_hist = models.JSONField(default=dict)
    ttfb_hist = models.JSONField(default=dict)
    hist_bin = models.BinaryField(null=True)
    ttfb_bin = models.BinaryField(null=True)
    connect_count = models.PositiveIntegerField(default=0)
    connect_sum_us = models.BigIntegerField(default=0)

    class Meta:
        # Second before shard: the index also serves reads of a run in time order (finalize,
        # the live chart's ?since= poll) without a sort.
        constraints = [
            models.UniqueConstraint(fields=["run", "second", "shard_no", "label"], name="pageinterval_unique")
        ]

    def __str__(self):
        return f"{self.label} @ {self.second} s (run {self.run_id} shard {self.shard_no})"


class SlowTrace(models.Model):
    """Trace context: one page's (label's) slowest request of one second of one shard, and its W3C trace id.

    Written by the interval writer from the engine's ``slowest`` (workers/engine/runner.py), kept
    apart from PageInterval so that a roll-up (which deletes the per-second rows) keeps them: the
    drill-down lists a range's slowest requests with links to the environment's tracing backend.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="slow_traces")
    shard_no = models.PositiveIntegerField()
    second = models.IntegerField()
    label = models.CharField(max_length=210)
    ms = models.FloatField()
    trace_id = models.CharField(max_length=32)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "label", "second", "shard_no"], name="slowtrace_unique")]

    def __str__(self):
        return f"{self.label} @ {self.second} s: {self.ms} ms, trace {self.trace_id}"


class RunFigures(models.Model):
    """What a finished run's pages read, computed once at finalize (the summary stays on Run).

    Kept apart from Run so that lists of runs (the runs list, a journey of 2,000 runs) do not
    load chart series. A finished run without a row (recorded before issue 9) is computed
    from its interval rows on demand, as before.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="figures")
    # analysis.series(run) as the chart endpoint serves it.
    series = models.JSONField()
    # comparison.run_batches(run) as [[label or None, figures], ...] (JSON keys cannot be None).
    batches = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    # When the per-second label rows were rolled up into PageRollup (None: not yet).
    rolled_up_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"figures of run {self.run_id}"


class PageRollup(models.Model):
    """One page's (label's) measurements over ROLLUP_S seconds (or less) of a run, all shards merged.

    PLIMSOLL_ROLLUP_AFTER seconds after a run ended (its figures are stored in Run.summary and
    RunFigures), its per-second PageInterval rows are rolled up into these and deleted
    (services.rollup_due, from the watchdog):
    per-label detail is kept per minute, per-second run totals stay on ShardInterval (the
    degradation and batch inputs), so nothing a report, comparison or export reads is lost.
    """

    ROLLUP_S = 60

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="page_rollups")
    second = models.IntegerField(help_text="first second of the span, a multiple of span_s")
    span_s = models.PositiveIntegerField()
    label = models.CharField(max_length=210)
    pages = models.PositiveIntegerField(default=0)
    hits = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    errors_by_kind = models.JSONField(default=dict)
    error_samples = models.JSONField(default=dict)
    bytes_in = models.BigIntegerField(default=0)
    bytes_out = models.BigIntegerField(default=0)
    hist_bin = models.BinaryField(null=True)
    ttfb_bin = models.BinaryField(null=True)
    connect_count = models.PositiveIntegerField(default=0)
    connect_sum_us = models.BigIntegerField(default=0)
    # Rolled up while the run was live (results.rollup.live_rollup): each second's pages, page
    # durations' count and sum (``rollup.pack_seconds``), so that the finalize reads the span as
    # its seconds and computes the same figures as from the per-second rows. Null after the run.
    seconds_bin = models.BinaryField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "second", "label"], name="pagerollup_unique")]

    def __str__(self):
        return f"{self.label} @ {self.second}+{self.span_s} s (run {self.run_id})"


class ProtocolInterval(models.Model):
    """One page's (label's) protocol figures from one shard in one second (issue 26): the hits by
    protocol, the streamed responses' histograms and the WebSocket sessions' round trips and messages.

    Written by the interval writer beside its PageInterval row, but only for a label-second that
    has something to say: a stream or WebSocket figure, or a hit over another protocol than
    HTTP/1.1. A label-second without a row had HTTP/1.1 hits only (``hits`` here lets readers
    count those exactly), so a plain HTTP/1.1 run writes no row at all. The roll-up merges a
    finished run's rows into one row per label and ROLLUP_S span (``span_s``, shard 0), as it
    does PageInterval's. Histograms are in the binary form (Histogram.to_bytes); ``events_bin``
    holds event counts per response, not microseconds.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="protocol_intervals")
    shard_no = models.PositiveIntegerField()
    second = models.IntegerField(help_text="seconds since the run's start_at (a span's first second)")
    span_s = models.PositiveIntegerField(default=1)
    label = models.CharField(max_length=210)
    hits = models.PositiveIntegerField(default=0)
    protocols = models.JSONField(default=dict, help_text='hits by protocol, e.g. {"h2": 30, "http/1.1": 2}')
    ttfe_bin = models.BinaryField(null=True, help_text="streamed responses: time to first event")
    gap_bin = models.BinaryField(null=True, help_text="streamed responses: gaps between events")
    events_bin = models.BinaryField(null=True, help_text="streamed responses: events per response (counts)")
    rtt_bin = models.BinaryField(null=True, help_text="WebSocket sessions: message round trips")
    ws_sent = models.BigIntegerField(default=0)
    ws_received = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "second", "shard_no", "label"], name="protocolinterval_unique")
        ]

    def __str__(self):
        return f"{self.label} @ {self.second}+{self.span_s} s protocols (run {self.run_id} shard {self.shard_no})"


class ResultImport(TimeStamped):
    """One uploaded result file on its way to an imported run (issue 18): a background task reads it.

    The upload is kept under ``VAR_DIR/result-uploads`` (owner-only) until the task has read it,
    then deleted whatever the outcome. ``bytes_read`` / ``bytes_total`` are the progress the
    environment's page polls; ``error`` the reader's message (it names the bad line).
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        READING = "reading", "Reading"
        STORING = "storing", "Storing"
        DONE = "done", "Imported"
        FAILED = "failed", "Failed"

    ACTIVE = (Status.QUEUED, Status.READING, Status.STORING)
    team_path = "environment__project__team"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="result_imports")
    plan = models.ForeignKey(Plan, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    file_name = models.CharField(max_length=255)
    format = models.CharField(max_length=16, blank=True, default="")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    bytes_read = models.BigIntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    already_imported = models.BooleanField(default=False, help_text="the same file had been imported before")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.file_name} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def percent(self) -> int:
        if self.status == self.Status.DONE:
            return 100
        return int(100 * self.bytes_read / self.bytes_total) if self.bytes_total else 0
