"""Plans: a weighted mix of test cases against an environment, their load profile, levels and thresholds."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

from portal.common import TimeStamped, new_code, plural

from .. import profiles
from .environments import Environment, Project
from .test_cases import TestCase

# The plan thresholds on streams and WebSocket sessions (issue 26): Plan.threshold_<key>, the snapshot's <key>.
PROTOCOL_THRESHOLD_KEYS = ("ttfe_p95_ms", "gap_p95_ms", "rtt_p95_ms", "min_h2_share_pct")


class Plan(TimeStamped):
    """What to run: a weighted mix of test cases against an environment, a load profile and thresholds."""

    team_path = "project__team"

    class Protocol(models.TextChoices):  # the engine's plan option (docs/protocols.md)
        ENVIRONMENT = "", "The environment's"
        AUTO = "auto", "Automatic: HTTP/2 over TLS when the server offers it, else HTTP/1.1"
        HTTP1 = "http1", "HTTP/1.1 only"
        H2C = "h2c", "HTTP/2, also in clear text (h2c with prior knowledge)"

    class ThinkTimeMode(models.TextChoices):
        FIXED = "fixed", "Fixed"
        UNIFORM = "uniform", "Uniform (mean ± 50 %)"
        EXPONENTIAL = "exponential", "Negative exponential"

    # The kinds of load profile are classes in the engine (workers/engine/profiles.py); these are read from them.
    ProfileKind = models.TextChoices(
        "ProfileKind", [(kind.name.upper(), (kind.name, kind.label)) for kind in profiles.ordered()]
    )

    # The fields each kind of profile uses (a kind with levels: none); the form shows and validates only these.
    PROFILE_FIELDS = {kind.name: kind.fields for kind in profiles.ordered()}
    # The kinds' optional parameters that may stay empty (their column is nullable): the engine's default then.
    OPTIONAL_PROFILE_FIELDS = ("rate_start",)
    # Every kind's fields, in the order the form shows them; and the degradation settings.
    PROFILE_INPUTS = profiles.PARAMETERS
    DEGRADATION_INPUTS = (
        "degradation_drop_pct",
        "degradation_rise_pct",
        "degradation_sustain_s",
        "degradation_steady_s",
    )

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="plans")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="plans")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    profile_kind = models.CharField("kind", max_length=12, choices=profiles.choices, default="ramp")
    users = models.PositiveIntegerField(default=20, validators=[MinValueValidator(1), MaxValueValidator(100_000)])
    ramp_up = models.FloatField("ramp-up (s)", default=10, validators=[MinValueValidator(0)])
    hold = models.FloatField("hold (s)", default=60, validators=[MinValueValidator(1)])
    ramp_down = models.FloatField("ramp-down (s)", default=0, validators=[MinValueValidator(0)])
    pacing = models.FloatField(
        "pacing (s)",
        null=True,
        blank=True,
        validators=[MinValueValidator(0.1), MaxValueValidator(86_400)],
        help_text="Each user starts one iteration every this many seconds, whatever the response times",
    )
    rate = models.FloatField(
        "rate (iterations/s)",
        null=True,
        blank=True,
        validators=[MinValueValidator(0.01), MaxValueValidator(100_000)],
        help_text="Iterations started per second during the hold",
    )
    rate_start = models.FloatField(
        "starting rate (iterations/s)",
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(100_000)],
        help_text="The rate ramps linearly from this one over the ramp-up. Empty: the rate from the start",
    )
    max_users = models.PositiveIntegerField(
        "maximum users",
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100_000)],
        help_text="An iteration that finds no free user is not started, and counted as dropped",
    )
    think_time_mode = models.CharField(max_length=12, choices=ThinkTimeMode.choices, default=ThinkTimeMode.FIXED)
    request_timeout = models.FloatField(
        "request timeout (s)", default=30, validators=[MinValueValidator(0.1), MaxValueValidator(600)]
    )
    protocol = models.CharField(
        max_length=8,
        choices=Protocol.choices,
        default=Protocol.ENVIRONMENT,
        blank=True,
        help_text="HTTP/2 multiplexes a page's resources on one connection per user, as a browser does. "
        "The environment's choice unless the plan makes its own",
    )
    tls_accept_any = models.BooleanField(
        "accept any TLS certificate",
        default=False,
        help_text="For a test system with a self-signed certificate; certificates are verified otherwise",
    )
    trace_context = models.BooleanField(
        "send trace context",
        default=True,
        help_text="A W3C traceparent header on every request, so the slowest requests link to their server traces",
    )
    trace_sample_rate = models.FloatField(
        "sampled share",
        default=1.0,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text="The share of requests flagged sampled (0 to 1): lower it if your tracing cannot keep them all",
    )
    threshold_apd_ms = models.PositiveIntegerField("APD at most (ms)", null=True, blank=True)
    threshold_p95_ms = models.PositiveIntegerField("p95 at most (ms)", null=True, blank=True)
    threshold_error_rate_pct = models.FloatField(
        "error rate at most (%)", null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(100)]
    )
    threshold_min_pages_per_s = models.FloatField(
        "pages/s at least", null=True, blank=True, validators=[MinValueValidator(0)]
    )
    # Streams and WebSocket sessions (issue 26; docs/protocols.md): judged only on runs that have them.
    threshold_ttfe_p95_ms = models.PositiveIntegerField("time to first event p95 at most (ms)", null=True, blank=True)
    threshold_gap_p95_ms = models.PositiveIntegerField("gap between events p95 at most (ms)", null=True, blank=True)
    threshold_rtt_p95_ms = models.PositiveIntegerField("WebSocket round trip p95 at most (ms)", null=True, blank=True)
    threshold_min_h2_share_pct = models.FloatField(
        "HTTP/2 share at least (%)",
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(100)],
        help_text="of the hits whose protocol was recorded: catches a server that fell back to HTTP/1.1",
    )
    # Stop criteria (issue 24): rules that end a run early when the target is plainly broken, e.g.
    # [{"metric": "error_rate_pct", "above": 50, "window_s": 60}] (workers/engine/stop_criteria.py).
    stop_criteria = models.JSONField(
        "stop criteria",
        default=list,
        blank=True,
        help_text="Rules that stop a run when the target is plainly broken, evaluated over a sliding window",
    )
    # A steps plan run to find where the system breaks: its run ends "done" with the capacity found,
    # and fails only when even its first level breaks the thresholds.
    capacity_search = models.BooleanField(
        "capacity search",
        default=False,
        help_text="For a steps profile: the run ends done with the capacity found (the last level that held "
        "every threshold) instead of failed when its upper levels break; it fails only if the first level breaks",
    )
    # Degradation in long runs (see portal.stats.analysis.degradation): against the steady
    # state after ramp-up, a sustained throughput drop or APD rise beyond these limits.
    degradation_drop_pct = models.FloatField(
        "throughput drop (%)",
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(99)],
        help_text="Degraded when pages/s stay this far below the steady state",
    )
    degradation_rise_pct = models.FloatField(
        "APD rise (%)",
        default=50,
        validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text="Degraded when APD stays this far above the steady state",
    )
    degradation_sustain_s = models.PositiveIntegerField(
        "sustained for (s)",
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(86_400)],
        help_text="How long a drop or rise must last to count",
    )
    degradation_steady_s = models.PositiveIntegerField(
        "steady state (s)",
        default=300,
        validators=[MinValueValidator(1), MaxValueValidator(86_400)],
        help_text="The first seconds after ramp-up that define the steady state",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"],
                name="plan_name_unique_in_project",
                violation_error_message="This project already has a plan with this name.",
            )
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("projects:plan", args=[self.code])

    def get_levels(self) -> list["PlanLevel"]:
        """The steps profile's levels in order; a form sets ``_levels`` to preview unsaved ones."""
        if getattr(self, "_levels", None) is not None:
            return self._levels
        return list(self.levels.all()) if self.pk else []

    @property
    def kind(self) -> profiles.ProfileKind:
        """The profile's kind (workers/engine/profiles.py): it answers every question about the shape."""
        return profiles.kind_named(self.profile_kind)

    def profile_values(self) -> dict:
        """The kinds' flat parameters as this plan holds them (a kind reads its own)."""
        return {name: getattr(self, name) for name in self.PROFILE_INPUTS}

    def engine_profile(self):
        """The profile as the engine's Profile, unchecked (a plan being edited may lack values)."""
        return self.kind.unchecked(self.profile_values(), self.get_levels())

    @property
    def duration(self) -> float:
        """Seconds from the start to the end of the profile (docs/plan-format.md, "Load profiles")."""
        return self.kind.duration(self.engine_profile())

    @property
    def peak_users(self) -> int:
        """The most virtual users active at once (for arrival rate, the cap)."""
        return self.kind.peak_users(self.engine_profile())

    @property
    def load_summary(self) -> str:
        """A few words for lists: "50 users", "20 → 50 users", "20 iterations/s"."""
        return self.kind.load_words(self.engine_profile(), profiles.WORDS)

    @property
    def profile_description(self) -> str:
        """The load profile in words, e.g. "5 levels: 20 → 50 users, 1 h ramp-up, 5 h measured, …"."""
        return self.kind.describe(self.engine_profile(), profiles.WORDS)

    def profile_dict(self) -> dict:
        """The ``profile`` of the engine's plan, with the keys docs/plan-format.md gives for its kind."""
        levels = [level.to_engine_dict() for level in self.get_levels()] if self.kind.uses_levels else []
        return self.kind.document(self.profile_values(), levels)

    def problems(self) -> list[str]:
        """Why this plan cannot run yet (empty when it can)."""
        problems = []
        if self.kind.uses_levels and not self.get_levels():
            problems.append(f"Add at least one level to the {self.kind.name} profile.")
        entries = list(self.mix.select_related("test_case").prefetch_related("test_case__steps"))
        if not entries:
            problems.append("Add at least one test case to the mix.")
        for entry in entries:
            steps = list(entry.test_case.steps.all())
            if not steps:
                problems.append(f"Test case “{entry.test_case}” has no steps.")
            problems.extend(entry.test_case.placeholder_problems(steps))
        return problems

    def to_engine_dict(self) -> dict:
        """The plan as the engine takes it; a run stores this snapshot, so later edits don't change history."""
        return {
            "base_url": self.environment.base_url.rstrip("/"),
            "test_cases": [
                e.test_case.to_engine_dict(e.weight)
                for e in self.mix.select_related("test_case__data_set").prefetch_related("test_case__steps")
            ],
            "profile": self.profile_dict(),
            "think_time_mode": self.think_time_mode,
            "request_timeout": self.request_timeout,
            "thresholds": {
                "apd_ms": self.threshold_apd_ms,
                "p95_ms": self.threshold_p95_ms,
                "error_rate_pct": self.threshold_error_rate_pct,
                "min_pages_per_s": self.threshold_min_pages_per_s,
                # The stream and WebSocket thresholds only when set, so older snapshots read the same.
                **{
                    key: value
                    for key in PROTOCOL_THRESHOLD_KEYS
                    if (value := getattr(self, f"threshold_{key}")) is not None
                },
            },
            # Only when they differ from the engine's defaults (as a step's newer keys).
            **({"protocol": protocol} if (protocol := self.effective_protocol) != self.Protocol.AUTO else {}),
            **({"tls_verify": False} if self.tls_accept_any else {}),
            **({"ca_bundle": self.environment.ca_bundle} if self.environment.ca_bundle else {}),
            **({} if self.trace_context else {"trace_context": False}),
            **({"trace_sample_rate": self.trace_sample_rate} if self.trace_sample_rate != 1.0 else {}),
            # The environment's collector, when it has one and the plan sends trace context.
            **(
                {"otlp_endpoint": self.environment.otlp_endpoint}
                if self.environment.otlp_endpoint and self.trace_context
                else {}
            ),
            **({"stop_criteria": list(self.stop_criteria)} if self.stop_criteria else {}),
        }

    @property
    def effective_protocol(self) -> str:
        """The plan's own protocol, else its environment's."""
        return self.protocol or self.environment.protocol or self.Protocol.AUTO

    @property
    def stop_rules(self) -> list:
        """The stop criteria as rules (workers/engine/stop_criteria.py); a malformed stored one is left out."""
        from workers.engine.stop_criteria import CriteriaError, parse_rules

        try:
            return parse_rules(self.stop_criteria or [])
        except CriteriaError:
            return []

    def analysis_settings(self) -> dict:
        """What the run's analysis needs beyond the engine's plan; a run keeps a copy."""
        return {
            "capacity_search": self.capacity_search and self.kind.uses_levels,
            "degradation": {
                "drop_pct": self.degradation_drop_pct,
                "rise_pct": self.degradation_rise_pct,
                "sustain_s": self.degradation_sustain_s,
                "steady_s": self.degradation_steady_s,
            },
        }


