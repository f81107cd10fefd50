"""A plan's baseline through the API (issue 24.6): what its runs are judged against, set as code."""

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from portal.api.base import StrictSerializer, TeamScopedViewSet
from portal.api.errors import error_responses
from portal.common import Invalid
from portal.history.models import TrialSet
from portal.projects.models import Plan
from portal.runs.models import Run

from . import baselines, change_points, selectors
from .models import Baseline


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
    figure = serializers.CharField(help_text="APD, p95, pages/s or error rate")
    key = serializers.CharField(help_text="The summary's key: apd_ms, p95_ms, pages_per_s, error_rate_pct")
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
