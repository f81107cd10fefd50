"""Schedules, a plan's baseline and its change points through the API (issue 24): configuration as code.

The same rules as the schedule pages: a body passes the page's ``ScheduleForm`` (time zone,
the simple forms and cron, the busy-wait and catch-up limits) and is saved by
``services.schedule_save``; its messages are the form's, as a 400.
"""

from dataclasses import asdict

from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.api.base import ListByCodes, PartialUpdateMixin, QueryParams, StrictSerializer, TeamScopedViewSet
from portal.api.errors import error_responses, write_schemas
from portal.common import Invalid
from portal.history.models import TrialSet
from portal.projects.models import Plan
from portal.runs.models import Run

from . import baselines, change_points, selectors, services, timing
from .forms import ScheduleForm
from .models import Baseline, Schedule, ScheduleFire


class BaselineSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=Baseline.Kind.choices, default=Baseline.Kind.LAST_N)
    last_n = serializers.IntegerField(
        min_value=1, max_value=20, default=baselines.DEFAULT_LAST_N, help_text="For kind last_n"
    )
    run = serializers.UUIDField(required=False, allow_null=True, help_text="For kind run: a run of this plan")
    trial_set = serializers.UUIDField(
        required=False, allow_null=True, help_text="For kind trial_set: a trial set of this plan"
    )
    tolerance_pct = serializers.FloatField(min_value=0, max_value=1000, default=baselines.DEFAULT_TOLERANCE_PCT)
    pinned = serializers.BooleanField(read_only=True, help_text="False: the default (the last 3 valid runs, 10 %)")
    regressed_since = serializers.DictField(
        read_only=True,
        allow_null=True,
        help_text="{run, number, runs}: the plan's runs have been regressed since this run, not accepted",
    )


def _answer(plan: Plan) -> dict:
    baseline = baselines.baseline_of(plan)
    streak = selectors.regression_streak(plan_id=plan.id)
    return {
        "kind": baseline.kind,
        "last_n": baseline.last_n,
        "run": str(baseline.run.code) if baseline.run_id else None,
        "trial_set": str(baseline.trial_set.code) if baseline.trial_set_id else None,
        "tolerance_pct": baseline.tolerance_pct,
        "pinned": baseline.pk is not None,
        "regressed_since": {
            "run": str(streak["since"].code),
            "number": streak["since"].number,
            "runs": streak["runs"],
        }
        if streak
        else None,
    }


class PlanBaselineViewSet(TeamScopedViewSet):
    """``/plans/{code}/baseline/``: the same service and rules as the schedule page's form."""

    serializer_class = BaselineSerializer

    def safely_get_queryset(self):
        return Plan.objects.select_related("project")

    @extend_schema(
        summary="What the plan's runs are judged against", responses={200: BaselineSerializer, **error_responses(404)}
    )
    def retrieve(self, request, code=None):
        plan = self.get_scoped(self.safely_get_queryset(), code=code)
        return Response(_answer(plan))

    @extend_schema(
        summary="Pin the plan's baseline: the last N valid runs, a run or a trial set of the plan, and the tolerance",
        request=BaselineSerializer,
        responses={200: BaselineSerializer, **error_responses(400, 403, 404)},
    )
    def update(self, request, code=None):
        plan = self.get_scoped(self.safely_get_queryset(), write=True, code=code)
        body = BaselineSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        # Looked up in the plan's project: a run of another plan gets the service's answer, another team's nothing.
        run = Run.objects.filter(project=plan.project, code=data["run"]).first() if data.get("run") else None
        trial_set = (
            TrialSet.objects.filter(project=plan.project, code=data["trial_set"]).first()
            if data.get("trial_set")
            else None
        )
        try:
            baselines.baseline_save(
                plan=plan,
                kind=data["kind"],
                last_n=data["last_n"],
                run=run,
                trial_set=trial_set,
                tolerance_pct=data["tolerance_pct"],
            )
        except baselines.BaselineError as exc:
            field = {Baseline.Kind.RUN: "run", Baseline.Kind.TRIAL_SET: "trial_set"}.get(data["kind"], "kind")
            raise Invalid({field: [str(exc)]}) from None
        return Response(_answer(plan))


class ChangeRefSerializer(serializers.Serializer):
    number = serializers.IntegerField(allow_null=True, help_text="Its place in the environment's ledger")
    code = serializers.UUIDField()
    title = serializers.CharField()


