"""Projects, environments, test cases (with their steps) and plans (with mix and levels) through the API.

Writes go through the UI's forms and services: the same rules, the same messages.
"""

from dataclasses import asdict

from django.db import transaction
from django.http import JsonResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from portal.accounts.models import Team
from portal.api.base import ListByCodes, PartialUpdateMixin, QueryParams, StrictSerializer, TeamScopedViewSet
from portal.api.errors import TargetRefused, error_responses, write_schemas
from portal.api.parsers import JSONParser
from portal.projects import drift, services, tryit, wsactions
from portal.projects.forms import (
    DataSetUploadForm,
    ProjectForm,
    StepForm,
    TestCaseForm,
    format_extractions,
    format_headers,
)
from portal.projects.models import DataSet, Environment, Plan, Project, Step, TestCase

from .serializers import (
    ConfigurationItemSerializer,
    DataSetInfoSerializer,
    EnvironmentSerializer,
    PlanSerializer,
    ProjectSerializer,
    StepSerializer,
    TestCaseSerializer,
    TryResultSerializer,
    VerificationSerializer,
    step_document,
)

# The step form's text fields and the API's structured ones.
STEP_FIELD_NAMES = {
    "headers_text": "headers",
    "extract_text": "extract",
    "resources_text": "resources",
    "ws_actions_text": "websocket.actions",
    "ws_hold": "websocket.hold",
    "stream_kind": "stream.kind",
    "stream_idle_timeout": "stream.idle_timeout",
    "stream_last_event_contains": "stream.last_event_contains",
}


class ProjectFilter(QueryParams):
    project = serializers.UUIDField(required=False, help_text="Only this project's")


class DataSetUploadSerializer(StrictSerializer):
    """For the schema and for unknown fields; the file's rules are the upload form's (parse_data_set)."""

    file = serializers.FileField(help_text="CSV, UTF-8, at most 100,000 rows")
    mode = serializers.ChoiceField(choices=DataSet.Mode.choices, default=DataSet.Mode.SEQUENTIAL)


class TryRequestSerializer(StrictSerializer):
    environment = serializers.UUIDField(help_text="The code of one of the test case's project's environments")


class DataSetModeSerializer(StrictSerializer):
    mode = serializers.ChoiceField(choices=DataSet.Mode.choices)


def _form_errors(form, names: dict | None = None) -> dict:
    names = names or {}
    return {names.get(field, field): list(messages) for field, messages in form.errors.items()}


def _blank(value) -> str:
    return "" if value is None else str(value)


class JourneyParams(QueryParams):
    plan = serializers.UUIDField(required=False, help_text="The plan whose runs to show (default: the most run)")


class CompareParams(QueryParams):
    a = serializers.UUIDField(help_text="Before: a run's or a trial set's code")
    b = serializers.UUIDField(help_text="After: a run's or a trial set's code")


JOURNEY_SCHEMA = extend_schema(
    summary="The journey: the plan's runs, the applied tuning changes and their effects (the journey page's data)",
    parameters=[JourneyParams],
    responses={200: OpenApiTypes.OBJECT, **error_responses(400, 404)},
)


def _journey_plan(request, choices):
    params = JourneyParams(data=request.query_params)
    params.is_valid(raise_exception=True)
    code = params.validated_data.get("plan")
    try:
        from portal.history import journey

        return journey.chosen_plan(choices, str(code) if code else None)
    except LookupError:
        raise exceptions.NotFound("No such plan here.") from None


