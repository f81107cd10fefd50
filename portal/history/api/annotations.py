"""Annotations for Grafana (issue 29): runs and applied tuning changes, as markers on a team's dashboards.

Two doors over one selector (``selectors.annotations``):
- ``GET /api/v1/annotations/?from=…&to=…``: a plain JSON list, for Grafana's JSON/Infinity data sources
  and for scripts;
- ``/api/v1/grafana/`` in the "simple JSON" data source's protocol: ``GET`` answers its connection test,
  ``POST annotations`` its annotation queries (``{"range": {"from", "to"}, "annotation": {"query": …}}``).

Both read only the caller's teams (and the token's team), and return at most ``LIMIT`` of each kind.
"""

from datetime import UTC, datetime

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from portal.api.base import StrictSerializer, TeamScopedViewSet
from portal.api.errors import error_responses

from .. import selectors
from ..models import TuningChange

LIMIT = 1000
MAX_SPAN_DAYS = 400


class AnnotationSerializer(serializers.Serializer):
    time = serializers.IntegerField(help_text="Start, in milliseconds since the epoch (Grafana's unit)")
    timeEnd = serializers.IntegerField(help_text="End, in milliseconds; equal to time for a change")  # noqa: N815
    title = serializers.CharField()
    text = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())


def _when(value) -> datetime:
    """An ISO 8601 instant or milliseconds since the epoch (Grafana sends either)."""
    if isinstance(value, int | float) or (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
        try:
            return datetime.fromtimestamp(int(value) / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise serializers.ValidationError("out of range") from None
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise serializers.ValidationError("an ISO 8601 instant (2026-11-25T02:00:00Z) or milliseconds") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class InstantField(serializers.Field):
    def to_internal_value(self, data):
        return _when(data)

    def to_representation(self, value):
        return value.isoformat()


class RangeSerializer(StrictSerializer):
    start = InstantField(help_text="From: ISO 8601 or milliseconds since the epoch")
    end = InstantField(help_text="To: ISO 8601 or milliseconds since the epoch")
    project = serializers.CharField(required=False, max_length=100, help_text="A project's name or code")

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "must be after the start"})
        if (attrs["end"] - attrs["start"]).days > MAX_SPAN_DAYS:
            raise serializers.ValidationError({"end": f"at most {MAX_SPAN_DAYS} days after the start"})
        return attrs


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _payload(runs, changes) -> list[dict]:
    out = []
    for run in runs:
        verdict = run.baseline_verdict.verdict if getattr(run, "baseline_verdict", None) else None
        tags = ["plimsoll", "run", f"project:{run.project.name}", f"plan:{run.plan_name}", f"status:{run.status}"]
        if verdict:
            tags.append(f"verdict:{verdict}")
        end = run.finished_at or run.start_at
        out.append(
            {
                "time": _ms(run.start_at),
                "timeEnd": _ms(end),
                "title": f"Run #{run.number} {run.plan_name}: {run.get_status_display().lower()}",
                "text": f"{run.environment_name} · {run.plan_snapshot.get('base_url', '')}"
                + (f" · against its baseline: {verdict.replace('_', ' ')}" if verdict else ""),
                "tags": tags,
            }
        )
    for change in changes:
        keys = ", ".join(
            f"{e['key']} = {e['value']}" if e.get("value") is not None else f"{e['key']} removed"
            for e in (change.edits or [])[:5]
        )
        out.append(
            {
                "time": _ms(change.applied_at),
                "timeEnd": _ms(change.applied_at),
                "title": f"Tuning change #{change.number} {change.title}",
                "text": f"{change.environment.name} · {change.get_category_display()}" + (f" · {keys}" if keys else ""),
                "tags": ["plimsoll", "tuning-change", f"project:{change.environment.project.name}", change.category],
            }
        )
    return sorted(out, key=lambda a: a["time"])


class AnnotationViewSet(TeamScopedViewSet):
    """Runs and applied tuning changes in a time range, as Grafana annotations."""

    serializer_class = AnnotationSerializer
    pagination_class = None  # Grafana reads one plain list; LIMIT bounds it instead

    def safely_get_queryset(self):
        return TuningChange.objects.filter(status=TuningChange.Status.APPLIED)

    def _annotations(self, start, end, project: str | None) -> list[dict]:
        from portal.runs.models import Run

        runs = self.scope_to_caller(Run.objects.all())
        changes = self.get_queryset()
        runs, changes = selectors.annotations(runs=runs, changes=changes, start=start, end=end, project=project)
        return _payload(runs[:LIMIT], changes[:LIMIT])

    @extend_schema(
        summary="Runs and applied tuning changes in a time range, as Grafana annotations",
        parameters=[
            OpenApiParameter("from", str, required=True, description="ISO 8601 or milliseconds since the epoch"),
            OpenApiParameter("to", str, required=True, description="ISO 8601 or milliseconds since the epoch"),
            OpenApiParameter("project", str, description="Only this project (its name or code)"),
        ],
        responses={200: AnnotationSerializer(many=True), **error_responses(400, 401)},
    )
    def list(self, request):
        params = RangeSerializer(
            data={
                k: v
                for k, v in (
                    ("start", request.query_params.get("from")),
                    ("end", request.query_params.get("to")),
                    ("project", request.query_params.get("project")),
                )
                if v is not None
            }
        )
        params.is_valid(raise_exception=True)
        data = params.validated_data
        return Response(self._annotations(data["start"], data["end"], data.get("project")))


class GrafanaCheckSerializer(serializers.Serializer):
    status = serializers.CharField()
    annotations = serializers.BooleanField()


class GrafanaAnnotationQuery(serializers.Serializer):
    range = serializers.DictField(help_text='{"from": "2026-11-25T00:00:00Z", "to": "2026-11-26T00:00:00Z"}')
    annotation = serializers.DictField(
        required=False, help_text='{"query": "project=Demo intranet"} narrows to one project (optional)'
    )


class GrafanaViewSet(TeamScopedViewSet):
    """Grafana's "simple JSON" data source protocol, for annotations only."""

    serializer_class = AnnotationSerializer
    pagination_class = None
    # Grafana POSTs its annotation queries, but they only read: a read token is enough.
    required_scopes = {"annotations": "read"}
    safely_get_queryset = AnnotationViewSet.safely_get_queryset
    _annotations = AnnotationViewSet._annotations

    @extend_schema(
        summary="The simple JSON data source's connection test",
        responses={200: GrafanaCheckSerializer, **error_responses(401)},
    )
    def check(self, request):
        return Response({"status": "ok", "annotations": True})

    @extend_schema(
        summary="Annotations for a simple JSON data source's annotation query",
        request=GrafanaAnnotationQuery,
        responses={200: AnnotationSerializer(many=True), **error_responses(400, 401)},
    )
    def annotations(self, request):
        body = request.data if isinstance(request.data, dict) else {}
        window = body.get("range")
        if not isinstance(window, dict):
            raise serializers.ValidationError({"range": 'expected {"from": …, "to": …}'})
        params = RangeSerializer(data={"start": window.get("from"), "end": window.get("to")})
        params.is_valid(raise_exception=True)
        annotation = body.get("annotation") if isinstance(body.get("annotation"), dict) else {}
        query = str(annotation.get("query") or "").strip()
        project = query.removeprefix("project=").strip() if query.startswith("project=") else None
        found = self._annotations(params.validated_data["start"], params.validated_data["end"], project or None)
        return Response([{"annotation": annotation, **a} for a in found])
