"""Optional OTLP export of the engine's request spans (issue 29 item 4): OTLP/HTTP with JSON encoding.

With a plan's ``otlp_endpoint`` (and its trace context on), every **sampled** request (``traceparent``
flags ``01``) becomes one client span, ``SPAN_KIND_CLIENT``, whose trace id and span id are the
``traceparent``'s trace id and parent id: the server's span (its parent id is ours) hangs under it in
Tempo, Jaeger or Zipkin. Attributes: ``http.request.method``, ``url.full``,
``http.response.status_code`` (or ``error.type`` and status ERROR when no response came).

Why its own encoder rather than ``opentelemetry-exporter-otlp-proto-http``: the SDK makes a Span
object per request (start, attributes, end, processor: microseconds of Python on the engine's loop,
where a whole request costs the engine 20-30 µs) and brings protobuf, requests and the SDK into the
workers. Here the loop's share is one tuple appended to a deque (two clock reads, under 0.5 µs), and
OTLP/HTTP's JSON encoding (the specification's: ids as hex, 64-bit integers as strings) is made by a
background thread with string formatting.

Bounded, so it never slows the engine by more than a few percent:

- **a queue with a cap** (QUEUE_CAP spans): when it is full, a span is dropped and counted, the
  engine never waits;
- **a background thread** posts batches of up to BATCH spans every INTERVAL_S; it never touches the
  event loop. Each post is bounded by POST_TIMEOUT_S, and a failed post's spans are counted as failed,
  never retried (a slow or dead collector costs nothing but those spans);
- **a CPU budget**: the thread keeps its own CPU time (``time.thread_time``: encoding and posting)
  under CPU_BUDGET of the CPU time the rest of the process (the engine) used since it started (it
  shares the generator's core and the GIL); over it, it waits, and the queue's cap drops what it
  cannot take. Without the budget the export
  would cost what it costs (2-4 µs a span, 10-15 % of a request's 25 µs at a sample rate of 1.0);
  with it, a high sample rate exports a share of the spans and says how many it dropped;
- at the run's end, what is queued is flushed for at most FLUSH_S, within the same budget.

The endpoint is checked against the engine's allowlist like a target (loopback only by default); one
that is refused, or not an http(s) URL, exports nothing, and the run says why (``stats()``).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

__all__ = ["SpanExporter", "encode", "traces_url"]

QUEUE_CAP = 4_000
BATCH = 1_000
INTERVAL_S = 0.25
POST_TIMEOUT_S = 2.0
FLUSH_S = 3.0
CPU_BUDGET = 0.02  # the thread's CPU, at most this share of the CPU the rest of the process used
MAX_ERROR = 200


def traces_url(endpoint: str) -> str:
    """The URL spans are posted to: ``endpoint`` itself, or ``<endpoint>/v1/traces`` when it has no path."""
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"otlp_endpoint: an http(s) URL of an OTLP/HTTP receiver, not {endpoint!r}")
    if parts.path in ("", "/"):
        return endpoint.strip().rstrip("/") + "/v1/traces"
    return endpoint.strip()


def _attr(key: str, value: str) -> str:
    return '{"key":%s,"value":{"stringValue":%s}}' % (json.dumps(key), json.dumps(value))  # noqa: UP031


def _status_tail(status: int, error: str) -> bytes:
    if error:
        return b'{"key":"error.type","value":{"stringValue":%b}}],"status":{"code":2,"message":%b}}' % (
            json.dumps(error).encode(),
            json.dumps(error).encode(),
        )
    code = b'"code":2' if status >= 500 else b""
    return b'{"key":"http.response.status_code","value":{"intValue":"%d"}}],"status":{%b}}' % (status, code)


# One span: the JSON by hand, as bytes (braces everywhere: % reads better than an f-string's doubled braces).
_SPAN = (
    b'{"traceId":"%b","spanId":"%b","name":"%b","kind":3,"startTimeUnixNano":"%d","endTimeUnixNano":"%d",'
    b'"attributes":[{"key":"http.request.method","value":{"stringValue":"%b"}},'
    b'{"key":"url.full","value":{"stringValue":%b}},%b'
)


def encode(spans: list[tuple], resource: dict[str, str], cache: dict | None = None) -> bytes:
    """An ``ExportTraceServiceRequest`` in OTLP/HTTP's JSON encoding for ``spans`` (as the exporter queues them).

    A span: ``(traceparent line, method, url, status, end in ns since the epoch, duration in s, error)``:
    the loop reads one clock (the wall clock at the end), the start is computed here.
    ``cache`` keeps the encoded URLs, methods and status tails between calls (bounded).
    """
    cache = cache if cache is not None else {}
    out = []
    span = _SPAN
    for tp, method, url, status, end_ns, duration_s, error in spans:
        u = cache.get(url)
        if u is None:
            u = json.dumps(url).encode()
            if len(cache) < 4096:
                cache[url] = u
        m = cache.get(method)
        if m is None:
            m = cache[method] = method.encode()  # a token (RFC 9110): nothing to escape
        key = (status, error)
        tail = cache.get(key)
        if tail is None:
            tail = _status_tail(status, error)
            if len(cache) < 4096:
                cache[key] = tail
        out.append(span % (tp[16:48], tp[49:65], m, end_ns - int(duration_s * 1e9), end_ns, m, u, tail))
    attributes = ",".join(_attr(k, v) for k, v in resource.items()).encode()
    return b"".join(
        (
            b'{"resourceSpans":[{"resource":{"attributes":[',
            attributes,
            b']},"scopeSpans":[{"scope":{"name":"plimsoll.engine"},"spans":[',
            b",".join(out),
            b"]}]}]}",
        )
    )


class SpanExporter:
    """The bounded queue of finished sampled requests and the thread that posts them (see the module docstring)."""

    def __init__(
        self,
        endpoint: str,
        resource: dict[str, str],
        *,
        cap: int = QUEUE_CAP,
        batch: int = BATCH,
        interval_s: float = INTERVAL_S,
        cpu_budget: float | None = None,
        address: str | None = None,
    ) -> None:
        self.url = traces_url(endpoint)
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._address = address  # the address the allowlist checked: connected to, not resolved again
        self.resource = dict(resource)
        self.cap, self.batch, self.interval_s = cap, batch, interval_s
        self.cpu_budget = CPU_BUDGET if cpu_budget is None else cpu_budget
        self.queue: deque = deque()  # appended to by the engine's loop, emptied by the thread
        self.dropped = 0  # the queue was full, the CPU budget was spent, or the final flush ran out of time
        self.exported = 0  # posted and answered 2xx
        self.failed = 0  # posted (or tried) and not taken: the receiver's error, a timeout, a refused connection
        self.posts = 0
        self.error = ""
        self.cpu_s = 0.0  # the thread's own CPU time (encoding and posting), at its end
        self._conn: http.client.HTTPConnection | None = None
        self._urls: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plimsoll-otlp", daemon=True)
        self._started = False

    # -- the engine's side: never blocks --

    def add(self, tp: bytes, method: str, url: str, status: int, end_ns: int, duration_s: float, error: str) -> None:
        """A finished sampled request (``tp``: its ``traceparent`` line); dropped and counted when the queue is full.

        The client (h1.py) appends to ``queue`` itself on its hot path, with the same cap; this is the slow door.
        """
        q = self.queue
        if len(q) >= self.cap:
            self.dropped += 1
            return
        q.append((tp, method, url, status, end_ns, duration_s, error))

    # -- the thread --

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def close(self, flush_s: float = FLUSH_S) -> dict[str, Any]:
        """Stops the thread after flushing for at most ``flush_s``; returns ``stats()``."""
        if self._started:
            self._flush_until = time.monotonic() + flush_s
            self._stop.set()
            self._thread.join(flush_s + POST_TIMEOUT_S + 1)
        if self.queue:  # not flushed in time: the rest is dropped, and said
            left = len(self.queue)
            self.queue.clear()
            self.dropped += left
        return self.stats()

    def stats(self) -> dict[str, Any]:
        return {
            "endpoint": self.url,
            "spans": self.exported + self.dropped + self.failed + len(self.queue),
            "exported": self.exported,
            "dropped": self.dropped,
            "failed": self.failed,
            "posts": self.posts,
            "error": self.error,
            "cpu_ms": round(self.cpu_s * 1000, 1),
        }

    def _run(self) -> None:
        self._cpu0, self._proc0 = time.thread_time(), time.process_time()
        try:
            while not self._stop.wait(self.interval_s):
                self._drain(None)
            self._drain(self._flush_until)
        finally:
            self.cpu_s = time.thread_time() - self._cpu0
            if self._conn is not None:
                self._conn.close()

    def _over_budget(self) -> float:
        """Seconds to wait before the next batch to be back within the CPU budget (0 when within it).

        The budget is a share of the CPU the rest of the process (the engine's loop) used since the
        thread started, so it scales with what the engine does, whatever the machine's load.
        """
        used = time.thread_time() - self._cpu0
        engine = time.process_time() - self._proc0 - used
        if used <= engine * self.cpu_budget:
            return 0.0
        return 0.05

    def _drain(self, until: float | None) -> None:
        """Posts what is queued, batch by batch, within the CPU budget (``until``: the final flush's deadline).

        Over the budget, the thread waits for it while the queue's cap drops what comes; the final
        flush does not wait: what it cannot post within the budget and its deadline is dropped.
        """
        q = self.queue
        while q:
            wait = self._over_budget()
            if wait > 0:
                if until is not None or self._stop.wait(min(wait, self.interval_s)):
                    return  # the run ended: close() counts what is left as dropped
                continue
            if until is not None and time.monotonic() >= until:
                return
            n = min(len(q), self.batch)
            spans = [q.popleft() for _ in range(n)]
            self._post(spans, until)

    def _post(self, spans: list[tuple], until: float | None) -> None:
        body = encode(spans, self.resource, self._urls)
        timeout = POST_TIMEOUT_S if until is None else max(0.1, min(POST_TIMEOUT_S, until - time.monotonic()))
        self.posts += 1
        try:
            conn = self._conn
            if conn is None:
                cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                host = self._address if self._address and not self._https else self._host  # https: the name, for TLS
                conn = self._conn = cls(host, self._port, timeout=timeout)
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.request(
                "POST",
                self._path,
                body,
                {"Content-Type": "application/json", "Host": f"{self._host}:{self._port}"},
            )
            response = conn.getresponse()
            answer = response.read(2000)
        except (OSError, http.client.HTTPException) as exc:
            self.failed += len(spans)
            self.error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            return
        if 200 <= response.status < 300:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
            self.error = f"HTTP {response.status}: {answer[:120].decode('utf-8', 'replace')}"[:MAX_ERROR]
        if response.will_close:
            conn.close()
            self._conn = None
