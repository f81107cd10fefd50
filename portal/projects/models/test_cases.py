"""Test cases (navigation paths), their steps (pages), data sets and the HAR imports that make them."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

from portal.common import TimeStamped, new_code
from workers.engine import variables

from .environments import Project

# ``{{name}}`` (or ``{{ name }}``) in a step's path, header values and body: an extracted value or a
# data-set column. The engine's own pattern, so the portal checks exactly what the engine substitutes.
PLACEHOLDER = variables.PLACEHOLDER


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
