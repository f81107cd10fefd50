"""Loopback servers for the HTTP/2, stream and WebSocket tests (127.0.0.1 only).

* ``StreamsServer``: the demo target's ``demo.streams`` application under Hypercorn,
  in its own thread and loop: h2c and HTTP/1.1 on ``http_url``, TLS (ALPN h2 or
  http/1.1, trustme certificate) on ``https_url``; ``app.counters`` is what it served.
* ``NginxH2``: nginx (Debian's) with ``http2`` on a TLS listener and on a cleartext
  one (prior knowledge): an HTTP/2 server independent of python-hyper.
* ``RawH2Server``: a server built on the ``h2`` library's server side that
  misbehaves on purpose, per path: resets streams, refuses them, sends GOAWAY,
  breaks the framing, never opens its flow-control window, caps concurrent streams,
  sends a stream's first event in one read with thousands of frames after it.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import trustme

from demo.streams import Certificates, StreamsApp, serve

from .servers import LOCAL, TWO_K, NginxProcess, free_port


class StreamsServer:
    def __init__(self, directory: Path, knobs: dict | None = None) -> None:
        self.certs = Certificates(directory)
        self.app = StreamsApp(knobs)
        self.http_url = self.https_url = ""
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="demo-streams", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("demo.streams did not start")

    @property
    def ca_pem(self) -> str:
        return self.certs.ca_pem

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._stop = asyncio.Event()

        def ready(http_url: str, https_url: str) -> None:
            self.http_url, self.https_url = http_url, https_url
            self._ready.set()

        self._loop.run_until_complete(serve(self.app, self.certs, LOCAL, ready=ready, stop=self._stop))

    def set_knobs(self, **knobs) -> None:
        self._loop.call_soon_threadsafe(self.app.set_knobs, {k.replace("__", "."): v for k, v in knobs.items()})
        time.sleep(0.05)

    def reset(self) -> None:
        self._loop.call_soon_threadsafe(self.app.counters.reset)
        time.sleep(0.05)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


class NginxH2(NginxProcess):
    """nginx with HTTP/2 over TLS (``https_url``), h2c with prior knowledge (``h2c_url``) and HTTP/1.1 (``h1_url``)."""

    def __init__(self, directory: Path) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        cert.private_key_and_cert_chain_pem.write_to_path(str(directory / "cert.pem"))
        cert.private_key_pem.write_to_path(str(directory / "key.pem"))
        self.ca_pem = ca.cert_pem.bytes().decode()
        tls_port, h2c_port, h1_port = free_port(), free_port(), free_port()
        self.https_url = f"https://{LOCAL}:{tls_port}"
        self.h2c_url = f"http://{LOCAL}:{h2c_port}"
        self.h1_url = f"http://{LOCAL}:{h1_port}"
        server = f"""\
        listen 127.0.0.1:{tls_port} ssl http2;
        listen 127.0.0.1:{h2c_port} http2;
        listen 127.0.0.1:{h1_port};
        ssl_certificate {directory}/cert.pem;
        ssl_certificate_key {directory}/key.pem;
        location = /proto {{ return 200 "$server_protocol"; }}"""
        super().__init__(directory, server=server, ports=[tls_port, h2c_port, h1_port], files={"2k.txt": TWO_K})


class _RawH2(asyncio.Protocol):
    """One server-side HTTP/2 connection whose behaviour depends on the request path."""

    def __init__(self, server: RawH2Server) -> None:
        self.server = server
        settings = dict(server.settings)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.conn.local_settings = h2.settings.Settings(client=False, initial_values=settings)
        self.transport: asyncio.Transport | None = None
        self.open = 0
        self.arrived = 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server.connections += 1
        self.conn.initiate_connection()
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        arrived = time.perf_counter()
        try:
            events = self.conn.receive_data(data)
        except Exception:
            self.transport.abort()
            return
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                path = dict(ev.headers)[b":path"].decode()
                self.server.paths.append(path)
                self.server.arrived = self.arrived = arrived  # the request's read, before h2 parsed it
                self.open += 1
                self.server.max_open = max(self.server.max_open, self.open)
                self._handle(ev.stream_id, path)
            elif isinstance(ev, h2.events.DataReceived):
                if not self.server.never_read:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamReset):
                self.server.resets_received += 1
                self.open -= 1
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.conn.data_to_send())

    def _handle(self, stream_id: int, path: str) -> None:
        conn = self.conn
        if path == "/reset":
            conn.reset_stream(stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
            self.open -= 1
        elif path == "/refuse-once":
            if self.server.refused == 0:
                self.server.refused += 1
                conn.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                self.open -= 1
            else:
                self._ok(stream_id, b"second time lucky")
        elif path == "/goaway" and self.server.goaways == 0:
            # Once: GOAWAY naming the stream before this one as the last processed, so this one was not.
            conn.close_connection(h2.errors.ErrorCodes.NO_ERROR, last_stream_id=stream_id - 2 if stream_id > 2 else 0)
            self.server.goaways += 1
        elif path == "/malformed":
            # A HEADERS frame whose header block is garbage for HPACK (a bad index), on the request's stream.
            block = b"\xff\xff\xff\xff\x0f"
            frame = len(block).to_bytes(3, "big") + b"\x01\x05" + stream_id.to_bytes(4, "big") + block
            self.transport.write(conn.data_to_send() + frame)
        elif path == "/slow":
            asyncio.get_running_loop().call_later(0.05, self._ok_later, stream_id)
        elif path == "/upload":
            pass  # answers never: the body is never read (see never_read)
        elif path == "/sse-burst":
            conn.send_headers(stream_id, [(b":status", b"200"), (b"content-type", b"text/event-stream")])
            asyncio.get_running_loop().call_later(0.05, self._burst, stream_id)
        else:
            self._ok(stream_id, b"ok " + path.encode())

    def _ok_later(self, stream_id: int) -> None:
        self._ok(stream_id, b"slow ok")
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.conn.data_to_send())

    def _burst(self, stream_id: int) -> None:
        """An SSE stream's first event, then ``burst_frames`` DATA frames of keep-alive comments and a last
        event, in one write: the client reads the first event together with much to parse after it.
        ``burst_sent`` is the write's time (``time.perf_counter``), ``bursts`` the server's time to first
        event of each (from the read that held the request). The frames are made here, not by h2: h2
        takes longer to make them than the client to parse them, and its flow-control books are not needed.
        """
        if self.transport is None or self.transport.is_closing():
            return
        sid = stream_id.to_bytes(4, "big")

        def frame(payload: bytes, flags: int = 0) -> bytes:
            return len(payload).to_bytes(3, "big") + bytes((0, flags)) + sid + payload

        data = b"".join(
            (
                self.conn.data_to_send(),
                frame(b"data: first\n\n"),
                frame(b": k\n\n") * self.server.burst_frames,
                frame(b"data: [DONE]\n\n", flags=1),  # END_STREAM
            )
        )
        self.server.burst_sent = time.perf_counter()
        self.server.bursts.append(self.server.burst_sent - self.arrived)
        self.transport.write(data)

    def _ok(self, stream_id: int, body: bytes) -> None:
        self.conn.send_headers(stream_id, [(b":status", b"200"), (b"content-length", str(len(body)).encode())])
        self.conn.send_data(stream_id, body, end_stream=True)
        self.open -= 1

    def connection_lost(self, exc) -> None:
        self.transport = None


class RawH2Server:
    """A cleartext HTTP/2 server (prior knowledge) on 127.0.0.1 misbehaving per path (see ``_RawH2._handle``)."""

    def __init__(self, *, max_concurrent_streams: int = 100, initial_window: int = 65535, never_read: bool = False):
        self.settings = {
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_concurrent_streams,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: initial_window,
        }
        self.never_read = never_read
        self.paths: list[str] = []
        self.connections = 0
        self.max_open = 0
        self.refused = 0
        self.goaways = 0
        self.resets_received = 0
        self.burst_frames = 20_000  # /sse-burst
        self.burst_sent = 0.0
        self.arrived = 0.0  # the last request's arrival (time.perf_counter)
        self.bursts: list[float] = []  # /sse-burst: seconds from the request's arrival to the burst's write
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raw-h2", daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("raw h2 server did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start():
            self._server = await self._loop.create_server(lambda: _RawH2(self), LOCAL, 0)
            self.url = f"http://{LOCAL}:{self._server.sockets[0].getsockname()[1]}"
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def tls_server_context(directory: Path) -> tuple[ssl.SSLContext, str]:
    """A server TLS context for 127.0.0.1 (no ALPN: HTTP/1.1 only) and the PEM of the CA that signed it."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    return ctx, ca.cert_pem.bytes().decode()
