"""Share links through the API: create (the token shown once), list, read, revoke.

The same rules as the *Share* button: only editors and owners (and write tokens) create
and revoke; every member (and any token of the team) lists. What a link opens is named by
codes in the body and found through the caller's teams (``get_scoped``): an object of
another team is a 404, as everywhere. The token is returned by the create call only; the
database keeps its SHA-256 (``portal.tokens``).
"""

import uuid

from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.response import Response

from portal.api.base import QueryParams, StrictSerializer, TeamScopedViewSet
from portal.api.errors import error_responses
from portal.history.models import Experiment, TrialSet
from portal.projects.models import Environment, Plan
from portal.runs.models import Run

from . import services
from .models import ShareLink


class ShareLinkSerializer(serializers.ModelSerializer):
    project = serializers.UUIDField(source="project.code", read_only=True)
    created_by = serializers.CharField(source="created_by.get_username", read_only=True, default=None)
    state = serializers.SerializerMethodField(help_text="open, expired, revoked, or sharing_off (the project's)")
    target = serializers.SerializerMethodField(help_text="The codes of what the link opens")

    class Meta:
        model = ShareLink
        fields = (
            "code",
            "project",
            "kind",
            "title",
            "note",
            "target",
            "prefix",
            "state",
            "created_by",
            "created_at",
            "expires_at",
            "revoked_at",
            "open_count",
            "last_opened_at",
        )
        read_only_fields = fields

    def get_state(self, link) -> str:
        if link.revoked_at is not None:
            return "revoked"
        if link.expires_at <= timezone.now():
            return "expired"
        sharing = getattr(link.project, "sharing", None)  # selected with the link: no query per row
        if sharing is not None and not sharing.enabled:
            return "sharing_off"
        return "open"

    def get_target(self, link) -> dict[str, str]:
        codes = {
            "run": link.run.code if link.run_id else None,
            "a": link.before_code,
            "b": link.after_code,
            "experiment": link.experiment.code if link.experiment_id else None,
            "environment": link.environment.code if link.environment_id else None,
            "plan": link.plan.code if link.plan_id else None,
        }
        return {name: str(code) for name, code in codes.items() if code}


class ShareLinkCreatedSerializer(ShareLinkSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown this once; only its hash is stored")
    url = serializers.CharField(read_only=True, help_text="The page a stakeholder opens (holds the token)")

    class Meta(ShareLinkSerializer.Meta):
        fields = (*ShareLinkSerializer.Meta.fields, "token", "url")
        read_only_fields = fields


class ShareLinkCreateSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=ShareLink.Kind.choices)
    run = serializers.UUIDField(required=False, help_text="kind=run: the (finished) run's code")
    a = serializers.UUIDField(required=False, help_text="kind=comparison: before, a run's or a trial set's code")
    b = serializers.UUIDField(required=False, help_text="kind=comparison: after, a run's or a trial set's code")
    experiment = serializers.UUIDField(required=False, help_text="kind=experiment: the experiment's code")
    environment = serializers.UUIDField(required=False, help_text="kind=journey: the environment's code")
    plan = serializers.UUIDField(required=False, help_text="kind=journey: the plan whose runs tell the story")
    days = serializers.IntegerField(
        min_value=services.MIN_DAYS,
        max_value=services.MAX_DAYS,
        default=services.DEFAULT_DAYS,
        help_text="Days until the link expires (1 to 365, default 30)",
    )
    note = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)

    NEEDS = {
        ShareLink.Kind.RUN: ("run",),
        ShareLink.Kind.COMPARISON: ("a", "b"),
        ShareLink.Kind.EXPERIMENT: ("experiment",),
        ShareLink.Kind.JOURNEY: ("environment", "plan"),
    }

    def validate(self, data):
        needs = self.NEEDS[data["kind"]]
        missing = {name: ["Required for this kind of link."] for name in needs if name not in data}
        if missing:
            raise serializers.ValidationError(missing)
        extra = {name: [f"Not used by a {data['kind']} link."] for name in self.NEEDS_ALL if name in data}
        for name in needs:
            extra.pop(name, None)
        if extra:
            raise serializers.ValidationError(extra)
        return data

    NEEDS_ALL = ("run", "a", "b", "experiment", "environment", "plan")


class ShareLinkFilter(QueryParams):
    project = serializers.UUIDField(required=False, help_text="Links of one project")
    kind = serializers.ChoiceField(choices=ShareLink.Kind.choices, required=False)
    run = serializers.UUIDField(required=False, help_text="Links to one run")
    experiment = serializers.UUIDField(required=False, help_text="Links to one experiment")
    environment = serializers.UUIDField(required=False, help_text="Links to one environment's journey")
    state = serializers.ChoiceField(choices=["open", "expired", "revoked"], required=False)


