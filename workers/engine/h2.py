"""HTTP/2 for the engine: its own framing (``h2wire``) and ``hpack`` (python-hyper) on its asyncio transports.

The ``h2`` library's state machines, events and checks cost ~4 times the
CPU of the rest of a request; the client side of RFC 9113 that a load
generator needs is made here instead (frames read and made in ``_H2Conn``,
header blocks in ``h2wire``), and tested against nginx, Hypercorn and a
server on ``h2`` (tests/engine/test_h2.py).

``H2Client`` is an ``H1Client`` (same cookies, redirects, deadlines, allowlist
and body decoding) whose requests go over HTTP/2 when the plan's ``protocol``
says so and the server agrees; the protocol of each request is recorded in
``Response.protocol`` (``"h2"`` or ``"http/1.1"``).

* **Choosing the protocol** (per origin, per virtual user):
  ``http1``: HTTP/1.1 everywhere (what ``H1Client`` does).
  ``auto``: as a browser: https origins offer ALPN ``h2`` and ``http/1.1`` and
  use what the server picks; http origins use HTTP/1.1.
  ``h2c``: as ``auto`` for https; http origins speak cleartext HTTP/2 with
  prior knowledge (RFC 9113 §3.3), no upgrade dance.
  The first connection to an https origin learns the answer; a server that
  picks ``http/1.1`` (or offers no ALPN) gets that very connection handed to the
  HTTP/1.1 pool, so no handshake is wasted, and the origin stays HTTP/1.1 for the
  session.
* **One connection per origin**, as a browser: every request of a page (main
  request and its resources, fetched in parallel by the runner) is a stream on
  it. At most the server's ``SETTINGS_MAX_CONCURRENT_STREAMS`` streams are
  open; further requests wait, in order. A connection that received GOAWAY takes
  no new stream; a new one is opened for the next request.
* **Flow control**: received DATA is acknowledged as it is consumed (a
  WINDOW_UPDATE once half a window is used, one per read at most); the client announces a 1 MiB
  stream window and a 16 MiB connection window, so downloads are not throttled.
  A request body is sent as the server's windows allow; a server that never
  opens its window leaves the request waiting until its timeout, which is then
  reported as ``flow_control_stalled`` rather than a plain timeout.
* **Failures**: a stream the server resets (RST_STREAM) fails with
  ``StreamReset`` (kind ``stream_reset``); a stream refused by GOAWAY (its id
  above the last one the server processed) or by RST_STREAM ``REFUSED_STREAM``
  was not processed, so it is sent once more on a new connection, whatever its
  method (RFC 9113 §8.7). Frames that break the protocol (malformed HEADERS, a
  bad frame size...) fail every stream of the connection with
  ``H2ProtocolError`` (kind ``protocol_error``), after a GOAWAY. A timeout or
  cancellation resets only its own stream (CANCEL); the connection goes on.
  A connection retired by a graceful GOAWAY finishes its streams before it closes.
* **Headers**: pseudo-headers from the URL, the user's headers lower-cased, the
  connection-specific ones (Connection, Keep-Alive, Transfer-Encoding, Upgrade,
  Host) left out as RFC 9113 §8.2.2 requires; cookies from the jar as one
  ``cookie`` field. Server push is disabled.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque

from . import h2wire as w
from .h1 import (
    HTTP11,
    H1Client,
    Headers,
    ServerDisconnected,
    _Conn,
    _now,
    _Pool,
    _Prepared,
)
from .streams import StreamObserver
from .targets import DEFAULT_ALLOWLIST, Allowlist, TargetGuard

__all__ = [
    "H2",
    "HTTP11",
    "PROTOCOLS",
    "FlowControlStalled",
    "H2Client",
    "H2ProtocolError",
    "StreamReset",
    "make_client",
    "tls_context",
]

H2 = "h2"  # Response.protocol of a request sent over HTTP/2
PROTOCOLS = ("auto", "http1", "h2c")
STREAM_WINDOW = 1 << 20  # our SETTINGS_INITIAL_WINDOW_SIZE
CONNECTION_WINDOW = 1 << 24  # our connection-level window
MAX_HEADER_LIST = 1 << 16
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host"})
_ORIGIN_H1 = 1  # an origin spoken to over HTTP/1.1
_ORIGIN_H2 = 2  # an origin spoken to over HTTP/2


class H2ProtocolError(ConnectionError):
    """The server broke the HTTP/2 protocol (malformed frames or headers); kind ``protocol_error``."""

    kind = "protocol_error"


class StreamReset(ConnectionError):
    """The server reset the stream (RST_STREAM) before the response was complete; kind ``stream_reset``."""

    kind = "stream_reset"

    def __init__(self, message: str, error_code: int = 0) -> None:
        super().__init__(message)
        self.error_code = error_code


class FlowControlStalled(TimeoutError):
    """The request body could not be sent within the timeout: the server's flow-control window stayed shut."""

    kind = "flow_control_stalled"


