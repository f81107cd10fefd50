"""The results history: tuning changes, trial sets, experiments and external measurements.

The seed stories are journeys of changes (an index, -T1118, RBS, a pool size), each
measured before and after. These models record that journey:

* a **TuningChange** is the only way an environment's configuration changes once the
  environment exists; it keeps the whole configuration before and after, so the
  configuration at any past change can be shown, and every run records the change it
  ran under (``Run.tuning_change``);
* a **TrialSet** is N runs of one plan in a row on one environment (the TFS team ran 3
  and averaged), so a comparison can weigh the difference against the spread;
* an **Experiment** automates a seed story: baseline trials, apply a change (by its
  hook or by a person confirming), trials after, then the comparison;
* an **ExternalMeasurement** is a figure measured outside Plimsoll (backup time,
  database size) that joins the journey and the comparisons.
"""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

from portal.common import TimeStamped, new_code
from portal.projects.models import Environment, Plan, Project

MAX_TRIALS = 20


def config_dict(configuration: list[dict]) -> dict[str, str]:
    """An ordered configuration list ([{key, value}]) as a dict."""
    return {item["key"]: item["value"] for item in configuration or []}


def config_diff(before: list[dict], after: list[dict]) -> list[dict]:
    """Keys that differ: [{key, before, after}], None for a key added (before) or removed (after).

    Order: the after configuration's order, then removed keys in their old order.
    """
    b, a = config_dict(before), config_dict(after)
    diff = [{"key": k, "before": b.get(k), "after": v} for k, v in a.items() if b.get(k) != v]
    diff += [{"key": k, "before": v, "after": None} for k, v in b.items() if k not in a]
    return diff


def apply_edits(configuration: list[dict], edits: list[dict]) -> list[dict]:
    """The configuration with ``edits`` ([{key, value}], value None = remove) applied, order kept."""
    out = [dict(item) for item in configuration or []]
    for edit in edits:
        index = next((i for i, item in enumerate(out) if item["key"] == edit["key"]), None)
        if edit["value"] is None:
            if index is not None:
                del out[index]
        elif index is None:
            out.append({"key": edit["key"], "value": edit["value"]})
        else:
            out[index]["value"] = edit["value"]
    return out


class TuningChange(TimeStamped):
    """A dated, authored change of an environment's configuration, with the keys before → after.

    A change is written down as ``edits`` (the keys to set or remove) and takes effect when
    it is applied: then ``config_before``/``config_after`` record the whole configuration on
    either side (so edits made by other changes in between are kept), the environment takes
    ``config_after``, and the change gets its number in the environment's ledger. A change
    that is part of an experiment waits as *planned* until the baseline trials are done.
    """

    team_path = "environment__project__team"

    class Category(models.TextChoices):
        INDEX = "index", "Index"
        TRACE_FLAG = "trace_flag", "Trace flag"
        STORAGE = "storage", "Storage"
        WEB_SERVER = "web_server", "Web server"
        CACHE = "cache", "Cache"
        HARDWARE = "hardware", "Hardware"
        CODE = "code", "Code"
        OTHER = "other", "Other"
        # "No change", an A/A test: recorded and applied like a change, it touches no key, so an
        # experiment made of it measures the noise floor and the ledger never claims a change that did not happen.
        CONTROL = "control", "Control (no change, A/A)"
        # A regressed run's level accepted as the new normal (portal/schedules/baselines.py): an event in the
        # ledger, with who and why, that touches no key either.
        BASELINE = "baseline", "Baseline accepted"

    class Status(models.TextChoices):
        PLANNED = "planned", "Planned"
        APPLIED = "applied", "Applied"
        FAILED = "failed", "Failed"

    class HookMethod(models.TextChoices):
        POST = "POST", "POST"
        PUT = "PUT", "PUT"
        PATCH = "PATCH", "PATCH"
        GET = "GET", "GET"
        DELETE = "DELETE", "DELETE"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="changes")
    number = models.PositiveIntegerField(null=True, blank=True, help_text="Its place in the ledger, once applied")
    category = models.CharField(max_length=12, choices=Category.choices, default=Category.OTHER)
    title = models.CharField(max_length=200, help_text="What changed, in a few words: “Enable -T1118”")
    reason = models.TextField(blank=True, help_text="Why: the symptom or bottleneck it addresses")
    reference = models.URLField("reference link", max_length=500, blank=True, help_text="A KB article, a ticket…")
    edits = models.JSONField(default=list, help_text="[{key, value}], value null removes the key")
    config_before = models.JSONField(default=list)
    config_after = models.JSONField(default=list)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PLANNED)
    made_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    # The apply hook: an HTTP request Plimsoll sends to make the change (allowlisted targets only).
    hook_method = models.CharField("hook method", max_length=6, choices=HookMethod.choices, default=HookMethod.POST)
    hook_url = models.URLField("hook URL", max_length=500, blank=True)
    hook_body = models.TextField("hook body", blank=True)
    hook_content_type = models.CharField("hook content type", max_length=100, default="application/json", blank=True)
    hook_response = models.JSONField(
        null=True, blank=True, help_text="{status, reason, body, elapsed_ms, error, at} of the last hook call"
    )
    error_message = models.TextField(blank=True)
    # The target's own configuration read right after the change was applied, where the environment
    # names where the target reports it (Environment.config_url; portal/projects/drift.py):
    # {at, url, error, drifted [{key, ledger, actual}], agreed, unreported, unrecorded}. None: not read.
    verification = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["environment", "number", "id"]
        constraints = [
            models.UniqueConstraint(fields=["environment", "number"], name="tuningchange_number_unique_in_env"),
        ]
        indexes = [models.Index(fields=["environment", "applied_at"], name="tuningchange_env_applied_idx")]

    def __str__(self):
        return f"#{self.number} {self.title}" if self.number else self.title

    def get_absolute_url(self):
        return reverse("history:change", args=[self.code])

    @property
    def is_applied(self) -> bool:
        return self.status == self.Status.APPLIED

    @property
    def diff(self) -> list[dict]:
        """[{key, before, after}] once applied; before that, the edits against the current configuration."""
        if self.is_applied:
            return config_diff(self.config_before, self.config_after)
        current = self.environment.configuration
        return config_diff(current, apply_edits(current, self.edits))

    @property
    def has_hook(self) -> bool:
        return bool(self.hook_url)

    @property
    def is_control(self) -> bool:
        return self.category == self.Category.CONTROL

    @property
    def touches_nothing(self) -> bool:
        """A control or an accepted baseline: a ledger entry that changes no key."""
        return self.category in (self.Category.CONTROL, self.Category.BASELINE)