TEST_CASE_EXAMPLE = OpenApiExample(
    "Log in, then search",
    request_only=True,
    value={
        "project": "a1b2c3d4-0000-4000-8000-000000000001",
        "name": "Log in and search",
        "steps": [
            {
                "name": "Login form",
                "path": "/login",
                "extract": [{"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"}],
            },
            {
                "name": "Log in",
                "method": "POST",
                "path": "/login",
                "body_type": "form",
                "body": "username=demo&password=demo&csrfmiddlewaretoken={{csrf}}",
            },
            {"name": "Search", "path": "/search?q=report", "think_time": 2, "text_present": "results"},
        ],
    },
)
PLAN_EXAMPLE = OpenApiExample(
    "A ramp with thresholds",
    request_only=True,
    value={
        "project": "a1b2c3d4-0000-4000-8000-000000000001",
        "environment": "a1b2c3d4-0000-4000-8000-000000000003",
        "name": "Smoke: 20 users, 30 s",
        "profile_kind": "ramp",
        "users": 20,
        "ramp_up": 5,
        "hold": 30,
        "ramp_down": 0,
        "threshold_apd_ms": 1000,
        "threshold_p95_ms": 3000,
        "threshold_error_rate_pct": 0.1,
        "stop_criteria": [
            {"metric": "error_rate_pct", "above": 50, "window_s": 60},
            {"metric": "pages_per_s", "below": 1, "window_s": 30},
        ],
        "mix": [{"test_case": "a1b2c3d4-0000-4000-8000-000000000004", "weight": 1}],
    },
)

READ = {
    "list": lambda what, s: extend_schema(
        summary=f"List {what} of your teams",
        parameters=[ProjectFilter],
        responses={200: s(many=True), **error_responses(400)},
    ),
    "retrieve": lambda what, s: extend_schema(summary=f"One of the {what}", responses={200: s, **error_responses(404)}),
}


class ProjectWriteSerializer(StrictSerializer):
    team = serializers.UUIDField(required=False, help_text="The team's code (on create; fixed afterwards)")
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, default="")