class _Refused(ConnectionError):
    """The stream was not processed by the server (GOAWAY above it, or REFUSED_STREAM): safe to send again."""


class _Stream:
    __slots__ = (
        "waiter",
        "status",
        "headers",
        "chunks",
        "t_headers",
        "t_done",
        "window",
        "sending",
        "observer",
        "out_window",
        "unacked",
        "received",
        "length",
        "head",
    )

    def __init__(self, waiter: asyncio.Future[None], out_window: int, head: bool) -> None:
        self.waiter = waiter
        self.status = 0
        self.headers: Headers | None = None  # set with the response's headers
        self.chunks: list[bytes] = []
        self.t_headers = 0.0
        self.t_done = 0.0
        self.window: asyncio.Future[None] | None = None  # set while the body waits for flow-control credit
        self.sending = False
        self.observer: StreamObserver | None = None
        self.out_window = out_window  # what the server lets us send on it
        self.unacked = 0  # DATA received and not yet given back by WINDOW_UPDATE
        self.received = 0  # body bytes (content-length is checked at the end)
        self.length = -1  # the response's content-length, if any
        self.head = head


class _H2Conn(asyncio.Protocol):
    """One HTTP/2 connection (client side) multiplexing a virtual user's requests to one origin.

    Over TLS, ``connection_made`` runs after the handshake: if ALPN did not
    choose ``h2``, the transport is handed to an HTTP/1.1 ``_Conn`` (``h1``).
    Frames are made and read here (``h2wire``), HPACK decoding is ``hpack``'s.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, alpn: bool) -> None:
        self.loop = loop
        self.alpn = alpn
        self.h1: _Conn | None = None  # set when ALPN fell back to HTTP/1.1
        self.transport: asyncio.Transport | None = None
        self.decoder = w.CachingDecoder(MAX_HEADER_LIST)
        self.streams: dict[int, _Stream] = {}
        self.closed = False  # no new streams (GOAWAY received, connection lost or broken)
        self.failure: BaseException | None = None
        self.slot_waiters: deque[asyncio.Future[None]] = deque()
        self.last_stream_id: int | None = None  # from GOAWAY
        # Until the server's first SETTINGS arrive (at most a round trip), one stream at a time: its
        # SETTINGS_MAX_CONCURRENT_STREAMS may be lower than what we would open.
        self.settings_seen = False
        self.max_streams = 100  # the server's SETTINGS_MAX_CONCURRENT_STREAMS (unlimited unless said)
        self.next_id = 1
        self.first_block = True
        self.buf = b""  # an incomplete frame from the last read
        self.pending: tuple[int, int, list[bytes]] | None = None  # (stream, flags, fragments) until END_HEADERS
        self.out_window = w.DEFAULT_WINDOW  # the server's connection window for our DATA
        self.peer_window = w.DEFAULT_WINDOW  # its SETTINGS_INITIAL_WINDOW_SIZE
        self.max_frame = w.DEFAULT_FRAME  # its SETTINGS_MAX_FRAME_SIZE
        self.in_window = CONNECTION_WINDOW  # what the server may still send us, connection-wide
        self.unacked = 0
        self.out: list[bytes] = []  # control frames to write at the end of the read

    # -- asyncio callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.alpn:
            ssl_object = transport.get_extra_info("ssl_object")
            chosen = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
            if chosen != H2:
                self.h1 = _Conn()
                transport.set_protocol(self.h1)
                self.h1.connection_made(transport)
                return
        # As the h2 library sent them. Naming HEADER_TABLE_SIZE matters: nginx then shrinks the table it fills
        # with every response's fields to 0, so its blocks repeat byte for byte (the decoder's cache hits).
        settings = {w.HEADER_TABLE_SIZE: 4096, w.ENABLE_PUSH: 0, w.INITIAL_WINDOW_SIZE: STREAM_WINDOW}
        settings.update(
            {w.MAX_FRAME_SIZE: w.DEFAULT_FRAME, w.ENABLE_CONNECT_PROTOCOL: 0, w.MAX_CONCURRENT_STREAMS: 100}
        )
        settings[w.MAX_HEADER_LIST_SIZE] = MAX_HEADER_LIST
        preface = w.PREFACE + w.settings_frame(settings) + w.window_update(0, CONNECTION_WINDOW - w.DEFAULT_WINDOW)
        transport.write(preface)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = _now()  # the read's arrival: the whole read is parsed before its pieces are handed over (streams.py)
        if self.buf:
            data = self.buf + data
            self.buf = b""
        end = len(data)
        pos = 0
        unpack = w.HEAD.unpack_from
        try:
            while end - pos >= 9:
                lt, flags, sid = unpack(data, pos)
                length = lt >> 8
                if length > w.DEFAULT_FRAME:
                    raise _Invalid(w.FRAME_SIZE_ERROR, f"a frame of {length} bytes")
                stop = pos + 9 + length
                if stop > end:
                    break
                payload = data[pos + 9 : stop]
                pos = stop
                kind = lt & 0xFF
                if self.pending is not None:
                    self._frame(kind, flags, sid & 0x7FFFFFFF, payload, now)
                elif kind == 0:  # DATA, HEADERS of one frame: the steady state, without _frame's dispatch
                    self._data(flags, sid & 0x7FFFFFFF, payload, now)
                elif kind == 1 and flags & _PLAIN_HEADERS == w.END_HEADERS and sid & 1 and sid < self.next_id:
                    self._headers(sid, flags, payload, now)
                else:
                    self._frame(kind, flags, sid & 0x7FFFFFFF, payload, now)
                if self.failure is not None:
                    return
        except _Invalid as exc:
            self._fail_connection(exc.code, exc.detail)
            return
        if pos < end:
            self.buf = data[pos:]
        if self.unacked >= CONNECTION_WINDOW // 2:  # flow control: give back what was read, in one update
            self.out.append(w.window_update(0, self.unacked))
            self.in_window += self.unacked
            self.unacked = 0
        if self.out:
            self._write(b"".join(self.out))
            self.out.clear()

    def _frame(self, kind: int, flags: int, sid: int, payload: bytes, now: float) -> None:
        if self.pending is not None and kind != w.CONTINUATION:
            raise _Invalid(w.PROTOCOL_ERROR, "a header block interrupted before its end")
        if kind == w.DATA:
            self._data(flags, sid, payload, now)
        elif kind == w.HEADERS:
            if not sid:
                raise _Invalid(w.PROTOCOL_ERROR, "HEADERS on stream 0")
            payload = _unpad(flags, payload)
            if flags & w.PRIORITY_FLAG:
                if len(payload) < 5:
                    raise _Invalid(w.FRAME_SIZE_ERROR, "a HEADERS frame too short for its priority")
                payload = payload[5:]
            self._check_id(sid)
            if flags & w.END_HEADERS:
                self._headers(sid, flags, payload, now)
            else:
                self.pending = (sid, flags, [payload])
        elif kind == w.CONTINUATION:
            if self.pending is None or self.pending[0] != sid:
                raise _Invalid(w.PROTOCOL_ERROR, "an unexpected CONTINUATION frame")
            _, first_flags, parts = self.pending
            parts.append(payload)
            if flags & w.END_HEADERS:
                self.pending = None
                self._headers(sid, first_flags, b"".join(parts), now)
            elif sum(map(len, parts)) > 2 * MAX_HEADER_LIST:
                raise _Invalid(w.COMPRESSION_ERROR, "a header block larger than announced")
        elif kind == w.SETTINGS:
            self._settings(flags, sid, payload)
        elif kind == w.WINDOW_UPDATE:
            if len(payload) != 4:
                raise _Invalid(w.FRAME_SIZE_ERROR, "a WINDOW_UPDATE frame not of 4 bytes")
            self._window_update(sid, w.U32.unpack(payload)[0] & 0x7FFFFFFF)
        elif kind == w.RST_STREAM:
            if len(payload) != 4 or not sid:
                raise _Invalid(w.FRAME_SIZE_ERROR if sid else w.PROTOCOL_ERROR, "a bad RST_STREAM frame")
            self._check_id(sid)
            self._reset(sid, w.U32.unpack(payload)[0])
        elif kind == w.PING:
            if len(payload) != 8 or sid:
                raise _Invalid(w.FRAME_SIZE_ERROR if sid == 0 else w.PROTOCOL_ERROR, "a bad PING frame")
            if not flags & w.ACK:
                self.out.append(w.frame(w.PING, w.ACK, 0, payload))
        elif kind == w.GOAWAY:
            if len(payload) < 8 or sid:
                raise _Invalid(w.FRAME_SIZE_ERROR if sid == 0 else w.PROTOCOL_ERROR, "a bad GOAWAY frame")
            last, code = w.U32X2.unpack_from(payload)
            self._goaway(last & 0x7FFFFFFF, code)
        elif kind == w.PUSH_PROMISE:  # push is disabled (SETTINGS_ENABLE_PUSH 0): a server pushing breaks the rules
            raise _Invalid(w.PROTOCOL_ERROR, "PUSH_PROMISE with push disabled")
        elif kind == w.PRIORITY and len(payload) != 5:
            raise _Invalid(w.FRAME_SIZE_ERROR, "a PRIORITY frame not of 5 bytes")
        # other frame types are ignored (RFC 9113 §5.5)

    def _check_id(self, sid: int) -> None:
        if not sid & 1 or sid >= self.next_id:
            raise _Invalid(w.PROTOCOL_ERROR, f"a frame on stream {sid}, which we did not open")

    def _data(self, flags: int, sid: int, payload: bytes, now: float) -> None:
        if not sid:
            raise _Invalid(w.PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self.in_window -= size
        if self.in_window < 0:
            raise _Invalid(w.FLOW_CONTROL_ERROR, "DATA beyond the connection's window")
        self.unacked += size
        self._check_id(sid)
        s = self.streams.get(sid)
        if s is None:  # a stream we reset: only the connection's window counts it
            return
        if not s.t_headers:
            raise _Invalid(w.PROTOCOL_ERROR, "DATA before the response's headers")
        s.unacked += size
        if flags & w.PADDED:
            payload = _unpad(flags, payload)
        if payload:
            s.received += len(payload)
            s.chunks.append(payload)
            if s.observer is not None:
                s.observer.feed(payload, now)
        if flags & w.END_STREAM:
            self._end(sid, s)
        elif s.unacked >= STREAM_WINDOW // 2:
            if s.unacked > STREAM_WINDOW:
                raise _Invalid(w.FLOW_CONTROL_ERROR, "DATA beyond the stream's window")
            self.out.append(w.window_update(sid, s.unacked))
            s.unacked = 0

    def _headers(self, sid: int, flags: int, block: bytes, now: float) -> None:
        s = self.streams.get(sid)
        trailers = s is not None and s.t_headers != 0.0
        try:
            status, fields, simple, length = self.decoder.decode_cached(
                block, w.check_trailers if trailers else w.check_response
            )
        except w.HPACKError as exc:
            raise _Invalid(w.COMPRESSION_ERROR, f"HPACK: {exc}") from None
        except w.MalformedHeaders as exc:
            raise _Invalid(w.PROTOCOL_ERROR, str(exc)) from None
        if s is None:
            return  # a stream we reset: the block was decoded for the table's sake
        if trailers:
            if not flags & w.END_STREAM:
                raise _Invalid(w.PROTOCOL_ERROR, "trailers without END_STREAM")
            self._end(sid, s)
            return
        if status < 200:  # an informational response (1xx): the final one follows
            if flags & w.END_STREAM:
                raise _Invalid(w.PROTOCOL_ERROR, "an informational response that ends the stream")
            return
        s.t_headers = now
        s.status = status
        if simple is not None:
            s.headers = Headers(simple)
        else:
            s.headers = hdrs = Headers()
            for name, value in fields:
                hdrs._add(name, value)
            length = hdrs.get("content-length", "")
            length = -1 if not length else int(length) if length.isdigit() else -2
        if length != -1 and not s.head and status != 204 and status != 304:
            s.length = length
        if s.observer is not None:
            s.observer.touch()
        if flags & w.END_STREAM:
            self._end(sid, s)

    def _end(self, sid: int, s: _Stream) -> None:
        del self.streams[sid]
        s.t_done = _now()
        if s.length != -1 and s.length != s.received:
            exc = H2ProtocolError(
                f"invalid HTTP/2 from the server (a body of {s.received} bytes, not its content-length)"
            )
            if not s.waiter.done():
                s.waiter.set_exception(exc)
        elif not s.waiter.done():
            s.waiter.set_result(None)
        self._free_slot()
        if self.closed and not self.streams and self.transport is not None:
            self.transport.close()  # after a graceful GOAWAY, once the last stream is done

    def _reset(self, sid: int, code: int) -> None:
        s = self.streams.pop(sid, None)
        if s is None:
            return
        if code == w.REFUSED_STREAM:
            err: BaseException = _Refused("the server refused the stream (REFUSED_STREAM)")
        else:
            err = StreamReset(f"the server reset the stream ({w.code_name(code)})", code)
        if not s.waiter.done():
            s.waiter.set_exception(err)
        self._wake(s)
        self._free_slot()

    def _settings(self, flags: int, sid: int, payload: bytes) -> None:
        if sid:
            raise _Invalid(w.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & w.ACK:
            if payload:
                raise _Invalid(w.FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
            return
        if len(payload) % 6:
            raise _Invalid(w.FRAME_SIZE_ERROR, "a SETTINGS frame not in 6-byte entries")
        for i in range(0, len(payload), 6):
            key, value = w.SETTING.unpack_from(payload, i)
            if key == w.MAX_CONCURRENT_STREAMS:
                self.max_streams = value
            elif key == w.INITIAL_WINDOW_SIZE:
                if value > w.MAX_WINDOW:
                    raise _Invalid(w.FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1")
                delta, self.peer_window = value - self.peer_window, value
                for s in self.streams.values():
                    s.out_window += delta
            elif key == w.MAX_FRAME_SIZE:
                if not w.DEFAULT_FRAME <= value < 1 << 24:
                    raise _Invalid(w.PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range")
                self.max_frame = value
            elif key == w.ENABLE_PUSH and value > 1:
                raise _Invalid(w.PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1")
        self.out.append(w.frame(w.SETTINGS, w.ACK, 0))
        self.settings_seen = True
        for s in self.streams.values():  # INITIAL_WINDOW_SIZE may have opened every stream's window
            self._wake(s)
        waiters, self.slot_waiters = self.slot_waiters, deque()
        for fut in waiters:  # each checks the new limit again, in order
            if not fut.done():
                fut.set_result(None)

    def _window_update(self, sid: int, increment: int) -> None:
        if not increment:
            raise _Invalid(w.PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
        if not sid:
            self.out_window += increment
            if self.out_window > w.MAX_WINDOW:
                raise _Invalid(w.FLOW_CONTROL_ERROR, "the connection's window above 2^31-1")
            for s in self.streams.values():
                self._wake(s)
            return
        self._check_id(sid)
        s = self.streams.get(sid)
        if s is not None:
            s.out_window += increment
            if s.out_window > w.MAX_WINDOW:
                raise _Invalid(w.FLOW_CONTROL_ERROR, "a stream's window above 2^31-1")
            self._wake(s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        err: BaseException
        if self.failure is not None:
            err = self.failure
        elif isinstance(exc, OSError):
            err = exc
        else:
            err = ServerDisconnected("the server closed the HTTP/2 connection before the response was complete")
            if exc is not None:
                err.__cause__ = exc
        self._fail_streams(err)

    # -- used by the client --

    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    async def roundtrip(
        self, prep: _Prepared, cookie: str, body: bytes, observer: StreamObserver | None = None, tp: bytes = b""
    ) -> _Stream:
        while len(self.streams) >= (self.max_streams if self.settings_seen else 1):
            if not self.usable():
                break
            fut = self.loop.create_future()
            self.slot_waiters.append(fut)
            try:
                await fut
            except BaseException:
                if not fut.done() or fut.cancelled():
                    try:
                        self.slot_waiters.remove(fut)
                    except ValueError:
                        pass
                else:
                    self._free_slot()  # pass the slot we were given on
                raise
        stream_id, s = self.open_stream(prep, cookie, body, observer, tp)
        try:
            if body:
                await self._send_body(stream_id, s, body)
            await s.waiter
        except BaseException as exc:
            self._abandon(stream_id, s)
            if s.sending and isinstance(exc, asyncio.CancelledError):
                raise _StalledCancel() from None  # noqa: B904 - H2Client._stalled turns it back into the timeout
            raise
        return s

    def has_slot(self) -> bool:
        return len(self.streams) < (self.max_streams if self.settings_seen else 1)

    def open_stream(
        self, prep: _Prepared, cookie: str, body: bytes, observer: StreamObserver | None, tp: bytes
    ) -> tuple[int, _Stream]:
        """Open a stream (a slot is free) and send its HEADERS; raises ``_Refused`` if the connection is done."""
        transport = self.transport
        if self.next_id > w.MAX_WINDOW:  # stream ids used up: a new connection takes over
            self.closed = True
        if self.closed or transport is None or transport.is_closing():
            raise _Refused("the HTTP/2 connection closed before the request was sent")
        block = prep.h2
        if block is None:
            block = prep.h2 = w.encode_block(_h2_headers(prep))
        if tp or cookie or body:  # tp: b"traceparent: <value>\r\n" (h1's line)
            block += w.per_request_fields(tp[13:-2], cookie.encode("latin-1", "replace"), len(body))
        if self.first_block:
            block = w.TABLE_SIZE_ZERO + block
            self.first_block = False
        stream_id = self.next_id
        self.next_id += 2
        s = _Stream(self.loop.create_future(), self.peer_window, prep.head)
        self.streams[stream_id] = s
        if observer is not None:
            s.observer = observer
            observer.begin(self.loop, lambda exc: self._stall(stream_id, s, exc))
        if observer is not None:
            # After HPACK (the time to first event is not the encoding's) and before the write: marked after
            # it, a server on another thread or core could read the request (and its timer start) first, by
            # up to 451 µs measured on loopback, and a 50 ms wait was timed 49.95 ms.
            observer.mark_sent()
        if len(block) <= self.max_frame:  # one HEADERS frame (END_HEADERS, END_STREAM without a body)
            transport.write(w.HEAD.pack(len(block) << 8 | 1, 4 if body else 5, stream_id) + block)
        else:
            transport.write(w.headers_frames(stream_id, block, not body, self.max_frame))
        return stream_id, s

    async def _send_body(self, stream_id: int, s: _Stream, body: bytes) -> None:
        view = memoryview(body)
        offset = 0
        while offset < len(body):
            if s.waiter.done():  # answered or reset meanwhile: nothing more to send
                return
            window = min(self.out_window, s.out_window, self.max_frame)
            if window <= 0:
                s.window = self.loop.create_future()
                s.sending = True
                await s.window
                s.sending = False
                s.window = None
                continue
            chunk = view[offset : offset + window].tobytes()
            offset += len(chunk)
            self.out_window -= len(chunk)
            s.out_window -= len(chunk)
            self._write(w.frame(w.DATA, w.END_STREAM if offset >= len(body) else 0, stream_id, chunk))

    def close(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.closed = True
        if self.h1 is None:
            self._write(w.goaway(0, w.NO_ERROR))
        self.transport.close()

    # -- internals --

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    @staticmethod
    def _wake(s: _Stream) -> None:
        if s.window is not None and not s.window.done():
            s.window.set_result(None)

    def _free_slot(self) -> None:
        while self.slot_waiters:
            fut = self.slot_waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _stall(self, stream_id: int, s: _Stream, exc: BaseException) -> None:
        """A streamed response went idle too long: fail its request and reset only its stream."""
        if not s.waiter.done():
            s.waiter.set_exception(exc)
        self._abandon(stream_id, s)

    def _abandon(self, stream_id: int, s: _Stream) -> None:
        """A stream we give up on (timeout, cancellation, error): reset it if it is still open."""
        if self.streams.pop(stream_id, None) is None:
            return
        self._free_slot()
        if self.usable():
            self._write(w.rst_stream(stream_id, w.CANCEL))

    def _goaway(self, last_stream_id: int, error_code: int) -> None:
        self.closed = True
        self.last_stream_id = last_stream_id
        code = w.code_name(error_code)
        for stream_id in [sid for sid in self.streams if sid > last_stream_id]:
            s = self.streams.pop(stream_id)
            if not s.waiter.done():
                s.waiter.set_exception(_Refused(f"the server sent GOAWAY ({code}) before processing the stream"))
        if error_code != w.NO_ERROR:
            self._break(H2ProtocolError(f"the server ended the HTTP/2 connection with GOAWAY ({code})"))
            return
        while self.slot_waiters:
            fut = self.slot_waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # they see the connection unusable and go elsewhere
        if not self.streams and self.transport is not None:
            self.transport.close()

    def _fail_connection(self, code: int, detail: str) -> None:
        """The server broke the protocol: GOAWAY with the error's code, then every stream fails."""
        self._write(b"".join(self.out) + w.goaway(0, code))
        self.out.clear()
        self._break(H2ProtocolError(f"invalid HTTP/2 from the server ({detail})"))

    def _break(self, err: BaseException) -> None:
        self.closed = True
        self.failure = err
        self._fail_streams(err)
        if self.transport is not None:
            self.transport.abort()

    def _fail_streams(self, err: BaseException) -> None:
        streams, self.streams = self.streams, {}
        for s in streams.values():
            if not s.waiter.done():
                s.waiter.set_exception(err)
            self._wake(s)
        while self.slot_waiters:
            fut = self.slot_waiters.popleft()
            if not fut.done():
                fut.set_result(None)


