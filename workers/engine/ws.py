"""WebSocket sessions for the engine: python-hyper's sans-IO ``wsproto`` on the engine's own transports.

``open_websocket(client, url, headers, timeout)`` opens a session for one
virtual user's ``H1Client`` (or ``H2Client``): the connection goes through the
client's allowlist check and TLS settings (``ws://`` as ``http://``, ``wss://``
as ``https://``, HTTP/1.1 upgrade, RFC 6455), with the user's cookies and the
step's headers on the handshake (and a ``traceparent`` when the client has
trace context). A handshake answered with anything but 101 is ``WsRejected``
(kind ``http_status``, with the status).

The session receives in the background: text and binary messages (fragments
joined) go to a queue that ``receive()`` reads; pings are answered; a close
from the server is answered and ends the session (``WsClosed``, kind
``ws_closed``, with the close code and reason). A message larger than
``max_message_bytes`` closes the session with 1009 (``WsMessageTooBig``, kind
``message_too_big``); frames that break RFC 6455 close it with 1002
(``WsProtocolError``, kind ``protocol_error``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from .h1 import H1Client, _current_tasks, _Deadlines, _deadlines_of, _prepare

__all__ = [
    "DEFAULT_MAX_MESSAGE",
    "WsClosed",
    "WsMessageTooBig",
    "WsProtocolError",
    "WsRejected",
    "WsSession",
    "http_url",
    "open_websocket",
]

DEFAULT_MAX_MESSAGE = 1 << 20
_PROTOCOL_CODES = frozenset({1002, 1007})  # protocol error, invalid frame payload data
_now = time.perf_counter
_MASKS_AT_ONCE = 64  # masking keys drawn from os.urandom 64 at a time (one syscall, not one per message)


def _wsproto_idle(ws: WSConnection) -> bool:
    """True when wsproto's connection is open with nothing half-parsed: our own frame parser may take over."""
    try:
        conn = ws.connection
        if conn is None or conn.state is not ConnectionState.OPEN:
            return False
        proto = conn._proto
        decoder = proto._frame_decoder
        return len(decoder.buffer) == 0 and decoder.header is None and proto._message_decoder.opcode is None
    except AttributeError:  # another wsproto: keep it for everything
        return False


class WsRejected(ConnectionError):
    """The server answered the upgrade with another status than 101; kind ``http_status``."""

    kind = "http_status"

    def __init__(self, status: int) -> None:
        super().__init__(f"the server refused the WebSocket upgrade ({status})")
        self.status = status


class WsClosed(ConnectionError):
    """The server closed the session (or the connection dropped) while the step still needed it; kind ``ws_closed``."""

    kind = "ws_closed"

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class WsMessageTooBig(ConnectionError):
    """A message over the step's size limit (the session is closed with 1009); kind ``message_too_big``."""

    kind = "message_too_big"


class WsProtocolError(ConnectionError):
    """Frames that break RFC 6455 (the session is closed with 1002); kind ``protocol_error``."""

    kind = "protocol_error"


def http_url(url: str) -> str:
    """``ws://`` -> ``http://``, ``wss://`` -> ``https://`` (others unchanged): the URL the allowlist checks."""
    if url[:5].lower() == "ws://":
        return "http://" + url[5:]
    if url[:6].lower() == "wss://":
        return "https://" + url[6:]
    return url


