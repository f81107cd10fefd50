"""A tuning change's server figures before → after, read from the environment's Prometheus (issue 29 item 1).

Prometheus has scraped the servers for months, so a change's effect on them can be read whether or
not Plimsoll scraped them during its runs (an imported run, a run before the data source was set,
a server added since). The two sides:

- **the runs' windows** when there are runs on both sides with the same plan: the first finished run
  under the change, against the last finished run of the same plan under the configuration before
  it (the previous change, or the initial configuration). Each side is that run's measurement
  window (its first window's start to its last's end; the whole run when it has none), so both
  sides are read under the same load;
- otherwise **the change's own time ± WINDOW_S** (15 minutes before its application against 15
  minutes after, cut at now): whatever load the servers had, said as such.

Each side of each server with label matchers is one ``query_range`` (at the environment's interval,
coarser for a long run so a side is at most MAX_STEPS readings), read through ``promql.window``
(``portal.outbound``, the token, the series cap) and turned into figures by the scrape's own code
(``exposition.figures``); a side's figure is the mean over its readings. Every failure is a message
for the page, per server; nothing raises.
"""

from __future__ import annotations

import math
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from portal.runs.models import Run
from portal.runs.summary import RunSummary
from portal.telemetry.countersets import COUNTER_SETS
from portal.telemetry.exposition import figures

from .history import MORE_IS_BETTER

WINDOW_S = 15 * 60
MAX_STEPS = 720  # readings per side and server: a 72-hour soak is read at a 6-minute step
TIMEOUT_S = 8.0  # per query, on the page's path (in parallel across servers and sides)
CANDIDATE_RUNS = 20
SKIPPED = (Run.Status.CANCELLED, Run.Status.ERROR)


@dataclass
class Side:
    label: str
    start: datetime
    end: datetime
    run: Run | None = None


@dataclass
class FigureRow:
    key: str
    name: str
    unit: str
    main: bool
    before: float
    after: float
    lower_is_better: bool

    @property
    def change_pct(self) -> float | None:
        return None if not self.before else 100.0 * (self.after - self.before) / abs(self.before)

    @property
    def better(self) -> bool | None:
        """Whether it moved the good way (None: within 5 %, or no base to compare with)."""
        pct = self.change_pct
        if pct is None or abs(pct) < 5:
            return None
        return (pct < 0) == self.lower_is_better


@dataclass
class ServerFigures:
    name: str
    selector: str
    rows: list[FigureRow] = field(default_factory=list)
    error: str = ""


@dataclass
class BeforeAfter:
    basis: str  # "runs" or "window"
    before: Side
    after: Side
    step_s: int
    servers: list[ServerFigures]
    note: str = ""


def _window_of(run: Run) -> tuple[datetime, datetime]:
    """The run's measured seconds: its first window's start to its last's end (the whole run without windows)."""
    windows = RunSummary.of(run).windows
    if windows:
        start = min(w["start"] for w in windows)
        end = max(w["end"] for w in windows)
        if end > start:
            return run.start_at + timedelta(seconds=start), run.start_at + timedelta(seconds=end)
    return run.start_at, run.finished_at


def _finished(runs):
    return runs.filter(status__in=Run.FINISHED, start_at__isnull=False, finished_at__isnull=False).exclude(
        status__in=SKIPPED
    )


def sides(change, *, now: datetime | None = None) -> tuple[str, Side, Side, str]:
    """(basis, before, after, note) for an applied change: the runs' windows, or its time ± WINDOW_S."""
    now = now or timezone.now()
    environment = change.environment
    previous = (
        environment.changes.filter(status="applied", applied_at__lt=change.applied_at)
        .exclude(pk=change.pk)
        .order_by("-applied_at", "-number")
        .first()
    )
    after_runs = list(_finished(change.runs.filter(environment=environment)).order_by("start_at")[:CANDIDATE_RUNS])
    before_runs = _finished(
        Run.objects.filter(environment=environment, tuning_change=previous, finished_at__lte=change.applied_at)
    ).order_by("-finished_at")
    for after in after_runs:
        before = before_runs.filter(plan_id=after.plan_id).first() if after.plan_id else None
        if before is not None:
            b0, b1 = _window_of(before)
            a0, a1 = _window_of(after)
            return (
                "runs",
                Side(f"Run #{before.number} ({before.plan_name})", b0, b1, before),
                Side(f"Run #{after.number} ({after.plan_name})", a0, a1, after),
                "",
            )
    at = change.applied_at
    end = min(at + timedelta(seconds=WINDOW_S), now)
    note = (
        "No finished run of one plan on both sides of the change: the figures are the "
        f"{WINDOW_S // 60} minutes before it was applied against the {WINDOW_S // 60} after, under whatever "
        "load the servers had then."
    )
    if end < at + timedelta(seconds=WINDOW_S):
        note += f" The change is younger than that: its after side ends now ({(end - at).total_seconds():.0f} s)."
    return (
        "window",
        Side(f"{WINDOW_S // 60} min before", at - timedelta(seconds=WINDOW_S), at),
        Side(f"{WINDOW_S // 60} min after", at, end),
        note,
    )


