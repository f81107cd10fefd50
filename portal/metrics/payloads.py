"""The Servers section's payload as types: what the run page's server charts, their live polls
(``servers.json``), the server figures of comparisons and the template read, built by one selector
(``selectors.run_servers``; ``selectors.run_servers_chart`` for ``servers.json``).
"""

# No postponed annotations here: Python 3.11 would not see NotRequired in them.
from typing import NotRequired, TypedDict


class WindowStats(TypedDict):
    """A series' figures within one measurement window (None without a value there)."""

    mean: float | None
    p95: float | None
    max: float | None
    n: int


class ServerSeries(TypedDict):
    """One figure of a server's counter set over the run: a value per scrape."""

    key: str
    name: str
    unit: str
    main: bool  # one of the counter set's main figures (compared between runs)
    cpu: bool  # the counter set's CPU figure
    t: list[float]  # seconds since the start: at the scrape (gauges), mid-interval (rates)
    values: list[float | None]
    windows: list[WindowStats]  # one per measurement window


class Server(TypedDict):
    id: int
    name: str
    role: str
    url: str  # the scraped endpoint, or the Prometheus and the server's labels there
    counter_set: str
    scrapes: int
    good_scrapes: int
    gaps: list[dict]  # consecutive failed or missed scrapes: from, to (seconds since the start), scrapes, reason
    series: list[ServerSeries]


class MeasurementWindow(TypedDict):
    label: str
    start: float
    end: float


class RunServers(TypedDict):
    """Everything the Servers section shows (``selectors.run_servers``; None when no server was scraped)."""

    interval_s: int
    windows: list[MeasurementWindow]
    servers: list[Server]
    restarts: int  # how often the watchdog restarted a lost collector
    hints: list[dict]  # the bottleneck hints (portal.metrics.hints.Hint)


class ServersChart(TypedDict):
    """``servers.json``: the section's data and whether the page polls again (empty without a scraped server)."""

    windows: list[MeasurementWindow]
    servers: list[Server]
    hints: list[dict]
    interval_s: NotRequired[int]
    restarts: NotRequired[int]
    active: bool  # the page polls again while True
    duration_s: float  # the plan's duration