class PlanLevel(models.Model):
    """One level of a steps profile: ramp to ``users``, hold (measured), ramp down to 0, then wait ``quiet``."""

    team_path = "plan__project__team"

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="levels")
    position = models.PositiveIntegerField(default=0)
    users = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(100_000)])
    ramp_up = models.FloatField("ramp-up (s)", default=0, validators=[MinValueValidator(0)])
    hold = models.FloatField("hold (s)", validators=[MinValueValidator(1)])
    ramp_down = models.FloatField("ramp-down (s)", default=0, validators=[MinValueValidator(0)])
    quiet = models.FloatField("quiet (s)", default=0, validators=[MinValueValidator(0)])

    class Meta:
        ordering = ["position", "id"]

    def __str__(self):
        return plural(self.users, "user")

    @property
    def duration(self) -> float:
        return self.ramp_up + self.hold + self.ramp_down + self.quiet

    def to_engine_dict(self) -> dict:
        return {
            "users": self.users,
            "ramp_up": self.ramp_up,
            "hold": self.hold,
            "ramp_down": self.ramp_down,
            "quiet": self.quiet,
        }


class MixEntry(models.Model):
    """A test case's share of a plan's iterations: weight / sum of weights."""

    team_path = "plan__project__team"

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="mix")
    test_case = models.ForeignKey(TestCase, on_delete=models.PROTECT, related_name="mix_entries")
    weight = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(10_000)])
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["plan", "test_case"],
                name="mixentry_unique_test_case",
                violation_error_message="This test case is already in the mix.",
            )
        ]

    def __str__(self):
        return f"{self.test_case} × {self.weight}"
