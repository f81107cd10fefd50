"""The results history through the API: tuning changes (the ledger) and external measurements.

Input is checked by the UI's own forms (ChangeForm, MeasurementForm), so both refuse the same
things with the same words; the writes are the same services.
"""

from django.db import transaction
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.accounts.models import ApiToken
from portal.api.base import QueryParams, StrictSerializer, TeamScopedViewSet, request_token
from portal.api.errors import error_responses
from portal.history import choices, comparison, services
from portal.history.api.prometheus import ChangePrometheusSerializer
from portal.history.api.prometheus import payload as prometheus_payload
from portal.history.experiment_forms import ExperimentForm, TrialSetForm
from portal.history.forms import ChangeForm, MeasurementForm, revert_prefill
from portal.history.models import Experiment, ExternalMeasurement, TrialSet, TuningChange
from portal.projects.api.serializers import ConfigurationItemSerializer, VerificationSerializer
from portal.projects.forms import format_configuration
from portal.projects.models import Environment, Plan
from portal.runs.services import RunError


class ChangeApplyFailed(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "change_not_applied"


def _blank(value) -> str:
    return "" if value is None else str(value)


def _form_errors(form) -> dict:
    return {field: list(messages) for field, messages in form.errors.items()}


class EnvironmentFilter(QueryParams):
    environment = serializers.UUIDField(required=False, help_text="Only this environment's")


class TuningChangeSerializer(StrictSerializer):
    code = serializers.UUIDField(read_only=True)
    environment = serializers.UUIDField()
    number = serializers.IntegerField(read_only=True, allow_null=True, help_text="Its place in the ledger")
    status = serializers.ChoiceField(choices=TuningChange.Status.choices, read_only=True)
    category = serializers.ChoiceField(choices=TuningChange.Category.choices, default=TuningChange.Category.OTHER)
    title = serializers.CharField(max_length=200)
    reason = serializers.CharField(required=False, allow_blank=True, default="")
    reference = serializers.CharField(required=False, allow_blank=True, default="", help_text="A URL")
    hook_method = serializers.ChoiceField(choices=TuningChange.HookMethod.choices, default="POST")
    hook_url = serializers.CharField(required=False, allow_blank=True, default="")
    hook_body = serializers.CharField(required=False, allow_blank=True, default="")
    hook_content_type = serializers.CharField(required=False, allow_blank=True, default="application/json")
    configuration = ConfigurationItemSerializer(
        many=True, write_only=True, help_text="The whole configuration as it will be after the change"
    )
    apply = serializers.BooleanField(default=True, write_only=True, help_text="Apply it now (as the page does)")
    config_before = ConfigurationItemSerializer(many=True, read_only=True)
    config_after = ConfigurationItemSerializer(many=True, read_only=True)
    applied_at = serializers.DateTimeField(read_only=True, allow_null=True)
    made_by = serializers.CharField(read_only=True, allow_null=True)
    error_message = serializers.CharField(read_only=True)
    verification = VerificationSerializer(
        read_only=True,
        allow_null=True,
        help_text="The target's own configuration read right after the change was applied, against the ledger "
        "(where the environment has a config_url); null when it was not read",
    )

    def to_representation(self, change):
        return {
            "code": str(change.code),
            "environment": str(change.environment.code),
            "number": change.number,
            "status": change.status,
            **{name: getattr(change, name) for name in ChangeForm.Meta.fields},
            "config_before": change.config_before,
            "config_after": change.config_after,
            "applied_at": change.applied_at.isoformat().replace("+00:00", "Z") if change.applied_at else None,
            "made_by": change.made_by.get_username() if change.made_by else None,
            "error_message": change.error_message,
            "verification": change.verification,
        }


class MeasurementSerializer(StrictSerializer):
    code = serializers.UUIDField(read_only=True)
    environment = serializers.UUIDField()
    name = serializers.CharField(max_length=100)
    unit = serializers.CharField(max_length=20)
    value = serializers.FloatField()
    measured_at = serializers.DateTimeField()
    lower_is_better = serializers.BooleanField(default=True)
    tuning_change = serializers.UUIDField(required=False, allow_null=True, default=None)
    run = serializers.UUIDField(required=False, allow_null=True, default=None)
    note = serializers.CharField(required=False, allow_blank=True, default="")

    def to_representation(self, m):
        return {
            "code": str(m.code),
            "environment": str(m.environment.code),
            "name": m.name,
            "unit": m.unit,
            "value": m.value,
            "measured_at": m.measured_at.isoformat().replace("+00:00", "Z"),
            "lower_is_better": m.lower_is_better,
            "tuning_change": str(m.tuning_change.code) if m.tuning_change else None,
            "run": str(m.run.code) if m.run else None,
            "note": m.note,
        }


class _EnvironmentDocumentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    def list(self, request, *args, **kwargs):
        filters = EnvironmentFilter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        rows = self.get_queryset()
        if "environment" in filters.validated_data:
            rows = rows.filter(environment__code=filters.validated_data["environment"])
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def _environment(self, data) -> Environment:
        return self.get_scoped(
            Environment.objects.select_related("project__team"), write=True, code=data["environment"]
        )


@extend_schema_view(
    list=extend_schema(
        summary="Tuning changes of your teams' environments (an environment's ledger with ?environment=)",
        parameters=[EnvironmentFilter],
        responses={200: TuningChangeSerializer(many=True), **error_responses(400)},
    ),
    retrieve=extend_schema(
        summary="One tuning change: its edits, and the configuration before and after",
        responses={200: TuningChangeSerializer, **error_responses(404)},
    ),
    create=extend_schema(
        summary="Record a tuning change and (by default) apply it: its hook first, then the configuration",
        responses={201: TuningChangeSerializer, **error_responses(400, 403, 404, 409)},
    ),
)
class TuningChangeViewSet(mixins.CreateModelMixin, _EnvironmentDocumentViewSet):
    serializer_class = TuningChangeSerializer

    def safely_get_queryset(self):
        return TuningChange.objects.select_related("environment", "made_by").order_by("environment_id", "number", "id")

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        environment = self._environment(data)
        form_data = {name: _blank(data[name]) for name in ChangeForm.Meta.fields}
        configuration = [dict(item) for item in data["configuration"]]
        change = self._record(environment, form_data, configuration, apply=data["apply"])
        return Response(self.get_serializer(change).data, status=status.HTTP_201_CREATED)

    def _record(self, environment, form_data: dict, configuration: list[dict], *, apply: bool) -> TuningChange:
        """Checks a change with the page's form, records it and (if asked) applies it, as the page does."""
        form = ChangeForm({**form_data, "configuration": format_configuration(configuration)}, environment=environment)
        if not form.is_valid():
            raise serializers.ValidationError(_form_errors(form))
        try:
            change = services.change_create(
                environment=environment, user=self.request.user, edits=form.edits, **form.change_fields
            )
        except services.ChangeError as exc:
            raise serializers.ValidationError({"configuration": [str(exc)]}) from None
        return self._apply(change, delete_if_busy=True) if apply else change

    @extend_schema(
        summary="Revert an applied change: a new change that puts back the keys it touched, applied now",
        request=None,
        responses={201: TuningChangeSerializer, **error_responses(400, 403, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def revert(self, request, code=None):
        change = self.get_object()
        if not change.is_applied:
            raise serializers.ValidationError({"non_field_errors": ["Only an applied change can be reverted."]})
        prefill = revert_prefill(change)
        form_data = {
            name: _blank(prefill["initial"].get(name, getattr(change, name))) for name in ChangeForm.Meta.fields
        }
        form_data["reference"] = change.reference
        new = self._record(change.environment, form_data, prefill["initial_configuration"], apply=True)
        return Response(self.get_serializer(new).data, status=status.HTTP_201_CREATED)

    def _apply(self, change: TuningChange, *, delete_if_busy: bool = False) -> TuningChange:
        try:
            return services.change_apply(change, user=self.request.user)
        except services.EnvironmentBusyForChange as exc:
            if delete_if_busy:
                change.delete()  # as on the page: nothing was sent and nothing changed, so no record
            raise ChangeApplyFailed(str(exc)) from None
        except services.ChangeError as exc:
            raise ChangeApplyFailed(str(exc)) from None

    @extend_schema(
        summary="Apply a planned (or failed) change",
        request=None,
        responses={200: TuningChangeSerializer, **error_responses(403, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def apply(self, request, code=None):
        return Response(self.get_serializer(self._apply(self.get_object())).data)

    @extend_schema(
        summary="The change's server figures before → after, from the environment's Prometheus (as its page shows)",
        responses={200: ChangePrometheusSerializer, **error_responses(404)},
    )
    @action(detail=True, methods=["get"])
    def prometheus(self, request, code=None):
        change = self.get_object()
        return Response(ChangePrometheusSerializer(prometheus_payload(change)).data)


@extend_schema_view(
    list=extend_schema(
        summary="External measurements (backup times, sizes) of your teams' environments",
        parameters=[EnvironmentFilter],
        responses={200: MeasurementSerializer(many=True), **error_responses(400)},
    ),
    retrieve=extend_schema(
        summary="One external measurement", responses={200: MeasurementSerializer, **error_responses(404)}
    ),
    destroy=extend_schema(
        summary="Delete an external measurement (one recorded by mistake)",
        responses={204: None, **error_responses(403, 404)},
    ),
    create=extend_schema(
        summary="Record an external measurement (a backup script posts its timing here)",
        responses={201: MeasurementSerializer, **error_responses(400, 403, 404)},
    ),
)
class MeasurementViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, _EnvironmentDocumentViewSet):
    serializer_class = MeasurementSerializer

    def safely_get_queryset(self):
        return ExternalMeasurement.objects.select_related("environment", "tuning_change", "run")

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        environment = self._environment(data)
        form_data = {name: _blank(data[name]) for name in MeasurementForm.Meta.fields}
        form_data["measured_at"] = data["measured_at"].isoformat()
        form_data["lower_is_better"] = "on" if data["lower_is_better"] else ""
        form = MeasurementForm(form_data, environment=environment)
        if not form.is_valid():
            raise serializers.ValidationError(_form_errors(form))
        measurement = services.measurement_record(environment=environment, user=request.user, **form.measurement_fields)
        return Response(self.get_serializer(measurement).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, *args, **kwargs):
        services.measurement_delete(measurement=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunIncludeSerializer(StrictSerializer):
    include = serializers.BooleanField(
        help_text="true: count the doubtful run in trends, baselines and verdicts anyway; false: leave it out again"
    )


class RunInclusionSerializer(serializers.Serializer):
    run = serializers.UUIDField()
    include_anyway = serializers.BooleanField()
    counts = serializers.BooleanField(help_text="Whether the run counts in trends, baselines and verdicts now")
    doubts = serializers.ListField(child=serializers.CharField(), help_text="Why the run is in doubt (kept either way)")


class RunIncludeViewSet(TeamScopedViewSet):
    """Include anyway: the run page's switch for a run left out of trial sets, comparisons and journeys."""

    serializer_class = RunInclusionSerializer

    def safely_get_queryset(self):
        from portal.runs.models import Run

        return Run.objects.select_related("project")

    @extend_schema(
        summary="Count a doubtful run anyway (a saturated generator, a lost shard, …), or leave it out again",
        request=RunIncludeSerializer,
        responses={200: RunInclusionSerializer, **error_responses(400, 403, 404)},
    )
    def create(self, request, code=None):
        run = self.get_object()
        serializer = RunIncludeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            run = services.run_include(run=run, include=serializer.validated_data["include"])
        except services.RunNotFinished as exc:
            raise serializers.ValidationError({"include": [str(exc)]}) from None
        return Response(
            {"run": str(run.code), "include_anyway": run.include_anyway, "counts": run.counts, "doubts": run.doubts}
        )


class TrialSetStartSerializer(StrictSerializer):
    size = serializers.IntegerField(default=3, help_text="Runs of the plan one after the other")
    label = serializers.CharField(required=False, allow_blank=True, default="")


class TrialSetSerializer(serializers.ModelSerializer):
    project = serializers.UUIDField(source="project.code", read_only=True)
    plan = serializers.UUIDField(source="plan.code", read_only=True, allow_null=True, default=None)
    runs = serializers.SerializerMethodField(help_text="Codes of its runs so far, in order")

    class Meta:
        model = TrialSet
        fields = ("code", "project", "plan", "plan_name", "label", "size", "status", "error_message", "created_at")
        fields = (*fields, "finished_at", "runs")
        read_only_fields = fields

    def get_runs(self, trial_set) -> list[str]:
        return [str(run.code) for run in sorted(trial_set.runs.all(), key=lambda run: run.number)]


class FiguresSerializer(serializers.Serializer):
    apd_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)
    pages_per_s = serializers.FloatField(allow_null=True)
    error_rate_pct = serializers.FloatField(allow_null=True)


class PageFiguresSerializer(FiguresSerializer):
    label = serializers.CharField()


class SetFiguresSerializer(serializers.Serializer):
    counted = serializers.ListField(child=serializers.UUIDField(), help_text="The runs that count, pooled")
    totals = FiguresSerializer(help_text="The counting runs pooled as one window: the set's own figures")
    sd_between_runs = FiguresSerializer(help_text="Sample standard deviation of the runs' own figures")
    pages = PageFiguresSerializer(many=True)


class TrialSetDetailSerializer(TrialSetSerializer):
    figures = serializers.SerializerMethodField(
        help_text="The set's figures: its counting trials pooled (as its page and comparisons show them)"
    )

    class Meta(TrialSetSerializer.Meta):
        fields = (*TrialSetSerializer.Meta.fields, "figures")
        read_only_fields = fields

    @extend_schema_field(SetFiguresSerializer)
    def get_figures(self, trial_set) -> dict:
        return comparison.set_figures(list(trial_set.runs.all()))


class PlanFilter(QueryParams):
    plan = serializers.UUIDField(required=False, help_text="Only this plan's")


@extend_schema_view(
    list=extend_schema(
        summary="Trial sets of your teams, newest first",
        parameters=[PlanFilter],
        responses={200: TrialSetSerializer(many=True), **error_responses(400)},
    ),
    retrieve=extend_schema(
        summary="One trial set, with its runs and its figures (its counting trials pooled)",
        responses={200: TrialSetDetailSerializer, **error_responses(404)},
    ),
)
class TrialSetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = TrialSetSerializer
    required_scopes = {"stop": ApiToken.Scope.RUN}

    def get_serializer_class(self):
        return TrialSetDetailSerializer if self.action == "retrieve" else TrialSetSerializer

    def safely_get_queryset(self):
        return (
            TrialSet.objects.select_related("project", "plan").prefetch_related("runs").order_by("-created_at", "-id")
        )

    def list(self, request, *args, **kwargs):
        filters = PlanFilter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        rows = self.get_queryset()
        if "plan" in filters.validated_data:
            rows = rows.filter(plan__code=filters.validated_data["plan"])
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(
        summary="Stop a trial set: its running trial is stopped and no more start (run or write token)",
        request=None,
        responses={200: TrialSetSerializer, **error_responses(403, 404)},
    )
    @action(detail=True, methods=["post"])
    def stop(self, request, code=None):
        trial_set = self.get_object()
        services.trialset_stop(trial_set)
        trial_set.refresh_from_db()
        return Response(self.get_serializer(trial_set).data)


class PlanTrialsViewSet(TeamScopedViewSet):
    """``POST /plans/{code}/trials/``: run a plan N times in a row."""

    serializer_class = TrialSetSerializer
    required_scopes = {"create": ApiToken.Scope.RUN}

    def safely_get_queryset(self):
        return Plan.objects.select_related("project", "environment")

    @extend_schema(
        summary="Start N trials of a plan, one after the other (run or write token)",
        request=TrialSetStartSerializer,
        responses={201: TrialSetSerializer, **error_responses(400, 403, 404)},
    )
    def create(self, request, code=None):
        plan = self.get_scoped(self.safely_get_queryset(), write=True, code=code)
        serializer = TrialSetStartSerializer(data=request.data if request.data else {})
        serializer.is_valid(raise_exception=True)
        form = TrialSetForm({k: _blank(v) for k, v in serializer.validated_data.items()})
        if not form.is_valid():
            raise serializers.ValidationError(_form_errors(form))
        trial_set = services.trialset_start(
            plan=plan, user=request.user, token=request_token(request), **form.cleaned_data
        )
        return Response(self.get_serializer(trial_set).data, status=status.HTTP_201_CREATED)


class ChangeDocumentSerializer(TuningChangeSerializer):
    """The experiment's tuning change, as ``/tuning-changes/`` takes and shows it (never applied here: the
    experiment applies it in its turn; its environment is the plan's)."""

    environment = serializers.UUIDField(read_only=True)
    apply = None


class ExperimentSerializer(StrictSerializer):
    code = serializers.UUIDField(read_only=True)
    plan = serializers.UUIDField(help_text="The plan it measures (on the change's environment)")
    title = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    trials = serializers.IntegerField(default=3, help_text="Trials before the change, and as many after")
    apply_mode = serializers.ChoiceField(choices=Experiment.ApplyMode.choices, default=Experiment.ApplyMode.HOOK)
    change = ChangeDocumentSerializer()
    status = serializers.ChoiceField(choices=Experiment.Status.choices, read_only=True)
    error_message = serializers.CharField(read_only=True)
    baseline = serializers.UUIDField(read_only=True, allow_null=True, help_text="The baseline trial set")
    after = serializers.UUIDField(read_only=True, allow_null=True, help_text="The trial set after the change")
    comparison = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="Baseline against after, once both sides have a run that counts (null in lists)",
    )

    def to_representation(self, e):
        # The comparison reads every run's figures: in lists it is left out (null), read the experiment.
        view = self.context.get("view")
        report = None if getattr(view, "action", None) == "list" else choices.experiment_report(e)
        return {
            "code": str(e.code),
            "plan": str(e.plan.code),
            "title": e.title,
            "description": e.description,
            "trials": e.trials,
            "apply_mode": e.apply_mode,
            "change": TuningChangeSerializer(e.change).data,
            "status": e.status,
            "error_message": e.error_message,
            "baseline": str(e.baseline.code) if e.baseline else None,
            "after": str(e.after.code) if e.after else None,
            "comparison": comparison.report_dict(report) if report else None,
        }


@extend_schema_view(
    list=extend_schema(
        summary="Experiments of your teams, newest first",
        parameters=[PlanFilter],
        responses={200: ExperimentSerializer(many=True), **error_responses(400)},
    ),
    retrieve=extend_schema(
        summary="An experiment's progress, trial sets and (once it can) its comparison",
        responses={200: ExperimentSerializer, **error_responses(404)},
    ),
    create=extend_schema(
        summary="Plan an experiment: N trials, a tuning change, N trials after (press start when ready)",
        responses={201: ExperimentSerializer, **error_responses(400, 403, 404)},
    ),
)
class ExperimentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TeamScopedViewSet):
    serializer_class = ExperimentSerializer
    required_scopes = {"start": ApiToken.Scope.RUN, "stop": ApiToken.Scope.RUN}

    def safely_get_queryset(self):
        return (
            Experiment.objects.select_related("plan", "change__environment", "change__made_by")
            .prefetch_related("trial_sets__runs")
            .order_by("-created_at", "-id")
        )

    def list(self, request, *args, **kwargs):
        filters = PlanFilter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        rows = self.get_queryset()
        if "plan" in filters.validated_data:
            rows = rows.filter(plan__code=filters.validated_data["plan"])
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        plan = self.get_scoped(
            Plan.objects.select_related("project__team", "environment"), write=True, code=data["plan"]
        )
        form = ExperimentForm({k: _blank(data[k]) for k in ExperimentForm.Meta.fields})
        change_data = {name: _blank(data["change"][name]) for name in ChangeForm.Meta.fields}
        change_data["configuration"] = format_configuration([dict(i) for i in data["change"]["configuration"]])
        change_form = ChangeForm(change_data, environment=plan.environment)
        if form.is_valid() and change_form.is_valid():
            form.check_with_change(change_form)
        if form.errors or change_form.errors:
            errors = _form_errors(form)
            if change_form.errors:
                errors["change"] = _form_errors(change_form)
            raise serializers.ValidationError(errors)
        try:
            with transaction.atomic():
                change = services.change_create(
                    environment=plan.environment,
                    user=request.user,
                    edits=change_form.edits,
                    **change_form.change_fields,
                )
                experiment = services.experiment_create(
                    plan=plan, user=request.user, change=change, **form.cleaned_data
                )
        except services.ChangeError as exc:
            raise serializers.ValidationError({"non_field_errors": [str(exc)]}) from None
        return Response(self.get_serializer(experiment).data, status=status.HTTP_201_CREATED)

    def _step(self, do) -> Response:
        experiment = self.get_object()
        try:
            do(experiment)
        except (services.ChangeError, RunError) as exc:
            raise ChangeApplyFailed(str(exc)) from None
        return Response(self.get_serializer(self.get_queryset().get(pk=experiment.pk)).data)

    @extend_schema(
        summary="Start the baseline trials (run or write token)",
        request=None,
        responses={200: ExperimentSerializer, **error_responses(403, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def start(self, request, code=None):
        return self._step(lambda e: services.experiment_start(e, user=request.user))

    @extend_schema(
        summary="Confirm that the change was made by hand; the trials after it start",
        request=None,
        responses={200: ExperimentSerializer, **error_responses(403, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def confirm(self, request, code=None):
        return self._step(lambda e: services.experiment_confirm(e, user=request.user))

    @extend_schema(
        summary="Stop the experiment and its running trials (run or write token)",
        request=None,
        responses={200: ExperimentSerializer, **error_responses(403, 404)},
    )
    @action(detail=True, methods=["post"])
    def stop(self, request, code=None):
        return self._step(services.experiment_stop)
