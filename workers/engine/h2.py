"""HTTP/2 for the engine: the sans-IO ``h2`` library (python-hyper) on the engine's own asyncio transports.

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
* **Flow control**: received DATA is acknowledged as it is consumed (h2 sends
  WINDOW_UPDATE once half a window is used); the client announces a 1 MiB
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
* **Headers**: pseudo-headers from the URL, the user's headers lower-cased, the
  connection-specific ones (Connection, Keep-Alive, Transfer-Encoding, Upgrade,
  Host) left out as RFC 9113 §8.2.2 requires; cookies from the jar as one
  ``cookie`` field. Server push is disabled.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections import deque
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
import h2.utilities
import hpack.hpack
import hpack.table

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


# HPACK: servers such as nginx send their response headers as Huffman-coded literals without indexing,
# the same few strings (Server, Content-Type, ETag, Date within a second...) on every response, and
# hpack decodes each bit by bit in Python: about a third of the CPU of a request. The decoded strings
# are cached (bytes in, bytes out, both immutable; errors are raised as before, never cached).
_huffman = hpack.hpack.decode_huffman


@functools.lru_cache(maxsize=4096)
def _huffman_cached(data: bytes) -> bytes:
    return _huffman(data)


def _decode_huffman(data: bytes | bytearray | memoryview) -> bytes:
    return _huffman_cached(bytes(data))


hpack.hpack.decode_huffman = _decode_huffman


# Whole header blocks, cached per connection. HPACK is deterministic: a block decoded against a given dynamic
# table gives the same headers and adds the same entries to the table; the same headers encoded against the
# same table give the same block. So:
# * responses: a block is looked up with the decoder's table content (nginx adds every response header to
#   it, so the table cycles through the same few states); a hit returns the headers and makes the same
#   additions to the table, as the decoding would have. Blocks that resize the table are not cached.
# * requests: the encoder's table counts its changes (``version``); a block is reused only at the version it
#   was made at, and only blocks that left the table as it was are kept (the first request of a kind adds
#   its fields to the table and really runs).
# A server that answers with the same headers (Date changing once a second) and a user who sends the same
# request again cost a dict lookup instead of ~40 µs each way in hpack.
_BLOCK_CACHE = 64  # blocks per connection and direction; emptied when full


class _CountingTable(hpack.table.HeaderTable):
    """hpack's header table, counting its changes and, on request, noting what is added to it."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0
        self.added: list[tuple[bytes, bytes]] | None = None

    def add(self, name: bytes, value: bytes) -> None:
        self.version += 1
        if self.added is not None:
            self.added.append((name, value))
        super().add(name, value)

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, newmax: int) -> None:
        self.version += 1
        self.added = None  # a resize: the block is not replayable
        hpack.table.HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]


class _CachingDecoder(hpack.hpack.Decoder):
    def __init__(self) -> None:
        super().__init__()
        self.header_table = _CountingTable()
        self._blocks: dict[tuple[Any, ...], tuple[tuple[Any, ...], list[tuple[bytes, bytes]]]] = {}

    def decode(self, data: bytes, raw: bool = False) -> Any:
        table = self.header_table
        key = (bytes(data), tuple(table.dynamic_entries), table._maxsize, self.max_header_list_size, raw)
        hit = self._blocks.get(key)
        if hit is not None:
            headers, added = hit
            for name, value in added:
                table.add(name, value)
            return list(headers)
        added = table.added = []
        try:
            decoded = super().decode(data, raw)
        finally:
            replayable = table.added is added
            table.added = None
        if replayable:
            if len(self._blocks) >= _BLOCK_CACHE:
                self._blocks.clear()
            self._blocks[key] = (tuple(decoded), added)
        return decoded


# h2 checks every received header list (RFC 9113 §8.2: characters, pseudo-fields, connection-specific fields):
# a pure function of the list and the kind of block, so a list seen before passes (or fails) as it did.
# Only passing lists are kept; the set is shared (process-wide, bounded), as the lists are all alike.
_validate_headers = h2.utilities.validate_headers
_VALID: set[tuple[Any, ...]] = set()


def _validate_headers_cached(headers: Any, flags: Any) -> Any:
    items = tuple(headers)
    key = (items, flags)
    if key not in _VALID:
        for _ in _validate_headers(items, flags):  # raises on an invalid list: never kept
            pass
        if len(_VALID) >= 1024:
            _VALID.clear()
        _VALID.add(key)
    return items  # h2's checks pass every field through unchanged


h2.stream.validate_headers = _validate_headers_cached


