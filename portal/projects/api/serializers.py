"""The projects' documents as the API shows and takes them.

Writes are validated by the UI's own forms (``portal.projects.forms``), fed from these
documents in ``views.py``: the API and the browser refuse the same input with the same messages.
"""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.base import StrictSerializer
from portal.projects.models import Environment, Plan, Project, Server, Step
from portal.projects.selectors import data_set_head
from portal.projects.services import PLAN_VALUES


class ProjectSerializer(serializers.ModelSerializer):
    team = serializers.UUIDField(source="team.code", read_only=True)

    class Meta:
        model = Project
        fields = ("code", "team", "name", "description", "created_at", "updated_at")
        read_only_fields = fields


class ServerSerializer(serializers.ModelSerializer):
    class Meta:
        model = Server
        fields = ("name", "role", "hardware", "metrics_url", "counter_set", "prometheus_selector")
        read_only_fields = fields


class ConfigurationItemSerializer(serializers.Serializer):
    key = serializers.CharField()
    value = serializers.CharField(allow_blank=True)


class DriftedKeySerializer(serializers.Serializer):
    key = serializers.CharField()
    ledger = serializers.CharField(help_text="The ledger's value")
    actual = serializers.JSONField(help_text="The value the target reported")


class VerificationSerializer(serializers.Serializer):
    """The target's own configuration against the ledger (portal/projects/drift.py): Verify, and after a change."""

    at = serializers.DateTimeField(help_text="When the target's configuration was read")
    url = serializers.CharField(help_text="The environment's config_url")
    error = serializers.CharField(help_text="Why it could not be read; empty when it was")
    drifted = DriftedKeySerializer(many=True, help_text="Keys whose value differs from the ledger")
    agreed = serializers.ListField(child=serializers.CharField(), help_text="Keys where the target agrees")
    unreported = serializers.ListField(child=serializers.CharField(), help_text="In the ledger, not reported")
    unrecorded = serializers.ListField(child=serializers.CharField(), help_text="Reported, not in the ledger")


class TryMessageSerializer(serializers.Serializer):
    direction = serializers.CharField(help_text="sent or received; empty on the note that later messages were cut")
    text = serializers.CharField(allow_blank=True, help_text="The message (its first 4 KB)")
    at_ms = serializers.FloatField(required=False, help_text="Since the session opened")


class TryExchangeSerializer(serializers.Serializer):
    """One request as sent and its response as received, or why none came (portal/projects/tryit.py)."""

    method = serializers.CharField(help_text="GET, POST …, or WS for a WebSocket session")
    url = serializers.CharField()
    request_headers = serializers.DictField(child=serializers.CharField(allow_blank=True), help_text="The step's own")
    request_body = serializers.CharField(allow_blank=True, help_text="Its first 4 KB")
    status = serializers.IntegerField(allow_null=True, help_text="Null when no response came (see error)")
    reason = serializers.CharField(allow_blank=True)
    final_url = serializers.CharField(allow_blank=True, help_text="The URL after redirects; empty when the same")
    response_headers = serializers.DictField(child=serializers.CharField(allow_blank=True))
    response_body = serializers.CharField(allow_blank=True, help_text="Its first 4 KB, then how many bytes more")
    response_bytes = serializers.IntegerField()
    elapsed_ms = serializers.FloatField(allow_null=True)
    error = serializers.CharField(
        allow_blank=True, help_text="Why no response came (a timeout, a refused connection …)"
    )
    messages = TryMessageSerializer(many=True, help_text="A WebSocket session's messages in order (the first 200)")


class TryResultSerializer(serializers.Serializer):
    """Try it: one user ran one iteration of the test case; every exchange, and the checks' outcome."""

    test_case = serializers.UUIDField()
    environment = serializers.UUIDField()
    base_url = serializers.CharField()
    completed = serializers.BooleanField(help_text="The iteration ran to its end with every check passed")
    errors = serializers.DictField(
        child=serializers.CharField(), help_text="Per page: the first error the engine recorded (status, text …)"
    )
    elapsed_s = serializers.FloatField()
    exchanges = TryExchangeSerializer(many=True)


