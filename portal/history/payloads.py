"""The history's chart payloads as types, each built by one function and never copied.

``EnvironmentJourney`` is an environment's journey for one plan (``journey.environment_journey``): the
journey page's ``journey.json``, the API's journey of an environment, and the share page's (which leaves
out every address and code: ``portal.sharing.content.journey_data``). ``ProjectJourney`` is a project's
(``journey.project_journey``: its page and the API). ``ComparisonCurves`` is a comparison's overlay of its
sides' runs (``curves.sides_curves``: the comparison page's ``curves.json``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict


class NamedLink(TypedDict):
    name: str
    code: str
    url: str


class EnvironmentLink(NamedLink):
    journey_url: str


class JourneyPoint(TypedDict):
    """One finished run of the plan on the timeline (``journey.run_point``)."""

    seq: int
    x: int | None  # epoch ms of its start
    at: datetime | None
    number: int
    code: str
    source: str  # an imported run's tool and file ("" for a run Plimsoll made)
    url: str
    status: str
    status_display: str
    apd_ms: float | None
    p95_ms: float | None
    pages_per_s: float | None
    error_rate_pct: float | None
    capacity_users: int | None  # None without levels, or when even the lowest level broke
    capacity_held: bool | None
    counts: bool
    doubts: list
    include_anyway: bool
    change: int | None  # the tuning change it ran under
    baseline_verdict: str | None
    baseline_headline: str


class EnvironmentJourney(TypedDict):
    environment: EnvironmentLink
    plan: NamedLink | None
    points: list[JourneyPoint]
    counting: int
    has_capacity: bool
    truncated: bool  # more than MAX_RUNS runs: the latest are drawn
    changes: list[dict[str, Any]]  # the applied changes, each placed between the runs (seq) and in time (x)
    measurements: list[dict[str, Any]]  # external measurements, one series per name
    effects: list[dict[str, Any]]  # each change's effect on the plan's figures
    doubtful: list[dict[str, Any]]  # the runs with doubts, counting or not


class ProjectJourney(TypedDict):
    project: NamedLink
    plan: NamedLink | None
    sections: list[EnvironmentJourney]  # one per environment the plan ran on
    ledger: list[dict[str, Any]]  # every applied change of the project, with its effect on the plan


class CurveSeries(TypedDict):
    """A run's series over its measurement window, the time axis starting at the window's start."""

    t: list[int]
    bucket_s: int
    window_start: int
    apd_ms: list[float | None]
    p95_ms: list[float | None]
    pages_per_s: list[float | None]


class RunCurves(TypedDict):
    code: str
    number: int
    series: CurveSeries
    distribution: list[list[float]]  # [percentile, ms] over the measurement windows
    levels: list[dict[str, Any]]  # a steps run's users, pages/s and APD per level ([] otherwise)


class SideCurves(TypedDict):
    role: str
    label: str
    runs: list[RunCurves]  # at most curves.MAX_RUNS_PER_SIDE


class ComparisonCurves(TypedDict):
    sides: list[SideCurves]
