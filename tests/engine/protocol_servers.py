"""Loopback servers for the HTTP/2, stream and WebSocket tests (127.0.0.1 only).

* ``StreamsServer``: the demo target's ``demo.streams`` application under Hypercorn,
  in its own thread and loop: h2c and HTTP/1.1 on ``http_url``, TLS (ALPN h2 or
  http/1.1, trustme certificate) on ``https_url``; ``app.counters`` is what it served.
* ``NginxH2``: nginx (Debian's) with ``http2`` on a TLS listener and on a cleartext
  one (prior knowledge): an HTTP/2 server independent of python-hyper.
* ``RawH2Server``: a server built on the ``h2`` library's server side that
  misbehaves on purpose, per path: resets streams, refuses them, sends GOAWAY,
  breaks the framing, never opens its flow-control window, caps concurrent streams,
  sends a stream's first event in one read with thousands of frames after it; and
  frames written by hand that the ``h2`` library never makes (CONTINUATION, padding,
  priority fields, a response cut into 40 writes, trailers, fields it would refuse).
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


def _raw_frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big") + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal field without indexing, new name, no Huffman (both strings under 127 bytes)."""
    return b"\x00" + bytes((len(name),)) + name + bytes((len(value),)) + value


_STATUS_200 = b"\x88"  # static index 8


def _continuation(stream_id: int) -> bytes:
    """HEADERS without END_HEADERS, then two CONTINUATION frames; the body in one DATA frame."""
    block = _STATUS_200 + b"".join(_literal(b"x-part-%d" % i, b"v" * 100) for i in range(5))
    a, b, c = block[:50], block[50:300], block[300:]
    return b"".join(
        (
            _raw_frame(1, 0, stream_id, a),
            _raw_frame(9, 0, stream_id, b),
            _raw_frame(9, 0x4, stream_id, c),  # END_HEADERS
            _raw_frame(0, 0x1, stream_id, b"continued"),
        )
    )


def _padded(stream_id: int) -> bytes:
    """HEADERS padded and with priority fields; DATA frames padded (one with a pad length of 0)."""
    block = _STATUS_200 + _literal(b"x-padded", b"yes")
    headers = bytes((7,)) + bytes(5) + block + bytes(7)  # pad length, priority (5 bytes), block, padding
    return b"".join(
        (
            _raw_frame(1, 0x4 | 0x8 | 0x20, stream_id, headers),
            _raw_frame(0, 0x8, stream_id, bytes((200,)) + b"pad" + bytes(200)),
            _raw_frame(0, 0x8, stream_id, bytes((0,)) + b"ded"),
            _raw_frame(0, 0x1 | 0x8, stream_id, bytes((3,)) + b"!" + bytes(3)),
        )
    )


def _split(stream_id: int) -> bytes:
    """A PING, a response of several DATA frames and trailers: written in 40 pieces (frames cut anywhere)."""
    block = _STATUS_200 + _literal(b"content-length", b"3000")
    body = b"".join(_raw_frame(0, 0, stream_id, bytes((65 + i,)) * 1000) for i in range(3))
    trailers = _raw_frame(1, 0x1 | 0x4, stream_id, _literal(b"x-trailer", b"done"))
    return _raw_frame(6, 0, 0, b"pingpong") + _raw_frame(1, 0x4, stream_id, block) + body + trailers


def _uppercase(stream_id: int) -> bytes:
    """A response field name in capitals: RFC 9113 §8.2.1 makes the response malformed."""
    return _raw_frame(1, 0x1 | 0x4, stream_id, _STATUS_200 + _literal(b"X-Upper", b"1"))


def _bad_length(stream_id: int) -> bytes:
    """A content-length that the body does not match (RFC 9113 §8.1.1)."""
    block = _STATUS_200 + _literal(b"content-length", b"10")
    return _raw_frame(1, 0x4, stream_id, block) + _raw_frame(0, 0x1, stream_id, b"short")


RAW_RESPONSES = {
    "/continuation": _continuation,
    "/padded": _padded,
    "/split": _split,
    "/uppercase": _uppercase,
    "/bad-length": _bad_length,
}


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
        self.received: dict[int, int] = {}  # /count: request body bytes per stream
        self.big: dict[int, memoryview] = {}  # /big: what is still to send, as the client's windows allow

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server.connections += 1
        self.index = self.server.connections
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
                self.server.log.append((self.index, path))
                self.server.arrived = self.arrived = arrived  # the request's read, before h2 parsed it
                self.open += 1
                self.server.max_open = max(self.server.max_open, self.open)
                self._handle(ev.stream_id, path)
            elif isinstance(ev, h2.events.DataReceived):
                if ev.stream_id in self.received:
                    self.received[ev.stream_id] += len(ev.data)
                if not self.server.never_read:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id in self.received:
                self._ok(ev.stream_id, b"%d" % self.received.pop(ev.stream_id))
            elif isinstance(ev, h2.events.StreamReset):
                self.server.resets_received += 1
                self.open -= 1
        self._pump()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.conn.data_to_send())

    def _pump(self) -> None:
        """/big: send what the client's flow-control windows allow (h2 refuses to send more)."""
        for stream_id, rest in list(self.big.items()):
            while rest:
                n = min(len(rest), self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
                if n <= 0:
                    break
                self.conn.send_data(stream_id, rest[:n].tobytes(), end_stream=n == len(rest))
                rest = rest[n:]
            if rest:
                self.big[stream_id] = rest
            else:
                del self.big[stream_id]
                self.open -= 1

    def _raw(self, data: bytes, pieces: int = 1) -> None:
        """Write ``data`` after what h2 has queued, in ``pieces`` writes 5 ms apart (so many reads)."""
        data = self.conn.data_to_send() + data
        step = -(-len(data) // pieces)
        loop = asyncio.get_running_loop()
        for i in range(pieces):
            loop.call_later(0.005 * i, self._write_now, data[i * step : (i + 1) * step])

    def _write_now(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

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
        elif path in RAW_RESPONSES:
            # Frames written by hand (h2 only makes plain ones): literal fields, no dynamic table.
            self._raw(RAW_RESPONSES[path](stream_id), pieces=40 if path == "/split" else 1)
            self.open -= 1
        elif path == "/upload-count":
            self.received[stream_id] = 0  # answered at the end of the request body: its length
        elif path.startswith("/big/"):
            conn.send_headers(stream_id, [(b":status", b"200")])
            self.big[stream_id] = memoryview(b"b" * int(path[5:]))
        elif path == "/goaway-mid" and self.server.goaways == 0:
            # GOAWAY naming this stream's predecessor as the last one processed, written by hand so that h2
            # goes on answering the streams it has: those opened before are answered, this one and later not.
            last = stream_id - 2
            self.server.goaways += 1
            self.transport.write(conn.data_to_send() + _raw_frame(7, 0, 0, last.to_bytes(4, "big") + bytes(4)))
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
        self.log: list[tuple[int, str]] = []  # (connection number, path) of every request
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
