from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.base import AbsoluteUrls
from portal.projects.api.serializers import VerificationSerializer
from portal.runs.models import Run, RunShard
from portal.runs.summary import RunSummary
from portal.schedules.baselines import pending_for
from portal.schedules.models import ROW_VERDICTS, RunVerdict


class VerdictRowSerializer(serializers.Serializer):
    page = serializers.CharField(allow_null=True, help_text="null: all pages")
    figure = serializers.CharField(help_text="APD, p95, pages/s, error rate, capacity, degradation onset, drift …")
    verdict = serializers.ChoiceField(choices=ROW_VERDICTS)
    before = serializers.CharField(help_text="The baseline's figure, formatted")
    after = serializers.CharField(help_text="This run's figure, formatted")
    change = serializers.CharField()
    noise = serializers.CharField()
    basis = serializers.CharField()
    soak = serializers.BooleanField(
        required=False, help_text="A soak figure (degradation onset, drift per hour), judged against the baseline's"
    )


class BaselineVerdictSerializer(serializers.Serializer):
    """A plan's run judged against its plan's baseline (portal/schedules/baselines.py); *pending* until known."""

    verdict = serializers.ChoiceField(choices=RunVerdict.Verdict.choices)
    headline = serializers.CharField()
    provisional = serializers.BooleanField(
        help_text="Judged against too few baseline runs to know their spread well (provisional_reason says why)"
    )
    provisional_reason = serializers.CharField()
    method = serializers.CharField(help_text="One sentence: how the verdict was reached")
    basis = serializers.CharField(help_text="How the figures were compared (samples, noise)")
    baseline = serializers.CharField(source="baseline_label", help_text="What the run was judged against")
    tolerance_pct = serializers.FloatField(help_text="Moves smaller than this are within noise whatever the noise")
    computed_at = serializers.DateTimeField()
    accepted = serializers.BooleanField(
        source="is_accepted", help_text="A regression whose level was accepted as the new normal (or explained)"
    )
    accepted_by = serializers.CharField(source="accepted_by.get_username", allow_null=True, default=None)
    accepted_at = serializers.DateTimeField(allow_null=True)
    accept_reason = serializers.CharField()


class BaselineVerdictDetailSerializer(BaselineVerdictSerializer):
    rows = VerdictRowSerializer(many=True, help_text="Every figure, in total and per page")


class StartedByScheduleSerializer(serializers.Serializer):
    code = serializers.UUIDField(source="schedule.code", help_text="The schedule's code")
    description = serializers.CharField(source="schedule.description", help_text="e.g. every day at 02:00 UTC")
    due_at = serializers.DateTimeField(help_text="The fire time that started the run")


class ShardLoadSerializer(serializers.Serializer):
    shard_no = serializers.IntegerField()
    users = serializers.IntegerField()
    planned = serializers.FloatField(help_text="Planned load: user-seconds, or iterations for an arrival rate")
    achieved = serializers.FloatField(help_text="The planned load over the seconds this shard was there")
    pct = serializers.FloatField()
    late_s = serializers.FloatField(allow_null=True, help_text="How long after the common start it began")
    ran_s = serializers.IntegerField(help_text="Seconds it recorded")
    status = serializers.CharField()
    worker = serializers.CharField(help_text="host:pid of the process that ran it")
    node = serializers.CharField(required=False, help_text="The Celery node (worker) that ran it")
    pool = serializers.CharField(required=False, help_text="The generator pool ('' the default pool)")
    labels = serializers.DictField(child=serializers.CharField(), required=False, help_text="The worker's labels")
    spans = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField()))


class RunLoadSerializer(serializers.Serializer):
    """Planned against achieved load (portal/runs/services/load.py); null until the run has finished."""

    unit = serializers.ChoiceField(choices=["user-seconds", "iterations"])
    planned = serializers.FloatField()
    achieved = serializers.FloatField()
    pct = serializers.FloatField()
    complete = serializers.BooleanField(help_text="False: the run is incomplete (or partial), never passed")
    rule_pct = serializers.IntegerField(help_text="Below this % of the planned load (total or a shard): incomplete")
    users_planned = serializers.IntegerField()
    users_ran = serializers.IntegerField()
    sentence = serializers.CharField(help_text="e.g. ran 20 of 100 users for 30 s: …")
    shards = ShardLoadSerializer(many=True)


