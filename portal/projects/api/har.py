"""HAR recordings through the API (issue 18): ``POST /projects/{code}/har-import/``.

One stateless call, like ``manage.py import_har``: the preview is computed with the safe
defaults (every correlation accepted unless listed in ``reject``, passwords posted as
``{{variable}}``, no cookie or credential kept), returned, and — unless ``dry_run`` — the
test case is created from it. The recording itself is never stored, so nothing of it lingers.
Editors only (a write token); bad files get the reader's message and create nothing.
"""

from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from portal.api.base import StrictSerializer, TeamScopedViewSet
from portal.api.errors import error_responses
from portal.projects import har, services
from portal.projects.models import Project

HAR_EXAMPLE = OpenApiExample(
    "A recording imported",
    value={
        "base_url": "http://127.0.0.1:8001",
        "created": True,
        "test_case": "b6c1e0a2-3f4d-4e5f-8a9b-0c1d2e3f4a5b",
        "test_case_url": "https://plimsoll.example/api/v1/test-cases/b6c1e0a2-3f4d-4e5f-8a9b-0c1d2e3f4a5b/",
        "steps": [
            {"name": "Login", "method": "GET", "path": "/login", "think_time": 2.1, "resources": ["/app.css"]},
            {"name": "Login", "method": "POST", "path": "/login", "think_time": 1.4, "resources": []},
        ],
        "hosts": [{"host": "fonts.example.com", "requests": 3, "kept": False, "reason": "third-party fonts"}],
        "correlations": [
            {"name": "csrf_token", "kind": "hidden form field", "step": 1, "uses": [2], "accepted": True},
        ],
        "variables_needed": ["password"],
        "notes": [],
    },
    response_only=True,
)


class HarUploadSerializer(StrictSerializer):
    file = serializers.FileField(help_text="A HAR 1.2 file (browsers' Save all as HAR, Playwright, k6 Studio)")
    name = serializers.CharField(max_length=100, required=False, help_text="The test case's name (default: file's)")
    reject = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, help_text="Correlations (variables) not to apply"
    )
    dry_run = serializers.BooleanField(required=False, default=False, help_text="Return the preview, create nothing")


class HarStepSerializer(serializers.Serializer):
    name = serializers.CharField()
    method = serializers.CharField()
    path = serializers.CharField()
    think_time = serializers.FloatField()
    resources = serializers.ListField(child=serializers.CharField())


class HarHostSerializer(serializers.Serializer):
    host = serializers.CharField()
    requests = serializers.IntegerField()
    kept = serializers.BooleanField()
    reason = serializers.CharField()


class HarCorrelationSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.CharField()
    step = serializers.IntegerField(help_text="The step (1-based) whose response sets it")
    uses = serializers.ListField(child=serializers.IntegerField(), help_text="The steps (1-based) that send it back")
    accepted = serializers.BooleanField()


class HarImportSerializer(serializers.Serializer):
    base_url = serializers.CharField()
    created = serializers.BooleanField()
    test_case = serializers.UUIDField(allow_null=True)
    test_case_url = serializers.CharField(allow_null=True)
    steps = HarStepSerializer(many=True)
    hosts = HarHostSerializer(many=True)
    correlations = HarCorrelationSerializer(many=True)
    variables_needed = serializers.ListField(child=serializers.CharField())
    notes = serializers.ListField(child=serializers.CharField())


class ProjectHarImportViewSet(TeamScopedViewSet):
    serializer_class = HarImportSerializer
    parser_classes = [MultiPartParser]

    def safely_get_queryset(self):
        return Project.objects.select_related("team")

    @extend_schema(
        summary="Import a HAR recording as a test case (write token, editors); dry_run returns the preview only",
        request={"multipart/form-data": HarUploadSerializer},
        responses={
            201: HarImportSerializer,
            200: HarImportSerializer,
            **error_responses(400, 403, 404, 413),
        },
        examples=[HAR_EXAMPLE],
    )
    def create(self, request, code=None):
        project = self.get_scoped(self.safely_get_queryset(), write=True, code=code)
        data = {k: v for k, v in request.data.items() if k != "reject"}
        if "reject" in request.data:
            data["reject"] = request.data.getlist("reject")
        upload = HarUploadSerializer(data=data)
        upload.is_valid(raise_exception=True)
        form = upload.validated_data
        too_large = services.har_too_large(form["file"].size)
        if too_large:  # before reading it: the upload waits in a temporary file until then
            raise exceptions.ValidationError({"file": [too_large]})
        try:
            preview = har.analyze(
                services.har_entries(form["file"].read()),
                allowed=services.allowed_target,
                choices=har.Choices(rejected=set(form.get("reject", []))),
            )
        except har.HarError as exc:
            raise exceptions.ValidationError({"file": [str(exc)]}) from None
        test_case = None
        if not form["dry_run"]:
            name = form.get("name") or form["file"].name.removesuffix(".har")
            try:
                test_case = services.test_case_import(
                    project=project,
                    name=name,
                    steps=preview.step_fields(),
                    description=f"Imported from {form['file'].name} through the API.",
                )
            except services.ImportRefused as exc:
                raise exceptions.ValidationError({"name": [str(exc)]}) from None
        body = {
            "base_url": preview.base_url,
            "created": test_case is not None,
            "test_case": test_case.code if test_case else None,
            "test_case_url": request.build_absolute_uri(reverse("api:test-case-detail", args=[test_case.code]))
            if test_case
            else None,
            "steps": [
                {
                    "name": s.name,
                    "method": s.method,
                    "path": s.path,
                    "think_time": s.think_time,
                    "resources": s.resources,
                }
                for s in preview.steps
            ],
            "hosts": [vars(h) for h in preview.hosts],
            "correlations": [
                {
                    "name": c.name,
                    "kind": c.kind,
                    "step": c.step + 1,
                    "uses": [u + 1 for u in c.uses],
                    "accepted": c.accepted,
                }
                for c in preview.correlations
            ],
            "variables_needed": preview.variables_needed(),
            "notes": list(preview.notes),
        }
        return Response(
            HarImportSerializer(body).data, status=status.HTTP_201_CREATED if test_case else status.HTTP_200_OK
        )
