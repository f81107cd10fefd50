from django.urls import path

from . import views

app_name = "runs"

urlpatterns = [
    # /runs/
    path("runs/", views.run_list, name="list"),
    # Issue 25: generator capacity, a team's usage, limits and waiting runs.
    path("capacity/", views.capacity, name="capacity"),
    path("runs/<uuid:code>/", views.run_detail, name="detail"),
    path("runs/<uuid:code>/series.json", views.run_series, name="series"),
    # Issue 26: streams, WebSocket sessions and protocols over time (the run page's fifth chart).
    path("runs/<uuid:code>/protocols.json", views.run_protocol_series, name="protocol-series"),
    # Issue 15: one page's series, a time range's figures, the latency distribution.
    path("runs/<uuid:code>/detail.json", views.run_detail_data, name="detail-data"),
    path("runs/<uuid:code>/stop/", views.run_stop, name="stop"),
    # /projects/<code>/runs/, /plans/<code>/run/
    path("projects/<uuid:code>/runs/", views.project_runs, name="project"),
    path("plans/<uuid:code>/run/", views.run_start, name="start"),
    # Issue 18: other tools' result files become imported runs of an environment.
    path("environments/<uuid:code>/import-results/", views.results_import, name="import"),
]