class EnvironmentSerializer(serializers.ModelSerializer):
    project = serializers.UUIDField(source="project.code", read_only=True)
    servers = ServerSerializer(many=True, read_only=True)
    configuration = ConfigurationItemSerializer(
        many=True, read_only=True, help_text="Read-only: it changes only through tuning changes"
    )
    prometheus_token_set = serializers.SerializerMethodField(
        help_text="Whether a Prometheus token is stored (the token itself is never shown)"
    )

    class Meta:
        model = Environment
        fields = (
            "code",
            "project",
            "name",
            "base_url",
            "config_url",
            "trace_url_template",
            "otlp_endpoint",
            "description",
            "metrics_interval_s",
            "generator_pool",
            "prometheus_url",
            "prometheus_token_set",
            "protocol",
            "ca_bundle",
            "ca_bundle_name",
            "configuration",
            "servers",
        )
        read_only_fields = fields

    def get_prometheus_token_set(self, environment) -> bool:
        return bool(environment.prometheus_token)


class ExtractionSerializer(StrictSerializer):
    name = serializers.CharField()
    source = serializers.ChoiceField(choices=Step.Source.choices)
    expression = serializers.CharField()


class StreamSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=Step.StreamKind.choices, default=Step.StreamKind.SSE)
    idle_timeout = serializers.FloatField(default=10.0, help_text="Seconds without a byte before stream_stalled")
    last_event_contains = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="The last event's data must contain it"
    )


class WebSocketSerializer(StrictSerializer):
    actions = serializers.JSONField(
        help_text='[{"send": "..."}, {"expect": {"contains"|"regex"|"json": "...", "equals"?: "..."}, '
        '"timeout"?: s, "extract"?: [...]}, {"wait": s}] (docs/protocols.md)'
    )
    hold = serializers.FloatField(default=0.0, help_text="Seconds the session stays open after its last action")


class StepSerializer(StrictSerializer):
    """One page of a test case; ``{{name}}`` placeholders must come from earlier steps or the data set."""

    name = serializers.CharField(max_length=100)
    method = serializers.ChoiceField(choices=Step.Method.choices, default=Step.Method.GET)
    path = serializers.CharField(max_length=2000, help_text="Relative to the environment's base URL, starting with /")
    headers = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False, default=dict)
    body_type = serializers.ChoiceField(choices=Step.BodyType.choices, default=Step.BodyType.RAW)
    body = serializers.CharField(required=False, allow_blank=True, default="")
    think_time = serializers.FloatField(default=1.0, help_text="Seconds after the page")
    timeout = serializers.FloatField(required=False, allow_null=True, default=None)
    expect_status = serializers.IntegerField(required=False, allow_null=True, default=None)
    max_duration_ms = serializers.IntegerField(required=False, allow_null=True, default=None)
    text_present = serializers.CharField(required=False, allow_blank=True, default="")
    text_absent = serializers.CharField(required=False, allow_blank=True, default="")
    extract = ExtractionSerializer(many=True, required=False, default=list)
    resources = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    kind = serializers.ChoiceField(
        choices=Step.Kind.choices, default=Step.Kind.REQUEST, help_text="request | stream | websocket"
    )
    stream = StreamSerializer(
        required=False, allow_null=True, default=None, help_text="A stream step's options (kind stream)"
    )
    websocket = WebSocketSerializer(
        required=False,
        allow_null=True,
        default=None,
        help_text="A WebSocket session's actions and hold (kind websocket), in the engine's format",
    )
    recorded_protocol = serializers.CharField(
        max_length=12,
        required=False,
        allow_blank=True,
        default="",
        help_text="The protocol a recording used for this page (h2, http/1.1); informative",
    )


class DataSetInfoSerializer(serializers.Serializer):
    file_name = serializers.CharField()
    columns = serializers.ListField(child=serializers.CharField())
    row_count = serializers.IntegerField()
    mode = serializers.CharField()


