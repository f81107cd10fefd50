"""A run's summary as a type: what ``Run.summary`` holds, read through one class instead of by string key.

The analysis writes the summary once, when the run ends (``portal.runs.analysis.summarize``), as JSON in
``Run.summary``; everything that reads it — pages, the API, exports, notifications, history, server
metrics, share pages — reads it through ``RunSummary.of(run)``, whose attributes are typed below. An
imported run's or an old run's summary may lack parts: each attribute then reads as empty (``{}``,
``[]``, None), never a KeyError. ``to_json`` gives back the stored form (the one serializer: the API's
``summary`` field and ``summary.json`` write it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

Verdict = Literal["passed", "failed"] | None


class Latency(TypedDict, total=False):
    """A histogram's figures, in ms (None without pages)."""

    apd_ms: float | None
    min_ms: float | None
    max_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None


class ProtocolFigures(TypedDict, total=False):
    """Streams, WebSocket sessions and protocols of a window (issue 26; portal.runs.results.protocols.totals_of),
    each only when the run has it: the thresholds judge the first four."""

    ttfe_p95_ms: float | None
    gap_p95_ms: float | None
    rtt_p95_ms: float | None
    h2_share_pct: float | None
    ws_messages_per_s: float  # WebSocket messages per second, sent and received (a window's, a level's)


class Totals(Latency, ProtocolFigures, total=False):
    """The figures of a measured window (or of all of them): a window's protocol figures are in its totals, the
    run's totals have the threshold-able ones (``ProtocolFigures``)."""

    pages: int
    hits: int
    errors: int
    error_rate_pct: float
    bytes_in: int
    bytes_out: int
    transactions: int
    iterations_started: int
    iterations_dropped: int
    users: int
    pages_per_s: float
    hits_per_s: float
    bytes_per_s: float
    transactions_per_s: float
    ttfb_ms: float | None
    ttfb_p95_ms: float | None
    connect_ms: float | None


class Threshold(TypedDict):
    """A plan's threshold judged on a window: "APD ≤ 1000 ms", measured ``actual``."""

    name: str
    limit: float
    actual: float | None
    unit: str
    op: str  # "≤" (a ceiling) or "≥" (a floor)
    passed: bool


class Window(TypedDict, total=False):
    """A measured window: the hold, or one level of a steps profile."""

    label: str
    start: int
    end: int
    seconds: int
    note: str
    index: int
    handoffs: int
    reduced_seconds: int
    missing_seconds: int
    totals: Totals
    thresholds: list[Threshold]
    verdict: Verdict


class Span(TypedDict, total=False):
    """All the measured windows together: from the first one's start to the last one's end."""

    start: int
    end: int
    seconds: int
    note: str


class PageRow(Latency, total=False):
    """One page label's figures over the measured windows."""

    label: str
    pages: int
    errors: int
    error_rate_pct: float
    pages_per_s: float
    bytes_in: int
    ttfb_ms: float | None
    connect_ms: float | None


class ErrorRow(TypedDict):
    kind: str
    count: int
    sample: str
    pages: list[str]


class WholeRun(TypedDict, total=False):
    pages: int
    hits: int
    errors: int
    bytes_in: int
    seconds: int


class Generator(TypedDict, total=False):
    """The load generator's own health in the measured seconds; saturated: its figures are suspect."""

    loop_lag_p99_ms: float | None
    cpu_pct_max: float | None
    saturated: Any  # the sentence whenever a measured second was over a limit (sustained or not)
    lagged: Any  # the sentence when those seconds fall short of saturation (the run still counts)


class Handoff(TypedDict, total=False):
    """A shard handed from one worker to another during the run (portal.runs.analysis.handoff_timeline)."""

    kind: str  # "stopped" or "silent"
    shard: int
    worker: str
    stopped_at_s: int
    resumed_at_s: int | None
    resumed_on: str | None
    gap_s: float | None
    text: str
    window: str | None
    missing_s: int | None


@dataclass(frozen=True)
class LevelFigure:
    """A stream, WebSocket or protocol figure of a level (a measured window): a column of the report's levels table
    and of levels.csv, present only when some level has it (never for a plain HTTP plan)."""

    key: str  # in the window's totals and the capacity level's row
    name: str  # the column's title
    title: str  # what it is, in words
    unit: str  # "ms", "/s" or "%"

    def text(self, value) -> str:
        from portal import formatting

        if self.unit == "ms":
            return formatting.duration_ms(value)
        if self.unit == "%":
            return formatting.percent(value)
        return formatting.rate(value)


