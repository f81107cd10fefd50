from django.contrib import admin

from .models import GeneratorWorker, TeamQuota


@admin.register(TeamQuota)
class TeamQuotaAdmin(admin.ModelAdmin):
    """Per-team limits (issue 25): a run over one is refused with the limit and the team's usage."""

    list_display = ("team", "max_runs", "max_users", "max_user_hours")
    search_fields = ("team__name",)


@admin.register(GeneratorWorker)
class GeneratorWorkerAdmin(admin.ModelAdmin):
    """The registered generators (read-only: workers write their own rows)."""

    list_display = ("node", "slots", "labels", "queues", "heartbeat_at")
    readonly_fields = ("node", "host", "slots", "labels", "queues", "started_at", "heartbeat_at")