def _mean(values: list[float | None]) -> float | None:
    good = [v for v in values if v is not None]
    return statistics.fmean(good) if good else None


def _side_figures(server, env, token: str, side: Side, step: int) -> dict[str, float] | str:
    """{series key: mean over the side} for one server, or why there is none."""
    from portal.telemetry.promql import PrometheusError, window

    counter_set = COUNTER_SETS[server.counter_set]
    start, end = side.start.timestamp(), side.end.timestamp()
    if end - start < step:
        return f"{side.label}: shorter than one reading ({step} s)"
    try:
        # One reading before the side's start: a counter's first rate needs the value before it.
        readings = window(
            env.prometheus_url,
            token,
            server.prometheus_selector,
            counter_set,
            start - step,
            end,
            step,
            timeout=TIMEOUT_S,
        )
    except PrometheusError as exc:
        return f"{side.label}: {exc}"
    ordered = sorted(readings.items())
    values = figures(counter_set, [(t, None if isinstance(got, str) else got) for t, got in ordered])
    out = {}
    for s in counter_set.series:
        # Rates are for the interval ending at each reading: the first one (before the start) is left out.
        mean = _mean(values[s.key][1:])
        if mean is not None:
            out[s.key] = mean
    if not out:
        reasons = {got for _, got in ordered if isinstance(got, str)}
        return f"{side.label}: no figures ({'; '.join(sorted(reasons)) or 'no samples'})"
    return out


def _servers(environment) -> list:
    return [s for s in environment.servers.all() if s.prometheus_selector and s.counter_set in COUNTER_SETS]


UNAVAILABLE = {
    "not_applied": "The change is not applied yet: it has no before and after.",
    "no_prometheus": "The environment has no Prometheus data source (set its URL on the environment).",
    "no_servers": "None of the environment's servers names its Prometheus labels (its selector).",
}


def unavailable(change) -> str | None:
    """Why the change has no figures to read (a key of UNAVAILABLE), or None when it has."""
    if change.status != "applied" or change.applied_at is None:
        return "not_applied"
    if not change.environment.prometheus_url:
        return "no_prometheus"
    if not _servers(change.environment):
        return "no_servers"
    return None


def change_before_after(change, *, now: datetime | None = None) -> BeforeAfter | None:
    """The change's server figures before → after from the environment's Prometheus; None when it has none to read.

    None: the change is not applied, the environment has no Prometheus, or no server names its labels there
    (``unavailable`` says which).
    """
    from portal.telemetry.promql import PrometheusError, token_decrypt

    environment = change.environment
    if unavailable(change) is not None:
        return None
    servers = _servers(environment)
    basis, before, after, note = sides(change, now=now)
    longest = max((before.end - before.start).total_seconds(), (after.end - after.start).total_seconds(), 1)
    step = max(environment.metrics_interval_s, math.ceil(longest / MAX_STEPS))
    shown = [ServerFigures(s.name, s.prometheus_selector) for s in servers]
    result = BeforeAfter(basis, before, after, step, shown, note)
    try:
        token = token_decrypt(environment.prometheus_token)
    except PrometheusError as exc:
        for server in result.servers:
            server.error = str(exc)
        return result
    jobs = [(server, side) for server in servers for side in (before, after)]
    # Every query at once (each bounded by TIMEOUT_S): a slow Prometheus costs the page one timeout.
    with ThreadPoolExecutor(max_workers=min(8, len(jobs))) as pool:
        answers = list(pool.map(lambda job: _side_figures(job[0], environment, token, job[1], step), jobs))
    for i, (server, shown) in enumerate(zip(servers, result.servers, strict=True)):
        got_b, got_a = answers[2 * i], answers[2 * i + 1]
        errors = [got for got in (got_b, got_a) if isinstance(got, str)]
        if errors:
            shown.error = "; ".join(errors)[:600]
            continue
        counter_set = COUNTER_SETS[server.counter_set]
        for s in counter_set.series:
            if s.key in got_b and s.key in got_a:
                shown.rows.append(
                    FigureRow(
                        s.key,
                        s.name,
                        s.unit,
                        s.key in counter_set.main,
                        round(got_b[s.key], 4),
                        round(got_a[s.key], 4),
                        s.key not in MORE_IS_BETTER,
                    )
                )
        shown.rows.sort(key=lambda r: not r.main)
    return result
