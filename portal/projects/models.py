from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import models
from django.urls import reverse

from portal.accounts.models import Team
from portal.common import TimeStamped, new_code, plural
from workers.engine import variables

from . import profiles

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


# ``{{name}}`` (or ``{{ name }}``) in a step's path, header values and body: an extracted value or a
# data-set column. The engine's own pattern, so the portal checks exactly what the engine substitutes.
PLACEHOLDER = variables.PLACEHOLDER


# The engine's plan option (docs/protocols.md): an environment's, or a plan's own choice.
PROTOCOL_CHOICES = [
    ("auto", "Automatic: HTTP/2 over TLS when the server offers it, else HTTP/1.1"),
    ("http1", "HTTP/1.1 only"),
    ("h2c", "HTTP/2, also in clear text (h2c with prior knowledge)"),
]

# The plan thresholds on streams and WebSocket sessions (issue 26): Plan.threshold_<key>, the snapshot's <key>.
PROTOCOL_THRESHOLD_KEYS = ("ttfe_p95_ms", "gap_p95_ms", "rtt_p95_ms", "min_h2_share_pct")


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

    def get_data_set(self) -> "DataSet | None":
        try:
            return self.data_set
        except DataSet.DoesNotExist:
            return None

    def data_set_columns(self) -> list[str]:
        """The data set's column names, without loading its rows (unless they are at hand already)."""
        if TestCase.data_set.is_cached(self):
            data_set = self.get_data_set()
            return list(data_set.columns) if data_set else []
        return DataSet.objects.filter(test_case=self).values_list("columns", flat=True).first() or []

    def variables_before(self, steps: list["Step"]) -> list[set[str]]:
        """For each of ``steps`` (in order), the names its ``{{…}}`` may use: columns and earlier extractions."""
        known = set(self.data_set_columns())
        available = []
        for step in steps:
            available.append(set(known))
            known |= step.extracted_names()
        return available

    def placeholder_problems(self, steps: list["Step"] | None = None) -> list[str]:
        """Steps that use a ``{{name}}`` nothing provides (after a reorder, or a data set removed or replaced)."""
        steps = list(self.steps.all()) if steps is None else steps
        problems = []
        for number, (step, available) in enumerate(zip(steps, self.variables_before(steps), strict=True), start=1):
            unknown = [name for name in step.placeholders() if name not in available]
            if unknown:
                names = ", ".join(f"{{{{{name}}}}}" for name in unknown)
                problems.append(
                    f"Step {number} “{step.name}” of “{self}” uses {names}, which no earlier step extracts "
                    "and no data-set column provides."
                )
        return problems

    def to_engine_dict(self, weight: int) -> dict:
        d = {"name": self.name, "weight": weight, "steps": [s.to_engine_dict() for s in self.steps.all()]}
        data_set = self.get_data_set()
        if data_set is not None:  # only when there is one: older engines refuse unknown keys
            d["data_set"] = data_set.to_engine_dict()
        return d


