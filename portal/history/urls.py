from django.urls import path

from .views import changes, comparison, experiments, journey

app_name = "history"

urlpatterns = [
    # Tuning changes and external measurements (views/changes.py)
    path("environments/<uuid:code>/changes/new/", changes.change_new, name="change-new"),
    path("changes/<uuid:code>/", changes.change_detail, name="change"),
    path("changes/<uuid:code>/apply/", changes.change_apply, name="change-apply"),
    path("changes/<uuid:code>/prometheus/", changes.change_prometheus, name="change-prometheus"),
    path("environments/<uuid:code>/measurements/new/", changes.measurement_new, name="measurement-new"),
    path("measurements/<uuid:code>/delete/", changes.measurement_delete, name="measurement-delete"),
    path("runs/<uuid:code>/include/", changes.run_include, name="run-include"),
    # Trial sets and experiments (views/experiments.py)
    path("plans/<uuid:code>/trials/", experiments.trialset_new, name="trialset-new"),
    path("trialsets/<uuid:code>/", experiments.trialset_detail, name="trialset"),
    # Issue 18: a trial set of runs that exist already (imported ones), from the environment's import page.
    path(
        "environments/<uuid:code>/trialsets/from-runs/",
        experiments.trialset_from_runs,
        name="trialset-from-runs",
    ),
    path("trialsets/<uuid:code>/stop/", experiments.trialset_stop, name="trialset-stop"),
    path("projects/<uuid:code>/experiments/", experiments.experiment_list, name="experiments"),
    path("projects/<uuid:code>/experiments/new/", experiments.experiment_new, name="experiment-new"),
    path("experiments/<uuid:code>/", experiments.experiment_detail, name="experiment"),
    path("experiments/<uuid:code>/start/", experiments.experiment_start, name="experiment-start"),
    path("experiments/<uuid:code>/confirm/", experiments.experiment_confirm, name="experiment-confirm"),
    path("experiments/<uuid:code>/stop/", experiments.experiment_stop, name="experiment-stop"),
    # Comparison of two runs or trial sets (views/comparison.py)
    path("projects/<uuid:code>/compare/", comparison.compare, name="compare"),
    path("projects/<uuid:code>/compare/curves.json", comparison.compare_curves, name="compare-curves"),
    # The journey (views/journey.py)
    path("environments/<uuid:code>/journey/", journey.environment_journey, name="environment-journey"),
    path("environments/<uuid:code>/journey.json", journey.environment_journey_data, name="environment-journey-data"),
    path("projects/<uuid:code>/journey/", journey.project_journey, name="project-journey"),
    path("projects/<uuid:code>/journey.json", journey.project_journey_data, name="project-journey-data"),
]
