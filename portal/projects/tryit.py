"""*Try it*: one virtual user runs one iteration of a test case, and every request and response is kept.

What people do before a load run: does the login extract its token, does the search find the text.
It runs through the engine library (``workers.engine.runner``), as a run does: the same steps,
checks, extractions and data set, the same allowlist (checked before anything is sent and at every
connection), the same HTTP client. Only the profile differs: one user, one iteration (a pacing
longer than the bound, so no second one starts), no think time (a try is about the requests, not
their timing), each request's timeout capped.

It runs synchronously in the web request, bounded by ``BOUND_S``: one user's few requests take
what one page load takes, the person waits for the answer anyway, and a worker task would need a
row, a poll and a queue slot shared with load shards for a few seconds' work. The bound holds
whatever the target does: the engine stops at the end of its hold, and each request times out.

Since a try holds a web thread, an account runs at most ``PLIMSOLL_TRIES_PER_USER`` at once over the
whole site, its browser and its tokens together (``held``: slots in the shared cache, as long-polls'
in portal.api.longpoll); one more is refused before anything is sent (issue 30: one account's tries,
or its many free tokens', could otherwise take every web thread).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings

from portal import limits
from portal.outbound import targets_allowlist
from workers.engine.h2 import make_client
from workers.engine.http import HttpClient, Response
from workers.engine.runner import run_sync
from workers.engine.targets import BadTargetURL, TargetNotAllowed

from .models import Environment, Step, TestCase

BOUND_S = 15
"""The whole try, at most: the engine's hold (it stops every user at its end)."""
REQUEST_TIMEOUT_S = 10.0
"""Each request, at most (the plan's timeout does not apply: a try has no plan)."""
SLOT_TTL_S = BOUND_S + REQUEST_TIMEOUT_S + 10
"""A try's slot expires after this, should its process die holding it (the try itself ends sooner)."""
RETRY_AFTER_S = 5
"""Seconds to wait before trying again when over the cap (a try usually takes a second or two)."""
BODY_SHOWN = 4096
"""Bytes of each request and response body kept for the page."""
MESSAGES_SHOWN = 200
"""WebSocket messages kept per session (a chat that streams thousands is cut, and says so)."""


@dataclass
class Exchange:
    """One request as sent and its response as received (or why none came)."""

    method: str
    url: str
    request_headers: dict[str, str]
    request_body: str
    status: int | None = None
    reason: str = ""
    final_url: str = ""
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: str = ""
    response_bytes: int = 0
    elapsed_ms: float | None = None
    error: str = ""
    # A WebSocket session's messages, in order: {"direction": "sent" | "received", "text": …, "at_ms": since
    # the session opened}; a session's exchange has method "WS" and status 101 once its handshake succeeded.
    messages: list[dict] = field(default_factory=list)


@dataclass
class TryResult:
    environment: str
    base_url: str
    exchanges: list[Exchange]
    completed: bool  # the iteration's last step ended with its checks passed
    errors: dict[str, str]  # label: the first error the engine recorded for it (status, text, extraction …)
    elapsed_s: float
    refused: str = ""  # why nothing was sent (a target outside the allowlist)


def _text(data: bytes) -> str:
    shown = data[:BODY_SHOWN].decode("utf-8", errors="replace")
    return shown + (f"\n… ({len(data) - BODY_SHOWN:,} more bytes)" if len(data) > BODY_SHOWN else "")


class _Recorder:
    """The engine's HTTP client, keeping each exchange (HttpClient protocol, workers/engine/http.py)."""

    def __init__(self, inner: HttpClient, exchanges: list[Exchange]):
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "exchanges", exchanges)

    def __setattr__(self, name, value):  # what the engine sets on its client (a session's loop …) is the inner's
        setattr(self.inner, name, value)

    async def request(self, method, url, headers, body, timeout, stream=None) -> Response:
        exchange = Exchange(method, url, dict(headers), _text(body or b""))
        self.exchanges.append(exchange)
        started = time.perf_counter()
        timeout = min(timeout, REQUEST_TIMEOUT_S)
        try:
            if stream is None:
                response = await self.inner.request(method, url, headers, body, timeout)
            else:  # a streamed response (streams.py): its events observed as a run observes them
                response = await self.inner.request(method, url, headers, body, timeout, stream)
        except Exception as exc:  # shown as the exchange's outcome; the engine records it as the step's error
            exchange.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            exchange.elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
            raise
        exchange.status, exchange.reason = response.status, response.reason
        exchange.final_url = response.url if response.url and response.url != url else ""
        exchange.response_headers = dict(response.headers)
        exchange.response_body = _text(response.body)
        exchange.response_bytes = len(response.body)
        exchange.elapsed_ms = round(response.total_s * 1000, 1)
        return response

    def websocket_observer(self, event: str, *args) -> None:
        """A WebSocket session step as it goes (workers/engine/runner.py ``_ws_step``): an exchange per session,
        with each message sent and received."""
        if event == "connect":
            url, headers = args
            exchange = Exchange("WS", url, dict(headers), "")
            self.exchanges.append(exchange)
            object.__setattr__(self, "_ws", exchange)
            object.__setattr__(self, "_ws_started", time.perf_counter())
            return
        exchange = self._ws
        since = round((time.perf_counter() - self._ws_started) * 1000, 1)
        if event == "open":
            exchange.status, exchange.reason = 101, "Switching Protocols"
            object.__setattr__(self, "_ws_started", time.perf_counter())
            exchange.elapsed_ms = since
        elif event in ("sent", "received"):
            if len(exchange.messages) < MESSAGES_SHOWN:
                exchange.messages.append({"direction": event, "text": _text(args[0].encode()), "at_ms": since})
            elif len(exchange.messages) == MESSAGES_SHOWN:
                exchange.messages.append({"direction": "", "text": f"… (only the first {MESSAGES_SHOWN} shown)"})
        elif event == "error":
            exchange.error = args[0]

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name):  # anything else the runner reads from its client (cookies …)
        return getattr(self.inner, name)