_PLAIN_HEADERS = w.END_HEADERS | w.PADDED | w.PRIORITY_FLAG


class _Invalid(Exception):
    """A frame that breaks RFC 9113: the connection ends with GOAWAY(code)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & w.PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise _Invalid(w.PROTOCOL_ERROR, "padding as long as the frame")
    return payload[1 : len(payload) - payload[0]]


class _StalledCancel(asyncio.CancelledError):
    """A cancellation that arrived while the request body waited for flow-control credit."""


def _h2_headers(prep: _Prepared) -> list[tuple[bytes, bytes]]:
    headers = [
        (b":method", prep.method.encode("ascii")),
        (b":scheme", prep.scheme.encode("ascii")),
        (b":authority", prep.authority.encode("ascii")),
        (b":path", prep.target.encode("ascii")),
    ]
    for name, value in prep.fields:
        if name in _HOP_BY_HOP or (name == "te" and value.strip().lower() != "trailers"):
            continue
        headers.append((name.encode("ascii"), value.encode("latin-1", "replace")))
    return headers


class H2Client(H1Client):
    """An HTTP client for one virtual user speaking HTTP/2 where ``protocol`` allows (see the module docstring)."""

    def __init__(
        self,
        allowlist: str | Allowlist | TargetGuard = DEFAULT_ALLOWLIST,
        *,
        protocol: str = "auto",
        verify: bool = True,
        ca_bundle: str | None = None,
        limit: int = 6,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}")
        super().__init__(allowlist, limit=limit, verify=verify)
        self.protocol = protocol
        self._ca_bundle = ca_bundle
        self._origins: dict[tuple[str, str, int], int] = {}
        self._h2: dict[tuple[str, str, int], _H2Conn] = {}
        self._connecting: dict[tuple[str, str, int], asyncio.Future[None]] = {}
        self._retiring: list[_H2Conn] = []  # replaced connections that still finish streams

    def _stalled(self, exc: BaseException | None, timeout: float) -> BaseException | None:
        if isinstance(exc, _StalledCancel):
            return FlowControlStalled(
                f"the request body was not sent within {timeout:g} s: the server's flow-control window stayed shut"
            )
        return None

    async def _hop(
        self, prep: _Prepared, body: bytes, stream: StreamObserver | None = None, tp: bytes = b""
    ) -> tuple[int, str, Headers, bytes, float, float, str]:
        kind = self._origins.get(prep.origin)
        if kind is None:
            kind = self._first_kind(prep)
        if kind == _ORIGIN_H1:  # H1Client._hop, inlined: one coroutine less per HTTP/1.1 request
            conn1 = await self._roundtrip(prep, body, stream, tp)
            result = (conn1.status, conn1.reason, conn1.headers, conn1.body(), conn1.t_headers, conn1.t_done, HTTP11)
            self._finish(conn1, prep.close)
            return result
        for attempt in (0, 1):
            conn = self._h2.get(prep.origin)
            if conn is None or not conn.usable():
                conn = await self._h2_conn(prep)
                if conn is None:  # ALPN chose HTTP/1.1: the connection went to the HTTP/1.1 pool
                    return await H1Client._hop(self, prep, body, stream, tp)
            try:
                if body or not conn.has_slot():
                    s = await conn.roundtrip(prep, self._cookie_value(prep), body, stream, tp)
                else:  # conn.roundtrip without its coroutine: a GET with a free slot (the steady state)
                    stream_id, s = conn.open_stream(prep, self._cookie_value(prep), body, stream, tp)
                    try:
                        await s.waiter
                    except BaseException:
                        conn._abandon(stream_id, s)
                        raise
            except _Refused:
                if attempt or self._closed:
                    raise ServerDisconnected("the server refused the stream twice (GOAWAY or REFUSED_STREAM)") from None
                continue
            raw = s.chunks[0] if len(s.chunks) == 1 else b"".join(s.chunks)
            return s.status, "", s.headers, raw, s.t_headers, s.t_done, H2
        raise AssertionError("unreachable")

    def _first_kind(self, prep: _Prepared) -> int | None:
        if self.protocol == "http1" or (prep.scheme == "http" and self.protocol == "auto"):
            self._origins[prep.origin] = _ORIGIN_H1
            return _ORIGIN_H1
        if prep.scheme == "http":  # h2c with prior knowledge
            self._origins[prep.origin] = _ORIGIN_H2
            return _ORIGIN_H2
        return None  # https: ALPN decides on the first connection

    def _cookie_value(self, prep: _Prepared) -> str:
        line = self._cookie(prep)  # b"Cookie: a=1; b=2\r\n" or b""
        return line[8:-2].decode("latin-1") if line else ""

    async def _h2_conn(self, prep: _Prepared) -> _H2Conn | None:
        """The origin's HTTP/2 connection, opened if needed; None when ALPN chose HTTP/1.1."""
        origin = prep.origin
        while True:
            if self._closed:
                raise ConnectionError("the client is closed")
            conn = self._h2.get(origin)
            if conn is not None and conn.usable():
                return conn
            if self._origins.get(origin) == _ORIGIN_H1:
                return None
            pending = self._connecting.get(origin)
            if pending is not None:
                await asyncio.shield(pending)
                continue
            # One connection attempt per origin at a time: the others wait for it, then use it (or, if it
            # failed, try on their own, so each request fails with its own error).
            fut = self._loop.create_future()
            self._connecting[origin] = fut
            try:
                conn = await self._open_h2(prep)
            finally:
                del self._connecting[origin]
                fut.set_result(None)
            if conn.h1 is not None:
                self._origins[origin] = _ORIGIN_H1
                self._adopt(prep, conn.h1)
                return None
            self._origins[origin] = _ORIGIN_H2
            old = self._h2.get(origin)
            if old is not None:
                if old.streams:  # a graceful GOAWAY: its streams finish, then it closes itself
                    self._retiring = [c for c in self._retiring if c.streams] + [old]
                else:
                    old.close()
            self._h2[origin] = conn
            return conn

    def _tls(self, prep: _Prepared) -> ssl.SSLContext:
        # Two contexts (made when first needed, then cached): HTTP/1.1 connections offer only http/1.1,
        # so a server can never pick h2 on them.
        return tls_context(verify=self._verify, ca_bundle=self._ca_bundle, alpn=(HTTP11,))

    async def _open_h2(self, prep: _Prepared) -> _H2Conn:
        tls = prep.scheme == "https"
        conn = _H2Conn(self._loop, alpn=tls)
        ctx = tls_context(verify=self._verify, ca_bundle=self._ca_bundle, alpn=(H2, HTTP11)) if tls else None
        await self._open(prep, conn, ctx)
        if self._closed:
            conn.close()
            raise ConnectionError("the client is closed")
        return conn

    def _adopt(self, prep: _Prepared, conn: _Conn) -> None:
        """Put an HTTP/1.1 connection that ALPN gave us into the origin's pool (idle, or to a waiting request)."""
        pool = self._pools.get(prep.origin)
        if pool is None:
            pool = self._pools[prep.origin] = _Pool()
        if pool.count >= self._limit:
            conn.closed = True
            conn.transport.close()
            return
        pool.count += 1
        conn.pool = pool
        pool.conns.add(conn)
        conn.keep_alive = True  # fresh: nothing said otherwise yet (_finish would discard it)
        self._finish(conn)

    async def close(self) -> None:
        conns = [*self._h2.values(), *self._retiring]
        self._h2.clear()
        self._retiring.clear()
        for conn in conns:
            conn._fail_streams(ConnectionError("the client is closed"))
            conn.close()
        await super().close()