LEVEL_FIGURE_COLUMNS = (
    LevelFigure("ttfe_p95_ms", "TTFE p95", "Time to first event p95 of the streamed responses", "ms"),
    LevelFigure("gap_p95_ms", "Gap p95", "Gap between events p95 of the streamed responses", "ms"),
    LevelFigure("rtt_p95_ms", "WS round trip p95", "WebSocket message round trip p95", "ms"),
    LevelFigure("ws_messages_per_s", "WS msgs/s", "WebSocket messages per second, sent and received", "/s"),
    LevelFigure("h2_share_pct", "HTTP/2", "The share of HTTP hits served over HTTP/2", "%"),
)


class CapacityLevel(TypedDict, total=False):
    """One level of a steps run, as the capacity table shows it."""

    label: str
    users: int  # the plan's users of the level (what it asked for)
    start: int
    end: int
    note: str
    apd_ms: float | None
    p95_ms: float | None
    pages_per_s: float | None
    error_rate_pct: float | None
    broken: list[str]  # the thresholds it broke, by name
    held: bool
    capacity: bool  # the highest level that held
    knee: bool  # after it, throughput grows less than half as fast as the users
    predicted_pages_per_s: float  # the scalability model's, where fitted
    # Streams, WebSocket sessions and protocols (issue 26), only when the level has them (LEVEL_FIGURE_COLUMNS)
    ttfe_p95_ms: float | None
    gap_p95_ms: float | None
    rtt_p95_ms: float | None
    ws_messages_per_s: float | None
    h2_share_pct: float | None


# The Universal Scalability Law fitted to a steps run's levels (portal.runs.capacity.scalability_model);
# functional syntax: "lambda" is a keyword in Python.
ScalabilityModel = TypedDict(
    "ScalabilityModel",
    {
        "fitted": bool,
        "linear": bool,  # levels that never saturated: no σ, κ or peak
        "reason": str,
        "concurrency": str,  # "users", or Little's law for arrival rates
        "lambda": float | None,
        "sigma": float | None,
        "kappa": float | None,
        "lambda_ci": list[float | None] | None,
        "sigma_ci": list[float | None] | None,
        "kappa_ci": list[float | None] | None,
        "peak_users": float | None,
        "peak_pages_per_s": float | None,
        "r2": float | None,
        # no model, a measured ceiling instead: the flat top's pages/s and the users where it was reached
        "ceiling_pages_per_s": float | None,
        "ceiling_users": float | None,
        "levels": list[dict[str, float]],  # n, measured and predicted pages/s
        "predicted_pages_per_s": list[float],
        "curve": Any,  # points to draw (portal.stats.scalability.curve)
        "last_level": float,
        "sentence": str,
    },
    total=False,
)


class Capacity(TypedDict, total=False):
    """A steps run's capacity: the highest level within the thresholds, the knee, the model (the report's chart)."""

    analysed: bool
    reason: str  # why not analysed
    search: bool  # a capacity search: ends done with its answer
    capacity_users: int | None
    capacity_pages_per_s: float | None
    capacity_apd_ms: float | None
    next_level_broke: str | None
    first_failure_users: int | None
    knee_users: int | None
    broken: dict[str, list[str]]  # users → the thresholds broken there
    thresholds_set: bool
    levels: list[CapacityLevel]
    sentence: str
    model: ScalabilityModel
    answer: str  # a capacity search's answer in words


class ChangePoint(TypedDict):
    """When a drift that crossed its limit began (portal.stats.changepoint)."""

    began_s: int
    began_interval_s: list[int]
    crossed_s: int
    shape: str


class Degradation(TypedDict, total=False):
    """A single-window run's degradation: did throughput fall or APD rise, when, and how it drifted."""

    settings: dict[str, float]  # drop_pct, rise_pct, sustain_s, steady_s
    window: list[int]  # [start, end]
    analysed: bool
    reason: str  # why not analysed
    degraded: bool
    kind: str | None
    onset_s: int | None
    time_to_degradation_s: int | None
    throughput_onset_s: int | None
    apd_onset_s: int | None
    steady_pages_per_s: float | None
    steady_apd_ms: float | None
    steady_window: list[int]
    degraded_pages_per_s: float | None
    degraded_apd_ms: float | None
    oscillation: Any
    excursions: int
    excursions_per_10_min: float | None
    drift_ms_per_hour: float | None
    pages_per_s_drift_per_hour: float | None
    drift_ms_per_hour_se: float | None
    pages_per_s_drift_per_hour_se: float | None
    sentence: str
    change_points: dict[str, ChangePoint]  # "throughput", "apd"
    crossed_s: int | None
    began_s: int | None
    began_interval_s: list[int] | None
    began_metric: str
    began_sentence: str