class RunQueueSerializer(serializers.Serializer):
    """A waiting run's place (issue 25): null once it has been admitted."""

    position = serializers.IntegerField(help_text="1: the next run of its pool to start")
    waiting = serializers.IntegerField(help_text="Runs waiting for the same pool")
    estimate_s = serializers.IntegerField(allow_null=True, help_text="Seconds until it starts, if the runs end on time")
    reason = serializers.CharField(help_text="Why it waits, in words")
    free = serializers.IntegerField(help_text="Free slots of its pool")
    slots = serializers.IntegerField(help_text="All slots of its pool (live workers)")


class StopWindowSerializer(serializers.Serializer):
    from_s = serializers.IntegerField(help_text="First second of the window (since the run's start)")
    to_s = serializers.IntegerField(help_text="The second the window ends at (exclusive)")
    seconds = serializers.IntegerField()
    pages = serializers.IntegerField(help_text="Pages in the window, all shards")
    errors = serializers.IntegerField()
    error_rate_pct = serializers.FloatField()
    pages_per_s = serializers.FloatField()
    timed_pages = serializers.IntegerField(
        allow_null=True,
        help_text="Successful pages, the ones durations are measured on (null: the rule read no durations)",
    )
    apd_ms = serializers.FloatField(allow_null=True)
    p50_ms = serializers.FloatField(allow_null=True)
    p90_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)
    p99_ms = serializers.FloatField(allow_null=True)


class StoppedBySerializer(serializers.Serializer):
    """The stop criterion that ended the run (issue 24), with the figures of the window that broke it."""

    rule = serializers.DictField(
        help_text='As the plan has it: {"metric": "error_rate_pct", "above": 50, "window_s": 60}'
    )
    text = serializers.CharField(help_text="The rule in words: error rate > 50 % over 60 s")
    value = serializers.FloatField(allow_null=True, help_text="The rule's figure over the window")
    window = StopWindowSerializer()
    sentence = serializers.CharField(help_text="The rule and the window's figures in one sentence")
    at = serializers.DateTimeField(help_text="When the evaluator saw it broken and stopped the run")


class RunSerializer(AbsoluteUrls, serializers.ModelSerializer):
    url = serializers.SerializerMethodField(help_text="This run in the API")
    web_url = serializers.SerializerMethodField(help_text="This run's page in the browser")
    project = serializers.UUIDField(source="project.code", read_only=True)
    plan = serializers.UUIDField(source="plan.code", read_only=True, allow_null=True, default=None)
    verdict = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="passed, failed, or null: no threshold judged (a finished run), or the run was cancelled or stopped",
    )
    created_by = serializers.CharField(source="created_by.get_username", read_only=True, allow_null=True, default=None)
    is_active = serializers.BooleanField(read_only=True)
    started_by = serializers.CharField(
        read_only=True, help_text="Who started it: a person, a person via an API token (name and prefix), or a schedule"
    )
    api_token = serializers.CharField(
        source="api_token_label",
        read_only=True,
        allow_null=True,
        help_text="The API token that started the run (its name and prefix, never the secret); empty otherwise",
    )
    schedule = StartedByScheduleSerializer(
        source="schedule_fire", read_only=True, allow_null=True, help_text="The schedule whose fire started the run"
    )
    labels = serializers.DictField(
        child=serializers.CharField(), read_only=True, help_text="What the starter said about it: build, branch …"
    )
    note = serializers.CharField(read_only=True)
    stopped_by = StoppedBySerializer(
        read_only=True,
        allow_null=True,
        help_text="Set when one of the plan's stop criteria stopped the run (status cancelling, then stopped); "
        "null otherwise",
    )
    baseline_verdict = BaselineVerdictSerializer(
        read_only=True,
        allow_null=True,
        help_text="The run against its plan's baseline: pending from its end until judged; "
        "null while it runs and for a run without a plan",
    )

    class Meta:
        model = Run
        fields = (
            "code",
            "number",
            "url",
            "web_url",
            "project",
            "plan",
            "plan_name",
            "environment_name",
            "status",
            "verdict",
            "is_active",
            "error_message",
            "created_by",
            "started_by",
            "api_token",
            "schedule",
            "labels",
            "note",
            "stopped_by",
            "baseline_verdict",
            "created_at",
            "start_at",
            "finished_at",
            "kind",
            "source",
        )
        read_only_fields = fields

    def to_representation(self, run):
        data = super().to_representation(run)
        # The row is written when the run ends; a reader in between sees pending, never null.
        if data.get("baseline_verdict") is None and (pending := pending_for(run)) is not None:
            data["baseline_verdict"] = self.fields["baseline_verdict"].to_representation(pending)
        return data

    def get_url(self, run) -> str:
        return self.absolute(reverse("api:run-detail", args=[run.code]))

    def get_web_url(self, run) -> str:
        return self.absolute(run.get_absolute_url())


