"""Server figures of a run for the results history: one number per series, to compare before → after.

A tuning change acts on a server (a trace flag on the database, processes on the web tier),
so its effect shows there first: *CPU per 100 pages/s 38 % → 21 %*, *lock waits/s 140 → 3*.
Each run gives the mean of its measured windows; comparisons treat one run as one sample.
"""

from __future__ import annotations

from portal.runs.models import Run
from portal.runs.summary import RunSummary

from .selectors import run_servers

# Series where more is better (work done); for every other series (CPU, waits, queues) less is.
MORE_IS_BETTER = {"requests", "iis_requests", "sql_batches", "tps", "cache_hit", "sql_buffer_hit", "mem_available"}


def _window_mean(series: dict) -> float | None:
    parts = [(w["mean"], w["n"]) for w in series["windows"] if w["n"]]
    n = sum(k for _, k in parts)
    return sum(m * k for m, k in parts) / n if n else None


def run_server_figures(run: Run) -> dict[tuple[str, str, bool], float]:
    """{(name, unit, lower is better): value} for each server's main series, its CPU, and CPU per 100 pages/s."""
    data = run_servers(run)
    if not data:
        return {}
    pages = RunSummary.of(run).totals.get("pages_per_s")
    out = {}
    for server in data["servers"]:
        for s in server["series"]:
            if not (s["main"] or s["cpu"]):
                continue
            mean = _window_mean(s)
            if mean is None:
                continue
            out[(f"{server['name']}: {s['name']}", s["unit"], s["key"] not in MORE_IS_BETTER)] = mean
            if s["cpu"] and pages:
                out[(f"{server['name']}: CPU per 100 pages/s", "%", True)] = 100 * mean / pages
    return out
