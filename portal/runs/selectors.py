from django.utils import timezone

from .models import ResultImport, Run
from .payloads import ProtocolSeries, RunDetail, RunSeries, WindowDistribution
from .results import drilldown, protocols, read
from .summary import RunSummary

# Live figures average over the last few complete seconds, so a single slow second doesn't flicker.
LIVE_WINDOW_S = 5


def run_live_figures(run: Run) -> dict:
    """What the live page shows while a run runs: progress, users now, recent rates."""
    elapsed = 0.0
    if run.start_at:
        end = run.finished_at or timezone.now()
        elapsed = max(0.0, (end - run.start_at).total_seconds())
    duration = run.planned_duration
    last = read.shard_last_second(run)
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
    figures["users"] = read.users_at(run, last)
    figures["pages"], figures["errors"] = _run_totals(run, last)
    # The shards' per-second totals: a few rows, never the run's page rows.
    pages, errors = read.shard_sums(run, first=last - LIVE_WINDOW_S + 1, last=last)
    span = min(LIVE_WINDOW_S, last + 1)
    figures["pages_per_s"] = round(pages / span, 1)
    figures["errors_per_s"] = round(errors / span, 1)
    return figures


def _run_totals(run: Run, last: int) -> tuple[int, int]:
    """Pages and errors so far: each shard's running totals at its latest second.

    The sink keeps running totals per shard, so this reads one row per shard whatever the
    run's length. Rows written before those existed (running totals all zero) are summed.
    """
    rows = read.running_totals(run, run.shards.values_list("shard_no", flat=True), last=last)
    pages, errors = sum(r[0] for r in rows), sum(r[1] for r in rows)
    if pages or errors:
        return pages, errors
    return read.page_totals(run)


def run_shards(run) -> list:
    """The run's shards, each with ``load``: its planned and achieved load and lateness (None before the finalize)."""
    loads = {row["shard_no"]: row for row in (run.load or {}).get("shards", [])}
    shards = list(run.shards.all())
    for shard in shards:
        shard.load = loads.get(shard.shard_no)
    return shards


def run_handoffs(run: Run) -> list[dict]:
    """The run's shard handoffs for its timeline: from the summary once it ended, else as they stand."""
    from . import analysis

    if run.summary and not run.is_active:
        return RunSummary.of(run).handoffs
    return analysis.handoff_timeline(run, [])


def run_series(run: Run, *, since: int | None = None, live: bool = True) -> RunSeries:
    """The charts' data: per-second figures over the whole run, its status and measurement windows.

    The run page's charts, the share page's (``live=False``: a shared page never polls), the API
    (series) and series.csv read this one function; ``since`` (live polls) sends only the seconds
    from there on.
    """
    from . import analysis

    data = analysis.series(run, since=since)
    data.update(
        {
            "status": run.status,
            "active": run.is_active and live,
            "windows": [[start, end, label] for start, end, label in run.measurement_windows],
            "duration_s": run.planned_duration,
        }
    )
    return data


def run_protocol_series(run: Run, *, since: int | None = None, live: bool = True) -> ProtocolSeries:
    """The streams and WebSocket chart's data (``portal.runs.results.protocols.series``): the run page's and the
    share page's (``live=False``: a shared page never polls) ``protocols.json``; ``since`` (live polls) sends
    the bucket holding that second and the newer ones."""
    return {**protocols.series(run, since=since), "active": run.is_active and live}


def run_detail(run: Run, params, *, trace_links: bool = True) -> RunDetail | WindowDistribution:
    """The drill-down and zoom data of the run page and the share page (``portal.runs.results.drilldown``):
    ``page``, ``from`` and ``to`` of ``params`` (RangeError when one is malformed); ``only=distribution``
    without a range: only the distribution over the measurement windows. ``trace_links``: links to the
    team's tracing backend (never from a public page: its address is theirs)."""
    label, since, until = drilldown.parse_range(params)
    if params.get("only") == "distribution" and since is None and until is None:
        return drilldown.window_distribution(run, label)
    return drilldown.page_detail(run, label=label, since=since, until=until, trace_links=trace_links)


def result_imports(environment):
    """An environment's result imports (issue 18), newest first, with their runs."""
    return (
        ResultImport.objects.filter(environment=environment).select_related("run", "created_by").order_by("-created_at")
    )