class ProtocolLatency(TypedDict):
    """A stream's or WebSocket session's histogram in ms (portal.runs.results.protocols._ms)."""

    p50: float
    p90: float
    p95: float
    p99: float
    max: float
    mean: float


class PerResponse(TypedDict):
    mean: float
    min: int
    max: int


class StreamEvents(TypedDict):
    total: int  # events of all streamed responses
    per_response: PerResponse


class StreamFigures(TypedDict):
    """A label's streamed responses (SSE or chunked) that ended."""

    responses: int
    ttfe_ms: ProtocolLatency | None  # time to first event
    gap_ms: ProtocolLatency | None  # gaps between consecutive events
    events: StreamEvents


class WebSocketFigures(TypedDict):
    """A label's WebSocket sessions: round trips (a send to the next expected message) and messages."""

    round_trips: int
    rtt_ms: ProtocolLatency | None
    sent: int
    received: int
    sent_per_s: float | None
    received_per_s: float | None


class ProtocolPage(TypedDict):
    """One label's streams, WebSocket sessions and protocols (portal.runs.results.protocols.label_figures): a row
    of the summary's ``protocols.pages``, of the drill-down's ``protocols`` and of protocols.csv."""

    label: str
    protocols: dict[str, int]  # hits by protocol, most first: {"h2": 30, "http/1.1": 2}
    h2_share_pct: float | None
    stream: StreamFigures | None  # None: the label streamed nothing
    websocket: WebSocketFigures | None  # None: no WebSocket session


class _ProtocolTotals(TypedDict):
    protocols: dict[str, int]
    streams: int
    events: int
    ttfe_ms: ProtocolLatency | None
    gap_ms: ProtocolLatency | None
    rtt_ms: ProtocolLatency | None
    ws_sent: int
    ws_received: int
    ws_messages_per_s: float | None


class ProtocolTotals(_ProtocolTotals, total=False):
    """All labels together over the measured windows; the p95s and the HTTP/2 share only when the run has them
    (the thresholds' figures, also in the summary's ``totals``)."""

    ttfe_p95_ms: float | None
    gap_p95_ms: float | None
    rtt_p95_ms: float | None
    h2_share_pct: float | None


class Protocols(TypedDict, total=False):
    """The summary's ``protocols`` section (portal.runs.results.protocols.summary_of): both parts, or absent (and
    read as {}) for a run without protocol rows — HTTP/1.1 only, recorded before issue 26, or imported."""

    pages: list[ProtocolPage]
    totals: ProtocolTotals


class _StopRule(TypedDict):
    metric: str  # error_rate_pct, pages_per_s, apd_ms, p95_ms … (workers.engine.stop_criteria.METRICS)
    window_s: int


class StopRule(_StopRule, total=False):
    """A stop criterion as the plan has it (``Rule.to_dict``): ``above`` or ``below``, as its metric goes."""

    above: float
    below: float


class StopWindow(TypedDict):
    """The figures of the window that broke a stop criterion (portal.runs.services.criteria.figures_of)."""

    from_s: int  # first second of the window, since the run's start
    to_s: int  # the second it ends at (exclusive)
    seconds: int
    pages: int
    errors: int
    error_rate_pct: float
    pages_per_s: float
    timed_pages: int | None  # the pages durations were measured on (None: the rule read no durations)
    apd_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None


class StoppedBy(TypedDict):
    """The stop criterion that ended the run (portal.runs.services.criteria.run_stop): ``Run.stopped_by``, copied
    into the summary when the run ends stopped."""

    rule: StopRule
    text: str  # the rule in words: "error rate > 50 % over 60 s"
    value: float | None  # the rule's figure over the window
    window: StopWindow
    sentence: str  # the rule and the window's figures in one sentence
    at: str  # ISO 8601: when the evaluator saw it broken


