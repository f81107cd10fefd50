"""Stores the figures of finished runs recorded before issue 9 (chart series, comparison batches).

Those runs keep working without it (their pages compute from their rows, as before); with it,
their pages read stored figures like every newer run, and the watchdog's roll-up can take
their per-second rows after PLIMSOLL_ROLLUP_AFTER. Safe to run twice: a run with figures is skipped.
"""

from django.core.management.base import BaseCommand

from portal.runs.models import Run
from portal.runs.services import run_figures_store


class Command(BaseCommand):
    help = "Stores the chart series and comparison batches of finished runs that have none (runs before issue 9)."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=0, help="at most this many runs (default: all)")

    def handle(self, *args, limit, **options):
        runs = Run.objects.filter(status__in=Run.FINISHED, figures__isnull=True).order_by("id")
        if limit:
            runs = runs[:limit]
        stored = 0
        for run in runs.iterator(chunk_size=50):
            if run_figures_store(run=run):
                stored += 1
                self.stdout.write(f"run {run.id} (#{run.number} of {run.plan_name}): figures stored")
        self.stdout.write(f"{stored} run(s) given stored figures")