class RunDetailSerializer(RunSerializer):
    summary = serializers.JSONField(
        read_only=True, allow_null=True, help_text="Totals, windows, thresholds, pages, errors (null while running)"
    )
    thresholds = serializers.SerializerMethodField(
        help_text="Each threshold of each measured window, and whether it held (passed: true or false; null with "
        "not_judged saying why when an imported run's file has no such figure)"
    )

    load = RunLoadSerializer(read_only=True, allow_null=True, help_text="Planned against achieved load, per shard")
    queue = serializers.SerializerMethodField(help_text="While it waits for capacity: its position, estimate, reason")
    plan_snapshot = serializers.JSONField(read_only=True, help_text="The plan as it was when the run started")
    config_snapshot = serializers.JSONField(read_only=True, help_text="The environment's configuration at start")
    config_verification = VerificationSerializer(
        read_only=True,
        allow_null=True,
        help_text="The target's own configuration read as the run started (from the environment's config_url), "
        "against config_snapshot; null when it was not read. Drifted keys put the run in doubt",
    )
    baseline_verdict = BaselineVerdictDetailSerializer(
        read_only=True,
        allow_null=True,
        help_text="The run against its plan's baseline, with every figure; pending until judged",
    )

    class Meta(RunSerializer.Meta):
        fields = (
            *RunSerializer.Meta.fields,
            "queue",
            "thresholds",
            "summary",
            "load",
            "plan_snapshot",
            "config_snapshot",
            "config_verification",
        )
        read_only_fields = fields

    @extend_schema_field(RunQueueSerializer(allow_null=True))
    def get_queue(self, run) -> dict | None:
        from portal.runs.services import run_queue

        return run_queue(run)

    def get_thresholds(self, run) -> list[dict]:
        return RunSummary.of(run).threshold_rows()


class PageRowSerializer(serializers.Serializer):
    label = serializers.CharField()
    pages = serializers.IntegerField()
    errors = serializers.IntegerField()
    error_rate_pct = serializers.FloatField()
    pages_per_s = serializers.FloatField()
    apd_ms = serializers.FloatField(allow_null=True)
    p50_ms = serializers.FloatField(allow_null=True)
    p90_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)
    p99_ms = serializers.FloatField(allow_null=True)
    max_ms = serializers.FloatField(allow_null=True)


class ErrorRowSerializer(serializers.Serializer):
    kind = serializers.CharField()
    count = serializers.IntegerField()
    sample = serializers.CharField(allow_blank=True)
    pages = serializers.ListField(child=serializers.CharField())


class ShardSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunShard
        fields = (
            "shard_no",
            "user_count",
            "status",
            "worker",
            "claimed_at",
            "heartbeat_at",
            "finished_at",
            "error_message",
        )
        read_only_fields = fields


