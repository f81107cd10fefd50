"""Streamed responses: server-sent events and chunked bodies, timed event by event.

A step with ``stream`` (plan.py) hands a ``StreamObserver`` to the client
(``H1Client.request(..., stream=obs)``, and ``H2Client``'s); the connection
feeds it every piece of body as it arrives (httptools' ``on_body``, HTTP/2
DATA frames), so the observer sees the stream as the wire delivered it, with
the same clock (``time.perf_counter``) as the request's start:

* ``sse`` (``text/event-stream``): an event is a block of lines ended by a
  blank line (LF, CRLF or CR line ends); a block of comment lines only
  (``: keep-alive``) is not an event. The last event's ``data`` lines (joined
  by ``\\n``) are kept for the step's ``last_event_contains`` check.
* ``chunked``: newline-delimited records (NDJSON token streams and the like):
  each non-empty line is an event; a last line without its newline counts too.

Figures per response: time to first event (``first_event - sent``), the
gaps between consecutive events, the number of events. Time to first byte and
to last byte are the response's own (``Response.ttfb_s``, ``total_s``).

``sent`` is when the request (of the hop that answers with the stream) was
handed to its connection: the HTTP/1.1 request's bytes written, the HTTP/2
HEADERS made (HPACK-encoded) and queued. The time to first event is the
server's and the network's, as the server's own time to first token is, and
not the engine's own work before the request left: the connection set-up (in
the time to first byte and the connect histogram), the request's encoding
(an HTTP/2 request with large headers takes h2 milliseconds), an earlier
redirect hop. ``start`` (the call) stays for reference.

**Idle stall**: from the start of each request hop, if nothing arrives for
``idle_timeout`` seconds (no headers, no body byte), the observer calls the
connection's ``on_stall`` with ``StreamStalled`` (kind ``stream_stalled``);
the connection fails that request (HTTP/1.1: the connection is closed;
HTTP/2: only the stream is reset). One timer per stream, re-armed lazily (the
hot path only writes a timestamp).

**Bad input**: an SSE stream that ends in the middle of an event (no blank
line after the last block, e.g. a final ``data: [DONE]`` without its newline)
fails with ``StreamIncomplete`` (kind ``stream_incomplete``) from ``finish()``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["KINDS", "StreamIncomplete", "StreamObserver", "StreamStalled"]

KINDS = ("sse", "chunked")
MAX_LAST_EVENT = 10_000  # characters of the last event kept for the check
MAX_PENDING = 1 << 20  # bytes of an unfinished event kept; beyond, the stream is not what its kind says
_now = time.perf_counter


class StreamStalled(TimeoutError):
    """Nothing arrived on a stream for its idle timeout; kind ``stream_stalled``."""

    kind = "stream_stalled"


class StreamIncomplete(ConnectionError):
    """The stream ended in the middle of an event; kind ``stream_incomplete``."""

    kind = "stream_incomplete"


class StreamObserver:
    """Times one streamed response (see the module docstring); one per request."""

    __slots__ = (
        "kind",
        "idle_timeout",
        "start",
        "sent",
        "first_event",
        "last_event_at",
        "gaps",
        "events",
        "last_event",
        "_buf",
        "_last_activity",
        "_timer",
        "_loop",
        "_on_stall",
        "_done",
    )

    def __init__(self, kind: str, idle_timeout: float) -> None:
        if kind not in KINDS:
            raise ValueError(f"stream kind must be one of {', '.join(KINDS)}")
        self.kind = kind
        self.idle_timeout = idle_timeout
        self.start = self.sent = _now()  # the request's call (H1Client.request sets it) and its send (begin, sent)
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_stall: Callable[[BaseException], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.first_event = 0.0
        self.last_event_at = 0.0
        self.gaps: list[float] = []  # seconds between consecutive events
        self.events = 0
        self.last_event = ""
        self._buf = b""
        self._done = False

    # -- used by the connections --

    def begin(self, loop: asyncio.AbstractEventLoop, on_stall: Callable[[BaseException], None]) -> None:
        """A request hop starts on a connection that will feed us; ``on_stall`` fails it.

        Called just before the request is written (HTTP/1.1: its bytes are made); a connection that
        encodes the request after this (HTTP/2) calls ``mark_sent`` once it has.
        """
        self._reset()
        self._loop = loop
        self._on_stall = on_stall
        self.sent = self._last_activity = _now()
        self._cancel_timer()
        self._timer = loop.call_later(self.idle_timeout, self._check)

    def mark_sent(self) -> None:
        """The request is encoded and handed to the connection: the time to first event counts from now."""
        self.sent = _now()

    def touch(self) -> None:
        """Something arrived (headers)."""
        self._last_activity = _now()

    def feed(self, data: bytes, now: float = 0.0) -> None:
        """A piece of body; ``now``: when the connection was handed the bytes that held it (else: now).

        A connection that parses a whole read before it hands over the pieces
        (HTTP/2: every frame of the read, ``h2.receive_data``) stamps the read
        on arrival and passes that time, so the events are not timed after the
        parsing of what came with them.
        """
        if not now:
            now = _now()
        self._last_activity = now
        if self.kind == "sse":
            self._feed_sse(data, now)
        else:
            self._feed_lines(data, now)

    # -- used by the runner --

    def finish(self) -> None:
        """The response is complete: stop the idle timer; raise StreamIncomplete for a broken-off SSE event."""
        self.close()
        rest = self._buf
        self._buf = b""
        if not rest.strip():
            return
        if self.kind == "chunked":
            self._event(_now(), rest.decode("utf-8", "replace"))
            return
        shown = rest[:60].decode("utf-8", "replace")
        raise StreamIncomplete(f"the stream ended in the middle of an event ({shown!r} has no blank line after it)")

    def close(self) -> None:
        self._done = True
        self._cancel_timer()

    # -- internals --

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._done or self._loop is None:
            return
        idle = _now() - self._last_activity
        if idle < self.idle_timeout:
            self._timer = self._loop.call_later(self.idle_timeout - idle, self._check)
            return
        self._done = True
        if self._on_stall is not None:
            what = f"after {self.events} events" if self.events else "before the first event"
            self._on_stall(StreamStalled(f"the stream sent nothing for {self.idle_timeout:g} s ({what})"))

    def _event(self, now: float, data: str) -> None:
        if self.events == 0:
            self.first_event = now
        else:
            self.gaps.append(now - self.last_event_at)
        self.last_event_at = now
        self.events += 1
        self.last_event = data[:MAX_LAST_EVENT]

    def _feed_sse(self, data: bytes, now: float) -> None:
        buf = self._buf + data if self._buf else data
        if buf.find(b"\r") >= 0:  # (not ``in``: see h2wire._BAD_NAME)
            if buf.endswith(b"\r"):  # a CRLF may be split across pieces: wait for the next one
                self._buf = buf
                return
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        while True:
            end = buf.find(b"\n\n")
            if end < 0:
                break
            block = buf[:end]
            buf = buf[end + 2 :]
            data_lines = []
            is_event = False
            for line in block.split(b"\n"):
                if not line or line.startswith(b":"):
                    continue
                is_event = True
                if line.startswith(b"data"):
                    value = line[5:] if line[4:5] == b":" else b""
                    data_lines.append(value[1:] if value.startswith(b" ") else value)
            if is_event:
                self._event(now, b"\n".join(data_lines).decode("utf-8", "replace"))
        if len(buf) > MAX_PENDING:
            buf = buf[-MAX_PENDING:]
        self._buf = buf

    def _feed_lines(self, data: bytes, now: float) -> None:
        buf = self._buf + data if self._buf else data
        if buf.find(b"\n") < 0:
            self._buf = buf[-MAX_PENDING:]
            return
        *lines, rest = buf.split(b"\n")
        for line in lines:
            if line.strip():
                self._event(now, line.decode("utf-8", "replace"))
        self._buf = rest