@contextlib.contextmanager
def held(*, user_id: int) -> Iterator[None]:
    """One of the account's try slots for the duration of the block; ``limits.TooMany`` when none is free.

    Taken and given back by ``limits.slots_acquire`` / ``Slots.release``, as long-polls' are: a failing
    shared cache refuses the try (nothing held without a count) and, when giving back, is logged and left
    to the slot's TTL.
    """
    cap = settings.PLIMSOLL_TRIES_PER_USER
    slots = limits.slots_acquire([(f"try:user-{user_id}", cap)], ttl=SLOT_TTL_S)
    if slots is None:
        raise limits.TooMany(
            f"You already have {cap} tries running (at most {cap} at once per account, its tokens included): "
            "wait for one to end, then try again."
            if cap
            else "Try it is turned off on this site (PLIMSOLL_TRIES_PER_USER is 0).",
            RETRY_AFTER_S,
        )
    try:
        yield
    finally:
        slots.release()


def not_ready(test_case: TestCase, steps: list[Step] | None = None) -> str:
    """Why ``test_case`` cannot be tried yet, in words ("" when it can): the page's and the API's refusal."""
    steps = list(test_case.steps.all()) if steps is None else steps
    if not steps:
        return "Add a step first: an iteration of no step sends nothing."
    return " ".join(test_case.placeholder_problems(steps))


def engine_plan(test_case: TestCase, environment: Environment) -> dict:
    """One user, one iteration of ``test_case`` against ``environment``, without think times."""
    tc = test_case.to_engine_dict(1)
    tc["steps"] = [{**step, "think_time": 0} for step in tc["steps"]]
    return {
        "base_url": environment.base_url.rstrip("/"),
        **({"protocol": environment.protocol} if environment.protocol != "auto" else {}),
        **({"ca_bundle": environment.ca_bundle} if environment.ca_bundle else {}),
        "test_cases": [tc],
        "profile": {"kind": "pacing", "users": 1, "hold": BOUND_S, "pacing": BOUND_S + 60, "ramp_up": 0},
        "request_timeout": REQUEST_TIMEOUT_S,
    }


def test_case_try(*, test_case: TestCase, environment: Environment) -> TryResult:
    """Runs one iteration of ``test_case`` on ``environment`` and returns every exchange."""
    # A run's allowlist: PLIMSOLL_ALLOWED_TARGETS without the site's own services (its answers are shown).
    allow = targets_allowlist()
    exchanges: list[Exchange] = []
    errors: dict[str, str] = {}
    completed = False

    def sink(report: dict) -> bool:
        nonlocal completed
        for label, figures in (report.get("labels") or {}).items():
            for sample in (figures.get("error_samples") or {}).values():
                errors.setdefault(label, sample)
        completed = completed or report.get("iterations_completed", 0) > 0
        return completed  # stop as soon as the iteration is done

    started = time.monotonic()
    result = TryResult(environment.name, environment.base_url, exchanges, False, errors, 0.0)
    try:
        run_sync(
            engine_plan(test_case, environment),
            sink=sink,
            allowlist=allow,
            seed=0,
            # The environment's protocol and CA bundle, as a run's (a plan may choose another protocol).
            client_factory=lambda: _Recorder(
                make_client(allow, protocol=environment.protocol, ca_bundle=environment.ca_bundle or None), exchanges
            ),
        )
    except (TargetNotAllowed, BadTargetURL) as exc:
        result.refused = str(exc)
    result.completed = completed and not errors
    result.elapsed_s = round(time.monotonic() - started, 2)
    return result
