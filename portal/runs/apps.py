from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "portal.runs"
    label = "runs"