class ChangePointSerializer(serializers.Serializer):
    figure = serializers.CharField(
        help_text="APD, p95, pages/s or error rate; of a soak: Degradation onset, APD or Pages/s drift per hour"
    )
    key = serializers.CharField(
        help_text="The summary's key: apd_ms, p95_ms, pages_per_s, error_rate_pct; of a soak's degradation: "
        "time_to_degradation_s, drift_ms_per_hour, pages_per_s_drift_per_hour"
    )
    unit = serializers.CharField()
    page = serializers.CharField(allow_null=True, help_text="The page, or null for the run's totals")
    before = serializers.FloatField(help_text="The level before: the mean of the runs since the previous shift")
    after = serializers.FloatField(help_text="The level after: the mean of the runs up to the next shift")
    change_pct = serializers.FloatField(allow_null=True, help_text="Relative to the level before; null from 0")
    p_value = serializers.FloatField(help_text="Welch's test between the two levels")
    run_number = serializers.IntegerField(help_text="The first run at the new level")
    run_code = serializers.UUIDField()
    previous_run_number = serializers.IntegerField(help_text="The last run at the old level")
    labels = serializers.DictField(child=serializers.CharField(), help_text="The run's labels that changed")
    changes = ChangeRefSerializer(many=True, help_text="Tuning changes applied between the two runs")
    plan_edits = serializers.ListField(child=serializers.CharField(), help_text="Keys of the plan that differ")
    config_edits = serializers.ListField(
        child=serializers.CharField(), help_text="Configuration keys that differ with no change in the ledger"
    )
    text = serializers.CharField(help_text="“APD +38 % since run #41 (build 3f2a1c; after the change …)”")


class ChangePointQuerySerializer(StrictSerializer):
    last = serializers.IntegerField(
        min_value=10, max_value=change_points.LAST_RUNS, default=change_points.LAST_RUNS, help_text="Runs read"
    )


class PlanChangePointsViewSet(TeamScopedViewSet):
    """``GET /plans/{code}/change-points/``: persistent shifts across the plan's history, newest first."""

    serializer_class = ChangePointSerializer
    pagination_class = None  # bounded by ``last``: a few shifts at most per figure and page

    def safely_get_queryset(self):
        return Plan.objects.select_related("project")

    @extend_schema(
        summary="Persistent shifts in the plan's figures (totals and pages) over its last runs, attributed",
        parameters=[ChangePointQuerySerializer],
        responses={200: ChangePointSerializer(many=True), **error_responses(400, 404)},
    )
    def list(self, request, code=None):
        plan = self.get_scoped(self.safely_get_queryset(), code=code)
        query = ChangePointQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        found = change_points.plan_change_points(plan=plan, last=query.validated_data["last"])
        return Response(ChangePointSerializer([{**asdict(c), "text": c.text} for c in found], many=True).data)


class FireSerializer(serializers.ModelSerializer):
    run = serializers.UUIDField(source="run.code", read_only=True, allow_null=True, default=None)
    run_number = serializers.IntegerField(source="run.number", read_only=True, allow_null=True, default=None)

    class Meta:
        model = ScheduleFire
        fields = ("due_at", "outcome", "reason", "run", "run_number", "recorded_at", "decided_at")
        read_only_fields = fields


class ScheduleSerializer(serializers.ModelSerializer):
    project = serializers.UUIDField(source="project.code", read_only=True)
    plan = serializers.UUIDField(
        source="plan.code", read_only=True, allow_null=True, default=None, help_text="null: the plan was deleted"
    )
    description = serializers.CharField(read_only=True, help_text="The schedule in words, with its time zone")
    next_fires = serializers.SerializerMethodField(help_text="The next five fire times (none while paused)")
    recent_fires = FireSerializer(many=True, read_only=True, help_text="The last five fires, newest first")

    class Meta:
        model = Schedule
        fields = (
            "code",
            "project",
            "plan",
            "plan_name",
            "kind",
            "at_time",
            "every_hours",
            "cron",
            "time_zone",
            "description",
            "enabled",
            "disabled_reason",
            "ends_on",
            "busy_wait_minutes",
            "catch_up_hours",
            "next_fires",
            "recent_fires",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.DateTimeField()))
    def get_next_fires(self, schedule) -> list[str]:
        if not schedule.enabled:
            return []
        try:
            fires = timing.next_fires(schedule.cron, schedule.time_zone, timezone.now())
        except timing.ScheduleSpecError:
            return []
        return [serializers.DateTimeField().to_representation(fire) for fire in fires]


class ScheduleWriteSerializer(StrictSerializer):
    """The schedule form's fields; the plan by its code (the schedule belongs to the plan's project)."""

    plan = serializers.UUIDField(help_text="The plan this schedule runs")
    kind = serializers.ChoiceField(choices=Schedule.Kind.choices)
    at_time = serializers.TimeField(
        required=False, allow_null=True, help_text="HH:MM; for kind hours, the minute past the hour"
    )
    every_hours = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=23)
    cron = serializers.CharField(
        required=False, allow_blank=True, max_length=100, default="", help_text="For kind cron, e.g. 0 2 * * 1-5"
    )
    time_zone = serializers.CharField(max_length=64, default="UTC", help_text="e.g. Europe/Berlin")
    enabled = serializers.BooleanField(default=True)
    ends_on = serializers.DateField(required=False, allow_null=True, help_text="No fire after this day")
    busy_wait_minutes = serializers.IntegerField(
        min_value=0,
        max_value=24 * 60,
        default=30,
        help_text="When another run is on the environment, wait this long for it, then skip the fire",
    )
    catch_up_hours = serializers.FloatField(
        min_value=0,
        max_value=48,
        default=2.0,
        help_text="A fire missed while the scheduler was down still runs once if less late than this",
    )


