"""HAR recordings through the API (issue 18): ``POST /projects/{code}/har-import/``.

One call, like ``manage.py import_har``: the preview is computed with the safe defaults (every
correlation accepted unless listed in ``reject``, passwords posted as ``{{variable}}``, no cookie
or credential kept), returned, and — unless ``dry_run`` — the test case is created from it.
Editors only (a write token); bad files get the reader's message and create nothing.

A recording up to PLIMSOLL_HAR_INLINE_MB is analysed in the request and never stored (201/200).
A larger one is analysed by har_analysis_task off the web request (issue 30, item 4): 202 with a
``HarImport`` to poll (``GET /har-imports/{code}/``); the recording is deleted as soon as the task
is done with it, and the row (the outcome) by the sweep after PLIMSOLL_HAR_UPLOAD_TTL_S.
"""

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from portal.api.base import AbsoluteUrls, StrictSerializer, TeamScopedViewSet, accepted, refuse_body_over
from portal.api.errors import error_responses
from portal.projects import har, services
from portal.projects.models import HarImport, Project

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
    status_codes=["201"],
)


DRY_RUN_EXAMPLE = OpenApiExample(
    "A dry run: the preview only",
    value={**HAR_EXAMPLE.value, "created": False, "test_case": None, "test_case_url": None},
    response_only=True,
    status_codes=["200"],
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


class HarPreviewSerializer(serializers.Serializer):
    base_url = serializers.CharField()
    steps = HarStepSerializer(many=True)
    hosts = HarHostSerializer(many=True)
    correlations = HarCorrelationSerializer(many=True)
    variables_needed = serializers.ListField(child=serializers.CharField())
    notes = serializers.ListField(child=serializers.CharField())


class HarImportSerializer(HarPreviewSerializer):
    created = serializers.BooleanField()
    test_case = serializers.UUIDField(allow_null=True)
    test_case_url = serializers.CharField(allow_null=True)


class HarImportStatusSerializer(AbsoluteUrls, serializers.ModelSerializer):
    url = serializers.SerializerMethodField(help_text="This import in the API: poll it")
    project = serializers.UUIDField(source="project.code", read_only=True)
    created = serializers.SerializerMethodField(help_text="Whether the test case was created")
    test_case = serializers.UUIDField(source="test_case.code", read_only=True, allow_null=True, default=None)
    test_case_url = serializers.SerializerMethodField(help_text="The new test case in the API, once done")
    preview = HarPreviewSerializer(read_only=True, allow_null=True, help_text="The preview, once done")
    created_by = serializers.CharField(source="created_by.get_username", read_only=True, default=None)

    class Meta:
        model = HarImport
        fields = (
            "code",
            "url",
            "project",
            "file_name",
            "name",
            "dry_run",
            "status",
            "error",
            "created",
            "test_case",
            "test_case_url",
            "preview",
            "created_by",
            "created_at",
            "finished_at",
        )
        read_only_fields = fields

    def get_url(self, item) -> str:
        return self.absolute(reverse("api:har-import-detail", args=[item.code]))

    def get_created(self, item) -> bool:
        return item.test_case_id is not None

    def get_test_case_url(self, item) -> str | None:
        if not item.test_case_id:
            return None
        return self.absolute(reverse("api:test-case-detail", args=[item.test_case.code]))


QUEUED_EXAMPLE = OpenApiExample(
    "A large recording queued (over PLIMSOLL_HAR_INLINE_MB): poll its url",
    value={
        "code": "3e0b7c1d-9a4f-4c2e-8b6d-5f1a2e3c4d5e",
        "url": "https://plimsoll.example/api/v1/har-imports/3e0b7c1d-9a4f-4c2e-8b6d-5f1a2e3c4d5e/",
        "project": "a1b2c3d4-0000-4000-8000-000000000001",
        "file_name": "checkout.har",
        "name": "Checkout",
        "dry_run": False,
        "status": "queued",
        "error": "",
        "created": False,
        "test_case": None,
        "test_case_url": None,
        "preview": None,
        "created_by": "alice",
        "created_at": "2026-11-25T23:40:00Z",
        "finished_at": None,
    },
    response_only=True,
    status_codes=["202"],
)


class ProjectHarImportViewSet(TeamScopedViewSet):
    serializer_class = HarImportSerializer
    parser_classes = [MultiPartParser]

    def safely_get_queryset(self):
        return Project.objects.select_related("team")

    @extend_schema(
        summary="Import a HAR recording as a test case (write token, editors); dry_run returns the preview only. "
        "Over PLIMSOLL_HAR_INLINE_MB: 202 with the import to poll",
        request={"multipart/form-data": HarUploadSerializer},
        responses={
            201: HarImportSerializer,
            200: HarImportSerializer,
            202: HarImportStatusSerializer,
            **error_responses(400, 403, 404, 413),
        },
        examples=[HAR_EXAMPLE, DRY_RUN_EXAMPLE, QUEUED_EXAMPLE],
    )
    def create(self, request, code=None):
        project = self.get_scoped(self.safely_get_queryset(), write=True, code=code)
        refuse_body_over(request, settings.PLIMSOLL_HAR_MAX_MB, "PLIMSOLL_HAR_MAX_MB")  # before request.data
        data = {k: v for k, v in request.data.items() if k != "reject"}
        if "reject" in request.data:
            data["reject"] = request.data.getlist("reject")
        upload = HarUploadSerializer(data=data)
        upload.is_valid(raise_exception=True)
        form = upload.validated_data
        too_large = services.har_too_large(form["file"].size)
        if too_large:  # before reading it: the upload waits in a temporary file until then
            raise exceptions.ValidationError({"file": [too_large]})
        name = (form.get("name") or form["file"].name.removesuffix(".har"))[:100]
        if form["file"].size > settings.PLIMSOLL_HAR_INLINE_MB * 1024 * 1024:
            return self._queue(request, project, form, name)
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
            **services.har_preview_summary(preview),
            "created": test_case is not None,
            "test_case": test_case.code if test_case else None,
            "test_case_url": request.build_absolute_uri(reverse("api:test-case-detail", args=[test_case.code]))
            if test_case
            else None,
        }
        return Response(
            HarImportSerializer(body).data, status=status.HTTP_201_CREATED if test_case else status.HTTP_200_OK
        )

    def _queue(self, request, project, form, name):
        """A large recording: analysed by har_analysis_task, never in this request; 202 with its status."""
        try:
            item = services.har_api_import_start(
                project=project,
                user=request.user,
                chunks=form["file"].chunks(),
                file_name=form["file"].name[:255],
                name=name,
                dry_run=form["dry_run"],
                rejected=set(form.get("reject", [])),
            )
        except services.ImportRefused as exc:
            raise exceptions.ValidationError({"name": [str(exc)]}) from None
        body = HarImportStatusSerializer(item, context=self.get_serializer_context()).data
        return accepted(body)


@extend_schema_view(
    retrieve=extend_schema(
        summary="A large HAR's import: its status (poll it), then its test case or preview, or why it failed",
        responses={200: HarImportStatusSerializer, **error_responses(404)},
    ),
)
class HarImportViewSet(mixins.RetrieveModelMixin, TeamScopedViewSet):
    """``GET /har-imports/{code}/``: what became of a HAR the import answered 202 for (the team's, any role)."""

    serializer_class = HarImportStatusSerializer

    def safely_get_queryset(self):
        return HarImport.objects.select_related("project", "test_case", "created_by")
