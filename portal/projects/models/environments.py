"""Projects, their environments (the systems under test) and the servers each runs on."""

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import models
from django.urls import reverse

from portal.accounts.models import Team
from portal.common import TimeStamped, new_code

TRACE_ID_PLACEHOLDER = "{trace_id}"


def validate_otlp_endpoint(value: str) -> None:
    """An http(s) URL without credentials (the engine's strict parser), as the engine will post to it."""
    from workers.engine.otlp import traces_url
    from workers.engine.targets import BadTargetURL, parse_target_url

    if not value:
        return
    try:
        parse_target_url(traces_url(value))
    except (ValueError, BadTargetURL) as exc:
        raise ValidationError(f"Not an OTLP/HTTP endpoint: {exc}") from None


def validate_trace_url_template(value: str) -> None:
    """An http(s) URL with ``{trace_id}`` once (where a run's trace id goes) and no other placeholder."""
    if not value:
        return
    if value.count(TRACE_ID_PLACEHOLDER) != 1:
        raise ValidationError(
            "Put {trace_id} once where the trace id goes, e.g. https://tempo.example/trace/{trace_id}."
        )
    sample = value.replace(TRACE_ID_PLACEHOLDER, "4bf92f3577b34da6a3ce929d0e0e4736")
    if "{" in sample or "}" in sample:
        raise ValidationError("Only {trace_id} can be filled in: remove the other braces.")
    try:
        URLValidator(schemes=["http", "https"])(sample)
    except ValidationError:
        raise ValidationError("Give an http:// or https:// address with {trace_id} in it.") from None


def trace_url(template: str, trace_id: str) -> str:
    """The link to one trace (``""`` without a template)."""
    return template.replace(TRACE_ID_PLACEHOLDER, trace_id) if template else ""


# The engine's plan option (docs/protocols.md): an environment's, or a plan's own choice.
PROTOCOL_CHOICES = [
    ("auto", "Automatic: HTTP/2 over TLS when the server offers it, else HTTP/1.1"),
    ("http1", "HTTP/1.1 only"),
    ("h2c", "HTTP/2, also in clear text (h2c with prior knowledge)"),
]


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
    # Where the target reports its actual configuration, for Verify (portal/projects/drift.py).
    config_url = models.CharField(
        "configuration URL",
        max_length=500,
        blank=True,
        help_text="Optional: where the system under test reports its actual configuration, as a JSON object of "
        "key → value (the demo target: /_demo/knobs). Verify on the environment's page compares it with the ledger.",
    )
    # Trace context (docs/observability.md): where a trace id of the drill-down's slowest requests links to.
    trace_url_template = models.CharField(
        "trace URL template",
        max_length=500,
        blank=True,
        validators=[validate_trace_url_template],
        help_text="Optional: a link to one trace in your tracing backend, with {trace_id} where the id goes, "
        "e.g. https://tempo.example/trace/{trace_id} (Jaeger: …/trace/{trace_id}, Zipkin: …/zipkin/traces/{trace_id}).",
    )
    # Optional OTLP export (workers/engine/otlp.py): sampled requests' spans sent to the team's collector.
    otlp_endpoint = models.CharField(
        "OTLP endpoint",
        max_length=500,
        blank=True,
        validators=[validate_otlp_endpoint],
        help_text="Optional: an OTLP/HTTP receiver (an OpenTelemetry Collector, Tempo, Jaeger…), e.g. "
        "http://otel-collector:4318; the engine exports a client span for each sampled request. It must be "
        "in the load-target allowlist, like a target.",
    )
    # Server metrics (portal.metrics): how often each server's metrics endpoint is scraped during a run.
    metrics_interval_s = models.PositiveSmallIntegerField(
        "scrape servers every (s)",
        default=5,
        validators=[MinValueValidator(1), MaxValueValidator(300)],
        help_text="How often Plimsoll reads each server's metrics endpoint while a run is active.",
    )
    # Issue 25: the generator pool whose workers load this environment (workers on engine.<pool>); "": the default.
    generator_pool = models.CharField(
        "generator pool",
        max_length=60,
        blank=True,
        default="",
        help_text="Run on the workers of this pool only (PLIMSOLL_WORKER_LABELS pool=…); empty: the default pool.",
    )
    # Or the team's own Prometheus (portal.telemetry.promql), for servers that name themselves there by labels.
    prometheus_url = models.CharField(
        "Prometheus URL",
        max_length=500,
        blank=True,
        help_text="Optional: your Prometheus (or a compatible API), e.g. http://prometheus:9090. Servers with "
        "label matchers read their figures from it instead of being scraped.",
    )
    # Fernet-encrypted (portal.telemetry.promql.token_encrypt); never shown back.
    prometheus_token = models.TextField(blank=True, editable=False)
    # Issue 26: the protocol the engine speaks to this system (a plan may choose another), and a private CA.
    protocol = models.CharField(
        max_length=8,
        choices=PROTOCOL_CHOICES,
        default="auto",
        help_text="What the engine speaks to this system; a plan can choose another",
    )
    ca_bundle = models.TextField(
        "CA bundle",
        blank=True,
        help_text="PEM certificates of a private CA, trusted besides the system's CAs (certificates are verified)",
    )
    ca_bundle_name = models.CharField("CA bundle file", max_length=255, blank=True)

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

    @property
    def ca_bundle_count(self) -> int:
        """How many certificates the CA bundle holds."""
        return self.ca_bundle.count("-----BEGIN CERTIFICATE-----")

    def change_in_effect(self, at):
        """The last tuning change (portal.history) applied at or before ``at``; None: the initial configuration.

        Reached through the reverse relation, so that runs (an imported run's configuration) can ask
        without importing the results history, which sits above them.
        """
        TuningChange = self.changes.model
        return (
            self.changes.filter(status=TuningChange.Status.APPLIED, applied_at__lte=at)
            .order_by("-applied_at", "-number")
            .first()
        )


class Server(models.Model):
    """One machine of an environment (web, database, …), for the record and later for monitoring."""

    team_path = "environment__project__team"

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="servers")
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=100, blank=True, help_text="web, database, application, search …")
    hardware = models.CharField("hardware notes", max_length=300, blank=True)
    position = models.PositiveIntegerField(default=0)
    # Server metrics (portal.metrics): a Prometheus text endpoint and which of its series to keep.
    metrics_url = models.CharField(
        "metrics endpoint",
        max_length=500,
        blank=True,
        help_text="Prometheus text, e.g. http://web-01:9100/metrics (node_exporter) or :9182 (windows_exporter)",
    )
    counter_set = models.CharField(max_length=20, blank=True)
    prometheus_selector = models.CharField(
        "Prometheus labels",
        max_length=300,
        blank=True,
        help_text="With the environment's Prometheus: the label matchers of this server's series there, "
        'e.g. instance="web-01:9100"',
    )

    class Meta:
        ordering = ["position", "id"]

    def __str__(self):
        return self.name