class ScheduleFilter(QueryParams):
    project = serializers.UUIDField(required=False, help_text="Schedules of one project")
    plan = serializers.UUIDField(required=False, help_text="Schedules of one plan")


def _blank(value) -> str:
    return "" if value is None else str(value)


@extend_schema_view(
    list=extend_schema(
        summary="Schedules of your teams' projects, with their last fires; filter by project or plan",
        parameters=[ScheduleFilter],
        responses={200: ScheduleSerializer(many=True), **error_responses(400)},
    ),
    retrieve=extend_schema(summary="One schedule", responses={200: ScheduleSerializer, **error_responses(404)}),
    **write_schemas(
        request=ScheduleWriteSerializer,
        partial_request=ScheduleWriteSerializer(partial=True),
        answer=ScheduleSerializer,
        create="Schedule a plan: daily or weekdays at a time, every N hours, or a cron expression, in a time zone",
        update="Change a schedule (every field; a new timing or re-enabling counts fires from now)",
        partial_update="Change some fields of a schedule (e.g. enabled: false to pause it)",
        destroy="Delete a schedule and its fires (the runs stay)",
    ),
)
class ScheduleViewSet(
    PartialUpdateMixin, ListByCodes, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet
):
    serializer_class = ScheduleSerializer
    list_filter = ScheduleFilter

    def safely_get_queryset(self):
        # The page's selector: every schedule with its last fires, in a fixed number of queries.
        return selectors.schedules_with_fires(Schedule.objects.select_related("project__team", "plan"))

    def create(self, request, *args, **kwargs):
        schedule = self._save(None)
        return Response(self._answer(schedule), status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        schedule = self.get_scoped(self.safely_get_queryset(), write=True, code=kwargs["code"])
        return Response(self._answer(self._save(schedule)))

    def destroy(self, request, *args, **kwargs):
        schedule = self.get_scoped(self.safely_get_queryset(), write=True, code=kwargs["code"])
        schedule.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

    def patch_base(self, schedule) -> dict:
        return {
            "plan": str(schedule.plan.code) if schedule.plan_id else None,
            "kind": schedule.kind,
            "at_time": schedule.at_time.strftime("%H:%M") if schedule.at_time else None,
            "every_hours": schedule.every_hours,
            "cron": schedule.cron if schedule.kind == Schedule.Kind.CRON else "",
            "time_zone": schedule.time_zone,
            "enabled": schedule.enabled,
            "ends_on": schedule.ends_on.isoformat() if schedule.ends_on else None,
            "busy_wait_minutes": schedule.busy_wait_minutes,
            "catch_up_hours": schedule.catch_up_hours,
        }

    def _answer(self, schedule: Schedule) -> dict:
        fresh = self.safely_get_queryset().get(pk=schedule.pk)  # with its last fires, as in the list
        return ScheduleSerializer(fresh, context=self.get_serializer_context()).data

    def _save(self, schedule: Schedule | None) -> Schedule:
        body = ScheduleWriteSerializer(data=self.document())
        body.is_valid(raise_exception=True)
        data = body.validated_data
        plan = self.get_scoped(Plan.objects.select_related("project__team"), write=True, code=data["plan"])
        project = schedule.project if schedule is not None else plan.project
        if plan.project_id != project.id:
            raise Invalid({"plan": ["A schedule stays in its project: choose a plan of the same project."]})
        # The page's form: the same checks and the same messages.
        form = ScheduleForm(
            {
                "plan": plan.pk,
                "kind": data["kind"],
                "at_time": _blank(data.get("at_time")),
                "every_hours": _blank(data.get("every_hours")),
                "cron": data["cron"],
                "time_zone": data["time_zone"],
                "enabled": "on" if data["enabled"] else "",
                "ends_on": _blank(data.get("ends_on")),
                "busy_wait_minutes": data["busy_wait_minutes"],
                "catch_up_hours": data["catch_up_hours"],
            },
            project=project,
        )
        if not form.is_valid():
            raise Invalid({field: list(messages) for field, messages in form.errors.items()})
        clean = form.cleaned_data
        try:
            return services.schedule_save(
                project=project,
                plan=plan,
                kind=clean["kind"],
                at_time=clean.get("at_time"),
                every_hours=clean.get("every_hours"),
                cron=clean.get("cron") or "",
                time_zone=clean["time_zone"],
                enabled=clean["enabled"],
                ends_on=clean.get("ends_on"),
                busy_wait_minutes=clean["busy_wait_minutes"],
                catch_up_hours=clean["catch_up_hours"],
                schedule=schedule,
            )
        except timing.ScheduleSpecError as exc:
            field = "cron" if clean["kind"] == Schedule.Kind.CRON else "non_field_errors"
            raise Invalid({field: [str(exc)]}) from None

    @extend_schema(
        summary="A schedule's last 100 fires, newest first: when each came due and what became of it",
        responses={200: FireSerializer(many=True), **error_responses(404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def fires(self, request, code=None):
        schedule = self.get_scoped(Schedule.objects.select_related("project__team"), code=code)
        return Response(FireSerializer(selectors.schedule_fires(schedule=schedule), many=True).data)
