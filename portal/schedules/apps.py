from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    name = "portal.schedules"
    label = "schedules"

    def ready(self):
        from portal.runs.signals import run_finished

        from . import baselines

        run_finished.connect(baselines.on_run_finished, dispatch_uid="schedules.on_run_finished")