@extend_schema_view(
    **write_schemas(
        request=ProjectWriteSerializer,
        answer=ProjectSerializer,
        create="Create a project in one of your teams",
        update="Rename a project or change its description",
        partial_update="Change some fields of a project; the others stay",
        destroy="Delete a project with everything in it, its runs included",
    ),
    list=extend_schema(
        summary="List the projects of your teams", responses={200: ProjectSerializer(many=True), **error_responses()}
    ),
    retrieve=extend_schema(summary="One project", responses={200: ProjectSerializer, **error_responses(404)}),
)
class ProjectViewSet(
    PartialUpdateMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet
):
    serializer_class = ProjectSerializer
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def safely_get_queryset(self):
        return Project.objects.select_related("team").order_by("name", "id")

    def patch_base(self, project) -> dict:
        return {"name": project.name, "description": project.description}

    def _write_data(self) -> dict:
        serializer = ProjectWriteSerializer(data=self.document())
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def create(self, request, *args, **kwargs):
        data = self._write_data()
        if "team" not in data:
            raise serializers.ValidationError({"team": ["This field is required."]})
        team = self.get_scoped(Team.objects.all(), write=True, code=data["team"])
        form = ProjectForm({"name": data["name"], "description": data["description"]}, teams=[team])
        if not form.is_valid():
            raise serializers.ValidationError(_form_errors(form))
        project = services.project_create(team=team, name=form.cleaned_data["name"], description=data["description"])
        return Response(ProjectSerializer(project).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        project = self.get_object()
        data = self._write_data()
        if data.get("team", project.team.code) != project.team.code:
            raise serializers.ValidationError({"team": ["A project stays in its team."]})
        form = ProjectForm({"name": data["name"], "description": data["description"]}, instance=project)
        if not form.is_valid():
            raise serializers.ValidationError(_form_errors(form))
        return Response(ProjectSerializer(form.save()).data)

    def destroy(self, request, *args, **kwargs):
        services.project_delete(project=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Compare two runs or trial sets of the project: the page's rows, verdicts, basis and headline",
        parameters=[CompareParams],
        responses={200: OpenApiTypes.OBJECT, **error_responses(400, 404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def compare(self, request, code=None):
        from portal.history import comparison
        from portal.history.models import TrialSet
        from portal.runs.models import Run

        project = self.get_object()
        params = CompareParams(data=request.query_params)
        params.is_valid(raise_exception=True)
        sides = []
        for name in ("a", "b"):
            side = comparison.find_side(
                project=project,
                runs=self.scope_to_caller(Run.objects.all()),
                trial_sets=self.scope_to_caller(TrialSet.objects.all()),
                code=params.validated_data[name],
            )
            if side is None:
                raise exceptions.NotFound(f"No run or trial set of this project has the code given as {name}.")
            sides.append(side)
        return Response(comparison.report_dict(comparison.compare_sides(*sides)))

    @JOURNEY_SCHEMA
    @action(detail=True, methods=["get"], pagination_class=None)
    def journey(self, request, code=None):
        from portal.history import journey

        project = self.get_object()
        choices = journey.plan_choices(project=project)
        plan = _journey_plan(request, choices)
        # JsonResponse, as the page's journey.json: the same bytes, dates included, for both readers.
        return JsonResponse({**journey.project_journey(project, plan), "plans": journey.plans_listed(choices)})


class ServerWriteSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    role = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    hardware = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    metrics_url = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default="", help_text="A Prometheus text endpoint"
    )
    counter_set = serializers.CharField(
        max_length=20, required=False, allow_blank=True, default="", help_text="Needed with a metrics endpoint"
    )
    prometheus_selector = serializers.CharField(
        max_length=300,
        required=False,
        allow_blank=True,
        default="",
        help_text='Label matchers of this server in the environment\'s Prometheus, e.g. instance="web-01:9100"',
    )


class EnvironmentWriteSerializer(StrictSerializer):
    project = serializers.UUIDField(help_text="The project's code (fixed once created)")
    name = serializers.CharField(max_length=100)
    base_url = serializers.CharField(max_length=500, help_text="Scheme, host and port of the system under test")
    config_url = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="Where the target reports its actual configuration (a JSON object of key → value), for Verify; "
        "absent: unchanged",
    )
    description = serializers.CharField(required=False, allow_blank=True, default="")
    trace_url_template = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="A link to one trace, with {trace_id} where the id goes "
        "(e.g. https://tempo.example/trace/{trace_id}); absent: unchanged",
    )
    otlp_endpoint = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="An OTLP/HTTP receiver the engine exports sampled requests' spans to "
        "(e.g. http://otel-collector:4318); absent: unchanged",
    )
    metrics_interval_s = serializers.IntegerField(
        required=False, allow_null=True, help_text="Seconds between scrapes of the servers' metrics (default 5)"
    )
    configuration = ConfigurationItemSerializer(
        many=True, required=False, help_text="The initial configuration (on create only; then tuning changes)"
    )
    prometheus_url = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="Your Prometheus, read for servers with label matchers instead of scraping them; absent: unchanged",
    )
    prometheus_token = serializers.CharField(
        max_length=4000,
        required=False,
        allow_blank=True,
        write_only=True,
        help_text="Write-only bearer token for the Prometheus, stored encrypted; absent: unchanged, empty: forgotten",
    )
    servers = ServerWriteSerializer(many=True, required=False, default=list, help_text="Replaced as a whole")
    generator_pool = serializers.CharField(
        max_length=60, required=False, allow_blank=True, help_text="Run on this generator pool's workers only"
    )
    protocol = serializers.ChoiceField(
        choices=Environment._meta.get_field("protocol").choices,
        required=False,
        help_text="auto | http1 | h2c: what the engine speaks to this system (a plan may choose another); "
        "absent: unchanged",
    )
    ca_bundle = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="PEM certificates of a private CA, trusted besides the system's CAs; absent: unchanged, "
        "empty: removed",
    )
    ca_bundle_name = serializers.CharField(
        max_length=255, required=False, allow_blank=True, help_text="The bundle's file name, for the record"
    )