class _CachingEncoder(hpack.hpack.Encoder):
    def __init__(self) -> None:
        super().__init__()
        self.header_table = _CountingTable()
        self._blocks: dict[tuple[Any, ...], bytes] = {}

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        table = self.header_table
        if table.resized or isinstance(headers, dict):
            return super().encode(headers, huffman)
        items = tuple(headers)
        # The tuples' types too: h2 marks some fields never-indexed (a HeaderTuple subclass, equal to a plain one).
        key = (items, tuple(map(type, items)), table.version, huffman)
        block = self._blocks.get(key)
        if block is not None:
            return block
        block = super().encode(items, huffman)
        if table.version == key[2]:
            if len(self._blocks) >= _BLOCK_CACHE:
                self._blocks.clear()
            self._blocks[key] = block
        return block


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
    __slots__ = ("waiter", "status", "headers", "chunks", "t_headers", "t_done", "window", "sending", "observer")

    def __init__(self, waiter: asyncio.Future[None]) -> None:
        self.waiter = waiter
        self.status = 0
        self.headers = Headers()
        self.chunks: list[bytes] = []
        self.t_headers = 0.0
        self.t_done = 0.0
        self.window: asyncio.Future[None] | None = None  # set while the body waits for flow-control credit
        self.sending = False
        self.observer: StreamObserver | None = None