class SeriesSerializer(serializers.Serializer):
    bucket_s = serializers.IntegerField(help_text="Seconds per point (1, or more for long runs)")
    t = serializers.ListField(child=serializers.IntegerField(), help_text="Seconds since the run's start")
    users = serializers.ListField(child=serializers.IntegerField())
    pages_per_s = serializers.ListField(child=serializers.FloatField())
    hits_per_s = serializers.ListField(child=serializers.FloatField())
    errors_per_s = serializers.ListField(child=serializers.FloatField())
    dropped_per_s = serializers.ListField(child=serializers.FloatField())
    apd_ms = serializers.ListField(child=serializers.FloatField(allow_null=True))
    p95_ms = serializers.ListField(child=serializers.FloatField(allow_null=True))
    bytes_per_s = serializers.ListField(child=serializers.FloatField())
    apd_max_ms = serializers.ListField(
        child=serializers.FloatField(allow_null=True),
        required=False,
        help_text="Each point's highest per-second APD: a stall of one second survives the bucket's mean",
    )
    pages_per_s_min = serializers.ListField(
        child=serializers.FloatField(allow_null=True),
        required=False,
        help_text="Each point's lowest per-second pages (0 when a second had none)",
    )
    status = serializers.CharField()
    active = serializers.BooleanField()
    windows = serializers.ListField(child=serializers.ListField(), help_text="[start, end, label] of each window")
    duration_s = serializers.FloatField()


# Streams, WebSocket sessions and protocols (issue 26; portal/runs/results/protocols.py, docs/protocols.md)


class LatencyMsSerializer(serializers.Serializer):
    p50 = serializers.FloatField()
    p90 = serializers.FloatField()
    p95 = serializers.FloatField()
    p99 = serializers.FloatField()
    max = serializers.FloatField()
    mean = serializers.FloatField()


class PerResponseSerializer(serializers.Serializer):
    mean = serializers.FloatField()
    min = serializers.IntegerField()
    max = serializers.IntegerField()


class StreamEventsSerializer(serializers.Serializer):
    total = serializers.IntegerField(help_text="Events of all streamed responses")
    per_response = PerResponseSerializer()


class StreamFiguresSerializer(serializers.Serializer):
    responses = serializers.IntegerField(help_text="Streamed responses (SSE or chunked) that ended")
    ttfe_ms = LatencyMsSerializer(allow_null=True, help_text="Time to first event")
    gap_ms = LatencyMsSerializer(allow_null=True, help_text="Gaps between consecutive events")
    events = StreamEventsSerializer()


class WebSocketFiguresSerializer(serializers.Serializer):
    round_trips = serializers.IntegerField(help_text="Messages answered by an expected message")
    rtt_ms = LatencyMsSerializer(allow_null=True, help_text="Round trip: a send to the next expected message")
    sent = serializers.IntegerField()
    received = serializers.IntegerField()
    sent_per_s = serializers.FloatField(allow_null=True)
    received_per_s = serializers.FloatField(allow_null=True)


class ProtocolPageSerializer(serializers.Serializer):
    label = serializers.CharField()
    protocols = serializers.DictField(child=serializers.IntegerField(), help_text='Hits by protocol: {"h2": 30}')
    h2_share_pct = serializers.FloatField(allow_null=True)
    stream = StreamFiguresSerializer(allow_null=True)
    websocket = WebSocketFiguresSerializer(allow_null=True)


class ProtocolTotalsSerializer(serializers.Serializer):
    ttfe_p95_ms = serializers.FloatField(required=False)
    gap_p95_ms = serializers.FloatField(required=False)
    rtt_p95_ms = serializers.FloatField(required=False)
    h2_share_pct = serializers.FloatField(required=False)
    protocols = serializers.DictField(child=serializers.IntegerField(), required=False)
    streams = serializers.IntegerField(required=False)
    events = serializers.IntegerField(required=False)
    ttfe_ms = LatencyMsSerializer(allow_null=True, required=False)
    gap_ms = LatencyMsSerializer(allow_null=True, required=False)
    rtt_ms = LatencyMsSerializer(allow_null=True, required=False)
    ws_sent = serializers.IntegerField(required=False)
    ws_received = serializers.IntegerField(required=False)
    ws_messages_per_s = serializers.FloatField(allow_null=True, required=False)


class ProtocolsSerializer(serializers.Serializer):
    pages = ProtocolPageSerializer(many=True, help_text="Each page label with streams, WebSocket or HTTP/2 hits")
    totals = ProtocolTotalsSerializer(help_text="Empty for a run without any (HTTP/1.1 pages only)")