@extend_schema_view(
    list=READ["list"]("environments", EnvironmentSerializer),
    retrieve=READ["retrieve"]("environments", EnvironmentSerializer),
    **write_schemas(
        request=EnvironmentWriteSerializer,
        answer=EnvironmentSerializer,
        create="Create an environment: base URL, servers and its initial configuration",
        update="Change an environment's name, base URL, description or servers (its configuration "
        "changes only through tuning changes)",
        partial_update="Change some fields of an environment (servers, if given, are replaced as a whole); "
        "the others stay",
        destroy="Delete an environment that no plan uses",
        destroy_errors=(403, 404, 409),
    ),
)
class EnvironmentViewSet(
    PartialUpdateMixin, ListByCodes, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet
):
    serializer_class = EnvironmentSerializer
    list_filter = ProjectFilter
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def safely_get_queryset(self):
        return Environment.objects.select_related("project").prefetch_related("servers").order_by("name", "id")

    def create(self, request, *args, **kwargs):
        return Response(self._save(None), status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        return Response(self._save(self.get_object()))

    def patch_base(self, environment) -> dict:
        data = EnvironmentSerializer(environment).data
        return {k: v for k, v in data.items() if k not in ("code", "configuration", "prometheus_token_set")}

    @transaction.atomic
    def _save(self, environment) -> dict:
        serializer = EnvironmentWriteSerializer(data=self.document())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if environment is not None and data["project"] != environment.project.code:
            raise serializers.ValidationError({"project": ["An environment stays in its project."]})
        project = self.get_scoped(Project.objects.select_related("team"), write=True, code=data["project"])
        configuration = data.get("configuration")
        environment = services.environment_save(
            project=project,
            environment=environment,
            name=data["name"],
            base_url=data["base_url"],
            config_url=data.get("config_url"),
            prometheus_url=data.get("prometheus_url"),
            prometheus_token=data.get("prometheus_token"),
            trace_url_template=data.get("trace_url_template"),
            otlp_endpoint=data.get("otlp_endpoint"),
            description=data["description"],
            metrics_interval_s=data.get("metrics_interval_s"),
            configuration=None if configuration is None else [dict(item) for item in configuration],
            # The servers are replaced as a whole: the document's rows, in order.
            servers=[services.ServerSpec(**server) for server in data["servers"]],
            generator_pool=data.get("generator_pool"),
            protocol=data.get("protocol"),
            ca_bundle=data.get("ca_bundle"),
            ca_bundle_name=data.get("ca_bundle_name"),
        )
        return EnvironmentSerializer(self.safely_get_queryset().get(pk=environment.pk)).data

    def destroy(self, request, *args, **kwargs):
        services.environment_delete(environment=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Verify: the target's own configuration (from the environment's config_url) against the ledger",
        description="Reads the environment's config_url through the outbound rules (allowlist, 5 s, 200 KB) and "
        "compares it key by key with the ledger, as the environment page's Verify does. A target that cannot be "
        "read answers 200 with `error` saying why (and no keys): the check ran, the target did not answer it.",
        responses={200: VerificationSerializer, **error_responses(404)},
    )
    @action(detail=True, methods=["get"])
    def verify(self, request, code=None):
        environment = self.get_object()
        return Response(VerificationSerializer(drift.configuration_drift(environment).record(timezone.now())).data)

    @JOURNEY_SCHEMA
    @action(detail=True, methods=["get"], pagination_class=None)
    def journey(self, request, code=None):
        from portal.history import journey

        environment = self.get_object()
        choices = journey.plan_choices(environment=environment)
        plan = _journey_plan(request, choices)
        data = {**journey.environment_journey(environment, plan), "plans": journey.plans_listed(choices)}
        return JsonResponse(data)  # as the page's journey.json


