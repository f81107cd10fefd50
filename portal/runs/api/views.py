"""Runs through the API: start (a plan's runs), list, read (long-poll), stop, results and files."""

import time

from django.db import transaction
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.accounts.models import ApiToken
from portal.api import longpoll
from portal.api.base import QueryParams, StrictSerializer, TeamScopedViewSet, request_token
from portal.api.errors import TargetRefused, error_responses
from portal.common import Invalid
from portal.projects.models import Plan
from portal.runs import exports, selectors, services
from portal.runs.models import Run
from portal.runs.summary import RunSummary
from portal.schedules.models import RunVerdict

from .serializers import (
    BaselineVerdictDetailSerializer,
    ErrorRowSerializer,
    PageRowSerializer,
    ProtocolsSerializer,
    RunDetailSerializer,
    RunSerializer,
    SeriesSerializer,
    ShardSerializer,
)

# A long-poll holds a web worker: at most this long, and the status is re-read this often.
MAX_WAIT_S = 60
POLL_INTERVAL_S = 0.5

# A list's item (a run's detail adds its thresholds, summary and snapshots: portal/api/examples.py).
RUN_EXAMPLE = OpenApiExample(
    "A passed run",
    value={
        "code": "3f0c7c55-9d0e-4d57-9a55-2b8f1a3e4c11",
        "number": 12,
        "url": "https://plimsoll.example/api/v1/runs/3f0c7c55-9d0e-4d57-9a55-2b8f1a3e4c11/",
        "web_url": "https://plimsoll.example/runs/3f0c7c55-9d0e-4d57-9a55-2b8f1a3e4c11/",
        "project": "a1b2c3d4-0000-4000-8000-000000000001",
        "plan": "a1b2c3d4-0000-4000-8000-000000000002",
        "plan_name": "Smoke",
        "kind": "native",
        "source": {},
        "environment_name": "Staging",
        "status": "passed",
        "verdict": "passed",
        "is_active": False,
        "error_message": "",
        "created_by": "alice",
        "started_by": "alice via token ci-pipeline (plim_x7Kq2b…)",
        "api_token": "ci-pipeline (plim_x7Kq2b…)",
        "schedule": None,
        "labels": {"build": "3f2a1c", "branch": "main"},
        "note": "merge of #412",
        "stopped_by": None,
        "baseline_verdict": None,
        "created_at": "2026-11-24T17:00:00Z",
        "start_at": "2026-11-24T17:00:02Z",
        "finished_at": "2026-11-24T17:01:05Z",
    },
    response_only=True,
)

STOPPED_RUN_EXAMPLE = OpenApiExample(
    "A nightly soak stopped by its criteria: the target answered errors",
    value={
        "code": "5b2e9c10-7a3d-4e1f-9c8b-0d1e2f3a4b5c",
        "number": 32,
        "url": "https://plimsoll.example/api/v1/runs/5b2e9c10-7a3d-4e1f-9c8b-0d1e2f3a4b5c/",
        "web_url": "https://plimsoll.example/runs/5b2e9c10-7a3d-4e1f-9c8b-0d1e2f3a4b5c/",
        "project": "a1b2c3d4-0000-4000-8000-000000000001",
        "plan": "a1b2c3d4-0000-4000-8000-000000000003",
        "plan_name": "Nightly soak",
        "kind": "native",
        "source": {},
        "environment_name": "Staging",
        "status": "stopped",
        "verdict": None,
        "is_active": False,
        "error_message": "",
        "created_by": None,
        "started_by": "the schedule “every day at 02:00 Europe/Berlin” (due 2026-11-25 01:00 UTC)",
        "api_token": "",
        "schedule": None,
        "labels": {},
        "note": "",
        "stopped_by": {
            "rule": {"metric": "error_rate_pct", "above": 50.0, "window_s": 60},
            "text": "error rate > 50 % over 60 s",
            "value": 97.5,
            "window": {
                "from_s": 2580,
                "to_s": 2640,
                "seconds": 60,
                "pages": 1204,
                "errors": 1174,
                "error_rate_pct": 97.508,
                "pages_per_s": 20.067,
                "timed_pages": 30,
                "apd_ms": 41.2,
                "p50_ms": 38.0,
                "p90_ms": 52.0,
                "p95_ms": 61.0,
                "p99_ms": 88.0,
            },
            "sentence": "error rate 97.508 % > 50 % over the last 60 s "
            "(seconds 2580–2640: 1,204 pages, 1,174 errors, 20.067 pages/s)",
            "at": "2026-11-25T01:44:03Z",
        },
        "baseline_verdict": None,
        "created_at": "2026-11-25T01:00:00Z",
        "start_at": "2026-11-25T01:00:02Z",
        "finished_at": "2026-11-25T01:44:05Z",
    },
    response_only=True,
)

