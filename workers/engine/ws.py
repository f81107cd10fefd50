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
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from wsproto import ConnectionType, WSConnection
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

from .h1 import H1Client, _deadlines_of, _prepare

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
    """One open WebSocket session (client side)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_message: int) -> None:
        self.loop = loop
        self.max_message = max_message
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.Future[None] = loop.create_future()
        self.messages: deque[tuple[str | bytes, float]] = deque()  # (message, arrival time)
        self.waiter: asyncio.Future[None] | None = None
        self.error: BaseException | None = None  # why the session ended, once it has
        self.close_code: int | None = None
        self.sent = 0
        self.received = 0
        self._parts: list[Any] = []
        self._size = 0
        self._reject_status = 0

    # -- asyncio callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        ws = self.ws
        try:
            ws.receive_data(data)
            for event in ws.events():
                self._event(event)
        except (RemoteProtocolError, LocalProtocolError) as exc:
            self._end(WsProtocolError(f"invalid WebSocket data from the server ({exc})"), 1002)

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
        if self.error is not None:
            raise self.error
        self._write(self.ws.send(TextMessage(data=text)))
        self.sent += 1

    async def receive(self, timeout: float) -> tuple[str | bytes, float]:
        """The next message and when it arrived; TimeoutError after ``timeout`` s, the session's error if it ended."""
        deadline = self.loop.time() + timeout
        while not self.messages:
            if self.error is not None:
                raise self.error
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                raise TimeoutError(f"no message within {timeout:g} s")
            self.waiter = self.loop.create_future()
            try:
                await asyncio.wait_for(self.waiter, remaining)
            except TimeoutError:
                raise TimeoutError(f"no message within {timeout:g} s") from None
            finally:
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
