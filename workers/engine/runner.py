"""The runner: virtual users run a load profile, aggregated per second, reported to a sink.

``run(plan, sink=...)`` is the engine's entry point. It knows nothing of Django
or Celery: the Celery task passes a sink that writes rows, tests pass a list's
``append``, the CLI prints.

**Virtual users.** Each user (numbered globally, see schedule.py) is a task
created just before its start offset (``_users``), then loops iterations: pick a test case by the mix, run its steps
in order (request, checks, think time). At its window's end a user finishes the
step in flight and starts no other, so the requests recorded are exactly the
requests the target served; think time is cut short at the window's end. A
failed step ends its iteration (after its think time, a new one starts): later
steps usually depend on earlier ones (log in, then open the inbox).

**Profiles** (shapes in schedule.py). ``constant``, ``ramp`` and ``steps`` are
closed models as above; in ``steps`` a user has one window per level it takes
part in, each a new session (a fresh client: cookies, connections).
``pacing`` is a closed model whose users start an iteration every ``pacing``
seconds on a fixed schedule (late: at once, catching up). ``arrival_rate`` is
an open model: a scheduler starts each arrival when due on a free user of a
pool that grows up to ``max_users`` (each with its own client); with none free
the arrival is dropped and counted in ``iterations_dropped``. In these two the
first page of an iteration is timed from when the iteration was *due*, so a
stalled target (or generator) cannot hide behind the users it slowed down (no
coordinated omission); the last page has no think time after it, since the
schedule decides when the next iteration starts.

**Generator health** (health.py). A watcher task records the event loop's lag
every 50 ms into each second's histogram, and each report carries this
process's CPU in that second, so a saturated generator can be told apart from
a slow target. Nothing grows with the run's length: a second's aggregates are
dropped once reported, so a 72-hour soak holds only the current seconds (and
the reports a failing sink has not accepted yet).

**What is measured.** Page duration is from sending a step's request to the
last byte of its body (redirects included), or of its last resource when the
step has resources (fetched in parallel after the main response, each a hit).
Only successful pages go into the
latency histogram: a refused connection takes microseconds and a timeout takes
exactly the timeout, so mixing them in would describe the failure, not the
site. (One exception: a complete page that failed only for being slower than
its ``max_duration_ms`` keeps its duration, or the percentiles would hide
exactly the slow pages.) Errors are counted per kind with a sample message instead. Requests still
in flight when a run is stopped or hits its hard end are *aborted*: counted in
``RunTotals.aborted``, never as samples, because their duration is unknown.

**Completion-second attribution.** A sample belongs to the second in which it
*completed* (``int(now - start)``), not the one in which it started. Once a
second is over, no later completion can change it, so its report can be sent
at once and never amended; a database row per second per label per shard is
then written once. (Start-second attribution would have to hold every second
open until the slowest request that started in it ends.)

**The sink runs in a worker thread,** one call at a time, in order of second.
A sink typically writes to a database; a slow write on the event loop would
stall every virtual user and show up as latency of the target. A thread keeps
the loop free, and (for Django) a thread is where the ORM may be called: it
refuses to run synchronously inside a running event loop. If the sink raises,
the report stays queued and is offered again a second later, so nothing is
lost while the database hiccups; reports are never merged or reordered.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import random
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import errors, health, safejson
from .datasets import DataFeed
from .gcpolicy import GcPolicy
from .h2 import make_client
from .histogram import Histogram
from .http import HttpClient, Response
from .mix import Mix
from .otlp import SpanExporter, traces_url
from .plan import DataSet, Plan, Step, Stream, TestCase, WebSocket, WsAction
from .schedule import arrivals, measurement_windows, shard_user_ids, total_duration, user_windows, whole_seconds
from .streams import StreamObserver
from .targets import DEFAULT_ALLOWLIST, Allowlist, TargetNotAllowed, check_url, parse_allowlist
from .tracecontext import TraceContext, trace_id_of
from .variables import (
    ExtractionError,
    Extractor,
    MissingVariable,
    Page,
    Template,
    VariableError,
    body_needs_json_check,
    check_json_body,
    compile_template,
    json_value_text,
    jsonpath_lookup,
    parse_jsonpath,
)
from .ws import open_websocket

log = logging.getLogger(__name__)

Sink = Callable[[dict[str, Any]], bool | str | None]
# What a sink may answer besides True (stop now): hand the rest of the schedule over. The run stops
# starting sessions, iterations and steps, lets requests in flight finish (up to DRAIN_GRACE_S),
# reports every second and returns with ``handed_off`` set; ``run(resume_at=...)`` continues it.
HANDOFF = "handoff"
DRAIN_GRACE_S = 5.0

HARD_END_GRACE_S = 5.0  # after total duration + request timeout, cancel whatever still runs
CANCEL_GRACE_S = 1.0  # how long cancelled users get to close their connections
SINK_RETRY_DELAY_S = 1.0
FINAL_SINK_ATTEMPTS = 3  # at the end, give up on a failing sink after this many tries
FINAL_DELIVERY_TIMEOUT_S = 15.0  # ...or after this long, if it hangs
PERCENTILES = (50, 90, 95, 99)
TICK_LATENESS_S = 0.002  # wake just after a second's end: loop timers have millisecond granularity
# Young collections every 100 ms: their pause grows with the objects touched since the last one. Once a second,
# 10,000 users at 2,000 requests/s left ~46,000 objects to scan, a 20 ms pause (bench scale, AMD EPYC VM).
GC_TICK_S = 0.1
ARRIVAL_BATCH = 64  # arrivals started back to back (catching up) before the scheduler lets the loop turn
SPAWN_LEAD_S = 0.05  # a closed-model user's task is created this long before its first session starts
SPAWN_BATCH = 256  # user tasks created back to back before the spawner lets the loop turn
# Iterations ended without a think time before one of them lets the loop turn (sleep(0)): a client that
# answers without waiting must not starve the others, but a loop turn per request costs ~5 % of it.
TURN_EVERY = 32


# -- results -------------------------------------------------------------------


@dataclass
class LabelTotals:
    """Whole-run figures for one label (``"<test case>: <step>"``)."""

    pages: int = 0
    hits: int = 0
    errors: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    error_samples: dict[str, str] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_out: int = 0
    histogram: Histogram = field(default_factory=Histogram)
    connect_histogram: Histogram = field(default_factory=Histogram)  # new connections of successful pages
    ttfb_histogram: Histogram = field(default_factory=Histogram)  # time to first byte of successful pages
    protocols: dict[str, int] = field(default_factory=dict)  # hits by protocol of the responses received
    # Streamed responses (a step with ``stream``): time to first event, gaps between events, events per response
    ttfe_histogram: Histogram = field(default_factory=Histogram)
    gap_histogram: Histogram = field(default_factory=Histogram)
    events_histogram: Histogram = field(default_factory=Histogram)  # values are event counts, not µs
    # WebSocket sessions: message round trips (a send to the expected reply), messages sent and received
    rtt_histogram: Histogram = field(default_factory=Histogram)
    ws_sent: int = 0
    ws_received: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = self._base_dict()
        if self.events_histogram.count:
            d["ttfe_ms"] = latency_ms(self.ttfe_histogram)
            d["gap_ms"] = latency_ms(self.gap_histogram)
            e = self.events_histogram
            d["events"] = {"total": e.sum, "per_response": {"mean": round(e.mean, 1), "min": e.min, "max": e.max}}
        if self.ws_sent or self.ws_received or self.rtt_histogram.count:
            d["rtt_ms"] = latency_ms(self.rtt_histogram)
            d["ws_messages"] = {"sent": self.ws_sent, "received": self.ws_received}
        return d

    def _base_dict(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "hits": self.hits,
            "errors": self.errors,
            "errors_by_kind": dict(self.errors_by_kind),
            "error_samples": dict(self.error_samples),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "latency_ms": latency_ms(self.histogram),
            "connect_ms": latency_ms(self.connect_histogram),
            "ttfb_ms": latency_ms(self.ttfb_histogram),
            "protocols": dict(self.protocols),
        }


@dataclass
class WindowTotals:
    """One measurement window (the hold, or a level's hold) over the whole seconds it covers: the summary's basis.

    The portal summarises a run over these seconds; the command line reports them
    too, so that a ramp-up (users connecting, caches warming) is kept out of the
    figures in both places.
    """

    label: str
    start_s: int  # first whole second inside the window
    end_s: int  # first whole second after it
    seconds: int = 0  # seconds of the window that were reported (fewer when the run stopped early)
    requests: int = 0
    pages: int = 0
    errors: int = 0
    histogram: Histogram = field(default_factory=Histogram)  # successful pages, all labels
    loop_lag: Histogram = field(default_factory=Histogram)  # generator health over the window (µs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "seconds": self.seconds,
            "requests": self.requests,
            "pages": self.pages,
            "errors": self.errors,
            "rps": round(self.requests / self.seconds, 1) if self.seconds else 0.0,
            "pages_per_s": round(self.pages / self.seconds, 1) if self.seconds else 0.0,
            "latency_ms": latency_ms(self.histogram),
            "loop_lag_ms": lag_ms(self.loop_lag),
        }


@dataclass
class RunTotals:
    """What ``run()`` returns: the sum of everything it reported, plus what it could not report."""

    requests: int = 0  # hits: every HTTP request, redirects included
    pages: int = 0  # steps completed, with or without error
    errors: int = 0
    aborted: int = 0  # requests in flight when stopped or at the hard end; not in any other figure
    duration_s: float = 0.0  # from the common start until the last user finished
    bytes_in: int = 0
    bytes_out: int = 0
    iterations_started: int = 0
    iterations_completed: int = 0
    iterations_dropped: int = 0  # due but not started: no free user (arrival_rate), a user too late (pacing), or a
    # closed-model session the loop reached only after its window closed
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    error_samples: dict[str, str] = field(default_factory=dict)
    histogram: Histogram = field(default_factory=Histogram)  # successful pages, all labels
    labels: dict[str, LabelTotals] = field(default_factory=dict)
    stopped: bool = False  # the sink asked to stop
    reports_sent: int = 0
    reports_dropped: int = 0  # the sink kept failing at the end
    loop_lag: Histogram = field(default_factory=Histogram)  # generator health: event-loop lag (µs), whole run
    cpu_pct_max: float = 0.0  # generator health: the busiest second's process CPU
    start_late_s: float = 0.0  # how long after the common start_at this run (shard) actually began
    handed_off: bool = False  # the sink asked for a handoff and the schedule was not over
    data_taken: dict[str, int] = field(default_factory=dict)  # unique data sets: rows taken, per test case
    windows: list[WindowTotals] = field(default_factory=list)  # the measurement windows' share of the above
    otlp: dict[str, Any] | None = None  # the plan's OTLP export (otlp.SpanExporter.stats()), when it has one

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "pages": self.pages,
            "errors": self.errors,
            "aborted": self.aborted,
            "duration_s": round(self.duration_s, 3),
            "rps": round(self.rps, 1),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "iterations_started": self.iterations_started,
            "iterations_completed": self.iterations_completed,
            "iterations_dropped": self.iterations_dropped,
            "errors_by_kind": dict(self.errors_by_kind),
            "error_samples": dict(self.error_samples),
            "latency_ms": latency_ms(self.histogram),
            "labels": {label: t.to_dict() for label, t in self.labels.items()},
            "loop_lag_ms": lag_ms(self.loop_lag),
            "cpu_pct_max": round(self.cpu_pct_max, 1),
            "start_late_ms": round(self.start_late_s * 1000, 2),
            "stopped": self.stopped,
            "handed_off": self.handed_off,
            "data_taken": dict(self.data_taken),
            "reports_sent": self.reports_sent,
            "reports_dropped": self.reports_dropped,
            "windows": [w.to_dict() for w in self.windows],
            **({"otlp": dict(self.otlp)} if self.otlp is not None else {}),
        }


def latency_ms(h: Histogram) -> dict[str, float]:
    """p50/p90/p95/p99/max/mean of a histogram in milliseconds (0 when empty)."""
    ps = h.percentiles(PERCENTILES)
    out = {f"p{q}": round(ps[q] / 1000, 3) for q in PERCENTILES}
    out["max"] = round(h.max / 1000, 3)
    out["mean"] = round(h.mean / 1000, 3)
    return out


def lag_ms(h: Histogram) -> dict[str, float]:
    """Event-loop lag as reported: ``{"p99", "max"}`` in milliseconds (0 when empty)."""
    return {"p99": round(h.percentile(99) / 1000, 3), "max": round(h.max / 1000, 3)}


# -- per-second aggregation --------------------------------------------------------


class _LabelInterval:
    __slots__ = (
        "pages",
        "hits",
        "errors",
        "errors_by_kind",
        "error_samples",
        "bytes_in",
        "bytes_out",
        "hist",
        "connect_hist",
        "ttfb_hist",
        "protocols",
        "ttfe_hist",
        "gap_hist",
        "events_hist",
        "rtt_hist",
        "ws_sent",
        "ws_received",
        "slowest_s",
        "slowest_trace",
    )

    def __init__(self) -> None:
        # Trace context: the slowest page of the second (its own request time) and the trace id it was sent with.
        self.slowest_s = 0.0
        self.slowest_trace = b""  # its traceparent line (tracecontext.py)
        self.rtt_hist: Histogram | None = None  # WebSocket steps: message round trips (send -> expected reply)
        self.ws_sent = self.ws_received = 0
        self.ttfe_hist: Histogram | None = None  # streamed responses only (created on the first one)
        self.gap_hist: Histogram | None = None
        self.events_hist: Histogram | None = None
        self.protocols: dict[str, int] = {}  # hits by protocol ("http/1.1", "h2"), of responses received
        self.pages = self.hits = self.errors = self.bytes_in = self.bytes_out = 0
        self.errors_by_kind: dict[str, int] = {}
        self.error_samples: dict[str, str] = {}
        self.hist = Histogram()
        self.connect_hist = Histogram()
        self.ttfb_hist = Histogram()

    def to_report(self) -> dict[str, Any]:
        d = self._base_report()
        if self.events_hist is not None:
            d["ttfe_hist"] = self.ttfe_hist.to_dict()
            d["gap_hist"] = self.gap_hist.to_dict()
            d["events_hist"] = self.events_hist.to_dict()
        if self.rtt_hist is not None:
            d["rtt_hist"] = self.rtt_hist.to_dict()
            d["ws_sent"] = self.ws_sent
            d["ws_received"] = self.ws_received
        return d

    def _base_report(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "hits": self.hits,
            "errors": self.errors,
            "errors_by_kind": dict(self.errors_by_kind),
            "error_samples": dict(self.error_samples),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "hist": self.hist.to_dict(),
            "connect_hist": self.connect_hist.to_dict(),
            "ttfb_hist": self.ttfb_hist.to_dict(),
            "protocols": dict(self.protocols),
            **(
                {"slowest": {"ms": round(self.slowest_s * 1000, 3), "trace_id": trace_id_of(self.slowest_trace)}}
                if self.slowest_trace
                else {}
            ),
        }

    def add_to(self, t: LabelTotals) -> None:
        t.pages += self.pages
        t.hits += self.hits
        t.errors += self.errors
        t.bytes_in += self.bytes_in
        t.bytes_out += self.bytes_out
        for kind, n in self.errors_by_kind.items():
            t.errors_by_kind[kind] = t.errors_by_kind.get(kind, 0) + n
        for kind, message in self.error_samples.items():
            t.error_samples.setdefault(kind, message)
        t.histogram.merge(self.hist)
        t.connect_histogram.merge(self.connect_hist)
        t.ttfb_histogram.merge(self.ttfb_hist)
        for protocol, n in self.protocols.items():
            t.protocols[protocol] = t.protocols.get(protocol, 0) + n
        if self.events_hist is not None:
            t.ttfe_histogram.merge(self.ttfe_hist)
            t.gap_histogram.merge(self.gap_hist)
            t.events_histogram.merge(self.events_hist)
        if self.rtt_hist is not None:
            t.rtt_histogram.merge(self.rtt_hist)
            t.ws_sent += self.ws_sent
            t.ws_received += self.ws_received


class _Interval:
    __slots__ = (
        "labels",
        "iterations_started",
        "iterations_completed",
        "iterations_dropped",
        "start_users",
        "peak_users",
        "loop_lag",
    )

    def __init__(self, users: int) -> None:
        self.labels: dict[str, _LabelInterval] = {}
        self.iterations_started = 0
        self.iterations_completed = 0
        self.iterations_dropped = 0
        self.loop_lag = Histogram()  # µs by which the loop watcher woke late in this second
        # Users active when the second began: an interval is created by the first event of its
        # second, and every change of the user count is such an event, so nothing changed before.
        self.start_users = users
        # The most users active at once during the second (the start, or right after an arrival),
        # so the report doesn't depend on when it runs: users leaving at 35.0 s ran in second 34.
        self.peak_users = users


@dataclass(frozen=True, slots=True, eq=False)
class _CompiledStep:
    """A step with everything precomputed that the hot loop needs.

    ``url``, ``headers`` and ``body`` are ready to send when the step has no
    ``{{placeholder}}`` (``templated`` is False): such a step costs nothing
    extra. Otherwise ``render(values)`` fills its templates (variables.py).
    """

    label: str
    case: str  # the test case's name (keys its data feed)
    method: str
    path: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    think_time: float
    timeout: float  # the step's own, else the plan's request_timeout
    expect_status: int | None
    text_present: str
    text_absent: str
    max_duration_ms: float | None
    extractors: tuple[Extractor, ...]
    resources: tuple[tuple[str, str], ...]  # (path, url)
    stream: Stream | None  # the main response is a stream: timed event by event
    websocket: WebSocket | None  # the step is a WebSocket session
    ws_actions: tuple[_WsCompiled, ...]
    data_set: DataSet | None  # the test case's
    templated: bool
    base_url: str
    path_template: Template | None
    header_templates: tuple[tuple[str, Template], ...]
    body_template: Template | None
    json_check: bool  # a json body with a placeholder outside a string: parse it after substitution
    missing: Mapping[str, str]  # variable name -> the sample message when it has no value

    @classmethod
    def build(cls, plan: Plan, tc: TestCase, step: Step) -> _CompiledStep:
        headers = dict(step.headers)
        content_type = _CONTENT_TYPES.get(step.body_type)
        if content_type and not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = content_type
        path_template = compile_template(step.path, "path")
        header_templates = tuple(
            (name, t) for name, value in headers.items() if (t := compile_template(value, "header")) is not None
        )
        body_template = compile_template(step.body, step.body_type)
        names = [*(path_template.names if path_template else ()), *(n for _, t in header_templates for n in t.names)]
        names += body_template.names if body_template else ()
        ws_actions = tuple(_WsCompiled.build(a) for a in (step.websocket.actions if step.websocket else ()))
        names += [n for a in ws_actions if a.template is not None for n in a.template.names]
        return cls(
            label=plan.label(tc, step),
            case=tc.name,
            method=step.method,
            path=step.path,
            url=plan.url_for(step),
            headers=headers,
            body=step.body.encode(),
            think_time=step.think_time,
            timeout=plan.request_timeout if step.timeout is None else step.timeout,
            expect_status=step.expect_status,
            text_present=step.text_present,
            text_absent=step.text_absent,
            max_duration_ms=step.max_duration_ms,
            extractors=tuple(Extractor(e.name, e.source, e.expression) for e in step.extract),
            resources=tuple((p, plan.base_url + p) for p in step.resources),
            stream=step.stream,
            websocket=step.websocket,
            ws_actions=ws_actions,
            data_set=tc.data_set,
            templated=bool(path_template or header_templates or body_template),
            base_url=plan.base_url,
            path_template=path_template,
            header_templates=header_templates,
            body_template=body_template,
            json_check=body_template is not None and step.body_type == "json" and body_needs_json_check(step.body),
            missing={name: _missing_message(name, tc, step) for name in names},
        )

    def render(self, values: Mapping[str, str]) -> tuple[str, Mapping[str, str], bytes]:
        """(url, headers, body) with the values filled in; raises VariableError (nothing is to be sent)."""
        url = self.url if self.path_template is None else self.base_url + self.path_template.render(values)
        headers = self.headers
        if self.header_templates:
            headers = dict(headers)
            for name, template in self.header_templates:
                headers[name] = template.render(values)
        body = self.body
        if self.body_template is not None:
            text = self.body_template.render(values)
            if self.json_check:
                check_json_body(text, self.body_template)
            body = text.encode()
        return url, headers, body


@dataclass(frozen=True, slots=True, eq=False)
class _WsCompiled:
    """A WebSocket action, compiled: its send template, its check's regex or JSON path, its extractors."""

    action: WsAction
    template: Template | None
    regex: re.Pattern[str] | None
    path: tuple[str | int, ...]
    extractors: tuple[Extractor, ...]
    kind: str  # the action's, and its text, "contains" value and timeout, at hand for the runner's driver
    text: str
    contains: str | None
    timeout: float | None

    @classmethod
    def build(cls, a: WsAction) -> _WsCompiled:
        return cls(
            action=a,
            template=compile_template(a.text, "raw") if a.kind == "send" else None,
            regex=re.compile(a.value) if a.check == "regex" else None,
            path=parse_jsonpath(a.value) if a.check == "json" else (),
            extractors=tuple(Extractor(e.name, e.source, e.expression) for e in a.extract),
            kind=a.kind,
            text=a.text,
            contains=a.value if a.kind == "expect" and a.check == "contains" else None,
            timeout=a.timeout,
        )

    def matches(self, text: str) -> bool:
        a = self.action
        if a.check == "contains":
            return a.value in text
        if a.check == "regex":
            return self.regex.search(text) is not None
        try:
            value = jsonpath_lookup(safejson.loads(text), self.path)
        except (ValueError, LookupError):
            return False
        return a.equals is None or json_value_text(value) == a.equals

    def describe(self) -> str:
        a = self.action
        if a.check == "json" and a.equals is not None:
            return f"{a.value} == {a.equals!r}"
        return f"{a.check} {a.value!r}"


class _WsCheckFailed(Exception):
    pass


class _WsDriver:
    """Runs a WebSocket step's sends and expects from the session's own callbacks.

    A message that comes is checked (and the next sends made) in the session's
    ``data_received``, not in the user's task: the task sleeps once per run of
    sends and expects (up to a ``wait`` or the end of the actions), not once per
    message. The same work, in the same order, as a loop over the actions would
    do: the round trip from the clock reading before the send to the message's
    arrival stamp, messages that do not match skipped until the expectation's
    deadline (``timeout`` or the step's), extraction into the user's variables.
    The deadline is a single loop timer per session that moves on to the current
    expectation's deadline when it fires early (at most one timer per timeout
    period, not one per message).
    """

    __slots__ = (
        "loop",
        "session",
        "actions",
        "values",
        "step_timeout",
        "observe",
        "rtts",
        "i",
        "last_send",
        "deadline",
        "limit",
        "timer",
        "done",
        "busy",
        "again",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        session: Any,
        actions: tuple[_WsCompiled, ...],
        values: dict[str, str],
        step_timeout: float,
        observe: Callable[..., None] | None,
    ) -> None:
        self.loop = loop
        self.session = session
        self.actions = actions
        self.values = values
        self.step_timeout = step_timeout
        self.observe = observe
        self.rtts: list[float] = []
        self.i = 0
        self.last_send: float | None = None
        self.deadline = 0.0  # the current expectation's deadline (loop time), 0 when none is waiting
        self.limit = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.done: asyncio.Future[int] | None = None
        self.busy = False
        self.again = False

    def run(self, i: int) -> asyncio.Future[int]:
        """Run the actions from ``i`` on; the future gives the index of the next ``wait`` (or the end)."""
        self.i = i
        self.done = self.loop.create_future()
        self.session.listener = self.pump
        self.pump()
        return self.done

    def detach(self) -> None:
        self.session.listener = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def pump(self) -> None:
        """Called when the session has news (a message, its end) and by ``run``: the actions from ``self.i`` on,
        as far as the messages that came allow; the future is resolved at the next wait (or the end)."""
        if self.busy:  # news while a send is under way: looked at when the current pass ends
            self.again = True
            return
        done = self.done
        if done is None or done.done():  # (only this method and the timer's _finish resolve it)
            return
        self.busy = True
        session = self.session
        messages = session.messages
        actions = self.actions
        observe = self.observe
        n = len(actions)
        i = self.i
        try:
            while True:
                self.again = False
                waiting = False
                while i < n:
                    compiled = actions[i]
                    kind = compiled.kind
                    if kind == "send":
                        template = compiled.template
                        text = compiled.text if template is None else template.render(self.values)
                        self.last_send = _perf_counter()
                        session.send_text(text)
                        if observe is not None:
                            observe("sent", text)
                        i += 1
                        continue
                    if kind == "wait":
                        break
                    if not self.deadline:
                        limit = compiled.timeout
                        if limit is None:
                            limit = self.step_timeout
                        self.limit = limit
                        self.deadline = deadline = self.loop.time() + limit
                        if self.timer is None:
                            self.timer = self.loop.call_at(deadline, self._expired)
                    contains = compiled.contains
                    while messages:
                        message, arrived = messages.popleft()
                        text = message if isinstance(message, str) else message.decode("utf-8", "replace")
                        if observe is not None:
                            observe("received", text)
                        if contains is not None:
                            if contains in text:
                                break
                        elif compiled.matches(text):
                            break
                    else:
                        self.i = i
                        if session.error is not None:
                            raise session.error
                        waiting = True  # for the next message
                        break
                    self.deadline = 0.0
                    last_send = self.last_send
                    if last_send is not None:
                        self.rtts.append(arrived - last_send)
                        self.last_send = None
                    if compiled.extractors:
                        self.i = i
                        page = Page(text.encode(), _JSON_HEADERS)
                        for extractor in compiled.extractors:
                            self.values[extractor.name] = extractor.extract(page)
                    i += 1
                self.i = i
                if not waiting:  # at a wait, or the end
                    self._finish(i)
                    return
                if not self.again:
                    return
        except BaseException as exc:
            self._finish(exc)
        finally:
            self.busy = False

    def _finish(self, result: int | BaseException) -> None:
        done = self.done
        self.session.listener = None
        self.deadline = 0.0
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if done is not None and not done.done():
            if isinstance(result, BaseException):
                done.set_exception(result)
            else:
                done.set_result(result)

    def _expired(self) -> None:
        self.timer = None
        deadline = self.deadline
        if not deadline or self.done is None or self.done.done():
            return
        if self.loop.time() < deadline:  # an earlier expectation's deadline: on to the current one
            self.timer = self.loop.call_at(deadline, self._expired)
            return
        compiled = self.actions[self.i]
        self._finish(_WsCheckFailed(f"no message matching {compiled.describe()} within {self.limit:g} s"))


_perf_counter = time.perf_counter  # (a module global: one look-up less per WebSocket send)
_CONTENT_TYPES = {"form": "application/x-www-form-urlencoded", "json": "application/json"}
RESOURCE_CONNECTIONS = 6  # resources fetched at once per page, as a browser per host
_NO_HEADERS: Mapping[str, str] = {}
_JSON_HEADERS: Mapping[str, str] = {"content-type": "application/json; charset=utf-8"}
DATA_EXHAUSTED_PAUSE_S = 1.0  # closed model: a user whose test case has no row left waits this long before a new draw


def _resumed(windows: list[tuple[float, float]], resume_at: float) -> list[tuple[float, float]]:
    """A user's windows from ``resume_at`` on: those over are dropped, the one under way starts a new session now."""
    if resume_at <= 0:
        return windows
    return [(max(a, resume_at), b) for a, b in windows if b > resume_at]


def _missing_message(name: str, tc: TestCase, step: Step) -> str:
    variable = "{{" + name + "}}"
    later = [s.name for s in tc.steps[tc.steps.index(step) + 1 :] if any(e.name == name for e in s.extract)]
    if later:
        return errors.short(f"{variable} has no value: only a later step ({later[0]!r}) extracts it")
    no_column = " and the data set has no such column" if tc.data_set is not None else ""
    return f"{variable} has no value: no earlier step extracted it{no_column}"


# -- the sink, in its own thread ------------------------------------------------------


class _Reporter:
    """Delivers reports to the sink sequentially from a one-thread executor; keeps failed ones queued."""

    def __init__(self, sink: Sink | None, loop: asyncio.AbstractEventLoop) -> None:
        self._sink = sink
        self._loop = loop
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plimsoll-sink")
        self._pending: deque[dict[str, Any]] = deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self.stop_requested = asyncio.Event()
        self.handoff_requested = asyncio.Event()
        self.sent = 0
        self.dropped = 0
        self._task = loop.create_task(self._deliver())

    def push(self, report: dict[str, Any]) -> None:
        self._pending.append(report)
        self._wakeup.set()

    async def _deliver(self) -> None:
        failures = 0
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            report = self._pending[0]
            try:
                if self._sink is None:
                    answer = None
                else:
                    answer = await self._loop.run_in_executor(self._executor, self._sink, report)
            except Exception:
                failures += 1
                log.exception(
                    "the sink failed on the report for second %s (attempt %d); it stays queued",
                    report["second"],
                    failures,
                )
                if self._closing and failures >= FINAL_SINK_ATTEMPTS:
                    self._drop_pending()
                    return
                await asyncio.sleep(SINK_RETRY_DELAY_S)
                continue
            failures = 0
            self._pending.popleft()
            self.sent += 1
            if answer == HANDOFF:
                self.handoff_requested.set()
            elif answer:
                self.stop_requested.set()

    def _drop_pending(self) -> None:
        if self._pending:
            log.error("giving up on %d report(s) the sink did not accept", len(self._pending))
        self.dropped += len(self._pending)
        self._pending.clear()

    async def close(self, timeout: float = FINAL_DELIVERY_TIMEOUT_S) -> None:
        """Deliver what is queued (bounded in time), then release the thread."""
        self._closing = True
        self._wakeup.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            log.error("the sink did not finish within %.0f s", timeout)
            self._task.cancel()
            self._drop_pending()
        finally:
            self._executor.shutdown(wait=False)

    def abandon(self) -> None:
        self._task.cancel()
        self._executor.shutdown(wait=False)


# -- the run -----------------------------------------------------------------------


class _Run:
    def __init__(
        self,
        plan: Plan,
        sink: Sink | None,
        user_ids: list[int],
        seed: Any,
        client_factory: Callable[[], HttpClient],
        shard: tuple[int, int] | None = None,
        resume_at: float = 0.0,
        data_taken: Mapping[str, int] | None = None,
        exporter: SpanExporter | None = None,
    ) -> None:
        self.plan = plan
        self.exporter = exporter  # the plan's OTLP export of sampled requests' spans (otlp.py), or None
        # A continuation: the part of the schedule before this offset ran elsewhere (or not at all).
        self.resume_at = resume_at
        self.data_taken = dict(data_taken or {})
        self.draining = False  # a handoff: start nothing new
        self.in_flight = 0  # pages being requested now (a drain waits for them)
        self.unturned = 0  # iterations ended without a think time since the last forced loop turn
        self.profile = plan.profile
        self.shard = shard  # arrival_rate: (shard_no, shard_count) of the arrivals this run starts
        self.timeout = plan.request_timeout
        self.think_mode = plan.think_time_mode
        self.user_ids = user_ids
        self.user_tasks: list[asyncio.Task[None]] = []  # the closed model's users, as _users() creates them
        self.seed = seed
        self.client_factory = client_factory
        self.sink = sink
        self.cases = cases = [tuple(_CompiledStep.build(plan, tc, s) for s in tc.steps) for tc in plan.test_cases]
        self.mix: Mix[tuple[_CompiledStep, ...]] = Mix(cases, [tc.weight for tc in plan.test_cases])
        self.totals = RunTotals(
            windows=[WindowTotals(label, *whole_seconds(a, b)) for a, b, label in measurement_windows(self.profile)],
            data_taken=dict(self.data_taken),
        )
        self.active = 0
        self.intervals: dict[int, _Interval] = {}
        self.next_second = 0  # the first second not yet reported
        self.loop = asyncio.get_running_loop()
        self.t0 = 0.0  # the common start on the loop's clock (timers)
        self.t0_perf = 0.0  # the same instant on time.perf_counter()'s clock (when iterations were due)
        self._cpu_mark = (time.perf_counter(), time.process_time())
        self.gc = GcPolicy()
        self.sessions_closed = 0  # user sessions (clients) closed: their objects may be garbage now

    # -- orchestration --

    async def execute(self, start_at: float | None) -> RunTotals:
        loop = self.loop
        self.gc.start()  # first: its full collection must not delay the start
        wall = time.time()
        perf = time.perf_counter()
        if start_at is None:
            start_at = wall
        self.t0 = t0 = loop.time() + (start_at - wall)
        self.t0_perf = perf + (start_at - wall)
        # A step may have a longer timeout of its own than the plan's: the hard end waits for it.
        longest = max([self.timeout] + [s.timeout for steps in self.cases for s in steps])
        hard_end = t0 + total_duration(self.profile) + longest + HARD_END_GRACE_S
        reporter = _Reporter(self.sink, loop)
        self.reporter = reporter
        tasks: list[asyncio.Task[None]] = []
        housekeeping: list[asyncio.Task[None]] = []  # reports, loop watcher, garbage collection
        finished = False
        try:
            await _sleep_until(loop, t0 + self.resume_at)
            # How late this shard began after the common start (a busy worker, a slow broker).
            self.totals.start_late_s = max(0.0, loop.time() - t0 - self.resume_at)
            if self.resume_at > 0:
                # A continuation starts the schedule where the clock is: the seconds it missed are a gap.
                self.resume_at = loop.time() - t0
            # A shard that starts late reports from the second it started, not from 0.
            self.next_second = max(0, int(loop.time() - t0))
            self._cpu_mark = (time.perf_counter(), time.process_time())
            if self.profile.open_model:
                tasks = [loop.create_task(self._arrivals())]
            elif self.user_ids:
                tasks = [loop.create_task(self._users())]
            housekeeping = [loop.create_task(c) for c in (self._tick(), self._watch_loop(), self._collect_garbage())]
            users_done = loop.create_task(self._wait_users(tasks))
            stop = loop.create_task(reporter.stop_requested.wait())
            handoff = loop.create_task(reporter.handoff_requested.wait())
            done, _ = await asyncio.wait(
                {users_done, stop, handoff},
                timeout=max(0.0, hard_end - loop.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if handoff in done and not users_done.done():
                await self._drain(users_done)
                done = {users_done} if users_done.done() else done
                self.totals.handed_off = True
            stop.cancel()
            handoff.cancel()
            if not users_done.done():
                if handoff in done:
                    log.info("handoff: cancelling the virtual users between requests (%d active)", self.active)
                elif stop in done:
                    self.totals.stopped = True
                    log.info("stop requested: cancelling the virtual users (%d active)", self.active)
                else:
                    log.warning("hard end reached: cancelling the virtual users still running")
                users_done.cancel()
                await self._cancel(tasks)
            end = loop.time()
            for t in housekeeping:
                t.cancel()
            self._flush_until(int(end - t0) + 1)  # every second left, the last partial one included
            await reporter.close()
            finished = True
        finally:
            self.gc.stop()
            if not finished:  # run() itself was cancelled or failed: leave nothing running
                for t in housekeeping:
                    t.cancel()
                await self._cancel(tasks)
                reporter.abandon()
        totals = self.totals
        if self.exporter is not None:  # the last spans flushed off the loop, bounded (otlp.FLUSH_S)
            totals.otlp = await loop.run_in_executor(None, self.exporter.close)
        totals.duration_s = max(0.0, end - t0)
        totals.reports_sent = reporter.sent
        totals.reports_dropped = reporter.dropped
        crashed = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
        if crashed:
            raise crashed[0]
        return totals

    async def _drain(self, users_done: asyncio.Task[None]) -> None:
        """A handoff: start no session, iteration or step; wait (bounded) for the pages in flight to complete.

        Users then sit in think times or wait for their next start, where cancelling them loses
        no request; one still in flight after ``DRAIN_GRACE_S`` is aborted (counted as such).
        """
        self.draining = True
        log.info("handoff requested: %d page(s) in flight", self.in_flight)
        deadline = self.loop.time() + DRAIN_GRACE_S
        while self.in_flight and self.loop.time() < deadline and not users_done.done():
            await asyncio.sleep(0.01)

    async def _wait_users(self, tasks: list[asyncio.Task[None]]) -> None:
        if tasks:
            await asyncio.wait(tasks)
        else:  # a shard without users still beats its heart for the run's duration
            await _sleep_until(self.loop, self.t0 + total_duration(self.profile))

    async def _cancel(self, tasks: list[asyncio.Task[None]]) -> None:
        running = [t for t in tasks if not t.done()]
        for t in running:
            t.cancel()
        if running:
            await asyncio.wait(running, timeout=CANCEL_GRACE_S)

    async def _tick(self) -> None:
        loop = self.loop
        while True:
            current = int(loop.time() - self.t0)
            self._flush_until(current)
            await _sleep_until(loop, self.t0 + current + 1 + TICK_LATENESS_S)

    async def _collect_garbage(self) -> None:
        """The young generations, collected and frozen in small batches (see gcpolicy.py)."""
        while True:
            await asyncio.sleep(GC_TICK_S)
            self.gc.tick(self.sessions_closed)

    async def _watch_loop(self) -> None:
        """Generator health: how late the loop wakes a timer (its lag), into each second's histogram."""
        while True:
            expected = time.perf_counter() + health.LAG_TICK_S
            await asyncio.sleep(health.LAG_TICK_S)
            lag = time.perf_counter() - expected
            self._interval().loop_lag.record(lag * 1_000_000 if lag > 0 else 0)

    def _cpu_pct(self) -> float:
        """This process's CPU (all threads) since the last call, in % of the wall time."""
        perf, cpu = time.perf_counter(), time.process_time()
        perf0, cpu0 = self._cpu_mark
        self._cpu_mark = (perf, cpu)
        return 100.0 * (cpu - cpu0) / (perf - perf0) if perf > perf0 else 0.0

    def _flush_until(self, end_second: int) -> None:
        """Report every second before ``end_second`` that is not reported yet."""
        if end_second <= self.next_second:
            return
        cpu_pct = self._cpu_pct()  # normally one second; several at once share the figure
        for s in range(self.next_second, end_second):
            self.reporter.push(self._report(s, cpu_pct))
        self.next_second = end_second

    def _report(self, second: int, cpu_pct: float = 0.0) -> dict[str, Any]:
        interval = self.intervals.pop(second, None)
        if interval is None:
            # Nothing happened in that second, so its users were those active when the next
            # interval began (or now, if none has begun yet).
            later = [k for k in self.intervals if k > second]
            interval = _Interval(self.intervals[min(later)].start_users if later else self.active)
        t = self.totals
        windows = [w for w in t.windows if w.start_s <= second < w.end_s]
        for w in windows:
            w.seconds += 1
        labels = {}
        for label, li in interval.labels.items():
            labels[label] = li.to_report()
            lt = t.labels.get(label)
            if lt is None:
                lt = t.labels[label] = LabelTotals()
            li.add_to(lt)
            t.requests += li.hits
            t.pages += li.pages
            t.errors += li.errors
            t.bytes_in += li.bytes_in
            t.bytes_out += li.bytes_out
            for kind, n in li.errors_by_kind.items():
                t.errors_by_kind[kind] = t.errors_by_kind.get(kind, 0) + n
            for kind, message in li.error_samples.items():
                t.error_samples.setdefault(kind, message)
            t.histogram.merge(li.hist)
            for w in windows:
                w.requests += li.hits
                w.pages += li.pages
                w.errors += li.errors
                w.histogram.merge(li.hist)
        t.iterations_started += interval.iterations_started
        t.iterations_completed += interval.iterations_completed
        t.iterations_dropped += interval.iterations_dropped
        t.loop_lag.merge(interval.loop_lag)
        for w in windows:
            w.loop_lag.merge(interval.loop_lag)
        t.cpu_pct_max = max(t.cpu_pct_max, cpu_pct)
        return {
            "second": second,
            "active_users": interval.peak_users,
            "iterations_started": interval.iterations_started,
            "iterations_completed": interval.iterations_completed,
            "iterations_dropped": interval.iterations_dropped,
            "loop_lag_ms": lag_ms(interval.loop_lag),
            "cpu_pct": round(cpu_pct, 1),
            "labels": labels,
        }

    def _interval(self) -> _Interval:
        s = int(self.loop.time() - self.t0)
        if s < self.next_second:  # never touch a second already reported
            s = self.next_second
        interval = self.intervals.get(s)
        if interval is None:
            interval = self.intervals[s] = _Interval(self.active)
        return interval

    # -- a virtual user (closed model) --

    def _new_client(self) -> HttpClient:
        """A fresh client for a user; with the plan's trace context, its own source of traceparent headers."""
        client = self.client_factory()
        if self.plan.trace_context and hasattr(client, "trace"):
            client.trace = TraceContext(self.plan.trace_sample_rate)
            if self.exporter is not None:
                client.export_spans(self.exporter)
        return client

    def _rng(self, k: int) -> random.Random:
        return random.Random(f"{self.seed}:{k}") if self.seed is not None else random.Random()

    async def _users(self) -> None:
        """The closed model's virtual users: each one's task created just before its first session, then awaited.

        Created all at once, 10,000 tasks ran their first steps in one loop turn
        (a ~80 ms stall at the start of every large run); created when due, in
        batches of ``SPAWN_BATCH``, the cost spreads over the ramp-up, and a user
        whose first level comes later holds no coroutine until then. Cancelled
        (a stop, the hard end), it cancels the users and gives them
        ``CANCEL_GRACE_S`` to close their connections. A user that failed
        raises here, after the others have finished.
        """
        loop = self.loop
        firsts = sorted(
            (windows[0][0], k, windows)
            for k in self.user_ids
            if (windows := _resumed(user_windows(k, self.profile), self.resume_at))
        )
        users = self.user_tasks
        try:
            for n, (start, k, windows) in enumerate(firsts):
                if n and n % SPAWN_BATCH == 0:
                    await asyncio.sleep(0)
                await _sleep_until(loop, self.t0 + start - SPAWN_LEAD_S)
                users.append(loop.create_task(self._user(k, windows)))
            if users:
                await asyncio.wait(users)
        finally:
            running = [t for t in users if not t.done()]
            for t in running:
                t.cancel()
            if running:
                await asyncio.wait(running, timeout=CANCEL_GRACE_S)
        for t in users:
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]

    async def _user(self, k: int, windows: list[tuple[float, float]]) -> None:
        """Virtual user ``k`` of a closed model: one session per window (one per level it is in, for steps)."""
        rng = self._rng(k)
        for start_offset, stop_offset in windows:
            await self._session(k, rng, start_offset, stop_offset)

    async def _session(self, k: int, rng: random.Random, start_offset: float, stop_offset: float) -> None:
        """One window of user ``k``: a fresh client (cookies, connections), then iterations until the window ends.

        With ``pacing``, iteration i is due at ``start_offset + i * pacing``:
        the user waits for it when early and starts at once when late (the
        schedule does not slip, so a late user catches up), and the first page
        is timed from when the iteration was due. Iterations that fall due
        before the window ends but could not start (the user was still busy)
        are counted as dropped.
        """
        loop = self.loop
        stop_at = self.t0 + stop_offset
        pacing = self.profile.pacing if self.profile.kind == "pacing" else 0.0
        n_due = math.ceil((stop_offset - start_offset) / pacing - 1e-9) if pacing else 0  # pacing: iterations due
        await _sleep_until(loop, self.t0 + start_offset)
        if self.draining:
            return
        if loop.time() >= stop_at:
            # Due inside its window, reached only after it closed (a loop that lags: an overloaded generator).
            # Starting it now would send requests after the window's end, so it does not start; its iterations
            # were due, so they count as dropped (its first one, or every one pacing had due) and the report
            # shows users that never ran instead of silently missing them.
            if start_offset < stop_offset:  # (an empty window had nothing due)
                self._interval().iterations_dropped += n_due or 1
            return
        client = self._new_client()
        interval = self._interval()  # before the change: a new interval notes the users at its start
        self.active += 1
        interval.peak_users = max(interval.peak_users, self.active)
        i = 0  # pacing: the next iteration, due at start_offset + i * pacing
        try:
            while True:
                if pacing:
                    if i >= n_due:
                        break
                    await _sleep_until(loop, self.t0 + start_offset + i * pacing)
                if loop.time() >= stop_at or self.draining:
                    break
                due_perf = None
                if pacing:
                    due_perf = self.t0_perf + start_offset + i * pacing
                    i += 1
                steps = self.mix.choose(rng)
                values = self._new_iteration(k, rng, steps)
                if values is None:  # its unique data set is used up: not started, counted as dropped
                    if not pacing:  # (pacing waits for the next due time anyway)
                        # _sleep_until, not asyncio.sleep: timers may wake a hair early, and a pause cut
                        # to the window's last instant would then spin, dropping an iteration each turn.
                        await _sleep_until(loop, min(loop.time() + DATA_EXHAUSTED_PAUSE_S, stop_at))
                    continue
                self._interval().iterations_started += 1
                if not await self._iteration(client, rng, steps, values, stop_at, due_perf):
                    break
            if i < n_due:
                self._interval().iterations_dropped += n_due - i
        finally:
            self._interval()  # before the change, as above
            self.active -= 1
            await client.close()
            self.sessions_closed += 1

    async def _iteration(
        self,
        client: HttpClient,
        rng: random.Random,
        steps: tuple[_CompiledStep, ...],
        values: dict[str, str],
        stop_at: float,
        due_perf: float | None = None,
    ) -> bool:
        """One iteration: its steps in order. False when the window closed during a think time (the user leaves).

        ``due_perf`` (pacing and arrival_rate): when the iteration was due, on
        ``time.perf_counter()``'s clock. Its first page is then timed from that
        moment rather than from when it was sent (no coordinated omission), and
        no think time follows its last page: the schedule, not the user,
        decides when the next iteration starts.
        """
        loop = self.loop
        slept = False
        last = len(steps) - 1
        for i, step in enumerate(steps):
            if i and (loop.time() >= stop_at or self.draining):
                break
            late_s = 0.0
            if i == 0 and due_perf is not None:
                late_s = max(0.0, time.perf_counter() - due_perf)
            self.in_flight += 1
            try:
                ok = await self._step(client, step, values, late_s)
            finally:
                self.in_flight -= 1
            if ok and i == last:
                self._interval().iterations_completed += 1
            if i == last and due_perf is not None:
                break
            think = draw_think_time(self.think_mode, step.think_time, rng) if step.think_time > 0 else 0.0
            if think > 0:
                remaining = stop_at - loop.time()
                if think >= remaining:
                    # The next step would start after the window: think until its end, then leave.
                    # (Returning rather than re-checking the clock: timers may wake a hair early.)
                    if remaining > 0:
                        await asyncio.sleep(remaining)
                    return False
                await asyncio.sleep(think)
                slept = True
            if not ok:
                break
        if not slept:
            # Let the loop turn (and its clock advance) even if a client answered without waiting: every
            # TURN_EVERY such iterations (of all users), since a client that waited has let it turn already.
            self.unturned += 1
            if self.unturned >= TURN_EVERY:
                self.unturned = 0
                await asyncio.sleep(0)
        return True

    # -- arrivals (open model) --

    async def _arrivals(self) -> None:
        """Start each of this shard's arrivals when due, each on a free user of the pool.

        Users are created when needed, up to this shard's share of
        ``max_users`` (its ``user_ids``), each with its own client (cookies,
        connections), and reused once free. An arrival that finds no free user
        is dropped and counted: queueing it would hide the target's slowness
        inside the generator.
        """
        loop = self.loop
        stop_at = self.t0 + total_duration(self.profile)
        pool: list[_PoolUser] = []
        idle: list[_PoolUser] = []  # free users, the most recently freed last (its connection is warm)
        inflight: set[asyncio.Task[None]] = set()
        crashed: list[BaseException] = []  # a bug in an iteration: raised at the end, as a closed user's would be

        def done(task: asyncio.Task[None]) -> None:
            inflight.discard(task)
            if not task.cancelled() and task.exception() is not None:
                crashed.append(task.exception())

        backlog = 0
        try:
            for _, offset in arrivals(self.profile, self.shard):
                if offset < self.resume_at:  # a continuation: those were due before it (elsewhere, or in the gap)
                    continue
                if self.draining:
                    break
                due = self.t0 + offset
                if due > loop.time():
                    await _sleep_until(loop, due)
                    backlog = 0
                else:
                    backlog += 1
                    if backlog % ARRIVAL_BATCH == 0:
                        await asyncio.sleep(0)  # catching up: let the users run too
                if idle:
                    user = idle.pop()
                elif len(pool) < len(self.user_ids):
                    k = self.user_ids[len(pool)]
                    user = _PoolUser(k, self._new_client(), self._rng(k))
                    pool.append(user)
                else:
                    self._interval().iterations_dropped += 1
                    continue
                task = loop.create_task(self._arrival(user, self.t0_perf + offset, stop_at, idle))
                inflight.add(task)
                task.add_done_callback(done)
            if inflight:
                await asyncio.wait(set(inflight))
            if crashed:
                raise crashed[0]
        finally:
            running = [t for t in inflight if not t.done()]
            for t in running:
                t.cancel()
            if running:
                await asyncio.wait(running, timeout=CANCEL_GRACE_S / 2)
            await asyncio.gather(*(user.client.close() for user in pool), return_exceptions=True)

    async def _arrival(self, user: _PoolUser, due_perf: float, stop_at: float, idle: list[_PoolUser]) -> None:
        """One arrival on ``user``: the iteration, then the user is free again."""
        interval = self._interval()  # before the change: a new interval notes the users at its start
        self.active += 1  # in the open model, the active users are the busy ones
        interval.peak_users = max(interval.peak_users, self.active)
        try:
            if self.draining:
                return
            steps = self.mix.choose(user.rng)
            values = self._new_iteration(user.k, user.rng, steps)
            if values is not None:  # None: its unique data set is used up (counted as dropped)
                self._interval().iterations_started += 1
                await self._iteration(user.client, user.rng, steps, values, stop_at, due_perf)
        finally:
            self._interval()  # before the change, as above
            self.active -= 1
            idle.append(user)

    def _new_iteration(self, k: int, rng: random.Random, steps: tuple[_CompiledStep, ...]) -> dict[str, str] | None:
        """The variables of user ``k``'s next iteration of the test case ``steps``, from a fresh start.

        That is its data-set row as {column: value} ({} without a data set);
        the steps add what they extract. None when the test case's ``unique``
        data set is used up: the caller must not start the iteration, which
        is counted here as dropped.
        """
        data_set = steps[0].data_set
        if data_set is None:
            return {}
        feeds: dict[str, DataFeed] | None = getattr(self, "_data_feeds", None)
        if feeds is None:
            feeds = self._data_feeds = {}
        feed = feeds.get(steps[0].case)
        if feed is None:
            shard = getattr(self, "shard", None) or (0, 1)
            feed = feeds[steps[0].case] = DataFeed(data_set.columns, data_set.rows, data_set.mode, shard)
            if taken := self.data_taken.get(steps[0].case):
                feed.skip(taken)  # a continuation: rows the shard used before its handoff are not used again
        row = feed.take(k, rng)
        if feed.mode == "unique":
            self.totals.data_taken[steps[0].case] = feed.taken
        if row is None:
            interval = self._interval()
            interval.iterations_dropped += 1
        return row

    async def _step(self, client: HttpClient, step: _CompiledStep, values: dict[str, str], late_s: float = 0.0) -> bool:
        """One page: the request, its resources, its checks and extractions (into ``values``); True if all went well.

        ``late_s`` (the first page of a pacing or arrival_rate iteration): how
        late the iteration started; added to the duration in the histogram, so
        a stalled target or generator shows (no coordinated omission).

        A page that fails is counted once, with the kind of its first failure.
        A page slower than ``max_duration_ms`` is an error (``check_failed``)
        whose duration still goes into the histogram: leaving it out would
        hide exactly the slow pages from the percentiles.
        """
        if step.websocket is not None:
            return await self._ws_step(client, step, values, late_s)
        url, headers, body = step.url, step.headers, step.body
        if step.templated:
            try:
                url, headers, body = step.render(values)
            except VariableError as exc:
                message = step.missing.get(exc.name, "") if isinstance(exc, MissingVariable) else ""
                self._record_error(step, errors.EXTRACTION_FAILED, message or errors.short(str(exc)), 0, 0, 0)
                return False
        observer = None
        try:
            if step.stream is None:
                resp = await client.request(step.method, url, headers, body, step.timeout)
                trace = getattr(client, "last_traceparent", b"")  # before the resources' requests replace it
            else:
                observer = StreamObserver(step.stream.kind, step.stream.idle_timeout)
                try:
                    resp = await client.request(step.method, url, headers, body, step.timeout, observer)
                    trace = getattr(client, "last_traceparent", b"")
                finally:
                    observer.close()
        except asyncio.CancelledError:
            self.totals.aborted += 1
            raise
        except Exception as exc:
            kind, detail = errors.classify(exc)
            if kind == errors.TIMEOUT:
                detail = f"no complete response within {step.timeout:g} s"
            self._record_error(step, kind, errors.request_message(step.method, step.path, detail), 1, 0, len(body))
            return False
        li = self._label(step.label)
        protocols = li.protocols
        protocols[resp.protocol] = protocols.get(resp.protocol, 0) + resp.hits
        status_ok = 200 <= resp.status < 400 if step.expect_status is None else resp.status == step.expect_status
        if not status_ok:
            detail = f"{resp.status} {resp.reason}".strip()
            message = errors.request_message(step.method, step.path, detail)
            self._record_error(step, errors.HTTP_STATUS, message, resp.hits, resp.bytes_in, resp.bytes_out)
            return False
        hits, bytes_in, bytes_out, duration = resp.hits, resp.bytes_in, resp.bytes_out, resp.total_s
        if step.resources:
            main_done = time.perf_counter()
            r_hits, r_in, r_out, failure = await self._resources(client, step)
            duration += time.perf_counter() - main_done
            hits += r_hits
            bytes_in += r_in
            bytes_out += r_out
            if failure is not None:
                self._record_error(step, failure[0], failure[1], hits, bytes_in, bytes_out)
                return False
            li = self._label(step.label)  # the second the page ends in
        page = Page(resp.body, resp.headers) if step.text_present or step.text_absent or step.extractors else None
        if step.text_present or step.text_absent:
            message = _text_check(step, page.text)
            if message:
                self._record_error(step, errors.CHECK_FAILED, message, hits, bytes_in, bytes_out)
                return False
        if step.max_duration_ms is not None and duration * 1000 > step.max_duration_ms:
            message = f"page took {duration * 1000:.0f} ms, more than {step.max_duration_ms:g} ms"
            self._record_error(step, errors.CHECK_FAILED, message, hits, bytes_in, bytes_out)
            li.hist.record((duration + late_s) * 1_000_000)
            li.ttfb_hist.record(resp.ttfb_s * 1_000_000)
            if resp.connect_s > 0:
                li.connect_hist.record(resp.connect_s * 1_000_000)
            if trace and duration > li.slowest_s:
                li.slowest_s, li.slowest_trace = duration, trace
            return False
        if observer is not None:
            message = self._stream_failure(step, observer)
            if message is not None:
                kind, message = message
                self._record_error(step, kind, message, hits, bytes_in, bytes_out)
                return False
        for extractor in step.extractors:
            try:
                values[extractor.name] = extractor.extract(page)
            except ExtractionError as exc:
                self._record_error(step, errors.EXTRACTION_FAILED, str(exc), hits, bytes_in, bytes_out)
                return False
        li.pages += 1
        li.hits += hits
        li.bytes_in += bytes_in
        li.bytes_out += bytes_out
        li.hist.record((duration + late_s) * 1_000_000)
        li.ttfb_hist.record(resp.ttfb_s * 1_000_000)
        if resp.connect_s > 0:  # 0: the main request went over a connection already open
            li.connect_hist.record(resp.connect_s * 1_000_000)
        if trace and duration > li.slowest_s:  # the page's own time (late_s is not the server's)
            li.slowest_s, li.slowest_trace = duration, trace
        if observer is not None:
            if li.events_hist is None:
                li.ttfe_hist, li.gap_hist, li.events_hist = Histogram(), Histogram(), Histogram()
            li.ttfe_hist.record((observer.first_event - observer.sent) * 1_000_000)  # from the send (streams.py)
            gap_hist = li.gap_hist
            for gap in observer.gaps:
                gap_hist.record(gap * 1_000_000)
            li.events_hist.record(observer.events)
        return True

    async def _ws_step(self, client: HttpClient, step: _CompiledStep, values: dict[str, str], late_s: float) -> bool:
        """A WebSocket session: connect, run the actions, hold, close; True if all went well (docs/protocols.md)."""
        url, headers, _ = step.url, step.headers, b""
        if step.templated:
            try:
                url, headers, _ = step.render(values)
            except VariableError as exc:
                message = step.missing.get(exc.name, "") if isinstance(exc, MissingVariable) else ""
                self._record_error(step, errors.EXTRACTION_FAILED, message or errors.short(str(exc)), 0, 0, 0)
                return False
        ws = step.websocket
        where = "WS " + step.path
        if not hasattr(client, "_open"):
            message = errors.short(f"{where} -> this HTTP client cannot open WebSocket sessions")
            self._record_error(step, errors.CONNECTION_ERROR, message, 0, 0, 0)
            return False
        # A client that keeps what a session exchanged (Try it: portal/projects/tryit.py) has an observer,
        # called with ("connect", url, headers), ("open",), ("sent", text), ("received", text), ("error", message)
        # and ("closed",); a run's client has none, and pays one attribute look-up per session.
        observe = getattr(client, "websocket_observer", None)
        if observe is not None:
            observe("connect", url, headers)
        start = time.perf_counter()
        try:
            session, connect_s = await open_websocket(client, url, headers, step.timeout, ws.max_message_bytes)
        except asyncio.CancelledError:
            self.totals.aborted += 1
            raise
        except Exception as exc:
            kind, detail = errors.classify(exc)
            if kind == errors.TIMEOUT:
                detail = f"no WebSocket handshake within {step.timeout:g} s"
            message = errors.request_message("WS", step.path, detail)
            if observe is not None:
                observe("error", message)
            self._record_error(step, kind, message, 1, 0, 0)
            return False
        handshake_s = time.perf_counter() - start
        if observe is not None:
            observe("open")
        failure: tuple[str, str] | None = None
        driver = _WsDriver(self.loop, session, step.ws_actions, values, step.timeout, observe)
        try:
            actions = step.ws_actions
            i = 0
            while i < len(actions):
                i = await driver.run(i)  # sends and expects, up to the next wait (or the end)
                if i < len(actions):
                    await asyncio.sleep(actions[i].action.seconds)
                    i += 1
            if ws.hold > 0:
                await session.hold(ws.hold)
            await session.close()
        except asyncio.CancelledError:
            session.abort()
            self.totals.aborted += 1
            raise
        except MissingVariable as exc:
            failure = errors.EXTRACTION_FAILED, step.missing.get(exc.name, "") or errors.short(str(exc))
        except (VariableError, ExtractionError) as exc:
            failure = errors.EXTRACTION_FAILED, errors.short(str(exc))
        except _WsCheckFailed as exc:
            failure = errors.CHECK_FAILED, errors.request_message("WS", step.path, str(exc))
        except Exception as exc:
            kind, detail = errors.classify(exc)
            failure = kind, errors.request_message("WS", step.path, detail)
        finally:
            driver.detach()
            session.abort()  # whatever is left of the connection (a no-op after a clean close)
        if observe is not None:
            observe("error", failure[1]) if failure is not None else observe("closed")
        li = self._label(step.label)
        if li.rtt_hist is None:
            li.rtt_hist = Histogram()
        li.ws_sent += session.sent
        li.ws_received += session.received
        li.rtt_hist.record_seconds(driver.rtts)
        if failure is not None:
            self._record_error(step, failure[0], failure[1], 1, 0, 0)
            return False
        li.pages += 1
        li.hits += 1
        li.hist.record((time.perf_counter() - start + late_s) * 1_000_000)
        li.ttfb_hist.record(handshake_s * 1_000_000)
        if connect_s > 0:
            li.connect_hist.record(connect_s * 1_000_000)
        return True

    @staticmethod
    def _stream_failure(step: _CompiledStep, observer: StreamObserver) -> tuple[str, str] | None:
        """(kind, message) when a complete streamed response is not what the step expects, else None."""
        try:
            observer.finish()
        except Exception as exc:
            kind, detail = errors.classify(exc)
            return kind, errors.request_message(step.method, step.path, detail)
        if observer.events == 0:
            return errors.CHECK_FAILED, errors.request_message(step.method, step.path, "the stream sent no event")
        expected = step.stream.last_event_contains
        if expected and expected not in observer.last_event:
            detail = f"the last event {observer.last_event[:60]!r} does not contain {expected!r}"
            return errors.CHECK_FAILED, errors.short(detail)
        return None

    async def _resources(self, client: HttpClient, step: _CompiledStep) -> tuple[int, int, int, tuple[str, str] | None]:
        """Fetch the step's resources, at most RESOURCE_CONNECTIONS at once.

        Returns (hits, bytes_in, bytes_out, first failure as (kind, message) or None).
        Every resource is fetched even when one fails, as a browser would.
        """
        resources = step.resources
        results: list[Response | BaseException | None] = [None] * len(resources)
        todo = iter(range(len(resources)))

        async def fetch() -> None:
            for i in todo:
                try:
                    results[i] = await client.request("GET", resources[i][1], _NO_HEADERS, b"", step.timeout)
                except asyncio.CancelledError:
                    self.totals.aborted += 1
                    raise
                except Exception as exc:
                    results[i] = exc

        workers = min(RESOURCE_CONNECTIONS, len(resources))
        if workers == 1:
            await fetch()
        else:
            await asyncio.gather(*(fetch() for _ in range(workers)))
        hits = bytes_in = bytes_out = 0
        failure: tuple[str, str] | None = None
        protocols = self._label(step.label).protocols
        for (path, _), r in zip(resources, results, strict=True):
            if isinstance(r, Response):
                protocols[r.protocol] = protocols.get(r.protocol, 0) + r.hits
                hits += r.hits
                bytes_in += r.bytes_in
                bytes_out += r.bytes_out
                if failure is None and not 200 <= r.status < 400:
                    detail = f"{r.status} {r.reason}".strip()
                    failure = errors.HTTP_STATUS, errors.request_message("resource GET", path, detail)
            else:
                hits += 1
                if failure is None and r is not None:
                    kind, detail = errors.classify(r)
                    if kind == errors.TIMEOUT:
                        detail = f"no complete response within {step.timeout:g} s"
                    failure = kind, errors.request_message("resource GET", path, detail)
        return hits, bytes_in, bytes_out, failure

    def _record_error(
        self, step: _CompiledStep, kind: str, message: str, hits: int, bytes_in: int, bytes_out: int
    ) -> None:
        li = self._label(step.label)
        li.pages += 1
        li.hits += hits
        li.bytes_in += bytes_in
        li.bytes_out += bytes_out
        li.errors += 1
        li.errors_by_kind[kind] = li.errors_by_kind.get(kind, 0) + 1
        if kind not in li.error_samples:
            li.error_samples[kind] = message

    def _label(self, label: str) -> _LabelInterval:
        labels = self._interval().labels
        li = labels.get(label)
        if li is None:
            li = labels[label] = _LabelInterval()
        return li


def _text_check(step: _CompiledStep, text: str) -> str | None:
    """The failure message of the step's text checks on the decoded body, or None when they pass."""
    if step.text_present and step.text_present not in text:
        return errors.short(f"expected text {step.text_present!r} not found")
    if step.text_absent and step.text_absent in text:
        return errors.short(f"unexpected text {step.text_absent!r} found")
    return None


def draw_think_time(mode: str, mean: float, rng: random.Random) -> float:
    """A think time around ``mean``: fixed; uniform within mean ±50 %; or negative exponential with that mean.

    Random think times keep virtual users from marching in lockstep, which
    would hit the target in synchronised waves no real population produces.
    """
    if mean <= 0:
        return 0.0
    if mode == "uniform":
        return rng.uniform(0.5 * mean, 1.5 * mean)
    if mode == "exponential":
        return rng.expovariate(1.0 / mean)
    return mean


@dataclass(slots=True)
class _PoolUser:
    """A virtual user of the open model's pool: its number, client and random stream."""

    k: int
    client: HttpClient
    rng: random.Random


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    """Sleep until the loop's clock reads ``deadline`` or later.

    Loops, because a timer may fire a hair early by the loop's own clock
    (uvloop's clock and timers have millisecond resolution): a user due at
    the start of second 1 must not be counted in second 0.
    """
    while (delay := deadline - loop.time()) > 0:
        await asyncio.sleep(delay)


# -- public entry points ------------------------------------------------------------------


async def run(
    plan: Plan | dict[str, Any],
    *,
    sink: Sink | None,
    user_ids: Iterable[int] | None = None,
    shard: tuple[int, int] | None = None,
    start_at: float | None = None,
    allowlist: str | Allowlist = DEFAULT_ALLOWLIST,
    seed: Any = None,
    client_factory: Callable[[], HttpClient] | None = None,
    resume_at: float = 0.0,
    data_taken: Mapping[str, int] | None = None,
) -> RunTotals:
    """Run ``plan`` (or one shard of it) and report each second to ``sink``.

    - ``shard=(shard_no, shard_count)``: run this shard's part of the plan.
      Closed models (constant, ramp, steps, pacing) run the user numbers
      ``k % shard_count == shard_no``; ``arrival_rate`` starts the arrivals
      ``j % shard_count == shard_no`` with the user numbers
      ``k % shard_count == shard_no`` of ``max_users`` as its pool. Shards with
      a common ``start_at`` add up to the plan.
    - ``user_ids``: the user numbers to run instead (closed models), or the
      pool (arrival_rate, with ``shard``). An ``arrival_rate`` plan given only
      a part of its users and no ``shard`` is refused: it cannot tell which
      arrivals are its own, and running them all would multiply the rate.

    - ``sink(report) -> bool | None`` is called from a worker thread, once per
      second (heartbeat included) and once more at the end; returning True
      stops the run: every user is cancelled at once.
    - ``start_at`` is a ``time.time()`` epoch shared by all shards; the run
      waits for it. Seconds in reports count from it.
    - ``allowlist``: the base URL is checked before anything is sent (raises
      TargetNotAllowed), and the default client checks every connection.
      A custom ``client_factory`` is responsible for its own connections.
    - ``seed`` makes the mix and think times reproducible (per user number,
      whatever the sharding).
    - A sink answering ``HANDOFF`` asks for a handoff (a worker shutting down):
      no session, iteration or step starts any more, pages in flight finish
      (up to ``DRAIN_GRACE_S``), every second is reported, and the totals say
      ``handed_off``. ``resume_at`` (seconds after ``start_at``) continues such
      a run: the schedule from that offset (or from now, when later) with the
      same users active, the same arrivals and the same measurement windows;
      users start fresh sessions. ``data_taken`` ({test case: rows}, the
      totals' ``data_taken``) skips the unique data-set rows used before.

    A report (JSON-safe; ``second`` counts from ``start_at``)::

        {"second": 7, "active_users": 20, "iterations_started": 31, "iterations_completed": 29,
         "iterations_dropped": 0, "loop_lag_ms": {"p99": 0.4, "max": 1.2}, "cpu_pct": 37.5,
         "labels": {"Browse: Home": {"pages": 30, "hits": 30, "errors": 1,
                                     "errors_by_kind": {"http_status": 1},
                                     "error_samples": {"http_status": "GET / -> 500 Internal Server Error"},
                                     "bytes_in": 181000, "bytes_out": 0,
                                     "hist": Histogram.to_dict() of the successful pages,
                                     "connect_hist": ... of their new connections' connect times,
                                     "ttfb_hist": ... of their times to first byte,
                                     "protocols": {"h2": 30},
                                     "slowest": {"ms": 48.2, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}}}}

    ``active_users`` is the peak of users running at once in that second (in
    ``arrival_rate``, the users busy with an iteration). ``hist`` is timed
    from the intended start in pacing and arrival_rate (see ``_iteration``);
    ``connect_hist`` and ``ttfb_hist`` are as measured on the wire.
    ``loop_lag_ms`` and ``cpu_pct`` are the generator's health (health.py).
    ``slowest`` (with the plan's ``trace_context``): the label's slowest
    successful page of the second (or one failed only by ``max_duration_ms``),
    its own request time and the W3C trace id it was sent with.
    Labels without a completed page in that second are left out.
    """
    if not isinstance(plan, Plan):
        plan = Plan.from_dict(plan)
    allow = parse_allowlist(allowlist)
    n = plan.profile.users
    if shard is not None:
        shard_no, shard_count = shard
        if not (isinstance(shard_no, int) and isinstance(shard_count, int) and 0 <= shard_no < shard_count):
            raise ValueError(f"shard must be (shard_no, shard_count) with 0 <= shard_no < shard_count, not {shard!r}")
        shard = (shard_no, shard_count)
    if user_ids is None:
        ids = list(range(n)) if shard is None else shard_user_ids(n, shard[1], shard[0])
    else:
        ids = sorted(set(user_ids))
        if ids and not (ids[0] >= 0 and ids[-1] < n):
            raise ValueError(f"user_ids must be within 0..{n - 1}")
        if plan.profile.open_model and shard is None and len(ids) != n:
            raise ValueError(
                "an arrival_rate plan split over shards needs shard=(shard_no, shard_count) "
                "to know which arrivals are its own; user_ids alone would run every arrival in every shard"
            )
    loop = asyncio.get_running_loop()
    for url in plan.target_urls():  # the base URL and any WebSocket step's own ws:// or wss:// origin
        await loop.run_in_executor(None, check_url, url, allow)
    # The engine's own HTTP layer (h1.py, and h2.py for HTTP/2): about 7x less CPU per request than aiohttp.
    factory = client_factory or functools.partial(
        make_client, allow, protocol=plan.protocol, verify=plan.tls_verify, ca_bundle=plan.ca_bundle or None
    )
    exporter, refused = None, ""
    if plan.otlp_endpoint and plan.trace_context:
        # The collector is checked like a target; a refused one exports nothing, and the totals say why.
        try:
            url = traces_url(plan.otlp_endpoint)
            addresses = await loop.run_in_executor(None, check_url, url, allow)
        except (ValueError, TargetNotAllowed) as exc:
            refused = f"not exported: {exc}"
        else:
            resource = {"service.name": "plimsoll-load-test", "plimsoll.base_url": plan.base_url}
            if shard is not None:
                resource["plimsoll.shard"] = f"{shard[0]}/{shard[1]}"
            exporter = SpanExporter(url, resource, address=addresses[0] if addresses else None)
            exporter.start()
    runner = _Run(plan, sink, ids, seed, factory, shard, resume_at, data_taken, exporter)
    try:
        totals = await runner.execute(start_at)
    finally:
        if exporter is not None and runner.totals.otlp is None:  # run() failed: stop the thread all the same
            exporter.close(0)
    if refused:
        totals.otlp = {"endpoint": plan.otlp_endpoint, "spans": 0, "exported": 0, "dropped": 0, "failed": 0}
        totals.otlp |= {"posts": 0, "error": refused, "cpu_ms": 0.0}
    return totals


def new_event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when uvloop is installed (a faster loop), else None (asyncio's default)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is in requirements.txt
        return None
    return uvloop.new_event_loop


def run_sync(plan: Plan | dict[str, Any], **kwargs: Any) -> RunTotals:
    """``run()`` in a fresh event loop (uvloop if available), for synchronous callers such as a Celery task."""
    with asyncio.Runner(loop_factory=new_event_loop_factory()) as runner:
        return runner.run(run(plan, **kwargs))
