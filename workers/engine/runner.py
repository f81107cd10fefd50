"""The runner: virtual users in a closed model, aggregated per second, reported to a sink.

``run(plan, sink=...)`` is the engine's entry point. It knows nothing of Django
or Celery: the Celery task passes a sink that writes rows, tests pass a list's
``append``, the CLI prints.

**Virtual users.** Each user (numbered globally, see schedule.py) waits for its
start offset, then loops iterations: pick a test case by the mix, run its steps
in order (request, checks, think time). At its window's end a user finishes the
step in flight and starts no other, so the requests recorded are exactly the
requests the target served; think time is cut short at the window's end. A
failed step ends its iteration (after its think time, a new one starts): later
steps usually depend on earlier ones (log in, then open the inbox).

**What is measured.** Page duration is from sending a step's request to the
last byte of its body (redirects included). Only successful pages go into the
latency histogram: a refused connection takes microseconds and a timeout takes
exactly the timeout, so mixing them in would describe the failure, not the
site. Errors are counted per kind with a sample message instead. Requests still
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
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import errors
from .histogram import Histogram
from .http import HttpClient, Response, make_client
from .mix import Mix
from .plan import Plan, Step, TestCase
from .schedule import total_duration, user_window
from .targets import DEFAULT_ALLOWLIST, Allowlist, check_url, parse_allowlist

log = logging.getLogger(__name__)

Sink = Callable[[dict[str, Any]], bool | None]

HARD_END_GRACE_S = 5.0  # after total duration + request timeout, cancel whatever still runs
CANCEL_GRACE_S = 1.0  # how long cancelled users get to close their connections
SINK_RETRY_DELAY_S = 1.0
FINAL_SINK_ATTEMPTS = 3  # at the end, give up on a failing sink after this many tries
FINAL_DELIVERY_TIMEOUT_S = 15.0  # ...or after this long, if it hangs
PERCENTILES = (50, 90, 95, 99)
TICK_LATENESS_S = 0.002  # wake just after a second's end: loop timers have millisecond granularity


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "hits": self.hits,
            "errors": self.errors,
            "errors_by_kind": dict(self.errors_by_kind),
            "error_samples": dict(self.error_samples),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "latency_ms": latency_ms(self.histogram),
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
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    error_samples: dict[str, str] = field(default_factory=dict)
    histogram: Histogram = field(default_factory=Histogram)  # successful pages, all labels
    labels: dict[str, LabelTotals] = field(default_factory=dict)
    stopped: bool = False  # the sink asked to stop
    reports_sent: int = 0
    reports_dropped: int = 0  # the sink kept failing at the end

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
            "errors_by_kind": dict(self.errors_by_kind),
            "error_samples": dict(self.error_samples),
            "latency_ms": latency_ms(self.histogram),
            "labels": {label: t.to_dict() for label, t in self.labels.items()},
            "stopped": self.stopped,
            "reports_sent": self.reports_sent,
            "reports_dropped": self.reports_dropped,
        }


def latency_ms(h: Histogram) -> dict[str, float]:
    """p50/p90/p95/p99/max/mean of a histogram in milliseconds (0 when empty)."""
    ps = h.percentiles(PERCENTILES)
    out = {f"p{q}": round(ps[q] / 1000, 3) for q in PERCENTILES}
    out["max"] = round(h.max / 1000, 3)
    out["mean"] = round(h.mean / 1000, 3)
    return out


# -- per-second aggregation --------------------------------------------------------


class _LabelInterval:
    __slots__ = ("pages", "hits", "errors", "errors_by_kind", "error_samples", "bytes_in", "bytes_out", "hist")

    def __init__(self) -> None:
        self.pages = self.hits = self.errors = self.bytes_in = self.bytes_out = 0
        self.errors_by_kind: dict[str, int] = {}
        self.error_samples: dict[str, str] = {}
        self.hist = Histogram()

    def to_report(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "hits": self.hits,
            "errors": self.errors,
            "errors_by_kind": dict(self.errors_by_kind),
            "error_samples": dict(self.error_samples),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "hist": self.hist.to_dict(),
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


class _Interval:
    __slots__ = ("labels", "iterations_started", "iterations_completed", "start_users", "peak_users")

    def __init__(self, users: int) -> None:
        self.labels: dict[str, _LabelInterval] = {}
        self.iterations_started = 0
        self.iterations_completed = 0
        # Users active when the second began: an interval is created by the first event of its
        # second, and every change of the user count is such an event, so nothing changed before.
        self.start_users = users
        # The most users active at once during the second (the start, or right after an arrival),
        # so the report doesn't depend on when it runs: users leaving at 35.0 s ran in second 34.
        self.peak_users = users


@dataclass(frozen=True, slots=True)
class _CompiledStep:
    """A step with everything precomputed that the hot loop needs."""

    label: str
    method: str
    path: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    think_time: float
    expect_status: int | None
    text_present: str
    text_absent: str

    @classmethod
    def build(cls, plan: Plan, tc: TestCase, step: Step) -> _CompiledStep:
        return cls(
            label=plan.label(tc, step),
            method=step.method,
            path=step.path,
            url=plan.url_for(step),
            headers=dict(step.headers),
            body=step.body.encode(),
            think_time=step.think_time,
            expect_status=step.expect_status,
            text_present=step.text_present,
            text_absent=step.text_absent,
        )


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
            if answer:
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
    ) -> None:
        self.plan = plan
        self.profile = plan.profile
        self.timeout = plan.request_timeout
        self.think_mode = plan.think_time_mode
        self.user_ids = user_ids
        self.seed = seed
        self.client_factory = client_factory
        self.sink = sink
        cases = [tuple(_CompiledStep.build(plan, tc, s) for s in tc.steps) for tc in plan.test_cases]
        self.mix: Mix[tuple[_CompiledStep, ...]] = Mix(cases, [tc.weight for tc in plan.test_cases])
        self.totals = RunTotals()
        self.active = 0
        self.intervals: dict[int, _Interval] = {}
        self.next_second = 0  # the first second not yet reported
        self.loop = asyncio.get_running_loop()
        self.t0 = 0.0

    # -- orchestration --

    async def execute(self, start_at: float | None) -> RunTotals:
        loop = self.loop
        wall = time.time()
        if start_at is None:
            start_at = wall
        self.t0 = t0 = loop.time() + (start_at - wall)
        hard_end = t0 + total_duration(self.profile) + self.timeout + HARD_END_GRACE_S
        reporter = _Reporter(self.sink, loop)
        self.reporter = reporter
        tasks: list[asyncio.Task[None]] = []
        ticker: asyncio.Task[None] | None = None
        finished = False
        try:
            await _sleep_until(loop, t0)
            # A shard that starts late reports from the second it started, not from 0.
            self.next_second = max(0, int(loop.time() - t0))
            tasks = [loop.create_task(self._user(k)) for k in self.user_ids]
            ticker = loop.create_task(self._tick())
            users_done = loop.create_task(self._wait_users(tasks))
            stop = loop.create_task(reporter.stop_requested.wait())
            done, _ = await asyncio.wait(
                {users_done, stop}, timeout=max(0.0, hard_end - loop.time()), return_when=asyncio.FIRST_COMPLETED
            )
            stop.cancel()
            if not users_done.done():
                if stop in done:
                    self.totals.stopped = True
                    log.info("stop requested: cancelling %d virtual users", sum(not t.done() for t in tasks))
                else:
                    log.warning("hard end reached: cancelling the virtual users still running")
                users_done.cancel()
                await self._cancel(tasks)
            end = loop.time()
            ticker.cancel()
            self._flush_until(int(end - t0) + 1)  # every second left, the last partial one included
            await reporter.close()
            finished = True
        finally:
            if not finished:  # run() itself was cancelled or failed: leave nothing running
                if ticker is not None:
                    ticker.cancel()
                await self._cancel(tasks)
                reporter.abandon()
        totals = self.totals
        totals.duration_s = max(0.0, end - t0)
        totals.reports_sent = reporter.sent
        totals.reports_dropped = reporter.dropped
        crashed = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
        if crashed:
            raise crashed[0]
        return totals

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

    def _flush_until(self, end_second: int) -> None:
        """Report every second before ``end_second`` that is not reported yet."""
        for s in range(self.next_second, end_second):
            self.reporter.push(self._report(s))
        self.next_second = max(self.next_second, end_second)

    def _report(self, second: int) -> dict[str, Any]:
        interval = self.intervals.pop(second, None)
        if interval is None:
            # Nothing happened in that second, so its users were those active when the next
            # interval began (or now, if none has begun yet).
            later = [k for k in self.intervals if k > second]
            interval = _Interval(self.intervals[min(later)].start_users if later else self.active)
        t = self.totals
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
        t.iterations_started += interval.iterations_started
        t.iterations_completed += interval.iterations_completed
        return {
            "second": second,
            "active_users": interval.peak_users,
            "iterations_started": interval.iterations_started,
            "iterations_completed": interval.iterations_completed,
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

    # -- a virtual user --

    async def _user(self, k: int) -> None:
        loop = self.loop
        start_offset, stop_offset = user_window(k, self.profile)
        stop_at = self.t0 + stop_offset
        await _sleep_until(loop, self.t0 + start_offset)
        if loop.time() >= stop_at:
            return
        rng = random.Random(f"{self.seed}:{k}") if self.seed is not None else random.Random()
        client = self.client_factory()
        interval = self._interval()  # before the change: a new interval notes the users at its start
        self.active += 1
        interval.peak_users = max(interval.peak_users, self.active)
        try:
            while loop.time() < stop_at:
                steps = self.mix.choose(rng)
                self._interval().iterations_started += 1
                slept = False
                last = len(steps) - 1
                for i, step in enumerate(steps):
                    if i and loop.time() >= stop_at:
                        break
                    ok = await self._step(client, step)
                    if ok and i == last:
                        self._interval().iterations_completed += 1
                    think = draw_think_time(self.think_mode, step.think_time, rng)
                    if think > 0:
                        remaining = stop_at - loop.time()
                        if think >= remaining:
                            # The next step would start after the window: think until its end, then leave.
                            # (Returning rather than re-checking the clock: timers may wake a hair early.)
                            if remaining > 0:
                                await asyncio.sleep(remaining)
                            return
                        await asyncio.sleep(think)
                        slept = True
                    if not ok:
                        break
                if not slept:
                    # Let the loop turn (and its clock advance) even if a client answered without waiting.
                    await asyncio.sleep(0)
        finally:
            self._interval()  # before the change, as above
            self.active -= 1
            await client.close()

    async def _step(self, client: HttpClient, step: _CompiledStep) -> bool:
        try:
            resp = await client.request(step.method, step.url, step.headers, step.body, self.timeout)
        except asyncio.CancelledError:
            self.totals.aborted += 1
            raise
        except Exception as exc:
            kind, detail = errors.classify(exc)
            if kind == errors.TIMEOUT:
                detail = f"no complete response within {self.timeout:g} s"
            self._record_error(step, kind, errors.request_message(step.method, step.path, detail), 1, 0, len(step.body))
            return False
        status_ok = 200 <= resp.status < 400 if step.expect_status is None else resp.status == step.expect_status
        if not status_ok:
            detail = f"{resp.status} {resp.reason}".strip()
            message = errors.request_message(step.method, step.path, detail)
            self._record_error(step, errors.HTTP_STATUS, message, resp.hits, resp.bytes_in, resp.bytes_out)
            return False
        if step.text_present or step.text_absent:
            failure = _text_check(step, resp)
            if failure:
                self._record_error(step, errors.CHECK_FAILED, failure, resp.hits, resp.bytes_in, resp.bytes_out)
                return False
        li = self._label(step.label)
        li.pages += 1
        li.hits += resp.hits
        li.bytes_in += resp.bytes_in
        li.bytes_out += resp.bytes_out
        li.hist.record(resp.total_s * 1_000_000)
        return True

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


def _text_check(step: _CompiledStep, resp: Response) -> str | None:
    """The failure message of the step's text checks, or None when they pass."""
    text = _decoded_text(resp)
    if step.text_present and step.text_present not in text:
        return errors.short(f"expected text {step.text_present!r} not found")
    if step.text_absent and step.text_absent in text:
        return errors.short(f"unexpected text {step.text_absent!r} found")
    return None