SCHEDULED_RUN_EXAMPLE = OpenApiExample(
    "A scheduled soak that regressed against its baseline",
    value={
        "code": "7d1e2a44-1c3b-4f0e-8a2d-5b6c7d8e9f00",
        "number": 31,
        "url": "https://plimsoll.example/api/v1/runs/7d1e2a44-1c3b-4f0e-8a2d-5b6c7d8e9f00/",
        "web_url": "https://plimsoll.example/runs/7d1e2a44-1c3b-4f0e-8a2d-5b6c7d8e9f00/",
        "project": "a1b2c3d4-0000-4000-8000-000000000001",
        "plan": "a1b2c3d4-0000-4000-8000-000000000003",
        "plan_name": "Nightly soak",
        "kind": "native",
        "source": {},
        "environment_name": "Staging",
        "status": "passed",
        "verdict": "passed",
        "is_active": False,
        "error_message": "",
        "created_by": None,
        "started_by": "the schedule “every day at 02:00 Europe/Berlin” (due 2026-11-24 01:00 UTC)",
        "api_token": "",
        "schedule": {
            "code": "c0ffee00-0000-4000-8000-000000000004",
            "description": "every day at 02:00 Europe/Berlin",
            "due_at": "2026-11-24T01:00:00Z",
        },
        "labels": {},
        "note": "",
        "stopped_by": None,
        "baseline_verdict": {
            "verdict": "regressed",
            "headline": "Run #31 regressed against Baseline: the last 3 valid runs (#27, #28, #29): "
            "Search APD 41 ms → 212 ms (5.2× slower).",
            "provisional": False,
            "provisional_reason": "",
            "method": "Each figure against the spread between the 3 baseline runs' own figures, "
            "Holm-adjusted over its 24 rows for a 1 % chance of a false alarm on a night with nothing changed, "
            "and beyond the 10 % tolerance.",
            "basis": "Batch means of each run's measured window; Welch 95 % intervals.",
            "baseline": "Baseline: the last 3 valid runs (#27, #28, #29)",
            "tolerance_pct": 10.0,
            "computed_at": "2026-11-24T03:02:11Z",
            "accepted": False,
            "accepted_by": None,
            "accepted_at": None,
            "accept_reason": "",
            "rows": [
                {
                    "page": "Search",
                    "figure": "APD",
                    "verdict": "regressed",
                    "before": "41 ms",
                    "after": "212 ms",
                    "change": "5.2× slower",
                    "noise": "± 3 ms",
                    "basis": "3 runs vs batch means",
                },
                {
                    "page": None,
                    "soak": True,
                    "figure": "Degradation onset",
                    "verdict": "regressed",
                    "before": "none in 2 h (3 runs)",
                    "after": "1 h 20 min",
                    "change": "degraded 1 h 20 min after ramp-up; the baseline never did",
                    "noise": "—",
                    "basis": "Time from the end of ramp-up to the sustained drop or rise, against 3 baseline runs",
                },
                {
                    "page": None,
                    "soak": True,
                    "figure": "APD drift per hour",
                    "verdict": "within_noise",
                    "before": "+0.4 ms/h (mean of 3)",
                    "after": "+0.6 ms/h",
                    "change": "+0.2 ms/h",
                    "noise": "± 4.1 ms/h",
                    "basis": "Least-squares slope over the measurement window, against 3 baseline runs",
                },
            ],
        },
        "created_at": "2026-11-24T01:00:01Z",
        "start_at": "2026-11-24T01:00:03Z",
        "finished_at": "2026-11-24T03:00:05Z",
    },
    response_only=True,
)


