"""/api/v1/: the REST API, its OpenAPI schema and its docs (Swagger UI, vendored: no CDN)."""

from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from portal.accounts.api.views import TeamViewSet, TokenViewSet
from portal.api.schema_view import SchemaView
from portal.history.api.annotations import AnnotationViewSet, GrafanaViewSet
from portal.history.api.views import (
    ExperimentViewSet,
    MeasurementViewSet,
    PlanTrialsViewSet,
    RunIncludeViewSet,
    TrialSetViewSet,
    TuningChangeViewSet,
)
from portal.notifications.api import ChannelViewSet
from portal.projects.api.har import HarImportViewSet, ProjectHarImportViewSet
from portal.projects.api.views import EnvironmentViewSet, PlanViewSet, ProjectViewSet, StepViewSet, TestCaseViewSet
from portal.runs import exports
from portal.runs.api.imports import EnvironmentResultImportViewSet, ResultImportViewSet
from portal.runs.api.views import PlanRunViewSet, RunViewSet
from portal.schedules.api import PlanBaselineViewSet, PlanChangePointsViewSet, ScheduleViewSet
from portal.sharing.api import ShareLinkViewSet

app_name = "api"

router = SimpleRouter()
router.register("projects", ProjectViewSet, basename="project")
router.register("environments", EnvironmentViewSet, basename="environment")
router.register("test-cases", TestCaseViewSet, basename="test-case")
router.register("plans", PlanViewSet, basename="plan")
router.register("runs", RunViewSet, basename="run")
router.register("result-imports", ResultImportViewSet, basename="result-import")
router.register("har-imports", HarImportViewSet, basename="har-import")
router.register("tuning-changes", TuningChangeViewSet, basename="tuning-change")
router.register("measurements", MeasurementViewSet, basename="measurement")
router.register("trial-sets", TrialSetViewSet, basename="trial-set")
router.register("experiments", ExperimentViewSet, basename="experiment")
router.register("teams", TeamViewSet, basename="team")
router.register("tokens", TokenViewSet, basename="token")
router.register("share-links", ShareLinkViewSet, basename="share-link")
router.register("annotations", AnnotationViewSet, basename="annotation")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("channels", ChannelViewSet, basename="channel")

# Codes are matched loosely (``<str:code>``) so that a malformed one is the API's JSON 404, not an HTML page.
# Result files keep their extension as the last part of the URL (no trailing slash), as CI tools expect.
# One per export format (portal/runs/exports/).
files = [
    path(f"runs/<str:code>/{fmt.file_name}", RunViewSet.as_view({"get": fmt.method}), name=fmt.route_name)
    for fmt in exports.FORMATS.values()
]

urlpatterns = [
    path("schema/", SchemaView.as_view(), name="schema"),
    # The split view serves its start-up script as a file: no inline script, ready for a strict CSP.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
    path("test-cases/<str:code>/steps/", StepViewSet.as_view({"get": "list", "post": "create"}), name="steps"),
    path(
        "test-cases/<str:code>/steps/<str:step>/",
        StepViewSet.as_view({"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}),
        name="step",
    ),
    path("test-cases/<str:code>/steps/<str:step>/move/", StepViewSet.as_view({"post": "move"}), name="step-move"),
    path("plans/<str:code>/runs/", PlanRunViewSet.as_view({"post": "create"}), name="plan-runs"),
    path(
        "plans/<str:code>/baseline/",
        PlanBaselineViewSet.as_view({"get": "retrieve", "put": "update"}),
        name="plan-baseline",
    ),
    path(
        "plans/<str:code>/change-points/",
        PlanChangePointsViewSet.as_view({"get": "list"}),
        name="plan-change-points",
    ),
    # Issue 18: imports. A result file becomes a run (in the background); a HAR becomes a test case.
    path(
        "environments/<str:code>/result-imports/",
        EnvironmentResultImportViewSet.as_view({"post": "create"}),
        name="environment-result-imports",
    ),
    path(
        "projects/<str:code>/har-import/",
        ProjectHarImportViewSet.as_view({"post": "create"}),
        name="project-har-import",
    ),
    # Issue 29: Grafana's "simple JSON" data source (its connection test and annotation queries).
    path("grafana/", GrafanaViewSet.as_view({"get": "check"}), name="grafana"),
    path("grafana/annotations", GrafanaViewSet.as_view({"post": "annotations"}), name="grafana-annotations"),
    path("plans/<str:code>/trials/", PlanTrialsViewSet.as_view({"post": "create"}), name="plan-trials"),
    path("runs/<str:code>/include/", RunIncludeViewSet.as_view({"post": "create"}), name="run-include"),
    *files,
    path("", include(router.urls)),
]