@dataclass(frozen=True)
class RunSummary:
    """The typed view of ``Run.summary``; ``of(run)`` reads it, ``to_json()`` writes the stored form."""

    window: Span = field(default_factory=dict)  # type: ignore[assignment]
    windows: list[Window] = field(default_factory=list)
    totals: Totals = field(default_factory=dict)  # type: ignore[assignment]
    distribution: list[list[float]] = field(default_factory=list)
    pages: list[PageRow] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)
    whole_run: WholeRun = field(default_factory=dict)  # type: ignore[assignment]
    generator: Generator = field(default_factory=dict)  # type: ignore[assignment]
    handoffs: list[Handoff] = field(default_factory=list)
    thresholds: list[Threshold] = field(default_factory=list)
    verdict: Verdict = None
    capacity: Capacity = field(default_factory=dict)  # type: ignore[assignment]  # steps runs (capacity.py)
    degradation: Degradation = field(default_factory=dict)  # type: ignore[assignment]  # one-window runs
    # streams, WebSocket sessions and protocols per page and in total (portal/runs/results/protocols.py); {} without
    protocols: Protocols = field(default_factory=dict)  # type: ignore[assignment]
    stopped_by: StoppedBy | None = None  # the stop criterion that ended the run (services/criteria.py)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # as stored, every key

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> RunSummary:
        """The stored summary (None or {} while a run has none): parts it lacks read as empty."""
        data = data or {}
        return cls(
            window=data.get("window") or {},
            windows=data.get("windows") or [],
            totals=data.get("totals") or {},
            distribution=data.get("distribution") or [],
            pages=data.get("pages") or [],
            errors=data.get("errors") or [],
            whole_run=data.get("whole_run") or {},
            generator=data.get("generator") or {},
            handoffs=data.get("handoffs") or [],
            thresholds=data.get("thresholds") or [],
            verdict=data.get("verdict"),
            capacity=data.get("capacity") or {},
            degradation=data.get("degradation") or {},
            protocols=data.get("protocols") or {},
            stopped_by=data.get("stopped_by"),
            raw=data,
        )

    @classmethod
    def of(cls, run) -> RunSummary:
        return cls.from_json(run.summary)

    def to_json(self) -> dict[str, Any] | None:
        """The stored form, every key as the analysis wrote it (None for a run without a summary)."""
        return self.raw or None

    def __bool__(self) -> bool:
        return bool(self.raw)

    @property
    def saturated(self) -> Any:
        """Why the generator's figures are in doubt in the measured seconds (None: they are not, or not known).

        Sustained saturation, or a few seconds above its limits (``lagged``); summaries written before
        ``saturated`` carried the short case keep it in ``lagged`` alone.
        """
        return self.generator.get("saturated") or self.generator.get("lagged")

    @property
    def saturation_sustained(self) -> bool:
        """The generator was saturated (not merely lagged a few seconds): its run is left out of comparisons."""
        return bool(self.saturated) and not self.generator.get("lagged")

    def page(self, label: str) -> PageRow | None:
        return next((p for p in self.pages if p.get("label") == label), None)

    @property
    def protocol_pages(self) -> list[ProtocolPage]:
        """Each label's streams, WebSocket sessions and protocols ([] for a run without any)."""
        return self.protocols.get("pages") or []

    @property
    def protocol_totals(self) -> ProtocolTotals:
        """All labels' streams, WebSocket sessions and protocols ({} for a run without any)."""
        return self.protocols.get("totals") or {}  # type: ignore[typeddict-item]

    def protocol_page(self, label: str) -> ProtocolPage | None:
        return next((p for p in self.protocol_pages if p.get("label") == label), None)

    @property
    def ws_round_trips(self) -> int:
        """The WebSocket round trips of all labels: the samples behind the round trip's percentiles."""
        return sum((p.get("websocket") or {}).get("round_trips") or 0 for p in self.protocol_pages)

    @property
    def _capacity_levels(self) -> bool:
        """Whether the levels table is the capacity's (analysed: sorted by users, held or broken) or the windows'."""
        return bool(self.capacity.get("analysed") and self.capacity.get("levels"))

    def _level_figures(self) -> list[dict[str, Any]]:
        """Each level's figures, in the levels table's order: the capacity's levels, else each window's totals."""
        if self._capacity_levels:
            return list(self.capacity["levels"])
        return [w.get("totals") or {} for w in self.windows] if len(self.windows) > 1 else []

    @property
    def level_columns(self) -> list[LevelFigure]:
        """The stream, WebSocket and protocol columns of the levels table: those some level has (none for a plain
        HTTP plan)."""
        levels = self._level_figures()
        return [c for c in LEVEL_FIGURE_COLUMNS if any(lv.get(c.key) is not None for lv in levels)]

    @property
    def level_rows(self) -> list[dict[str, Any]]:
        """The levels table's rows: ``{"level": the capacity level or the window, "figures": [{"column", "value",
        "text"}, …]}``, one figure per ``level_columns``."""
        columns = self.level_columns
        rows = self.capacity["levels"] if self._capacity_levels else self.windows if len(self.windows) > 1 else []
        out = []
        for row, figures in zip(rows, self._level_figures(), strict=True):
            cells = [{"column": c, "value": figures.get(c.key), "text": c.text(figures.get(c.key))} for c in columns]
            out.append({"level": row, "figures": cells})
        return out

    def threshold_rows(self) -> list[dict[str, Any]]:
        """Each threshold of each measured window, with the window's label (the API's ``thresholds``)."""
        return [{"window": w["label"], **t} for w in self.windows for t in w.get("thresholds") or []]