class TrialSet(TimeStamped):
    """N runs of one plan, one after the other, on one environment and one configuration."""

    team_path = "project__team"

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        STOPPED = "stopped", "Stopped"

    class Role(models.TextChoices):
        NONE = "", "—"
        BASELINE = "baseline", "Baseline"
        AFTER = "after", "After the change"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="trial_sets")
    environment = models.ForeignKey(Environment, on_delete=models.SET_NULL, null=True, related_name="trial_sets")
    plan = models.ForeignKey(Plan, on_delete=models.SET_NULL, null=True, related_name="trial_sets")
    plan_name = models.CharField(max_length=100)
    label = models.CharField(max_length=200, blank=True)
    size = models.PositiveSmallIntegerField(
        "trials", default=3, validators=[MinValueValidator(1), MaxValueValidator(MAX_TRIALS)]
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.RUNNING)
    error_message = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    experiment = models.ForeignKey(
        "Experiment", on_delete=models.CASCADE, null=True, blank=True, related_name="trial_sets"
    )
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.NONE, blank=True)
    # Started through the API: each trial's run records this token (name and prefix, never the secret).
    api_token = models.ForeignKey(
        "accounts.ApiToken", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return self.label or f"{self.size} trials of {self.plan_name}"

    def get_absolute_url(self):
        return reverse("history:trialset", args=[self.code])

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.RUNNING


class Experiment(TimeStamped):
    """A seed story automated: N baseline trials, apply a change, N trials after, compare.

    Each step is taken by ``services.experiment_advance``, which looks at the database
    and does the next thing; it is safe to call any number of times (Celery and the
    watchdog both call it).
    """

    team_path = "project__team"

    class Status(models.TextChoices):
        DRAFT = "draft", "Ready to start"
        BASELINE = "baseline", "Baseline trials"
        APPLYING = "applying", "Applying the change"
        AWAITING = "awaiting", "Waiting for the change"
        AFTER = "after", "Trials after the change"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        STOPPED = "stopped", "Stopped"

    ACTIVE = (Status.BASELINE, Status.APPLYING, Status.AWAITING, Status.AFTER)

    class ApplyMode(models.TextChoices):
        HOOK = "hook", "By its hook: Plimsoll sends the change's HTTP request"
        MANUAL = "manual", "By hand: a person makes the change and confirms here"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="experiments")
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="experiments")
    plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="experiments")
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    trials = models.PositiveSmallIntegerField(
        "trials each side", default=3, validators=[MinValueValidator(1), MaxValueValidator(MAX_TRIALS)]
    )
    change = models.OneToOneField(TuningChange, on_delete=models.PROTECT, related_name="experiment")
    apply_mode = models.CharField(max_length=6, choices=ApplyMode.choices, default=ApplyMode.HOOK)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.DRAFT)
    error_message = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return self.title

    def get_absolute_url(self):
        return reverse("history:experiment", args=[self.code])

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    def _set(self, role: str) -> "TrialSet | None":
        return next((s for s in self.trial_sets.all() if s.role == role), None)

    @property
    def baseline(self) -> "TrialSet | None":
        return self._set(TrialSet.Role.BASELINE)

    @property
    def after(self) -> "TrialSet | None":
        return self._set(TrialSet.Role.AFTER)


class ExternalMeasurement(TimeStamped):
    """A figure measured outside Plimsoll (backup time, database size), recorded against a configuration."""

    team_path = "environment__project__team"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="measurements")
    name = models.CharField(max_length=100, help_text="What was measured: “Database backup”")
    unit = models.CharField(max_length=20, help_text="s, min, GB, …")
    value = models.FloatField()
    measured_at = models.DateTimeField()
    lower_is_better = models.BooleanField(
        default=True, help_text="Times and sizes: lower is better. Untick for rates such as MB/s."
    )
    # The configuration it was measured under: chosen by hand, else the change in effect at measured_at.
    tuning_change = models.ForeignKey(
        TuningChange, on_delete=models.SET_NULL, null=True, blank=True, related_name="measurements"
    )
    run = models.ForeignKey(
        "runs.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="external_measurements"
    )
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["-measured_at", "-id"]
        indexes = [models.Index(fields=["environment", "name"], name="measurement_env_name_idx")]

    def __str__(self):
        return f"{self.name}: {self.value:g} {self.unit}"