class _ProjectDocumentViewSet(
    PartialUpdateMixin, ListByCodes, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet
):
    list_filter = ProjectFilter

    def _document(self, instance=None) -> tuple[Project, dict]:
        serializer = self.get_serializer(data=self.document())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if instance is not None and data["project"] != instance.project.code:
            raise serializers.ValidationError({"project": ["A project's objects stay in their project."]})
        project = self.get_scoped(Project.objects.select_related("team"), write=True, code=data["project"])
        return project, data

    def patch_base(self, obj) -> dict:
        data = self.get_serializer(obj).data
        return {k: v for k, v in data.items() if k not in ("code", "data_set", "duration_s", "problems")}

    def create(self, request, *args, **kwargs):
        project, data = self._document()
        obj = self.save_document(project, None, data)
        return Response(self.get_serializer(obj).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        project, data = self._document(instance)
        return Response(self.get_serializer(self.save_document(project, instance, data)).data)


@extend_schema_view(
    list=READ["list"]("test cases", TestCaseSerializer),
    retrieve=READ["retrieve"]("test cases", TestCaseSerializer),
    create=extend_schema(
        summary="Create a test case with its ordered steps",
        examples=[TEST_CASE_EXAMPLE],
        responses={201: TestCaseSerializer, **error_responses(400, 403, 404, 413)},
    ),
    update=extend_schema(
        summary="Replace a test case and all its steps (one document)",
        responses={200: TestCaseSerializer, **error_responses(400, 403, 404, 413)},
    ),
    partial_update=extend_schema(
        summary="Change some fields of a test case (steps, if given, replace all its steps); the others stay",
        request=TestCaseSerializer,
        responses={200: TestCaseSerializer, **error_responses(400, 403, 404, 413)},
    ),
    destroy=extend_schema(
        summary="Delete a test case that no plan's mix uses", responses={204: None, **error_responses(403, 404, 409)}
    ),
)
class TestCaseViewSet(_ProjectDocumentViewSet):
    __test__ = False  # not a pytest test class
    serializer_class = TestCaseSerializer
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def safely_get_queryset(self):
        return TestCase.objects.select_related("project").prefetch_related("steps").order_by("name", "id")

    @transaction.atomic
    def save_document(self, project, test_case, data) -> TestCase:
        form = TestCaseForm(
            {"name": data["name"], "description": data["description"]}, instance=test_case, project=project
        )
        if not form.is_valid():
            raise serializers.ValidationError(_form_errors(form))
        test_case = form.save()
        for step in list(test_case.steps.all()):
            services.step_delete(step=step)
        step_errors = []
        # One step at a time, as in the browser: each step may use what the steps before it extract.
        for item in data["steps"]:
            try:
                form_data = self._step_form_data(item)
            except serializers.ValidationError as exc:
                step_errors.append(exc.detail)
                continue
            step_form = StepForm(form_data, test_case=test_case)
            if step_form.is_valid():
                services.step_create(test_case=test_case, step=step_form.save(commit=False))
                step_errors.append({})
            else:
                step_errors.append(_form_errors(step_form, STEP_FIELD_NAMES))
        if any(step_errors):
            raise serializers.ValidationError({"steps": step_errors})  # rolls the whole document back
        return TestCase.objects.select_related("project").prefetch_related("steps").get(pk=test_case.pk)

    @staticmethod
    def _step_form_data(item: dict) -> dict:
        return step_form_data(item)

    def destroy(self, request, *args, **kwargs):
        services.test_case_delete(test_case=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Upload a CSV data set (replaces the old one): UTF-8, the first row names the columns",
        request={"multipart/form-data": DataSetUploadSerializer},
        responses={201: DataSetInfoSerializer, **error_responses(400, 403, 404, 413)},
    )
    @action(
        detail=True,
        methods=["post"],
        url_path="data-set",
        parser_classes=[MultiPartParser, JSONParser],
    )
    def data_set(self, request, code=None):
        test_case = self.get_object()
        DataSetUploadSerializer(data={k: v for k, v in request.data.items()}).is_valid(raise_exception=True)
        form = DataSetUploadForm(request.POST, request.FILES)
        if not form.is_valid():
            raise serializers.ValidationError(_form_errors(form))
        data_set = services.data_set_save(
            test_case=test_case,
            file_name=form.cleaned_data["file"].name,
            columns=form.cleaned_data["columns"],
            rows=form.cleaned_data["rows"],
            mode=form.cleaned_data["mode"],
        )
        return Response(DataSetInfoSerializer(data_set).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change how the data set's rows are taken (sequential, random, unique); the rows stay",
        request=DataSetModeSerializer,
        responses={200: DataSetInfoSerializer, **error_responses(400, 403, 404)},
    )
    @data_set.mapping.patch
    def data_set_mode(self, request, code=None):
        test_case = self.get_object()
        serializer = DataSetModeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data_set = DataSet.objects.filter(test_case=test_case).first()
        if data_set is None:
            raise exceptions.NotFound("This test case has no data set.")
        data_set = services.data_set_mode_set(data_set=data_set, mode=serializer.validated_data["mode"])
        return Response(DataSetInfoSerializer(data_set).data)

    @extend_schema(
        summary="Remove the test case's data set", request=None, responses={204: None, **error_responses(403, 404)}
    )
    @data_set.mapping.delete
    def data_set_delete(self, request, code=None):
        test_case = self.get_object()
        data_set = DataSet.objects.filter(test_case=test_case).first()
        if data_set is None:
            raise exceptions.NotFound("This test case has no data set.")
        services.data_set_delete(data_set=data_set)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Try it: one user runs one iteration of the test case on an environment, every exchange returned",
        description="As the test case page's Try it (portal/projects/tryit.py): through the engine, with the "
        "steps' checks, extractions and data set, no think times, at most 15 s in all and 10 s per request, "
        "answered in this request. The environment must be one of the test case's project's (another "
        "project's is 400, another team's 404). A target outside the load-target allowlist gets nothing sent: "
        "422 `target_not_allowed`. A failed check is not an error of the call: 200 with `completed` false and "
        "the check in `errors`. An account runs at most `PLIMSOLL_TRIES_PER_USER` tries at once (default 2, its "
        "tokens and browser together): one more is 429 `throttled` with `Retry-After`, nothing sent.",
        request=TryRequestSerializer,
        responses={200: TryResultSerializer, **error_responses(400, 403, 404, 422)},
    )
    @action(detail=True, methods=["post"], url_path="try")
    def try_it(self, request, code=None):
        test_case = self.get_object()  # a POST: an editor's or owner's, and a write token (else 403)
        serializer = TryRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        environment = self.get_scoped(Environment.objects.all(), code=serializer.validated_data["environment"])
        if environment.project_id != test_case.project_id:
            raise serializers.ValidationError({"environment": ["Choose one of this project's environments."]})
        if why := tryit.not_ready(test_case):
            raise serializers.ValidationError({"non_field_errors": [why]})
        # One of the account's try slots (PLIMSOLL_TRIES_PER_USER, its tokens together): over it, limits.TooMany,
        # answered 429 with Retry-After (portal/api/errors.py), nothing sent.
        with tryit.held(user_id=request.user.pk):
            result = tryit.test_case_try(test_case=test_case, environment=environment)
        if result.refused:
            raise TargetRefused(result.refused)
        return Response(
            TryResultSerializer(
                {
                    "test_case": test_case.code,
                    "environment": environment.code,
                    "base_url": result.base_url,
                    "completed": result.completed,
                    "errors": result.errors,
                    "elapsed_s": result.elapsed_s,
                    "exchanges": [asdict(exchange) for exchange in result.exchanges],
                }
            ).data
        )