class RunFilterSerializer(StrictSerializer):
    plan = serializers.UUIDField(required=False, help_text="The plan's code")
    project = serializers.UUIDField(required=False, help_text="The project's code")
    status = serializers.ChoiceField(choices=Run.Status.choices, required=False)
    verdict = serializers.ChoiceField(choices=["passed", "failed"], required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    label = serializers.CharField(
        required=False, help_text="name:value, e.g. build:3f2a1c (repeat it: runs with all of them)"
    )

    def to_internal_value(self, data):
        # Query strings also carry pagination and ``wait``: only the filters are checked here.
        return super().to_internal_value({k: v for k, v in data.items() if k in self.fields})


class AcceptSerializer(StrictSerializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, help_text="Why the new level is normal (or give a change)"
    )
    change = serializers.UUIDField(
        required=False, help_text="The code of an applied tuning change of the run's environment that explains it"
    )


class WaitSerializer(QueryParams):
    wait = serializers.FloatField(
        required=False,
        min_value=0,
        max_value=MAX_WAIT_S,
        help_text=(
            "Seconds to wait for the run to end before answering (long-poll, at most 60). Long-polls are "
            "limited per account and per token (2 at once by default, over the site) and per web process: over "
            "a limit, or while the web process restarts, the run's current state comes back at once, with the "
            "header `X-Plimsoll-Wait: capped` and `Retry-After` (seconds to wait before asking again)."
        ),
    )


def _file(body: str, content_type: str, name: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'inline; filename="{name}"'
    return response


def _file_schema(media_type: str, description: str, kind=OpenApiTypes.STR):
    return extend_schema(
        summary=description,
        responses={
            (200, media_type): OpenApiResponse(kind, description=description),
            **error_responses(404),
        },
    )


@extend_schema_view(
    list=extend_schema(
        summary="List runs of your teams, newest first",
        parameters=[RunFilterSerializer],
        responses={200: RunSerializer(many=True), **error_responses(400)},
        examples=[RUN_EXAMPLE, SCHEDULED_RUN_EXAMPLE, STOPPED_RUN_EXAMPLE],
    ),
    retrieve=extend_schema(
        summary="A run: status, verdict, thresholds and summary; ?wait=S long-polls until it ends",
        parameters=[
            WaitSerializer,
            OpenApiParameter(
                "X-Plimsoll-Wait",
                str,
                OpenApiParameter.HEADER,
                response=[200],
                description="`capped`: the long-poll was not held (over the token's or the process's limit)",
            ),
        ],
        responses={
            200: OpenApiResponse(
                RunDetailSerializer,
                description=(
                    "The run. With ?wait=S, once it ended or after S seconds; at once, with the header "
                    "`X-Plimsoll-Wait: capped`, when the account, the token or the web process has no long-poll to "
                    "spare, or the web process is stopping."
                ),
            ),
            **error_responses(400, 404),
        },
    ),
)
class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = RunSerializer
    required_scopes = {"stop": ApiToken.Scope.RUN, "accept": ApiToken.Scope.WRITE}

    def safely_get_queryset(self):
        return Run.objects.select_related(
            "project", "plan", "created_by", "baseline_verdict", "schedule_fire__schedule"
        ).order_by("-created_at", "-id")

    def get_serializer_class(self):
        return RunDetailSerializer if self.action != "list" else RunSerializer

    def list(self, request, *args, **kwargs):
        filters = RunFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        f = filters.validated_data
        runs = self.get_queryset()
        if "plan" in f:
            runs = runs.filter(plan__code=f["plan"])
        if "project" in f:
            runs = runs.filter(project__code=f["project"])
        if "status" in f:
            runs = runs.filter(status=f["status"])
        if "verdict" in f:
            runs = runs.filter(summary__verdict=f["verdict"])
        if "created_after" in f:
            runs = runs.filter(created_at__gte=f["created_after"])
        if "created_before" in f:
            runs = runs.filter(created_at__lt=f["created_before"])
        for text in request.query_params.getlist("label"):
            key, value = services.label_filter_clean(text)  # a name that is a plain identifier, so a safe lookup
            runs = runs.filter(**{f"labels__{key}": value})
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request, *args, **kwargs):
        params = WaitSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        run = self.get_object()
        wait = params.validated_data.get("wait", 0)
        if not (wait and run.is_active):
            return Response(self.get_serializer(run).data)
        token = request_token(request)
        slot = longpoll.acquire(user_id=request.user.pk, token_id=token.pk if token else None, wait_s=wait)
        if slot is None:
            # Every long-poll slot of this process, this account or this token is taken (or the process is
            # stopping): the current state, at once.
            return self._answered_early(run)
        deadline = time.monotonic() + wait
        stopping = False
        try:
            # Long-poll: one call covers a pipeline's wait. The state lives in the database: its status is
            # re-read (one column, not the row's kilobytes of snapshot and settings), the whole run once at the end.
            state = run.status
            while state in Run.ACTIVE and time.monotonic() < deadline:
                if longpoll.pause(min(POLL_INTERVAL_S, max(0.0, deadline - time.monotonic()))):
                    stopping = True  # a restart: the state now, rather than a cut connection later
                    break
                state = Run.objects.filter(pk=run.pk).values_list("status", flat=True).first()
        finally:
            slot.release()
        run = self.get_object()
        return self._answered_early(run) if stopping else Response(self.get_serializer(run).data)

    def _answered_early(self, run) -> Response:
        """The run's current state before its wait was over, and when to ask again (X-Plimsoll-Wait: capped)."""
        response = Response(self.get_serializer(run).data)
        response["X-Plimsoll-Wait"] = "capped"
        response["Retry-After"] = str(longpoll.RETRY_AFTER_S)
        return response

    @extend_schema(
        summary="Stop a run: its workers end it within a second or two (needs a run or write token)",
        request=None,
        responses={200: RunDetailSerializer, **error_responses(403, 404)},
    )
    @action(detail=True, methods=["post"])
    def stop(self, request, code=None):
        run = self.get_object()
        if run.is_active:
            run = services.run_cancel(run=run)
        return Response(RunDetailSerializer(run, context=self.get_serializer_context()).data)

    @extend_schema(
        summary="Accept a regressed run's level as the plan's new normal (needs a write token)",
        description="The run and the later runs of the same regression join the rolling baseline again; an event "
        "with who and why is written to the environment's ledger, or the given tuning change is linked instead. "
        "A run without a regression to accept, or no reason and no change, is a 400 and changes nothing.",
        request=AcceptSerializer,
        responses={200: BaselineVerdictDetailSerializer, **error_responses(400, 403, 404)},
    )
    @action(detail=True, methods=["post"])
    def accept(self, request, code=None):
        from portal.history.models import TuningChange
        from portal.schedules import baselines

        run = self.get_object()
        body = AcceptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        change = None
        if change_code := body.validated_data.get("change"):
            change = TuningChange.objects.filter(environment_id=run.environment_id, code=change_code).first()
            if change is None:
                raise Invalid({"change": ["No tuning change of the run's environment has this code."]})
        try:
            baselines.regression_accept(
                run=run, user=request.user, reason=body.validated_data.get("reason", ""), change=change
            )
        except baselines.BaselineError as exc:
            raise Invalid({"run": [str(exc)]}) from None
        verdict = RunVerdict.objects.select_related("accepted_by").get(run=run)
        return Response(BaselineVerdictDetailSerializer(verdict).data)

    @extend_schema(
        summary="The per-page table of the measured window(s)",
        responses={200: PageRowSerializer(many=True), **error_responses(404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def pages(self, request, code=None):
        return Response(RunSummary.of(self.get_object()).pages)

    @extend_schema(
        summary="Errors by kind, with a sample and the pages they hit",
        responses={200: ErrorRowSerializer(many=True), **error_responses(404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def errors(self, request, code=None):
        return Response(RunSummary.of(self.get_object()).errors)

    @extend_schema(
        summary="Per-second figures over the whole run (the charts' data)",
        responses={200: SeriesSerializer, **error_responses(404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def series(self, request, code=None):
        return Response(selectors.run_series(self.get_object()))

    @extend_schema(
        summary="The run's shards: users, worker, heartbeat, status",
        responses={200: ShardSerializer(many=True), **error_responses(404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def shards(self, request, code=None):
        return Response(ShardSerializer(self.get_object().shards.all(), many=True).data)

    @extend_schema(
        summary="Streams, WebSocket sessions and protocols of the measured window(s), per page and in total",
        responses={200: ProtocolsSerializer, **error_responses(404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def protocols(self, request, code=None):
        return Response(RunSummary.of(self.get_object()).protocols or {"pages": [], "totals": {}})


def _export_view(fmt: exports.ExportFormat):
    """The API's view of one export format: the run's file, as the format renders it."""

    def view(self, request, code=None):
        run = self.get_object()
        return _file(fmt.render(run), fmt.content_type, fmt.download_name(run))

    view.__name__ = fmt.method
    return _file_schema(fmt.media_type, fmt.summary, fmt.schema_type)(view)


# One view per export format (portal/runs/exports/), routed by portal/api/urls.py.
for _fmt in exports.FORMATS.values():
    setattr(RunViewSet, _fmt.method, _export_view(_fmt))


class StartRunSerializer(StrictSerializer):
    """A run takes everything from its plan; the body may add labels and a note (``{}`` is fine), nothing else."""

    labels = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        help_text='What the starter says about the run, e.g. {"build": "3f2a1c", "branch": "main"}: '
        "names of letters, digits, _ . - (at most 40), values of at most 100 characters, at most 20 labels",
    )
    note = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, help_text="Free text")


class PlanRunViewSet(TeamScopedViewSet):
    """``POST /plans/{code}/runs/``: what a pipeline calls after each deploy."""

    serializer_class = RunDetailSerializer
    required_scopes = {"create": ApiToken.Scope.RUN}

    def safely_get_queryset(self):
        return Plan.objects.select_related("project", "environment")

    @extend_schema(
        summary="Start a run of a plan (needs a run or write token); 201 with the run and its URL",
        request=StartRunSerializer,
        responses={201: RunDetailSerializer, **error_responses(400, 403, 404, 409, 422)},
    )
    def create(self, request, code=None):
        plan = self.get_scoped(self.safely_get_queryset(), write=True, code=code)
        start = StartRunSerializer(data=request.data if request.data else {})
        start.is_valid(raise_exception=True)
        labels, note = services.labels_clean(start.validated_data.get("labels"), start.validated_data.get("note", ""))
        if refusal := services.target_refusal(plan.environment.base_url, plan.to_engine_dict()):
            raise TargetRefused(refusal)
        with transaction.atomic():  # the run's start is enqueued on commit: its labels are there by then
            run = services.run_create(plan=plan, user=request.user, token=request_token(request))
            services.run_label(run=run, labels=labels, note=note)
        data = RunDetailSerializer(run, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_201_CREATED, headers={"Location": data["url"]})