CREATED_EXAMPLE = OpenApiExample(
    "A link to a run report, created",
    value={
        "code": "5e0b8a8e-3c1d-4b7a-9f21-0c9d8e7f6a51",
        "project": "a1b2c3d4-0000-4000-8000-000000000001",
        "kind": "run",
        "title": "Run #12 · Smoke",
        "note": "for the steering committee",
        "target": {"run": "3f0c7c55-9d0e-4d57-9a55-2b8f1a3e4c11"},
        "prefix": "Xq3vT9aB",
        "state": "open",
        "created_by": "alice",
        "created_at": "2026-11-24T17:00:00Z",
        "expires_at": "2026-12-24T17:00:00Z",
        "revoked_at": None,
        "open_count": 0,
        "last_opened_at": None,
        "token": "Xq3vT9aBc7…(43 characters)",
        "url": "https://plimsoll.example/s/Xq3vT9aBc7…/",
    },
    response_only=True,
)
CREATE_REQUEST_EXAMPLE = OpenApiExample(
    "Share a comparison for 7 days",
    value={
        "kind": "comparison",
        "a": "3f0c7c55-9d0e-4d57-9a55-2b8f1a3e4c11",
        "b": "9a8b7c6d-1111-4222-8333-444455556666",
        "days": 7,
        "note": "index on the custom field",
    },
    request_only=True,
)


@extend_schema_view(
    list=extend_schema(
        summary="Share links of your teams' projects (never their tokens); filter by project or object",
        parameters=[ShareLinkFilter],
        responses={200: ShareLinkSerializer(many=True), **error_responses(400)},
    ),
    retrieve=extend_schema(summary="One share link", responses={200: ShareLinkSerializer, **error_responses(404)}),
    create=extend_schema(
        summary="Share a run, a comparison, an experiment or a journey: 201 with the link's token, shown once",
        request=ShareLinkCreateSerializer,
        responses={201: ShareLinkCreatedSerializer, **error_responses(400, 403, 404)},
        examples=[CREATE_REQUEST_EXAMPLE, CREATED_EXAMPLE],
    ),
    destroy=extend_schema(
        summary="Revoke a link: it stops working at once (kept in the list as revoked)",
        responses={204: None, **error_responses(403, 404)},
    ),
)
class ShareLinkViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    TeamScopedViewSet,
):
    serializer_class = ShareLinkSerializer

    def safely_get_queryset(self):
        return ShareLink.objects.select_related(
            "project__sharing", "created_by", "run", "experiment", "environment", "plan"
        ).order_by("-created_at", "-id")

    def list(self, request, *args, **kwargs):
        filters = ShareLinkFilter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        f = filters.validated_data
        links = self.get_queryset()
        for name in ("project", "run", "experiment", "environment"):
            if name in f:
                links = links.filter(**{f"{name}__code": f[name]})
        if "kind" in f:
            links = links.filter(kind=f["kind"])
        now = timezone.now()
        if f.get("state") == "open":
            links = links.filter(revoked_at__isnull=True, expires_at__gt=now)
        elif f.get("state") == "expired":
            links = links.filter(revoked_at__isnull=True, expires_at__lte=now)
        elif f.get("state") == "revoked":
            links = links.filter(revoked_at__isnull=False)
        page = self.paginate_queryset(links)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def create(self, request, *args, **kwargs):
        body = ShareLinkCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        project, title, target = self._target(data)
        try:
            link, token = services.share_create(
                project=project,
                kind=data["kind"],
                title=title,
                user=request.user,
                days=data["days"],
                note=data["note"],
                **target,
            )
        except services.ShareError as exc:
            raise serializers.ValidationError({"non_field_errors": [str(exc)]}) from None
        link.token = token
        link.url = request.build_absolute_uri(reverse("sharing:public", args=[token]))
        return Response(
            ShareLinkCreatedSerializer(link, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    def destroy(self, request, *args, **kwargs):
        services.share_revoke(link=self.get_object(), user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _one(self, queryset, code: uuid.UUID):
        """An object of the caller's teams that the caller may share (404 / 403 as everywhere)."""
        return self.get_scoped(queryset, write=True, code=code)

    def _target(self, data) -> tuple:
        """(project, title, ShareLink fields) of what the link opens; the titles are the Share form's."""
        kind = data["kind"]
        if kind == ShareLink.Kind.RUN:
            run = self._one(Run.objects.select_related("project__team"), data["run"])
            if run.is_active:
                raise serializers.ValidationError({"run": ["A run is shared once it has ended."]})
            return run.project, f"Run #{run.number} · {run.plan_name}", {"run": run}
        if kind == ShareLink.Kind.COMPARISON:
            sides, labels = [], []
            for name in ("a", "b"):
                try:
                    side = self._one(Run.objects.select_related("project__team"), data[name])
                    labels.append(f"run #{side.number}")
                except Http404:
                    side = self._one(TrialSet.objects.select_related("project__team"), data[name])
                    labels.append(side.label or f"trial set of {side.plan_name}")
                sides.append(side)
            if sides[0].project_id != sides[1].project_id:
                raise serializers.ValidationError({"b": ["Both sides of a comparison are of the same project."]})
            fields = {"before_code": sides[0].code, "after_code": sides[1].code}
            return sides[0].project, f"Comparison: {labels[0]} → {labels[1]}", fields
        if kind == ShareLink.Kind.EXPERIMENT:
            experiment = self._one(Experiment.objects.select_related("project__team"), data["experiment"])
            return experiment.project, f"Experiment: {experiment.title}", {"experiment": experiment}
        environment = self._one(Environment.objects.select_related("project__team"), data["environment"])
        plan = self._one(Plan.objects.select_related("project__team"), data["plan"])
        if plan.project_id != environment.project_id:
            raise serializers.ValidationError({"plan": ["The plan and the environment are of the same project."]})
        title = f"Journey · {environment.name} · {plan.name}"
        return environment.project, title, {"environment": environment, "plan": plan}