class _H2Conn(asyncio.Protocol):
    """One HTTP/2 connection (client side) multiplexing a virtual user's requests to one origin.

    Over TLS, ``connection_made`` runs after the handshake: if ALPN did not
    choose ``h2``, the transport is handed to an HTTP/1.1 ``_Conn`` (``h1``).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, alpn: bool) -> None:
        self.loop = loop
        self.alpn = alpn
        self.h1: _Conn | None = None  # set when ALPN fell back to HTTP/1.1
        self.transport: asyncio.Transport | None = None
        # Our own headers are built valid (lower-case names, no connection-specific fields): not checked again.
        config = h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False
        )
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.encoder = _CachingEncoder()
        self.conn.decoder = _CachingDecoder()
        self.conn.decoder.max_header_list_size = self.conn.DEFAULT_MAX_HEADER_LIST_SIZE
        self.streams: dict[int, _Stream] = {}
        self.closed = False  # no new streams (GOAWAY received, connection lost or broken)
        self.failure: BaseException | None = None
        self.slot_waiters: deque[asyncio.Future[None]] = deque()
        self.last_stream_id: int | None = None  # from GOAWAY
        # Until the server's first SETTINGS arrive (at most a round trip), one stream at a time: its
        # SETTINGS_MAX_CONCURRENT_STREAMS may be lower than what we would open.
        self.settings_seen = False

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
        conn = self.conn
        conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
            },
        )
        conn.initiate_connection()
        conn.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        transport.write(conn.data_to_send())  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = _now()  # the read's arrival: h2 parses all of it before its events are seen (streams.py)
        conn = self.conn
        try:
            events = conn.receive_data(data)
        except (h2.exceptions.ProtocolError, ValueError, KeyError) as exc:
            # h2 queued a GOAWAY when it could name the error; send it, then give up on the connection.
            self._flush()
            detail = str(exc) or type(exc).__name__
            self._break(H2ProtocolError(f"invalid HTTP/2 from the server ({detail})"))
            return
        streams = self.streams
        for ev in events:
            t = type(ev)
            if t is h2.events.DataReceived:
                s = streams.get(ev.stream_id)
                if ev.flow_controlled_length:
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if s is not None and ev.data:
                    s.chunks.append(ev.data)
                    if s.observer is not None:
                        s.observer.feed(ev.data, now)
            elif t is h2.events.ResponseReceived:
                s = streams.get(ev.stream_id)
                if s is not None:
                    s.t_headers = now
                    if s.observer is not None:
                        s.observer.touch()
                    hdrs = s.headers
                    for name, value in ev.headers:
                        if name == b":status":
                            s.status = int(value)
                        elif name[:1] != b":":
                            hdrs._add(name.decode("latin-1"), value.decode("latin-1"))
            elif t is h2.events.StreamEnded:
                s = streams.pop(ev.stream_id, None)
                if s is not None:
                    s.t_done = _now()
                    if not s.waiter.done():
                        s.waiter.set_result(None)
                    self._free_slot()
                if self.closed and not streams and self.transport is not None:
                    self.transport.close()  # after a graceful GOAWAY, once the last stream is done
            elif t is h2.events.StreamReset:
                s = streams.pop(ev.stream_id, None)
                if s is not None:
                    code = _code_name(ev.error_code)
                    if ev.error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
                        err: BaseException = _Refused("the server refused the stream (REFUSED_STREAM)")
                    else:
                        err = StreamReset(f"the server reset the stream ({code})", int(ev.error_code))
                    if not s.waiter.done():
                        s.waiter.set_exception(err)
                    if s.window is not None and not s.window.done():
                        s.window.set_result(None)
                    self._free_slot()
            elif t is h2.events.WindowUpdated:
                if ev.stream_id == 0:
                    for s in streams.values():
                        self._wake(s)
                else:
                    s = streams.get(ev.stream_id)
                    if s is not None:
                        self._wake(s)
            elif t is h2.events.RemoteSettingsChanged:
                self.settings_seen = True
                for s in streams.values():  # INITIAL_WINDOW_SIZE may have opened every stream's window
                    self._wake(s)
                waiters, self.slot_waiters = self.slot_waiters, deque()
                for w in waiters:  # each checks the new limit again, in order
                    if not w.done():
                        w.set_result(None)
            elif t is h2.events.ConnectionTerminated:
                self._goaway(ev.last_stream_id, ev.error_code)
            elif t is h2.events.PushedStreamReceived:  # push is disabled; a server pushing anyway is refused
                conn.reset_stream(ev.pushed_stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
        self._flush()

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
        conn = self.conn
        while conn.open_outbound_streams >= (conn.remote_settings.max_concurrent_streams if self.settings_seen else 1):
            if not self.usable():
                break
            w = self.loop.create_future()
            self.slot_waiters.append(w)
            try:
                await w
            except BaseException:
                if not w.done() or w.cancelled():
                    try:
                        self.slot_waiters.remove(w)
                    except ValueError:
                        pass
                else:
                    self._free_slot()  # pass the slot we were given on
                raise
        if not self.usable():
            raise _Refused("the HTTP/2 connection closed before the request was sent")
        headers = prep.h2
        if headers is None:
            headers = prep.h2 = _h2_headers(prep)
        if tp:  # b"traceparent: <value>\r\n" (h1's line): added per request, the block stays cached
            headers = [*headers, (b"traceparent", tp[13:-2])]
        if cookie:
            headers = [*headers, (b"cookie", cookie.encode("latin-1", "replace"))]
        if body:
            headers = [*headers, (b"content-length", str(len(body)).encode())]
        stream_id = conn.get_next_available_stream_id()
        waiter = self.loop.create_future()
        s = _Stream(waiter)
        self.streams[stream_id] = s
        if observer is not None:
            s.observer = observer
            observer.begin(self.loop, lambda exc: self._stall(stream_id, s, exc))
        try:
            conn.send_headers(stream_id, headers, end_stream=not body)
            if observer is not None:
                observer.mark_sent()  # after HPACK: the time to first event is not the encoding's
            if body:
                await self._send_body(stream_id, s, body)
            else:
                self._flush()
            await waiter
        except BaseException as exc:
            self._abandon(stream_id, s)
            if s.sending and isinstance(exc, asyncio.CancelledError):
                raise _StalledCancel() from None  # noqa: B904 - H2Client._stalled turns it back into the timeout
            raise
        return s

    async def _send_body(self, stream_id: int, s: _Stream, body: bytes) -> None:
        conn = self.conn
        view = memoryview(body)
        offset = 0
        while offset < len(body):
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if window <= 0:
                self._flush()
                s.window = self.loop.create_future()
                s.sending = True
                await s.window
                s.sending = False
                s.window = None
                if s.waiter.done():  # reset meanwhile
                    return
                continue
            chunk = view[offset : offset + window]
            offset += len(chunk)
            conn.send_data(stream_id, chunk.tobytes(), end_stream=offset >= len(body))
        self._flush()

    def close(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.closed = True
        if self.h1 is None:
            try:
                self.conn.close_connection()
                self._flush()
            except h2.exceptions.ProtocolError:
                pass
        self.transport.close()

    # -- internals --

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    @staticmethod
    def _wake(s: _Stream) -> None:
        if s.window is not None and not s.window.done():
            s.window.set_result(None)

    def _free_slot(self) -> None:
        while self.slot_waiters:
            w = self.slot_waiters.popleft()
            if not w.done():
                w.set_result(None)
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
            try:
                self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                self._flush()
            except h2.exceptions.ProtocolError:
                pass

    def _goaway(self, last_stream_id: int, error_code: int) -> None:
        self.closed = True
        self.last_stream_id = last_stream_id
        code = _code_name(error_code)
        for stream_id in [sid for sid in self.streams if sid > last_stream_id]:
            s = self.streams.pop(stream_id)
            if not s.waiter.done():
                s.waiter.set_exception(_Refused(f"the server sent GOAWAY ({code}) before processing the stream"))
        if error_code != h2.errors.ErrorCodes.NO_ERROR:
            self._break(H2ProtocolError(f"the server ended the HTTP/2 connection with GOAWAY ({code})"))
            return
        while self.slot_waiters:
            w = self.slot_waiters.popleft()
            if not w.done():
                w.set_result(None)  # they see the connection unusable and go elsewhere
        if not self.streams and self.transport is not None:
            self.transport.close()

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
            w = self.slot_waiters.popleft()
            if not w.done():
                w.set_result(None)


class _StalledCancel(asyncio.CancelledError):
    """A cancellation that arrived while the request body waited for flow-control credit."""


def _code_name(code: Any) -> str:
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return f"error code {code}"


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
            conn = await self._h2_conn(prep)
            if conn is None:  # ALPN chose HTTP/1.1: the connection went to the HTTP/1.1 pool
                return await H1Client._hop(self, prep, body, stream, tp)
            try:
                s = await conn.roundtrip(prep, self._cookie_value(prep), body, stream, tp)
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
        conns = list(self._h2.values())
        self._h2.clear()
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
        ctx = ssl.create_default_context()
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
