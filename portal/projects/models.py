from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

from portal.accounts.models import Team
from portal.common import TimeStamped, new_code


class Project(TimeStamped):
    """A system's whole tuning journey: its environments, test cases, plans and runs."""

    team_path = "team"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name"],
                name="project_name_unique_in_team",
                violation_error_message="Your team already has a project with this name.",
            )
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("projects:detail", args=[self.code])


class Environment(TimeStamped):
    """The system under test: where load goes, what it runs on, and how it is configured."""

    team_path = "project__team"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="environments")
    name = models.CharField(max_length=100)
    base_url = models.URLField(
        "base URL",
        max_length=500,
        help_text="Scheme, host and port of the system under test, e.g. http://127.0.0.1:8001",
    )
    description = models.TextField(blank=True)
    # Ordered [{"key": ..., "value": ...}]: order is the author's (grouped by server, say), not alphabetical.
    configuration = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"],
                name="environment_name_unique_in_project",
                violation_error_message="This project already has an environment with this name.",
            )
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("projects:environment", args=[self.code])


class Server(models.Model):
    """One machine of an environment (web, database, …), for the record and later for monitoring."""

    team_path = "environment__project__team"

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="servers")
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=100, blank=True, help_text="web, database, application, search …")
    hardware = models.CharField("hardware notes", max_length=300, blank=True)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self):
        return self.name


class TestCase(TimeStamped):
    """A navigation path: the ordered pages one user visits in one iteration."""

    __test__ = False  # not a pytest test class
    team_path = "project__team"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="test_cases")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"],
                name="testcase_name_unique_in_project",
                violation_error_message="This project already has a test case with this name.",
            )
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("projects:testcase", args=[self.code])

    def to_engine_dict(self, weight: int) -> dict:
        return {"name": self.name, "weight": weight, "steps": [s.to_engine_dict() for s in self.steps.all()]}


class Step(models.Model):
    """One page: an HTTP request with its checks and the think time after it."""

    team_path = "test_case__project__team"

    class Method(models.TextChoices):
        GET = "GET"
        POST = "POST"
        PUT = "PUT"
        PATCH = "PATCH"
        DELETE = "DELETE"
        HEAD = "HEAD"
        OPTIONS = "OPTIONS"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    test_case = models.ForeignKey(TestCase, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveIntegerField(default=0)
    name = models.CharField(max_length=100)
    method = models.CharField(max_length=7, choices=Method.choices, default=Method.GET)
    path = models.CharField(max_length=2000, help_text="Relative to the environment's base URL, starting with /")
    headers = models.JSONField(default=dict, blank=True)
    body = models.TextField(blank=True)
    think_time = models.FloatField(
        "think time (s)", default=1.0, validators=[MinValueValidator(0), MaxValueValidator(3600)]
    )
    expect_status = models.PositiveSmallIntegerField(
        "expected status",
        null=True,
        blank=True,
        validators=[MinValueValidator(100), MaxValueValidator(599)],
        help_text="Empty: any 2xx or 3xx",
    )
    text_present = models.CharField("text that must appear", max_length=500, blank=True)
    text_absent = models.CharField("text that must not appear", max_length=500, blank=True)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self):
        return self.name

    def to_engine_dict(self) -> dict:
        return {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "headers": dict(self.headers),
            "body": self.body,
            "think_time": self.think_time,
            "expect_status": self.expect_status,
            "text_present": self.text_present,
            "text_absent": self.text_absent,
        }


class Plan(TimeStamped):
    """What to run: a weighted mix of test cases against an environment, a load profile and thresholds."""

    team_path = "project__team"

    class ThinkTimeMode(models.TextChoices):
        FIXED = "fixed", "Fixed"
        UNIFORM = "uniform", "Uniform (mean ± 50 %)"
        EXPONENTIAL = "exponential", "Negative exponential"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="plans")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="plans")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    users = models.PositiveIntegerField(default=20, validators=[MinValueValidator(1), MaxValueValidator(100_000)])
    ramp_up = models.FloatField("ramp-up (s)", default=10, validators=[MinValueValidator(0)])
    hold = models.FloatField("hold (s)", default=60, validators=[MinValueValidator(1)])
    ramp_down = models.FloatField("ramp-down (s)", default=0, validators=[MinValueValidator(0)])
    think_time_mode = models.CharField(max_length=12, choices=ThinkTimeMode.choices, default=ThinkTimeMode.FIXED)
    request_timeout = models.FloatField(
        "request timeout (s)", default=30, validators=[MinValueValidator(0.1), MaxValueValidator(600)]
    )
    threshold_apd_ms = models.PositiveIntegerField("APD at most (ms)", null=True, blank=True)
    threshold_p95_ms = models.PositiveIntegerField("p95 at most (ms)", null=True, blank=True)
    threshold_error_rate_pct = models.FloatField(
        "error rate at most (%)", null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(100)]
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

    @property
    def duration(self) -> float:
        return self.ramp_up + self.hold + self.ramp_down

    def problems(self) -> list[str]:
        """Why this plan cannot run yet (empty when it can)."""
        problems = []
        entries = list(self.mix.select_related("test_case"))
        if not entries:
            problems.append("Add at least one test case to the mix.")
        for entry in entries:
            if not entry.test_case.steps.exists():
                problems.append(f"Test case “{entry.test_case}” has no steps.")
        return problems

    def to_engine_dict(self) -> dict:
        """The plan as the engine takes it; a run stores this snapshot, so later edits don't change history."""
        return {
            "base_url": self.environment.base_url.rstrip("/"),
            "test_cases": [
                e.test_case.to_engine_dict(e.weight)
                for e in self.mix.select_related("test_case").prefetch_related("test_case__steps")
            ],
            "profile": {"users": self.users, "ramp_up": self.ramp_up, "hold": self.hold, "ramp_down": self.ramp_down},
            "think_time_mode": self.think_time_mode,
            "request_timeout": self.request_timeout,
            "thresholds": {
                "apd_ms": self.threshold_apd_ms,
                "p95_ms": self.threshold_p95_ms,
                "error_rate_pct": self.threshold_error_rate_pct,
            },
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
