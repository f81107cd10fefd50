"""Which of an environment's servers have figures to read, and whether a run may start on them.

Plain rules on the environment's rows (the scrape and Prometheus checks are ``portal.telemetry``'s):
the run lifecycle asks ``metric_sources_problems`` before a run starts, and ``portal.metrics``
collects from ``sources_of`` once it has.
"""

from __future__ import annotations

from portal.telemetry.countersets import COUNTER_SETS
from portal.telemetry.promql import check_prometheus_url
from portal.telemetry.scrape import check_metrics_url


def from_prometheus(environment, server) -> bool:
    """Whether ``server``'s figures come from the environment's Prometheus rather than a scrape."""
    return bool(environment.prometheus_url and server.prometheus_selector)


def sources_of(environment) -> list:
    """The environment's servers with a counter set and a metrics endpoint or Prometheus label matchers."""
    return [
        s
        for s in environment.servers.all()
        if s.counter_set in COUNTER_SETS and (s.metrics_url or from_prometheus(environment, s))
    ]


def metric_sources_problems(environment) -> list[str]:
    """Why a run on ``environment`` must not start because of its metrics endpoints (checked before each run)."""
    problems = []
    for server in sources_of(environment):
        if from_prometheus(environment, server):
            continue  # checked once below, for every server that reads it
        try:
            check_metrics_url(server.metrics_url)
        except ValueError as exc:
            problems.append(f"Server “{server.name}”: its metrics endpoint is refused: {exc}")
    if environment.prometheus_url and any(from_prometheus(environment, s) for s in sources_of(environment)):
        try:
            check_prometheus_url(environment.prometheus_url)
        except ValueError as exc:
            problems.append(f"The environment's Prometheus is refused: {exc}")
    return problems