@extend_schema_view(
    list=READ["list"]("plans", PlanSerializer),
    retrieve=READ["retrieve"]("plans", PlanSerializer),
    create=extend_schema(
        summary="Create a plan: environment, load profile, thresholds, degradation settings and mix",
        examples=[PLAN_EXAMPLE],
        responses={201: PlanSerializer, **error_responses(400, 403, 404)},
    ),
    update=extend_schema(
        summary="Replace a plan, its levels and its mix (one document)",
        responses={200: PlanSerializer, **error_responses(400, 403, 404)},
    ),
    partial_update=extend_schema(
        summary="Change some fields of a plan (levels or mix, if given, replace the old ones); the others stay",
        request=PlanSerializer,
        responses={200: PlanSerializer, **error_responses(400, 403, 404)},
    ),
    destroy=extend_schema(
        summary="Delete a plan (its runs stay in the history); refused while an experiment keeps it",
        responses={204: None, **error_responses(403, 404, 409)},
    ),
)
class PlanViewSet(_ProjectDocumentViewSet):
    serializer_class = PlanSerializer
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def safely_get_queryset(self):
        return (
            Plan.objects.select_related("project", "environment")
            .prefetch_related("levels", "mix__test_case")
            .order_by("name", "id")
        )

    def save_document(self, project, plan, data) -> Plan:
        plan = services.plan_save(
            project=project,
            plan=plan,
            name=data["name"],
            environment=str(data["environment"]),
            # Absent fields are None: the kind's fields are then required, as in the form.
            values={name: data.get(name) for name in services.PLAN_VALUES},
            levels=[services.LevelSpec(**level) for level in data["levels"]],
            mix=[(str(item["test_case"]), item["weight"]) for item in data["mix"]],
        )
        return self.safely_get_queryset().get(pk=plan.pk)

    def destroy(self, request, *args, **kwargs):
        services.plan_delete(plan=self.get_object())  # 409 while an experiment keeps it
        return Response(status=status.HTTP_204_NO_CONTENT)