_contexts: dict[tuple[bool, str | None, tuple[str, ...]], ssl.SSLContext] = {}


def tls_context(*, verify: bool = True, ca_bundle: str | None = None, alpn: tuple[str, ...]) -> ssl.SSLContext:
    """A client TLS context (cached): the system's CAs, plus ``ca_bundle`` (PEM text) if given; ``alpn`` offered."""
    key = (verify, ca_bundle, alpn)
    ctx = _contexts.get(key)
    if ctx is None:
        # Without verification the system's CA store is not read (≈ 40 ms of CPU per context, more when loaded).
        ctx = ssl.create_default_context() if verify else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if ca_bundle:
            try:
                ctx.load_verify_locations(cadata=ca_bundle)
            except (ssl.SSLError, ValueError) as exc:
                raise ValueError(f"the CA bundle is not valid PEM ({exc})") from None
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(list(alpn))
        _contexts[key] = ctx
    return ctx


def make_client(
    allowlist: str | Allowlist | TargetGuard = DEFAULT_ALLOWLIST,
    *,
    protocol: str = "auto",
    verify: bool = True,
    ca_bundle: str | None = None,
) -> H1Client:
    """A fresh client for one virtual user: ``H1Client`` for ``http1`` without a CA bundle, else ``H2Client``."""
    if protocol == "http1" and not ca_bundle:
        return H1Client(allowlist, verify=verify)
    return H2Client(allowlist, protocol=protocol, verify=verify, ca_bundle=ca_bundle)