class WsSession(asyncio.Protocol):
    """One open WebSocket session (client side).

    wsproto does the handshake and everything unusual. Once the session is open,
    the common case takes a lean path of its own (about half the CPU per message):
    a text message is framed and masked here (RFC 6455 §5.2-5.3, a fresh
    ``os.urandom`` key per frame), and complete unfragmented text or binary
    frames from the server are parsed here. The first frame of any other kind
    (a control frame, a fragment, a reserved bit, a masked or non-minimal
    length...) and everything after it go to wsproto, which is then used for
    the rest of the session, so its checks and state machine stay in charge.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_message: int) -> None:
        self.loop = loop
        self.max_message = max_message
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.Future[None] = loop.create_future()
        self.messages: deque[tuple[str | bytes, float]] = deque()  # (message, arrival time)
        self.waiter: asyncio.Future[bool | None] | None = None
        self.error: BaseException | None = None  # why the session ended, once it has
        self.close_code: int | None = None
        self.sent = 0
        self.received = 0
        self._parts: list[Any] = []
        self._size = 0
        self._reject_status = 0
        self._fast = False  # our own frame parser handles what the server sends (see the class docstring)
        self._buf = b""
        self._masks = b""
        self._deadlines: _Deadlines | None = None  # the loop's deadline wheel (h1.py), for receive()

    # -- asyncio callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._fast:
            data = self._parse(data)
            if not data:
                return
        ws = self.ws
        try:
            ws.receive_data(data)
            for event in ws.events():
                self._event(event)
        except (RemoteProtocolError, LocalProtocolError) as exc:
            self._end(WsProtocolError(f"invalid WebSocket data from the server ({exc})"), 1002)
            return
        if self.error is None and self.handshake.done() and _wsproto_idle(ws):
            self._fast = True  # open, at a frame boundary, no message half-received: the lean path again

    def _parse(self, data: bytes) -> bytes:
        """Take complete, unfragmented data frames off the front; what is left from the first other frame on
        is returned, for wsproto (b"" when there is none)."""
        buf = self._buf + data if self._buf else data
        pos = 0
        end = len(buf)
        handoff = False
        while end - pos >= 2:
            b0 = buf[pos]
            n = buf[pos + 1]  # a server sets no mask bit: a frame with one (n >= 128) goes to wsproto
            if (b0 != 0x81 and b0 != 0x82) or n == 127:  # FIN, no reserved bit, text or binary, < 64 KiB
                handoff = True
                break
            if n < 126:
                start = pos + 2
            elif n == 126:
                if end - pos < 4:
                    break
                n = (buf[pos + 2] << 8) | buf[pos + 3]
                if n < 126:  # not the shortest length encoding: wsproto says so
                    handoff = True
                    break
                start = pos + 4
            else:
                handoff = True
                break
            if n > self.max_message:
                self._fast = False
                self._buf = b""
                self._end(WsMessageTooBig(f"a message over {self.max_message} bytes"), 1009)
                return b""
            stop = start + n
            if stop > end:
                break
            if b0 == 0x81:
                try:
                    message: str | bytes = buf[start:stop].decode("utf-8")
                except UnicodeDecodeError:
                    self._fast = False
                    self._buf = b""
                    self._end(WsProtocolError("invalid WebSocket data from the server (text that is not UTF-8)"), 1007)
                    return b""
            else:
                message = buf[start:stop]
            self.received += 1
            self.messages.append((message, _now()))
            pos = stop
        if pos:
            self._wake()
        if handoff:  # wsproto takes over at this frame boundary (it has seen nothing since it was last idle)
            self._fast = False
            self._buf = b""
            return buf[pos:]
        self._buf = buf[pos:] if pos < end else b""
        return b""

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None:
            self.error = WsClosed("the connection closed without a close frame")
            if exc is not None:
                self.error.__cause__ = exc
        if not self.handshake.done():
            self.handshake.set_exception(self.error)
        self._wake()
        self.transport = None

    # -- events --

    def _event(self, event: Any) -> None:
        t = type(event)
        if t is TextMessage or t is BytesMessage or isinstance(event, Message):
            self._size += len(event.data)
            if self._size > self.max_message:
                self._end(WsMessageTooBig(f"a message over {self.max_message} bytes"), 1009)
                return
            if not event.message_finished:
                self._parts.append(event.data)
                return
            data = event.data
            if self._parts:
                self._parts.append(data)
                data = "".join(self._parts) if isinstance(data, str) else b"".join(self._parts)
                self._parts = []
            self._size = 0
            self.received += 1
            self.messages.append((data, _now()))
            self._wake()
        elif t is Ping:
            self._write(self.ws.send(event.response()))
        elif t is CloseConnection:
            self.close_code = event.code
            if self.error is None:
                reason = f" {event.reason}" if event.reason else ""
                if event.code in _PROTOCOL_CODES:  # wsproto reports frames it cannot parse as such a close
                    self.error = WsProtocolError(f"invalid WebSocket data from the server ({event.code}{reason})")
                else:
                    self.error = WsClosed(f"the server closed the session ({event.code}{reason})", event.code)
            try:
                self._write(self.ws.send(event.response()))
            except LocalProtocolError:
                pass
            if self.transport is not None:
                self.transport.close()
            self._wake()
        elif t is AcceptConnection:
            if not self.handshake.done():
                self.handshake.set_result(None)
        elif t is RejectConnection:
            self._reject_status = event.status_code
            if not event.has_body:
                self._reject()
        elif t is RejectData and event.body_finished:
            self._reject()

    def _reject(self) -> None:
        err = WsRejected(self._reject_status)
        self.error = err
        if not self.handshake.done():
            self.handshake.set_exception(err)
        if self.transport is not None:
            self.transport.close()

    # -- used by the runner --

    async def send(self, text: str) -> None:
        self.send_text(text)

    def send_text(self, text: str) -> None:
        """``send()`` without its coroutine (a send never waits: the transport buffers)."""
        if self.error is not None:
            raise self.error
        if self.handshake.done():
            self._write(self._frame(text.encode("utf-8")))
        else:
            self._write(self.ws.send(TextMessage(data=text)))
        self.sent += 1

    def _frame(self, payload: bytes) -> bytes:
        """One masked, final text frame (RFC 6455 §5.2), as wsproto would build it, with less work."""
        masks = self._masks
        if not masks:
            masks = os.urandom(4 * _MASKS_AT_ONCE)
        key, self._masks = masks[:4], masks[4:]
        n = len(payload)
        if n < 126:
            head = bytes((0x81, 0x80 | n))
        elif n < 65536:
            head = bytes((0x81, 0xFE)) + n.to_bytes(2, "big")
        else:
            head = bytes((0x81, 0xFF)) + n.to_bytes(8, "big")
        if n:
            mask = int.from_bytes((key * ((n >> 2) + 1))[:n], "big")
            payload = (int.from_bytes(payload, "big") ^ mask).to_bytes(n, "big")
        return head + key + payload

    async def receive(self, timeout: float) -> tuple[str | bytes, float]:
        """The next message and when it arrived; TimeoutError after ``timeout`` s, the session's error if it ended."""
        if self.messages:
            return self.messages.popleft()
        loop = self.loop
        deadline = loop.time() + timeout
        while not self.messages:
            if self.error is not None:
                raise self.error
            if deadline - loop.time() <= 0:
                raise TimeoutError(f"no message within {timeout:g} s")
            self.waiter = waiter = loop.create_future()
            task = _current_tasks.get(loop) if _current_tasks is not None else asyncio.current_task()
            if task is None:  # not in a task (a bare coroutine runner): a plain timer on the waiter
                timer = loop.call_at(deadline, _expire, waiter)
                try:
                    expired = await waiter
                finally:
                    timer.cancel()
                    self.waiter = None
                if expired and not self.messages and self.error is None:
                    raise TimeoutError(f"no message within {timeout:g} s")
                continue
            # The deadline on the loop's shared wheel (h1._Deadlines: a set insert and discard, firing at most
            # 10 ms late) rather than a loop timer per message (call_at and cancel cost ~3 times as much).
            deadlines = self._deadlines
            if deadlines is None:
                deadlines = self._deadlines = _deadlines_of(loop)
            cancelling = task.cancelling()
            slot = deadlines.arm(loop, deadline, task)
            try:
                await waiter
            except asyncio.CancelledError:
                if deadlines.expired(task) and task.uncancel() <= cancelling:
                    if self.messages:  # it came in the very turn the deadline passed: it is in time
                        break
                    raise TimeoutError(f"no message within {timeout:g} s") from None
                raise
            finally:
                deadlines.disarm(slot, task)
                self.waiter = None
        return self.messages.popleft()

    async def hold(self, seconds: float) -> None:
        """Keep the session open for ``seconds``, taking in (and dropping) messages; the session's error if it ends."""
        deadline = self.loop.time() + seconds
        while True:
            self.messages.clear()
            if self.error is not None:
                raise self.error
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                return
            self.waiter = self.loop.create_future()
            try:
                await asyncio.wait_for(self.waiter, remaining)
            except TimeoutError:
                return
            finally:
                self.waiter = None

    async def close(self, timeout: float = 1.0) -> None:
        """Close normally (1000) and wait (up to ``timeout``) for the server's close frame."""
        if self.transport is None:
            return
        if self.error is None:
            try:
                self._write(self.ws.send(CloseConnection(code=1000)))
            except LocalProtocolError:
                pass
            self.error = WsClosed("the session is closed", 1000)
            deadline = self.loop.time() + timeout
            while self.transport is not None and self.close_code is None and self.loop.time() < deadline:
                self.waiter = self.loop.create_future()
                try:
                    await asyncio.wait_for(self.waiter, deadline - self.loop.time())
                except TimeoutError:
                    break
                finally:
                    self.waiter = None
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- internals --

    def _write(self, data: bytes) -> None:
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _end(self, err: BaseException, code: int) -> None:
        if self.error is None:
            self.error = err
        try:
            self._write(self.ws.send(CloseConnection(code=code)))
        except LocalProtocolError:
            pass
        if not self.handshake.done():
            self.handshake.set_exception(err)
        if self.transport is not None:
            self.transport.close()
        self._wake()


