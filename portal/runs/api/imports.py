"""Result files of other tools through the API (issue 18): upload to an environment, follow the import.

``POST /environments/{code}/result-imports/`` (multipart: ``file``, optional ``format`` and
``plan``) keeps the file and queues its import; it answers 202 with the import, whose ``url``
a client polls (``percent``, ``status``) until it is ``done`` (``run`` is then the run's code)
or ``failed`` (``error`` says why, naming the bad line). Editors only; a read or run token is
refused (the upload writes to the history).
"""

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers
from rest_framework.parsers import MultiPartParser

from portal.api.base import AbsoluteUrls, StrictSerializer, TeamScopedViewSet, accepted, refuse_body_over
from portal.api.errors import error_responses
from portal.projects.models import Environment
from portal.runs import result_files, services
from portal.runs.models import ResultImport

IMPORT_EXAMPLE = OpenApiExample(
    "An import under way",
    value={
        "code": "7d1f3a52-5b8e-4b8a-9d0c-2f64c1a0e9b3",
        "url": "https://plimsoll.example/api/v1/result-imports/7d1f3a52-5b8e-4b8a-9d0c-2f64c1a0e9b3/",
        "environment": "a1b2c3d4-0000-4000-8000-000000000003",
        "file_name": "results.jtl",
        "format": "",
        "status": "reading",
        "bytes_read": 402653184,
        "bytes_total": 1073741824,
        "percent": 37,
        "error": "",
        "run": None,
        "run_url": None,
        "already_imported": False,
        "created_by": "alice",
        "created_at": "2026-11-24T17:00:00Z",
        "finished_at": None,
    },
    response_only=True,
)
FAILED_EXAMPLE = OpenApiExample(
    "A failed import",
    value={
        **IMPORT_EXAMPLE.value,
        "status": "failed",
        "percent": 0,
        "error": "Line 1834 is not a JMeter JTL line (17 values for 16 columns); nothing was imported. …",
    },
    response_only=True,
)


class ResultImportSerializer(AbsoluteUrls, serializers.ModelSerializer):
    url = serializers.SerializerMethodField(help_text="This import in the API: poll it")
    environment = serializers.UUIDField(source="environment.code", read_only=True)
    percent = serializers.IntegerField(read_only=True, help_text="Of the file read, 0-100")
    run = serializers.UUIDField(source="run.code", read_only=True, allow_null=True, default=None)
    run_url = serializers.SerializerMethodField(help_text="The imported run in the API, once done")
    created_by = serializers.CharField(source="created_by.get_username", read_only=True, default=None)

    class Meta:
        model = ResultImport
        fields = (
            "code",
            "url",
            "environment",
            "file_name",
            "format",
            "status",
            "bytes_read",
            "bytes_total",
            "percent",
            "error",
            "run",
            "run_url",
            "already_imported",
            "created_by",
            "created_at",
            "finished_at",
        )
        read_only_fields = fields

    def get_url(self, item) -> str:
        return self.absolute(reverse("api:result-import-detail", args=[item.code]))

    def get_run_url(self, item) -> str | None:
        return self.absolute(reverse("api:run-detail", args=[item.run.code])) if item.run_id else None


class ResultUploadSerializer(StrictSerializer):
    file = serializers.FileField(help_text="k6 JSON lines or CSV, JMeter JTL (CSV or XML), Locust "
                                 "_stats_history.csv, Gatling simulation.log; gzipped too")  # fmt: skip
    format = serializers.ChoiceField(
        choices=result_files.FORMATS, required=False, help_text="Instead of detecting it from the content"
    )
    plan = serializers.UUIDField(required=False, help_text="The plan these results stand for (the project's)")


@extend_schema_view(
    list=extend_schema(
        summary="Result imports of your teams' environments, newest first",
        responses={200: ResultImportSerializer(many=True), **error_responses()},
        examples=[IMPORT_EXAMPLE],
    ),
    retrieve=extend_schema(
        summary="One result import: its status and progress (poll it), its run or its error",
        responses={200: ResultImportSerializer, **error_responses(404)},
        examples=[IMPORT_EXAMPLE, FAILED_EXAMPLE],
    ),
)
class ResultImportViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = ResultImportSerializer

    def safely_get_queryset(self):
        return ResultImport.objects.select_related("environment", "run", "created_by").order_by("-created_at", "-id")


class EnvironmentResultImportViewSet(TeamScopedViewSet):
    """``POST /environments/{code}/result-imports/``: a result file becomes an imported run, in the background."""

    serializer_class = ResultImportSerializer
    parser_classes = [MultiPartParser]

    def safely_get_queryset(self):
        return Environment.objects.select_related("project")

    @extend_schema(
        summary="Upload a result file (write token, editors): 202 with the import to poll",
        request={"multipart/form-data": ResultUploadSerializer},
        responses={202: ResultImportSerializer, **error_responses(400, 403, 404, 413)},
        examples=[IMPORT_EXAMPLE],
    )
    def create(self, request, code=None):
        environment = self.get_scoped(self.safely_get_queryset(), write=True, code=code)
        limit = settings.PLIMSOLL_RESULT_UPLOAD_MAX_MB
        refuse_body_over(request, limit, "PLIMSOLL_RESULT_UPLOAD_MAX_MB")  # before request.data
        upload = ResultUploadSerializer(data={k: v for k, v in request.data.items()})
        upload.is_valid(raise_exception=True)
        data = upload.validated_data
        if data["file"].size > limit * 1024 * 1024:
            raise exceptions.ValidationError({"file": [f"Over the {limit} MB limit. Nothing was imported."]})
        plan = None
        if "plan" in data:
            plan = environment.project.plans.filter(code=data["plan"]).first()
            if plan is None:
                raise exceptions.ValidationError({"plan": ["No such plan in this environment's project."]})
        try:
            item = services.result_import_create(
                environment=environment,
                user=request.user,
                chunks=data["file"].chunks(),
                file_name=data["file"].name,
                format=data.get("format", ""),
                plan=plan,
            )
        except result_files.ResultFileError as exc:
            raise exceptions.ValidationError({"file": [str(exc)]}) from None
        body = ResultImportSerializer(item, context=self.get_serializer_context()).data
        return accepted(body)
