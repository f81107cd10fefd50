from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "portal.metrics"
    label = "metrics"
    verbose_name = "server metrics"

    def ready(self):
        from portal.runs.signals import run_admitted

        from .services import on_run_admitted

        run_admitted.connect(on_run_admitted, dispatch_uid="metrics.collection_start")