def _expire(waiter: asyncio.Future[bool | None]) -> None:
    if not waiter.done():
        waiter.set_result(True)  # the deadline passed (a message or the end of the session wakes it with None)


async def open_websocket(
    client: H1Client,
    url: str,
    headers: Mapping[str, str],
    timeout: float,
    max_message: int = DEFAULT_MAX_MESSAGE,
) -> tuple[WsSession, float]:
    """Connect and upgrade (within ``timeout``); returns the open session and the time the connection took (s)."""
    target = http_url(url)
    prep = _prepare("GET", target, headers)  # checks the URL; the request line is not used
    loop = asyncio.get_running_loop()
    if client._loop is None:  # the user's first exchange: its later requests need the loop's deadlines too
        client._loop = loop
        client._deadlines = _deadlines_of(loop)
    session = WsSession(loop, max_message)
    client.last_connect_s = 0.0
    async with asyncio.timeout(timeout):
        await client._open(prep, session, client._tls(prep) if prep.scheme == "https" else None)
        extra: list[tuple[bytes, bytes]] = []
        for name, value in prep.fields:
            if name in ("host", "connection", "upgrade", "accept-encoding") or name.startswith("sec-websocket-"):
                continue
            extra.append((name.encode("ascii"), value.encode("latin-1", "replace")))
        cookie = client._cookie(prep)
        if cookie:
            extra.append((b"cookie", cookie[8:-2]))
        trace = client.trace
        if trace is not None and not prep.user_trace:
            client.last_traceparent = line = trace.line()
            extra.append((b"traceparent", line[13:-2]))
        else:
            client.last_traceparent = b""
        try:
            session._write(session.ws.send(Request(host=prep.authority, target=prep.target, extra_headers=extra)))
            await session.handshake
        except BaseException:
            session.abort()
            raise
    return session, client.last_connect_s
