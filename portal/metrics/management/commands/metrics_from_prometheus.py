"""Reads a past run's server figures from its environment's Prometheus (an imported run, say)."""

from django.core.management.base import BaseCommand, CommandError

from portal.metrics.services import prometheus_backfill
from portal.runs.models import Run


class Command(BaseCommand):
    help = (
        "Reads RUN_ID's server figures from its environment's Prometheus with query_range, for every "
        "server with Prometheus labels, and stores them as a live run's scrape rounds (again: replaced)."
    )

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int)

    def handle(self, *args, run_id, **options):
        run = Run.objects.select_related("environment").filter(id=run_id).first()
        if run is None:
            raise CommandError(f"no run with id {run_id}")
        if run.environment is None or not run.environment.prometheus_url:
            raise CommandError(f"run {run_id}'s environment has no Prometheus URL")
        failed = prometheus_backfill(run_id=run_id)
        for server_id, reason in failed.items():
            self.stderr.write(f"server {server_id}: {reason}")
        if failed:
            raise CommandError(f"{len(failed)} server(s) could not be read from Prometheus")
        self.stdout.write(f"run {run_id}: server figures read from {run.environment.prometheus_url}")
