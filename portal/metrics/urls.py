from django.urls import path

from . import views

app_name = "metrics"

urlpatterns = [
    path("runs/<uuid:code>/servers.json", views.run_servers_json, name="run-servers"),
]