class TestCaseSerializer(StrictSerializer):
    """A test case and its ordered steps, as one document (a PUT replaces the steps)."""

    __test__ = False  # not a pytest test class
    code = serializers.UUIDField(read_only=True)
    project = serializers.UUIDField(help_text="The project's code (fixed once created)")
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    steps = StepSerializer(many=True)
    data_set = serializers.SerializerMethodField(help_text="Its data set, if any (null in lists: read the test case)")

    @extend_schema_field(DataSetInfoSerializer(allow_null=True))
    def get_data_set(self, test_case):
        data_set = data_set_head(test_case=test_case)
        return None if data_set is None else DataSetInfoSerializer(data_set).data

    def to_representation(self, test_case):
        data = {
            "code": str(test_case.code),
            "project": str(test_case.project.code),
            "name": test_case.name,
            "description": test_case.description,
            "steps": [step_document(step) for step in test_case.steps.all()],
        }
        # One query per test case: in lists it is left out (null), like the plans' problems.
        data["data_set"] = None if _listing(self) else self.get_data_set(test_case)
        return data


def step_document(step: Step) -> dict:
    return {
        "name": step.name,
        "method": step.method,
        "path": step.path,
        "headers": dict(step.headers),
        "body_type": step.body_type,
        "body": step.body,
        "think_time": step.think_time,
        "timeout": step.timeout,
        "expect_status": step.expect_status,
        "max_duration_ms": step.max_duration_ms,
        "text_present": step.text_present,
        "text_absent": step.text_absent,
        "extract": [dict(item) for item in step.extract],
        "resources": list(step.resources),
        "kind": step.kind,
        "stream": {
            "kind": step.stream_kind,
            "idle_timeout": step.stream_idle_timeout,
            "last_event_contains": step.stream_last_event_contains,
        }
        if step.kind == Step.Kind.STREAM
        else None,
        "websocket": {"actions": [dict(a) for a in step.ws_actions], "hold": step.ws_hold}
        if step.kind == Step.Kind.WEBSOCKET
        else None,
        "recorded_protocol": step.recorded_protocol,
    }


def _listing(serializer) -> bool:
    """Whether this is a list: then the per-object reads (problems, data set) are skipped, to keep queries fixed."""
    view = serializer.context.get("view")
    return getattr(view, "action", None) == "list"


class LevelSerializer(StrictSerializer):
    users = serializers.IntegerField()
    ramp_up = serializers.FloatField(default=0)
    hold = serializers.FloatField()
    ramp_down = serializers.FloatField(default=0)
    quiet = serializers.FloatField(default=0)


class MixItemSerializer(StrictSerializer):
    test_case = serializers.UUIDField(help_text="A test case of the plan's project")
    # The same words as the plan form's (forms.MixWeightField): −1, 0 and 10,001 give one rule.
    weight = serializers.IntegerField(
        min_value=1,
        max_value=10_000,
        default=1,
        error_messages={
            key: "Give a whole number from 1 to 10,000."
            for key in ("min_value", "max_value", "invalid", "max_string_length")
        },
    )


def profile_parameter_fields() -> dict:
    """A field per load-profile parameter (Plan.PROFILE_INPUTS), typed as its column: whole or decimal number."""
    fields = {}
    for name in Plan.PROFILE_INPUTS:
        integer = Plan._meta.get_field(name).get_internal_type() == "PositiveIntegerField"
        field = serializers.IntegerField if integer else serializers.FloatField
        fields[name] = field(required=False, allow_null=True)
    return fields


# the plan's own values besides its description (read where the document is built)
PLAN_FIELDS = tuple(name for name in PLAN_VALUES if name != "description")


