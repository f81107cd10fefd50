from django.apps import AppConfig


class HistoryConfig(AppConfig):
    name = "portal.history"
    label = "history"
    verbose_name = "Results history"

    def ready(self):
        from portal.runs.signals import run_finished

        from . import services

        run_finished.connect(services.on_run_finished, dispatch_uid="history.on_run_finished")
