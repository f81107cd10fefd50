"""The run's chart payloads as types: what the run page's charts, the share pages, the API and the exports
read, each built by one selector (``portal.runs.selectors``) and never copied.

``RunSeries`` is the time charts' data (``selectors.run_series``): the run page's ``series.json``, the
share page's series, the API's ``/runs/{code}/series/`` (``SeriesSerializer`` documents the same keys;
a test holds them equal) and ``series.csv``.
"""

from __future__ import annotations

from typing import TypedDict


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
