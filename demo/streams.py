"""The demo target's modern-protocols face: HTTP/2 (TLS and h2c), server-sent events and WebSocket.

    python -m demo.streams --host 127.0.0.1 [--port 0] [--tls-port 0] [--knob NAME=VALUE ...]

A small ASGI application served by Hypercorn, on two sockets: one cleartext
(HTTP/1.1, and HTTP/2 with prior knowledge, "h2c") and one TLS (ALPN ``h2`` or
``http/1.1``) with a certificate made at start by ``trustme`` for 127.0.0.1,
::1 and localhost; the CA's PEM is written where ``--ca-file`` says so that a
client (the engine's ``ca_bundle``) can trust it. Prints two lines once both
sockets accept connections::

    Plimsoll demo streams listening on http://127.0.0.1:PORT (h1, h2c)
    Plimsoll demo streams listening on https://127.0.0.1:PORT (h2, h1) ca=PATH

Why Hypercorn: one well-kept ASGI server that speaks HTTP/1.1, HTTP/2 over TLS
with ALPN, h2c with prior knowledge and WebSocket (over HTTP/1.1), so a single
application serves every protocol the engine speaks; the aiohttp application
of ``demo/app.py`` has no HTTP/2 server side. (Hypercorn builds on python-hyper's
``h2`` and ``wsproto``; the engine has its own framing and shares only ``hpack``
with it, and its tests also run against nginx, an independent HTTP/2 implementation.)

Endpoints (``?`` parameters override the knob of the same meaning for one request):

* ``GET /page`` (a small HTML page) and ``GET /res/{n}`` (``n`` bytes, at most
  1 MB): pages and resources for multiplexing;
* ``GET /sse?tokens=&first_ms=&gap_ms=``: server-sent events, as an LLM
  endpoint streams tokens: ``tokens`` events ``event: token`` whose data is
  ``{"i": i, "t": <send time, epoch seconds>}``, then ``event: done`` /
  ``data: [DONE]``; the first after ``first_ms``, the others ``gap_ms`` apart;
* ``GET /chunked?chunks=&gap_ms=``: the same pacing as a plain chunked body
  (``text/plain``, one line per chunk);
* ``WS /ws``: echo; each text message comes back as it was sent (after
  ``ws.delay_ms``), except ``/handshake``, answered with the cookie and ``x-``
  headers of the upgrade request as JSON; a message ``{"chat": "..."}`` is also sent to every other
  open ``/ws`` session as ``{"from": n, "chat": "..."}``;
* ``GET/POST /_demo/knobs``, ``GET /_demo/counters``, ``POST /_demo/counters/reset``
  (never counted).

Knobs that degrade each protocol (``KNOBS``): ``latency_ms`` (pages),
``sse.first_ms``, ``sse.gap_ms``, ``sse.tokens``, ``sse.drop_after`` (the
connection is dropped after that many events: a stream that ends without
``done``), ``sse.stall_after`` (the stream stops sending, without closing,
after that many events), ``sse.final_newline`` (``off``: the last event lacks
its terminating blank line), ``ws.delay_ms``, ``ws.drop_after`` (the server
closes the session, code 1011, after that many echoes). Counters count what
was served: requests by protocol (``"1.1"``/``"2"``) and path, SSE streams
and events sent, streams dropped or stalled, WebSocket sessions, messages
received and sent, the send times of the first events (last 10,000), and the
W3C ``traceparent`` headers seen per path, WebSocket upgrades included
(``traces``, ``demo/traces.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import tempfile
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from demo.traces import TraceLog

MAX_RES = 1 << 20
FIRST_EVENT_TIMES = 10_000


def _int(v: Any) -> int:
    n = int(v)
    if n < 0:
        raise ValueError("must be at least 0")
    return n


def _on_off(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if v not in ("on", "off"):
        raise ValueError('expected "on" or "off"')
    return v


KNOBS: dict[str, tuple[Any, Any]] = {  # name -> (parser, default)
    "latency_ms": (_int, 0),
    "sse.tokens": (_int, 20),
    "sse.first_ms": (_int, 0),
    "sse.gap_ms": (_int, 10),
    "sse.drop_after": (_int, 0),  # 0: never
    "sse.stall_after": (_int, 0),  # 0: never
    "sse.final_newline": (_on_off, "on"),
    "ws.delay_ms": (_int, 0),
    "ws.drop_after": (_int, 0),  # 0: never
}


class StreamCounters:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.by_protocol: Counter[str] = Counter()
        self.by_path: Counter[str] = Counter()
        self.peers: Counter[int] = Counter()  # client port (one per connection) -> requests served on it
        self.sse_streams = 0
        self.sse_events = 0  # token events sent
        self.sse_done = 0  # streams that sent their final "done" event
        self.sse_dropped = 0
        self.sse_stalled = 0
        self.first_event_sent: deque[float] = deque(maxlen=FIRST_EVENT_TIMES)
        # seconds from the request reaching the application to its first event's send (the server's own TTFE)
        self.first_event_delay: deque[float] = deque(maxlen=FIRST_EVENT_TIMES)
        self.chunked_streams = 0
        self.ws_sessions = 0
        self.ws_messages_in = 0
        self.ws_messages_out = 0
        self.ws_dropped = 0
        self.traces = TraceLog()  # W3C traceparent headers seen, per path (demo/traces.py)

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "by_protocol": dict(self.by_protocol),
            "by_path": dict(self.by_path),
            "connections": len(self.peers),
            "sse_streams": self.sse_streams,
            "sse_events": self.sse_events,
            "sse_done": self.sse_done,
            "sse_dropped": self.sse_dropped,
            "sse_stalled": self.sse_stalled,
            "first_event_sent": list(self.first_event_sent),
            "first_event_delay": list(self.first_event_delay),
            "chunked_streams": self.chunked_streams,
            "ws_sessions": self.ws_sessions,
            "ws_messages_in": self.ws_messages_in,
            "ws_messages_out": self.ws_messages_out,
            "ws_dropped": self.ws_dropped,
            "traces": self.traces.snapshot()["paths"],
        }


class StreamsApp:
    """The ASGI application (one instance per server)."""

    def __init__(self, knobs: dict[str, Any] | None = None) -> None:
        self.knobs = {name: default for name, (_, default) in KNOBS.items()}
        self.counters = StreamCounters()
        self.sessions: dict[int, Any] = {}  # open /ws sessions: number -> send()
        self._session_no = 0
        self.set_knobs(knobs or {})

    def set_knobs(self, values: dict[str, Any]) -> None:
        parsed = {}
        for name, value in values.items():
            if name not in KNOBS:
                raise ValueError(f"unknown knob {name!r} (known: {', '.join(KNOBS)})")
            try:
                parsed[name] = KNOBS[name][0](value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name}: {exc}") from None
        self.knobs.update(parsed)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind == "websocket":
            await self._websocket(scope, receive, send)
            return
        path = scope["path"]
        query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        if path.startswith("/_demo/"):
            await self._admin(scope, receive, send, path)
            return
        c = self.counters
        c.requests += 1
        c.by_protocol[scope.get("http_version", "1.1")] += 1
        c.by_path[path if not path.startswith("/res/") else "/res/"] += 1
        c.traces.record(path if not path.startswith("/res/") else "/res/", _header(scope, b"traceparent"))
        client = scope.get("client")
        if client:
            c.peers[client[1]] += 1
        try:
            if path == "/sse":
                await self._sse(send, query)
            elif path == "/chunked":
                await self._chunked(send, query)
            else:
                await self._page(scope, receive, send, path)
        except ValueError as exc:
            await _respond(send, 400, f"bad parameter: {exc}\n".encode(), "text/plain")

    # -- pages --

    async def _page(self, scope: dict[str, Any], receive: Any, send: Any, path: str) -> None:
        body = await _read_body(receive)
        if self.knobs["latency_ms"]:
            await asyncio.sleep(self.knobs["latency_ms"] / 1000)
        if path == "/page":
            links = "".join(f'<img src="/res/{100 + i}">' for i in range(4))
            page = f"<!doctype html><title>h2 page</title><h1>Hello over HTTP/{scope.get('http_version')}</h1>{links}"
            await _respond(send, 200, page.encode(), "text/html; charset=utf-8")
        elif path.startswith("/res/"):
            n = _int(path[5:] or "0")
            if n > MAX_RES:
                raise ValueError(f"at most {MAX_RES} bytes")
            await _respond(send, 200, b"r" * n, "application/octet-stream")
        elif path == "/echo":
            await _respond(send, 200, body, "application/octet-stream")
        elif path == "/protocol":
            await _respond(send, 200, scope.get("http_version", "").encode(), "text/plain")
        else:
            await _respond(send, 404, b"not found\n", "text/plain")

    # -- streams --

    def _pace(self, query: dict[str, str], prefix: str) -> tuple[int, float, float]:
        k = self.knobs
        count = _int(query.get("tokens", query.get("chunks", k["sse.tokens"])))
        first = _int(query.get("first_ms", k["sse.first_ms"])) / 1000
        gap = _int(query.get("gap_ms", k["sse.gap_ms"])) / 1000
        return count, first, gap

    async def _sse(self, send: Any, query: dict[str, str]) -> None:
        arrived = time.time()
        count, first, gap = self._pace(query, "sse")
        k = self.knobs
        drop_after, stall_after = k["sse.drop_after"], k["sse.stall_after"]
        c = self.counters
        c.sse_streams += 1
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        loop = asyncio.get_running_loop()
        due = loop.time() + first
        for i in range(count):
            if drop_after and i >= drop_after:
                c.sse_dropped += 1
                raise _Drop()
            if stall_after and i >= stall_after:
                c.sse_stalled += 1
                await asyncio.sleep(3600)
            await _sleep_until(loop, due)
            sent = time.time()
            if i == 0:
                c.first_event_sent.append(sent)
                c.first_event_delay.append(sent - arrived)
            event = f'id: {i}\nevent: token\ndata: {{"i": {i}, "t": {sent:.6f}}}\n\n'
            c.sse_events += 1  # counted before the send returns: the client may have it by then
            await send({"type": "http.response.body", "body": event.encode(), "more_body": True})
            due += gap
        tail = b"event: done\ndata: [DONE]\n\n" if k["sse.final_newline"] == "on" else b"event: done\ndata: [DONE]"
        c.sse_done += 1
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _chunked(self, send: Any, query: dict[str, str]) -> None:
        count, first, gap = self._pace(query, "chunked")
        self.counters.chunked_streams += 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        loop = asyncio.get_running_loop()
        due = loop.time() + first
        for i in range(count):
            await _sleep_until(loop, due)
            await send({"type": "http.response.body", "body": f"chunk {i}\n".encode(), "more_body": True})
            due += gap
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- websocket --

    async def _websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        msg = await receive()
        if msg["type"] != "websocket.connect":
            return
        if scope["path"] != "/ws":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "websocket.accept"})
        c = self.counters
        c.ws_sessions += 1
        c.traces.record("/ws", _header(scope, b"traceparent"))
        self._session_no += 1
        number = self._session_no
        self.sessions[number] = send
        echoed = 0
        try:
            while True:
                msg = await receive()
                if msg["type"] == "websocket.disconnect":
                    return
                text = msg.get("text")
                data = msg.get("bytes")
                c.ws_messages_in += 1
                if self.knobs["ws.delay_ms"]:
                    await asyncio.sleep(self.knobs["ws.delay_ms"] / 1000)
                c.ws_messages_out += 1
                if text == "/handshake":  # the cookie and x- headers of the upgrade request, as JSON
                    seen = {k.decode(): v.decode() for k, v in scope["headers"] if k == b"cookie" or k[:2] == b"x-"}
                    await send({"type": "websocket.send", "text": json.dumps(seen)})
                elif text is not None:
                    await send({"type": "websocket.send", "text": text})
                    self._chat(number, text)
                else:
                    await send({"type": "websocket.send", "bytes": data or b""})
                echoed += 1
                if self.knobs["ws.drop_after"] and echoed >= self.knobs["ws.drop_after"]:
                    c.ws_dropped += 1
                    await send({"type": "websocket.close", "code": 1011, "reason": "dropped by the ws.drop_after knob"})
                    return
        finally:
            self.sessions.pop(number, None)

    def _chat(self, number: int, text: str) -> None:
        if not text.startswith("{") or len(self.sessions) < 2:
            return
        try:
            chat = json.loads(text).get("chat")
        except (ValueError, AttributeError):
            return
        if not isinstance(chat, str):
            return
        out = json.dumps({"from": number, "chat": chat})
        for other, send in list(self.sessions.items()):
            if other != number:
                self.counters.ws_messages_out += 1
                asyncio.ensure_future(send({"type": "websocket.send", "text": out}))

    # -- admin --

    async def _admin(self, scope: dict[str, Any], receive: Any, send: Any, path: str) -> None:
        body = await _read_body(receive)
        method = scope["method"]
        if path == "/_demo/counters" and method == "GET":
            await _json(send, 200, self.counters.snapshot())
        elif path == "/_demo/counters/reset" and method == "POST":
            self.counters.reset()
            await _json(send, 200, self.counters.snapshot())
        elif path == "/_demo/knobs" and method == "GET":
            await _json(send, 200, self.knobs)
        elif path == "/_demo/knobs" and method == "POST":
            try:
                values = json.loads(body or b"{}")
                if not isinstance(values, dict):
                    raise ValueError("expected a JSON object of knob names to values")
                self.set_knobs(values)
            except ValueError as exc:
                await _json(send, 400, {"error": str(exc)})
                return
            await _json(send, 200, self.knobs)
        else:
            await _json(send, 404, {"error": "not found"})


class _Drop(Exception):
    """Raised inside a response to make Hypercorn drop the connection (a stream that breaks off)."""


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v.decode("latin-1")
    return None


async def _sleep_until(loop: asyncio.AbstractEventLoop, due: float) -> None:
    delay = due - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            break
    return b"".join(chunks)


async def _respond(send: Any, status: int, body: bytes, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Any, status: int, data: Any) -> None:
    await _respond(send, status, json.dumps(data).encode(), "application/json")


# -- serving ------------------------------------------------------------------------------------------


class Certificates:
    """A throw-away CA (trustme) and a server certificate for 127.0.0.1, ::1 and localhost, as files."""

    def __init__(self, directory: Path) -> None:
        import trustme

        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "::1", "localhost")
        self.ca_file = directory / "demo-ca.pem"
        self.cert_file = directory / "demo-cert.pem"
        self.key_file = directory / "demo-key.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        cert.private_key_and_cert_chain_pem.write_to_path(str(self.cert_file))
        cert.private_key_pem.write_to_path(str(self.key_file))

    @property
    def ca_pem(self) -> str:
        return self.ca_file.read_text()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted connections (Linux): without it a token written right after the headers waits
    # for the client's delayed ACK (Nagle), and events arrive in 40 ms bursts instead of at their pace.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def serve(
    app: StreamsApp,
    certs: Certificates,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_port: int = 0,
    *,
    ready: Any = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``app`` on a cleartext and a TLS socket until ``stop`` is set; ``ready(http_url, https_url)`` once up."""
    from hypercorn.asyncio.run import worker_serve
    from hypercorn.config import Config, Sockets
    from hypercorn.utils import wrap_app

    config = Config()
    config.certfile = str(certs.cert_file)
    config.keyfile = str(certs.key_file)
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = 75
    config.graceful_timeout = 1.0
    plain, tls = _listen(host, port), _listen(host, tls_port)
    shown = f"[{host}]" if ":" in host else host
    http_url = f"http://{shown}:{plain.getsockname()[1]}"
    https_url = f"https://{shown}:{tls.getsockname()[1]}"
    stop = stop or asyncio.Event()
    if ready is not None:
        asyncio.get_running_loop().call_soon(ready, http_url, https_url)
    await worker_serve(
        wrap_app(app, config.wsgi_max_body_size, "asgi"),
        config,
        sockets=Sockets(secure_sockets=[tls], insecure_sockets=[plain], quic_sockets=[]),
        shutdown_trigger=stop.wait,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.streams", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002, help="cleartext (HTTP/1.1, h2c); 0 picks a free port")
    parser.add_argument("--tls-port", type=int, default=8443, help="TLS (ALPN h2, http/1.1); 0 picks a free port")
    parser.add_argument("--ca-file", default="", help="where to write the CA's PEM (default: a temporary folder)")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    try:
        app = StreamsApp(dict(k.split("=", 1) for k in args.knob))
    except ValueError as exc:
        print(f"bad --knob: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="plimsoll-demo-tls-") as tmp:
        certs = Certificates(Path(tmp))
        if args.ca_file:
            Path(args.ca_file).write_text(certs.ca_pem)
        ca_path = args.ca_file or str(certs.ca_file)

        def ready(http_url: str, https_url: str) -> None:
            print(f"Plimsoll demo streams listening on {http_url} (h1, h2c)", flush=True)
            print(f"Plimsoll demo streams listening on {https_url} (h2, h1) ca={ca_path}", flush=True)

        async def run() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await serve(app, certs, args.host, args.port, args.tls_port, ready=ready, stop=stop)

        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover
            factory = None
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