def step_form_data(item: dict) -> dict:
    """A step document (StepSerializer's) as the step form's fields: both go through the same form.

    A WebSocket session's actions (the engine's format) become the form's lines of text, which the
    form reads back to the same actions; actions of the wrong shape are refused here, each by its number.
    """
    data = {
        **{k: _blank(item[k]) for k in ("name", "method", "path", "body_type", "body", "think_time")},
        **{k: _blank(item[k]) for k in ("timeout", "expect_status", "max_duration_ms", "text_present", "text_absent")},
        "headers_text": format_headers(item["headers"]),
        "extract_text": format_extractions(item["extract"]),
        "resources_text": "\n".join(item["resources"]),
        "kind": item.get("kind") or Step.Kind.REQUEST,
    }
    stream, websocket = item.get("stream"), item.get("websocket")
    if data["kind"] == Step.Kind.STREAM and stream is None:
        raise serializers.ValidationError({"stream": ['A stream step needs its stream options, e.g. {"kind": "sse"}.']})
    if data["kind"] == Step.Kind.WEBSOCKET and websocket is None:
        raise serializers.ValidationError({"websocket": ['A WebSocket step needs its actions: {"actions": [...]}.']})
    if data["kind"] != Step.Kind.STREAM and stream is not None:
        raise serializers.ValidationError({"stream": ['Only a step of kind "stream" has stream options.']})
    if data["kind"] != Step.Kind.WEBSOCKET and websocket is not None:
        raise serializers.ValidationError({"websocket": ['Only a step of kind "websocket" has a session.']})
    if stream is not None:
        data["stream_kind"] = stream["kind"]
        data["stream_idle_timeout"] = _blank(stream["idle_timeout"])
        data["stream_last_event_contains"] = stream["last_event_contains"]
    if websocket is not None:
        if problems := wsactions.actions_problems(websocket["actions"]):
            raise serializers.ValidationError({"websocket.actions": problems})
        data["ws_actions_text"] = wsactions.format_actions(websocket["actions"])
        data["ws_hold"] = _blank(websocket["hold"])
    data["recorded_protocol"] = item.get("recorded_protocol", "")
    return data


class StepMoveSerializer(StrictSerializer):
    position = serializers.IntegerField(min_value=0, help_text="Its new place: 0 is first; beyond the end is last")


class StepDocumentSerializer(StepSerializer):
    code = serializers.UUIDField(read_only=True)
    position = serializers.IntegerField(read_only=True, help_text="0 is the first step")

    def to_representation(self, step):
        return {"code": str(step.code), "position": step.position, **step_document(step)}