def _decoded_text(resp: Response) -> str:
    content_type = resp.headers.get("Content-Type", "")
    charset = "utf-8"
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        return resp.body.decode(charset, "replace")
    except LookupError:
        return resp.body.decode("utf-8", "replace")


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


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


# -- public entry points ------------------------------------------------------------------


async def run(
    plan: Plan | dict[str, Any],
    *,
    sink: Sink | None,
    user_ids: Iterable[int] | None = None,
    start_at: float | None = None,
    allowlist: str | Allowlist = DEFAULT_ALLOWLIST,
    seed: Any = None,
    client_factory: Callable[[], HttpClient] | None = None,
) -> RunTotals:
    """Run ``plan`` (or the users ``user_ids`` of it, for one shard) and report each second to ``sink``.

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

    A report (JSON-safe; ``second`` counts from ``start_at``)::

        {"second": 7, "active_users": 20, "iterations_started": 31, "iterations_completed": 29,
         "labels": {"Browse: Home": {"pages": 30, "hits": 30, "errors": 1,
                                     "errors_by_kind": {"http_status": 1},
                                     "error_samples": {"http_status": "GET / -> 500 Internal Server Error"},
                                     "bytes_in": 181000, "bytes_out": 0,
                                     "hist": Histogram.to_dict() of the successful pages}}}

    Labels without a completed page in that second are left out.
    """
    if not isinstance(plan, Plan):
        plan = Plan.from_dict(plan)
    allow = parse_allowlist(allowlist)
    ids = sorted(set(range(plan.profile.users) if user_ids is None else user_ids))
    if ids and not (ids[0] >= 0 and ids[-1] < plan.profile.users):
        raise ValueError(f"user_ids must be within 0..{plan.profile.users - 1}")
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, check_url, plan.base_url, allow)
    factory = client_factory or functools.partial(make_client, allow)
    return await _Run(plan, sink, ids, seed, factory).execute(start_at)


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
