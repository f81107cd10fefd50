from django.urls import path

from . import views

app_name = "schedules"

urlpatterns = [
    path("projects/<uuid:code>/schedules/", views.project_schedules, name="project"),
    path("projects/<uuid:code>/schedules/new/", views.schedule_new, name="new"),
    path("projects/<uuid:code>/schedules/preview/", views.schedule_preview, name="preview"),
    path("schedules/<uuid:code>/", views.schedule_edit, name="edit"),
    path("schedules/<uuid:code>/toggle/", views.schedule_toggle, name="toggle"),
    path("schedules/<uuid:code>/delete/", views.schedule_delete, name="delete"),
    path("schedules/<uuid:code>/baseline/", views.baseline_edit, name="baseline"),
    path("runs/<uuid:code>/accept/", views.regression_accept, name="accept"),
]