STEP = OpenApiParameter("step", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The step's code")
TEST_CASE = OpenApiParameter("code", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The test case's code")


@extend_schema_view(
    list=extend_schema(
        summary="A test case's steps, in order",
        parameters=[TEST_CASE],
        responses={200: StepDocumentSerializer(many=True), **error_responses(404)},
    ),
    create=extend_schema(
        summary="Add a step at the end of a test case",
        parameters=[TEST_CASE],
        request=StepSerializer,
        responses={201: StepDocumentSerializer, **error_responses(400, 403, 404)},
    ),
    retrieve=extend_schema(
        summary="One step",
        parameters=[TEST_CASE, STEP],
        responses={200: StepDocumentSerializer, **error_responses(404)},
    ),
    update=extend_schema(
        summary="Replace one step (its place stays)",
        parameters=[TEST_CASE, STEP],
        request=StepSerializer,
        responses={200: StepDocumentSerializer, **error_responses(400, 403, 404)},
    ),
    partial_update=extend_schema(
        summary="Change some fields of one step; the others stay",
        parameters=[TEST_CASE, STEP],
        request=StepSerializer,
        responses={200: StepDocumentSerializer, **error_responses(400, 403, 404)},
    ),
    destroy=extend_schema(
        summary="Delete one step (the later ones move up)",
        parameters=[TEST_CASE, STEP],
        responses={204: None, **error_responses(403, 404)},
    ),
)
class StepViewSet(PartialUpdateMixin, TeamScopedViewSet):
    """The steps of one test case as rows of their own: the same step form and services as the page's."""

    serializer_class = StepDocumentSerializer
    pagination_class = None  # a test case's steps are one short, ordered list
    lookup_field = "step"

    def safely_get_queryset(self):
        return Step.objects.select_related("test_case__project").order_by("position", "id")

    def _test_case(self, *, write: bool = False) -> TestCase:
        return self.get_scoped(TestCase.objects.select_related("project__team"), write=write, code=self.kwargs["code"])

    def get_object(self):
        step = self.get_scoped(self.get_queryset(), code=self.kwargs["step"], test_case__code=self.kwargs["code"])
        self.check_object_permissions(self.request, step)
        return step

    def patch_base(self, step) -> dict:
        return step_document(step)

    def list(self, request, code=None):
        test_case = self._test_case()
        return Response(StepDocumentSerializer(test_case.steps.order_by("position", "id"), many=True).data)

    def _validated(self) -> dict:
        serializer = StepSerializer(data=self.document())
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def _form_or_400(self, form) -> None:
        if not form.is_valid():
            raise serializers.ValidationError(_form_errors(form, STEP_FIELD_NAMES))

    @transaction.atomic
    def create(self, request, code=None):
        test_case = self._test_case(write=True)
        form = StepForm(step_form_data(self._validated()), test_case=test_case)
        self._form_or_400(form)
        step = services.step_create(test_case=test_case, step=form.save(commit=False))
        return Response(StepDocumentSerializer(step).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request, code=None, step=None):
        return Response(StepDocumentSerializer(self.get_object()).data)

    @transaction.atomic
    def update(self, request, code=None, step=None):
        instance = self.get_object()
        form = StepForm(step_form_data(self._validated()), instance=instance, test_case=instance.test_case)
        self._form_or_400(form)
        return Response(StepDocumentSerializer(form.save()).data)

    def destroy(self, request, code=None, step=None):
        services.step_delete(step=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Move one step to another place; the test case lists any {{name}} now used before it is extracted",
        parameters=[TEST_CASE, STEP],
        request=StepMoveSerializer,
        responses={200: StepDocumentSerializer(many=True), **error_responses(400, 403, 404)},
    )
    def move(self, request, code=None, step=None):
        instance = self.get_object()
        serializer = StepMoveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rows = services.step_move_to(step=instance, position=serializer.validated_data["position"])
        return Response(StepDocumentSerializer(rows, many=True).data)