class DataSet(models.Model):
    """Rows of values for one test case's ``{{column}}`` placeholders, each iteration taking one row."""

    team_path = "test_case__project__team"

    class Mode(models.TextChoices):
        SEQUENTIAL = "sequential", "Sequential (each user walks the rows in order)"
        RANDOM = "random", "Random (a random row for each iteration)"
        UNIQUE = "unique", "Unique (each row once in the whole run)"

    test_case = models.OneToOneField(TestCase, on_delete=models.CASCADE, related_name="data_set")
    file_name = models.CharField(max_length=255)
    columns = models.JSONField(default=list)
    # [[value, ...], ...] in the order of ``columns``; parsed once at upload, snapshotted into each run.
    rows = models.JSONField(default=list)
    row_count = models.PositiveIntegerField(default=0)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.SEQUENTIAL)
    uploaded_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.file_name

    @property
    def short_mode(self) -> str:
        return self.get_mode_display().split(":")[0]

    def to_engine_dict(self) -> dict:
        return {"columns": list(self.columns), "rows": self.rows, "mode": self.mode}


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

    class BodyType(models.TextChoices):
        RAW = "raw", "Raw (as written, with the headers given)"
        FORM = "form", "Form (application/x-www-form-urlencoded)"
        JSON = "json", "JSON (application/json)"

    class Source(models.TextChoices):
        REGEX = "regex", "regex"
        JSON = "json", "JSON path"
        FORM_FIELD = "form_field", "form field"
        HEADER = "header", "header"

    body_type = models.CharField(max_length=4, choices=BodyType.choices, default=BodyType.RAW)
    timeout = models.FloatField(
        "timeout (s)",
        null=True,
        blank=True,
        validators=[MinValueValidator(0.1), MaxValueValidator(600)],
        help_text="Empty: the plan's request timeout",
    )
    max_duration_ms = models.PositiveIntegerField(
        "maximum duration (ms)",
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(600_000)],
        help_text="A slower page counts as an error. Empty: no limit",
    )
    # [{"name", "source", "expression"}]: values taken from this page's response for later steps.
    extract = models.JSONField(default=list, blank=True)
    # ["/static/site.css", ...]: fetched in parallel after the main response, as a browser does.
    resources = models.JSONField(default=list, blank=True)

    class Kind(models.TextChoices):  # docs/protocols.md
        REQUEST = "request", "HTTP request"
        STREAM = "stream", "Streamed response (server-sent events or chunked)"
        WEBSOCKET = "websocket", "WebSocket session"

    class StreamKind(models.TextChoices):
        SSE = "sse", "Server-sent events (text/event-stream)"
        CHUNKED = "chunked", "Chunked lines (one event per line, e.g. JSON lines)"

    kind = models.CharField(max_length=9, choices=Kind.choices, default=Kind.REQUEST)
    stream_kind = models.CharField("stream format", max_length=7, choices=StreamKind.choices, default=StreamKind.SSE)
    stream_idle_timeout = models.FloatField(
        "idle timeout (s)",
        default=10.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(600)],
        help_text="A stream that sends nothing for this long is an error (stream_stalled)",
    )
    stream_last_event_contains = models.CharField(
        "the last event contains",
        max_length=500,
        blank=True,
        help_text="E.g. [DONE]. Empty: no check of the final event",
    )
    # The engine's actions, [{"send": ...} | {"expect": {...}, "timeout", "extract"} | {"wait": s}] (docs/protocols.md).
    ws_actions = models.JSONField("WebSocket actions", default=list, blank=True)
    ws_hold = models.FloatField(
        "hold open (s)",
        default=0.0,
        validators=[MinValueValidator(0), MaxValueValidator(3600)],
        help_text="Seconds the session stays open after its last action",
    )
    # The protocol a recording (HAR import) used for this page: "h2", "http/1.1", … ("" when unknown).
    recorded_protocol = models.CharField(max_length=12, blank=True)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self):
        return self.name

    def placeholders(self) -> list[str]:
        """The ``{{names}}`` its path, header values and body use, each once, in order of appearance.

        A WebSocket session's messages count too, except the names its own earlier expects extract.
        """
        texts = [self.path, *self.headers.values(), self.body]
        names = [name for text in texts for name in PLACEHOLDER.findall(text)]
        if self.kind == self.Kind.WEBSOCKET:
            own: set[str] = set()
            for action in self.ws_actions:
                if "send" in action:
                    names.extend(n for n in PLACEHOLDER.findall(action["send"]) if n not in own)
                own |= {item["name"] for item in action.get("extract") or []}
        return list(dict.fromkeys(names))

    def extracted_names(self) -> set[str]:
        """The variables this step gives later steps: its extractions, and its WebSocket expects' ones."""
        names = {item["name"] for item in self.extract}
        if self.kind == self.Kind.WEBSOCKET:
            names |= {item["name"] for action in self.ws_actions for item in action.get("extract") or []}
        return names

    def extractions_display(self) -> list[tuple[str, str, str]]:
        """(name, source in words, expression) of each extraction: "→ csrf (form field)" on the steps list."""
        labels = dict(self.Source.choices)
        return [(i["name"], labels.get(i["source"], i["source"]), i["expression"]) for i in self.extract]

    def to_engine_dict(self) -> dict:
        d = {
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
        # The newer keys only when they differ from the engine's defaults, so that a plain step
        # stays valid for an engine that does not know them (Plan.from_dict refuses unknown keys).
        if self.body_type != self.BodyType.RAW:
            d["body_type"] = self.body_type
        if self.timeout is not None:
            d["timeout"] = self.timeout
        if self.max_duration_ms is not None:
            d["max_duration_ms"] = self.max_duration_ms
        if self.extract:
            d["extract"] = [dict(item) for item in self.extract]
        if self.resources:
            d["resources"] = list(self.resources)
        if self.kind == self.Kind.STREAM:
            d["stream"] = {
                "kind": self.stream_kind,
                "idle_timeout": self.stream_idle_timeout,
                "last_event_contains": self.stream_last_event_contains,
            }
        elif self.kind == self.Kind.WEBSOCKET:
            # A session: GET upgrade, no body nor resources (the form refuses them; the engine too).
            d["method"], d["body"] = "GET", ""
            d.pop("body_type", None)
            d.pop("resources", None)
            d["websocket"] = {"actions": [dict(a) for a in self.ws_actions], "hold": self.ws_hold}
        return d


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


class HarImport(TimeStamped):
    """A large HAR imported through the API, analysed by har_analysis_task off the web request.

    The recording waits on disk only until the task is done with it (see services.har_api_import_start);
    this row keeps the outcome (the preview's summary, the test case or the refusal) for a client to
    poll, and is deleted by the sweep PLIMSOLL_HAR_UPLOAD_TTL_S after it was made.
    """

    team_path = "project__team"

    class Status(models.TextChoices):
        QUEUED = "queued"
        ANALYSING = "analysing"
        DONE = "done"
        FAILED = "failed"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="har_imports")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    token = models.CharField(max_length=64, unique=True, help_text="the waiting recording's file token")
    file_name = models.CharField(max_length=255)
    name = models.CharField(max_length=100, help_text="the test case's name")
    dry_run = models.BooleanField(default=False)
    status = models.CharField(max_length=9, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True, default="")
    preview = models.JSONField(null=True, blank=True, help_text="the preview's summary, once done")
    test_case = models.ForeignKey(TestCase, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    finished_at = models.DateTimeField(null=True, blank=True)
