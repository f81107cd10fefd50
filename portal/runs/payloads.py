"""The run's chart payloads as types: what the run page's charts, the share pages, the API and the exports
read, each built by one selector (``portal.runs.selectors``) and never copied.

``RunSeries`` is the time charts' data (``selectors.run_series``): the run page's ``series.json``, the
share page's series, the API's ``/runs/{code}/series/`` (``SeriesSerializer`` documents the same keys;
a test holds them equal) and ``series.csv``. ``ProtocolSeries`` is the streams and WebSocket chart
(``selectors.run_protocol_series``: the run page's and the share page's ``protocols.json``);
``RunDetail`` and ``WindowDistribution`` the drill-down and zoom (``selectors.run_detail``: the run
page's and the share page's ``detail.json``).
"""

from __future__ import annotations

from typing import Any, TypedDict

from .summary import ProtocolPage


class RunSeries(TypedDict):
    """Per-second (or per-bucket) figures over the whole run, with its status and measurement windows."""

    bucket_s: int  # seconds per point: 1, or more for a long run
    t: list[int]  # each point's first second since the start
    users: list[int]
    pages_per_s: list[float | None]
    hits_per_s: list[float | None]
    errors_per_s: list[float | None]
    dropped_per_s: list[float | None]
    apd_ms: list[float | None]
    p95_ms: list[float | None]
    bytes_per_s: list[float | None]
    apd_max_ms: list[float | None]  # each point's worst second's APD
    pages_per_s_min: list[float | None]  # each point's slowest second's pages
    since: int | None  # a live poll's first bucket (None: the whole run)
    status: str
    active: bool  # the page polls again while True
    windows: list[list]  # [start, end, label] of each measurement window
    duration_s: float  # the plan's duration


class ProtocolSeries(TypedDict):
    """Per chart bucket: p95 time to first event, gap and WebSocket round trip (ms), WebSocket messages/s and
    the h2 share of the protocol rows' hits; empty lists for a run without protocol rows."""

    bucket: int  # seconds per point
    t: list[int]  # each point's first second since the start
    ttfe_p95: list[float | None]
    gap_p95: list[float | None]
    rtt_p95: list[float | None]
    ws_msgs_per_s: list[float | None]
    h2_pct: list[float | None]
    active: bool  # the page polls again while True


# The seconds a drill-down covers: "of" a range the reader chose ("from" its first second, "to" the second
# after its last), or of the run's "measurement window" (no "from" and "to" for the distribution alone).
DetailRange = TypedDict("DetailRange", {"from": int, "to": int, "of": str}, total=False)


class WindowDistribution(TypedDict):
    """Only a page's (or all pages') latency distribution over the measurement windows (the report's chart)."""

    page: str | None
    distribution: list[list[float]]  # [percentile, ms] points
    range: DetailRange


class RunDetail(TypedDict):
    """One page's (or all pages') series, figures, distribution and errors, of a range or of the windows."""

    page: str | None
    range: DetailRange
    resolution_s: int  # 1, or the roll-up's span once the run's rows are rolled up
    series: dict[str, list]  # t and the per-bucket figures (portal.runs.results.drilldown._Bucketer)
    figures: dict[str, Any]
    distribution: list[list[float]]
    errors: list[dict]  # kind, count, sample
    slowest: list[dict]  # second, page, ms, trace_id, url
    windows: list[list[int]]  # [start, end] of each window read (empty for a range)
    protocols: list[ProtocolPage]  # streams, WebSocket sessions and protocols of the same seconds
