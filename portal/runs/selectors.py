from django.db.models import Max, Sum
from django.utils import timezone

from .models import PageInterval, Run, ShardInterval

# Live figures average over the last few complete seconds, so a single slow second doesn't flicker.
LIVE_WINDOW_S = 5


def run_live_figures(run: Run) -> dict:
    """What the live page shows while a run runs: progress, users now, recent rates."""
    elapsed = 0.0
    if run.start_at:
        end = run.finished_at or timezone.now()
        elapsed = max(0.0, (end - run.start_at).total_seconds())
    duration = run.planned_duration
    last = ShardInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"]
    figures = {
        "elapsed_s": round(min(elapsed, duration), 1),
        "duration_s": duration,
        "progress_pct": round(100 * min(elapsed / duration, 1.0), 1) if duration else 0,
        "users": 0,
        "pages": 0,
        "errors": 0,
        "pages_per_s": 0.0,
        "errors_per_s": 0.0,
    }
    if last is None:
        return figures
    figures["users"] = ShardInterval.objects.filter(run=run, second=last).aggregate(u=Sum("active_users"))["u"] or 0
    totals = PageInterval.objects.filter(run=run).aggregate(p=Sum("pages"), e=Sum("errors"))
    figures["pages"], figures["errors"] = totals["p"] or 0, totals["e"] or 0
    recent = PageInterval.objects.filter(run=run, second__gt=last - LIVE_WINDOW_S, second__lte=last).aggregate(
        p=Sum("pages"), e=Sum("errors")
    )
    span = min(LIVE_WINDOW_S, last + 1)
    figures["pages_per_s"] = round((recent["p"] or 0) / span, 1)
    figures["errors_per_s"] = round((recent["e"] or 0) / span, 1)
    return figures