class PlanSerializer(StrictSerializer):
    """A plan: its environment, load profile (fields of its kind, or levels), thresholds, degradation and mix."""

    code = serializers.UUIDField(read_only=True)
    project = serializers.UUIDField(help_text="The project's code (fixed once created)")
    environment = serializers.UUIDField(help_text="An environment of the project")
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    profile_kind = serializers.ChoiceField(choices=Plan.ProfileKind.choices, default=Plan.ProfileKind.RAMP)
    think_time_mode = serializers.ChoiceField(choices=Plan.ThinkTimeMode.choices, default=Plan.ThinkTimeMode.FIXED)
    request_timeout = serializers.FloatField(default=30)
    protocol = serializers.ChoiceField(
        choices=Plan.Protocol.choices,
        default=Plan.Protocol.ENVIRONMENT,
        allow_blank=True,
        help_text='"" (the environment\'s) | auto | http1 | h2c (docs/protocols.md)',
    )
    tls_accept_any = serializers.BooleanField(default=False, help_text="Accept any TLS certificate (self-signed)")
    trace_context = serializers.BooleanField(
        default=True, help_text="A W3C traceparent header on every request (docs/observability.md)"
    )
    trace_sample_rate = serializers.FloatField(
        default=1.0, help_text="The share of requests flagged sampled in their traceparent, 0 to 1"
    )
    threshold_apd_ms = serializers.IntegerField(required=False, allow_null=True)
    threshold_p95_ms = serializers.IntegerField(required=False, allow_null=True)
    threshold_error_rate_pct = serializers.FloatField(required=False, allow_null=True)
    threshold_min_pages_per_s = serializers.FloatField(required=False, allow_null=True)
    threshold_ttfe_p95_ms = serializers.IntegerField(
        required=False, allow_null=True, help_text="Streamed responses: time to first event p95 at most (ms)"
    )
    threshold_gap_p95_ms = serializers.IntegerField(
        required=False, allow_null=True, help_text="Streamed responses: gap between events p95 at most (ms)"
    )
    threshold_rtt_p95_ms = serializers.IntegerField(
        required=False, allow_null=True, help_text="WebSocket sessions: message round trip p95 at most (ms)"
    )
    threshold_min_h2_share_pct = serializers.FloatField(
        required=False, allow_null=True, help_text="HTTP/2 share of the hits at least (%)"
    )
    capacity_search = serializers.BooleanField(
        default=False, help_text="Steps profile: end done with the capacity found instead of failed"
    )
    degradation_drop_pct = serializers.FloatField(required=False, allow_null=True)
    degradation_rise_pct = serializers.FloatField(required=False, allow_null=True)
    degradation_sustain_s = serializers.IntegerField(required=False, allow_null=True)
    degradation_steady_s = serializers.IntegerField(required=False, allow_null=True)
    stop_criteria = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        allow_null=True,
        max_length=10,
        help_text="Rules that stop a run when the target is plainly broken, over a sliding window of the measured "
        'part: {"metric": "error_rate_pct", "above": 50, "window_s": 60}; metrics error_rate_pct, apd_ms, p50_ms, '
        "p90_ms, p95_ms, p99_ms (above) and pages_per_s (below); window_s 5..3600, default 60 (docs/plan-format.md)",
    )
    levels = LevelSerializer(many=True, required=False, default=list, help_text="The steps profile's levels")
    mix = MixItemSerializer(many=True, help_text="Test cases and their weights, in order")
    duration_s = serializers.FloatField(read_only=True, source="duration")
    problems = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Why the plan cannot run yet (empty when it can; empty in lists: read the plan)",
    )

    def get_fields(self):
        """The declared fields, with a field per load-profile parameter (users, rate, …: each a kind's parameter,
        checked by the kind; ``profile_parameter_fields``) right after ``profile_kind``."""
        fields = {}
        for name, field in super().get_fields().items():
            fields[name] = field
            if name == "profile_kind":
                fields.update(profile_parameter_fields())
        return fields

    def to_representation(self, plan):
        data = {
            "code": str(plan.code),
            "project": str(plan.project.code),
            "environment": str(plan.environment.code),
            "name": plan.name,
            "description": plan.description,
            **{name: getattr(plan, name) for name in PLAN_FIELDS},
            "levels": [
                {
                    "users": lv.users,
                    "ramp_up": lv.ramp_up,
                    "hold": lv.hold,
                    "ramp_down": lv.ramp_down,
                    "quiet": lv.quiet,
                }
                for lv in plan.get_levels()
            ],
            "mix": [{"test_case": str(e.test_case.code), "weight": e.weight} for e in plan.mix.all()],
            "duration_s": plan.duration,
            "problems": [] if _listing(self) else plan.problems(),
        }
        return data
