"""WebSocket sessions for the engine (RFC 6455), on the engine's own asyncio transports.

``open_websocket(client, url, headers, timeout)`` opens a session for one
virtual user's ``H1Client`` (or ``H2Client``): the connection goes through the
client's allowlist check and TLS settings (``ws://`` as ``http://``, ``wss://``
as ``https://``, HTTP/1.1 upgrade), with the user's cookies and the step's
headers on the handshake (and a ``traceparent`` when the client has trace
context). A handshake answered with anything but 101 is ``WsRejected`` (kind
``http_status``, with the status); a 101 without the right ``Upgrade``,
``Connection`` and ``Sec-WebSocket-Accept`` (or with an extension or a
subprotocol the client did not offer) is ``WsProtocolError``.

The session receives in the background: text and binary messages (fragments
joined) go to a queue that ``receive()`` reads; pings are answered; a close
from the server is answered and ends the session (``WsClosed``, kind
``ws_closed``, with the close code and reason). A message larger than
``max_message_bytes`` closes the session with 1009 (``WsMessageTooBig``, kind
``message_too_big``); frames that break RFC 6455 close it with 1002, text that
is not UTF-8 with 1007 (``WsProtocolError``, kind ``protocol_error``).

The handshake and the framing are the engine's own (they were python-hyper's
``wsproto`` until 2026-11-29: its h11 handshake and frame objects cost several
times the engine's own code per message and per session; the rules it enforced
are kept, each named in ``_Framing``'s docstring and tested in
``tests/engine/test_websocket.py``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
from collections import deque
from collections.abc import Callable, Mapping

from .h1 import H1Client, _current_tasks, _Deadlines, _deadlines_of, _prepare, _Prepared

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
MAX_HANDSHAKE_BYTES = 64 * 1024  # the 101 response's head; more is a protocol error
_PROTOCOL_CODES = frozenset({1002, 1007})  # protocol error, invalid frame payload data
# Close codes a server may send (RFC 6455 §7.4: the registered ones, except those only an endpoint reports
# to itself, 1005, 1006 and 1015; 1004 is reserved), and 3000-4999 (libraries, applications).
_REMOTE_CLOSE_CODES = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014})
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_now = time.perf_counter
_KEYS_AT_ONCE = 256  # masking keys drawn from os.urandom 256 at a time (one syscall, not one per message)
# The masking keys not used yet, as 32-bit integers, shared by every session of the process (each is used once).
_keys: list[int] = []
_keys_pop = _keys.pop
os.register_at_fork(after_in_child=_keys.clear)  # a forked worker draws its own keys, not its parent's next ones
# For a payload of n < 126 bytes: a 4-byte key K repeated over n bytes is (K * rep) >> shift, as an integer; the
# frame is ((head | K) << bits) | (payload ^ mask), ``size`` bytes. _SHORT[n] = (head, bits, rep, shift, size).
_SHORT = tuple(
    (
        (0x8180 | n) << 32,
        8 * n,
        sum(1 << (32 * j) for j in range((n + 3) // 4)),
        8 * (4 * ((n + 3) // 4) - n),
        n + 6,
    )
    for n in range(126)
)


def _new_key() -> int:
    """A masking key when the pool is empty: the pool refilled (the key is then taken from it)."""
    _keys.extend(memoryview(os.urandom(4 * _KEYS_AT_ONCE)).cast("I"))
    return _keys_pop()


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
    """Frames that break RFC 6455 (the session is closed with 1002, or 1007 for text that is not UTF-8);
    kind ``protocol_error``."""

    kind = "protocol_error"


def http_url(url: str) -> str:
    """``ws://`` -> ``http://``, ``wss://`` -> ``https://`` (others unchanged): the URL the allowlist checks."""
    if url[:5].lower() == "ws://":
        return "http://" + url[5:]
    if url[:6].lower() == "wss://":
        return "https://" + url[6:]
    return url


class WsSession(asyncio.Protocol):
    """One open WebSocket session (client side): the handshake's response, then RFC 6455 frames.

    Frames from the server (§5.2), checked as wsproto checked them: no mask, no
    reserved bit (no extension is offered), a known opcode (text 1, binary 2,
    continuation 0, close 8, ping 9, pong 10), a length in its shortest form
    (the 64-bit form without its top bit), a control frame final and at most
    125 bytes (it may come between the fragments of a message), a continuation
    only inside a fragmented message and no new message inside one; text is
    UTF-8 (1007 otherwise); a close carries nothing, or a code a server may send
    and a UTF-8 reason (a 1-byte payload is an error). A ping is answered with a
    pong carrying its payload; a pong is ignored. Client frames are masked with
    a fresh key each (§5.3, ``os.urandom``, drawn for many frames at once), the
    payload XORed as one integer (a frame under 126 bytes built as one integer).
    """

    __slots__ = (
        "loop",
        "max_message",
        "transport",
        "handshake",
        "messages",
        "waiter",
        "listener",
        "error",
        "close_code",
        "sent",
        "received",
        "_accept",
        "_open",
        "_done",
        "_close_sent",
        "_buf",
        "_need",
        "_frag_op",
        "_parts",
        "_size",
        "_deadlines",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, max_message: int) -> None:
        self.loop = loop
        self.max_message = max_message
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.Future[None] = loop.create_future()
        self.messages: deque[tuple[str | bytes, float]] = deque()  # (message, arrival time)
        self.waiter: asyncio.Future[bool | None] | None = None
        # Called instead of waking ``waiter`` when a message comes or the session ends (the runner's driver of
        # a step's actions: they run in this protocol's callbacks, not in a task woken per message).
        self.listener: Callable[[], None] | None = None
        self.error: BaseException | None = None  # why the session ended, once it has
        self.close_code: int | None = None
        self.sent = 0
        self.received = 0
        self._accept = b""  # the Sec-WebSocket-Accept the server must answer with
        self._open = False  # the handshake is done: what comes is frames
        self._done = False  # the session ended on our side of the parser: what comes is dropped
        self._close_sent = False
        self._buf: bytes | bytearray = b""  # the start of a frame (or of the handshake's response) not complete yet
        self._need = 0  # the bytes that frame needs before it is looked at again
        self._frag_op = 0  # the opcode (1 or 2) of a fragmented message under way, else 0
        self._parts: list[bytes] = []
        self._size = 0
        self._deadlines: _Deadlines | None = None  # the loop's deadline wheel (h1.py), for receive()

    # -- asyncio callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None:
            self.error = WsClosed("the connection closed without a close frame")
            if exc is not None:
                self.error.__cause__ = exc
        if not self.handshake.done():
            self.handshake.set_exception(self.error)
        self._done = True
        self._wake()
        self.transport = None

    # -- the handshake's response (RFC 6455 §4.1) --

    def _response(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HANDSHAKE_BYTES:
                self._bad_handshake(f"a response head over {MAX_HANDSHAKE_BYTES} bytes")
            else:
                self._buf = buf
            return
        self._buf = b""
        lines = buf[:end].decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit() or rest[3:4] not in ("", " "):
            self._bad_handshake(f"not an HTTP/1.1 status line: {lines[0][:60]!r}")
            return
        status = int(code)
        if status != 101:
            err = WsRejected(status)
            self.error = err
            self._done = True
            self.handshake.set_exception(err)
            if self.transport is not None:
                self.transport.close()
            return
        upgrade = accept = None
        connection = ""
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                self._bad_handshake(f"a malformed header line: {line[:60]!r}")
                return
            name = name.lower()
            value = value.strip(" \t")
            if name == "upgrade":
                upgrade = value
            elif name == "connection":
                connection += "," + value
            elif name == "sec-websocket-accept":
                accept = value
            elif name == "sec-websocket-extensions" and value:
                self._bad_handshake(f"an extension the client did not offer: {value[:60]!r}")
                return
            elif name == "sec-websocket-protocol":
                self._bad_handshake(f"a subprotocol the client did not offer: {value[:60]!r}")
                return
        if not any(token.strip().lower() == "upgrade" for token in connection.split(",")):
            self._bad_handshake("Missing header, 'Connection: Upgrade'")
        elif upgrade is None or upgrade.lower() != "websocket":
            self._bad_handshake("Missing header, 'Upgrade: WebSocket'")
        elif accept is None or accept.encode("latin-1") != self._accept:
            self._bad_handshake("Bad accept token")
        else:
            self._open = True
            self.handshake.set_result(None)
            rest_bytes = buf[end + 4 :]
            if rest_bytes:  # frames right behind the response
                self.data_received(rest_bytes)

    def _bad_handshake(self, why: str) -> None:
        err = WsProtocolError(f"invalid WebSocket data from the server ({why})")
        self.error = err
        self._done = True
        self._buf = b""
        if not self.handshake.done():
            self.handshake.set_exception(err)
        if self.transport is not None:
            self.transport.close()

    # -- frames (RFC 6455 §5) --

    def data_received(self, data: bytes) -> None:
        """Take every complete frame off the front of what came; keep the start of an incomplete one."""
        n = len(data) - 2
        # The common case first: what came is exactly one short, final, unmasked text frame (FIN and opcode 1,
        # no reserved bit, a 7-bit length: data[1] == n < 126 also says the mask bit is clear), not inside a
        # fragmented message, nothing pending: the same as the general loop below does with it.
        if 0 <= n < 126 and data[0] == 0x81 and data[1] == n and self._open and not self._buf and not self._frag_op:
            if n > self.max_message:
                self._end(WsMessageTooBig(f"a message over {self.max_message} bytes"), 1009)
                return None
            try:
                message = data[2:].decode("utf-8")
            except UnicodeDecodeError:
                return self._fail("text that is not UTF-8", 1007)
            self.received += 1
            self.messages.append((message, _now()))
            listener = self.listener
            if listener is not None:
                listener()
            else:
                self._wake()
            return None
        if not self._open:
            if not self._done:
                self._response(data)  # the handshake's response
            return None
        if self._buf:  # the rest of a frame: gathered in place until the frame is complete (no copy per read)
            pending = self._buf
            pending += data
            if len(pending) < self._need:
                return None
            buf = bytes(pending)
            self._buf = b""
        else:
            buf = data
        pos = 0
        end = len(buf)
        woke = False
        need = 2  # bytes the frame at pos needs before it can be looked at again
        message: str | bytes
        while end - pos >= 2:
            b0 = buf[pos]
            n = buf[pos + 1]
            if n < 126 and (b0 == 0x81 or b0 == 0x82) and not self._frag_op:  # the common case: a short message
                if n > self.max_message:
                    self._buf = b""
                    self._end(WsMessageTooBig(f"a message over {self.max_message} bytes"), 1009)
                    return None
                stop = pos + 2 + n
                if stop > end:
                    need = stop - pos
                    break
                if b0 == 0x81:
                    try:
                        message = buf[pos + 2 : stop].decode("utf-8")
                    except UnicodeDecodeError:
                        return self._fail("text that is not UTF-8", 1007)
                else:
                    message = buf[pos + 2 : stop]
                pos = stop
                self.received += 1
                self.messages.append((message, _now()))
                woke = True
                continue
            if n > 125:
                if n & 0x80:
                    return self._fail("a masked frame from the server")
                if n == 126:
                    if end - pos < 4:
                        need = 4
                        break
                    n = (buf[pos + 2] << 8) | buf[pos + 3]
                    if n < 126:
                        return self._fail("a 16-bit length under 126")
                    start = pos + 4
                else:
                    if end - pos < 10:
                        need = 10
                        break
                    n = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                    if n < 65536 or n >> 63:
                        return self._fail("a 64-bit length under 65536 or with its top bit set")
                    start = pos + 10
            else:
                start = pos + 2
            op = b0 & 0x0F
            if b0 & 0x70:
                return self._fail("a reserved bit set")
            if op >= 8:
                if op > 10:
                    return self._fail(f"reserved opcode {op}")
                if n > 125 or not b0 & 0x80:
                    return self._fail("a control frame fragmented or over 125 bytes")
            elif op == 0:
                if not self._frag_op:
                    return self._fail("a continuation frame outside a fragmented message")
            elif op > 2:
                return self._fail(f"reserved opcode {op}")
            elif self._frag_op:
                return self._fail("a new message inside a fragmented one")
            if op < 8 and self._size + n > self.max_message:
                self._buf = b""
                self._end(WsMessageTooBig(f"a message over {self.max_message} bytes"), 1009)
                return None
            stop = start + n
            if stop > end:
                need = stop - pos
                break
            pos = stop
            if b0 == 0x81:  # a whole text message (of 126 bytes or more)
                try:
                    message = buf[start:stop].decode("utf-8")
                except UnicodeDecodeError:
                    return self._fail("text that is not UTF-8", 1007)
            elif b0 == 0x82:
                message = buf[start:stop]
            elif op < 8:  # a fragment
                self._parts.append(buf[start:stop])
                self._size += n
                if op:
                    self._frag_op = op
                if not b0 & 0x80:
                    continue
                whole = b"".join(self._parts)
                if self._frag_op == 1:
                    try:
                        message = whole.decode("utf-8")
                    except UnicodeDecodeError:
                        return self._fail("text that is not UTF-8", 1007)
                else:
                    message = whole
                self._parts = []
                self._size = 0
                self._frag_op = 0
            else:
                self._control(op, buf[start:stop])
                if self._done:
                    return None
                continue
            self.received += 1
            self.messages.append((message, _now()))
            woke = True
        if pos < end:
            self._buf = bytearray(buf[pos:])
            self._need = need
        if woke:
            listener = self.listener
            if listener is not None:
                listener()
            else:
                self._wake()
        return None

    def _control(self, op: int, payload: bytes) -> None:
        if op == 9:  # ping: the pong carries its payload (none once our close is sent)
            if not self._close_sent:
                self._write(self._frame(payload, 0x8A))
            return
        if op == 10:  # an unsolicited pong: nothing to do
            return
        if not payload:
            code, reason = 1005, ""  # no status code in the close (§7.1.5)
        elif len(payload) == 1:
            return self._fail("a close frame with a 1-byte payload")
        else:
            code = (payload[0] << 8) | payload[1]
            if code not in _REMOTE_CLOSE_CODES and not 3000 <= code <= 4999:
                return self._fail(f"a close frame with code {code}")
            try:
                reason = payload[2:].decode("utf-8")
            except UnicodeDecodeError:
                return self._fail("a close reason that is not UTF-8", 1007)
        self.close_code = code
        if self.error is None:
            detail = f" {reason}" if reason else ""
            if code in _PROTOCOL_CODES:
                self.error = WsProtocolError(f"invalid WebSocket data from the server ({code}{detail})")
            else:
                self.error = WsClosed(f"the server closed the session ({code}{detail})", code)
        if not self._close_sent:  # the answer echoes the code (none for none, §5.5.1)
            self._close_sent = True
            self._write(self._frame(payload, 0x88))
        self._done = True
        self._open = False
        if self.transport is not None:
            self.transport.close()
        self._wake()
        return None

    def _fail(self, why: str, code: int = 1002) -> None:
        self._buf = b""
        self._parts = []
        self._end(WsProtocolError(f"invalid WebSocket data from the server ({why})"), code)

    # -- used by the runner --

    async def send(self, text: str) -> None:
        self.send_text(text)

    def send_text(self, text: str) -> None:
        """``send()`` without its coroutine (a send never waits: the transport buffers)."""
        if self.error is not None:
            raise self.error
        payload = text.encode("utf-8")
        n = len(payload)
        if n < 126:  # _frame() inline, for the common case: head, key and masked payload as one integer
            try:
                k = _keys_pop()
            except IndexError:
                k = _new_key()
            head, bits, rep, shift, size = _SHORT[n]
            frame = (((head | k) << bits) | (int.from_bytes(payload, "big") ^ ((k * rep) >> shift))).to_bytes(
                size, "big"
            )
        else:
            frame = self._frame(payload, 0x81)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(frame)
        self.sent += 1

    def _frame(self, payload: bytes, b0: int) -> bytes:
        """One masked, final frame (RFC 6455 §5.2-5.3) with first byte ``b0`` (FIN and the opcode)."""
        try:
            k = _keys_pop()
        except IndexError:
            k = _new_key()
        key = k.to_bytes(4, "big")
        n = len(payload)
        if n < 126:
            head = bytes((b0, 0x80 | n))
        elif n < 65536:
            head = bytes((b0, 0xFE)) + n.to_bytes(2, "big")
        else:
            head = bytes((b0, 0xFF)) + n.to_bytes(8, "big")
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
            self._send_close(1000)
            self.error = WsClosed("the session is closed", 1000)
            if self.close_code is None and self.transport is not None:
                loop = self.loop
                self.waiter = waiter = loop.create_future()
                timer = loop.call_later(timeout, _expire, waiter)
                try:
                    while self.transport is not None and self.close_code is None and not waiter.done():
                        await waiter  # the server's close (or the connection's end, or the timer) wakes it
                finally:
                    timer.cancel()
                    self.waiter = None
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- internals --

    def _send_close(self, code: int) -> None:
        if not self._close_sent:
            self._close_sent = True
            self._write(self._frame(code.to_bytes(2, "big"), 0x88))

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def _wake(self) -> None:
        listener = self.listener
        if listener is not None:
            listener()
            return
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _end(self, err: BaseException, code: int) -> None:
        if self.error is None:
            self.error = err
        if self._open:
            self._send_close(code)
        self._open = False
        self._done = True
        if not self.handshake.done():
            self.handshake.set_exception(err)
        if self.transport is not None:
            self.transport.close()
        self._wake()


def _expire(waiter: asyncio.Future[bool | None]) -> None:
    if not waiter.done():
        waiter.set_result(True)  # the deadline passed (a message or the end of the session wakes it with None)


_upgrade_heads: dict[_Prepared, bytes] = {}  # the request's fixed part, per prepared URL and headers


def _upgrade_head(prep: _Prepared) -> bytes:
    """``GET target HTTP/1.1``, ``Host`` and the step's headers (the upgrade's own fields are ours)."""
    head = _upgrade_heads.get(prep)
    if head is None:
        lines = [f"GET {prep.target} HTTP/1.1\r\nHost: {prep.authority}\r\n".encode("ascii")]
        for name, value in prep.fields:
            if name in ("host", "connection", "upgrade", "accept-encoding") or name.startswith("sec-websocket-"):
                continue
            lines.append(name.encode("ascii") + b": " + value.encode("latin-1", "replace") + b"\r\n")
        lines.append(b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n")
        head = b"".join(lines)
        if len(_upgrade_heads) >= 256:
            _upgrade_heads.clear()
        _upgrade_heads[prep] = head
    return head


async def open_websocket(
    client: H1Client,
    url: str,
    headers: Mapping[str, str],
    timeout: float,
    max_message: int = DEFAULT_MAX_MESSAGE,
) -> tuple[WsSession, float]:
    """Connect and upgrade (within ``timeout``); returns the open session and the time the connection took (s)."""
    target = http_url(url)
    prep = _prepare("GET", target, headers)  # checks the URL and the headers
    loop = asyncio.get_running_loop()
    if client._loop is None:  # the user's first exchange: its later requests need the loop's deadlines too
        client._loop = loop
        client._deadlines = _deadlines_of(loop)
    session = WsSession(loop, max_message)
    client.last_connect_s = 0.0
    task = _current_tasks.get(loop) if _current_tasks is not None else asyncio.current_task()
    if task is None:  # not in a task (a bare coroutine runner): the standard way
        async with asyncio.timeout(timeout):
            await _handshake(client, prep, session)
        return session, client.last_connect_s
    # The deadline on the loop's shared wheel (h1._Deadlines), as a request's: asyncio.timeout()'s loop timer
    # and its three Python calls cost more; the same TimeoutError, at most 10 ms later.
    deadlines = client._deadlines
    if deadlines is None:
        deadlines = client._deadlines = _deadlines_of(loop)
    cancelling = task.cancelling()
    slot = deadlines.arm(loop, loop.time() + timeout, task)
    try:
        await _handshake(client, prep, session)
    except asyncio.CancelledError:
        if deadlines.expired(task) and task.uncancel() <= cancelling:
            raise TimeoutError(f"no WebSocket handshake within {timeout:g} s") from None
        raise
    finally:
        deadlines.disarm(slot, task)
    return session, client.last_connect_s


async def _handshake(client: H1Client, prep: _Prepared, session: WsSession) -> None:
    """Connect and send the upgrade; wait for the 101 (the session is aborted if anything fails)."""
    await client._open(prep, session, client._tls(prep) if prep.scheme == "https" else None)
    request = [_upgrade_head(prep)]
    cookie = client._cookie(prep)
    if cookie:
        request.append(cookie)  # b"Cookie: ...\r\n"
    trace = client.trace
    if trace is not None and not prep.user_trace:
        client.last_traceparent = line = trace.line()
        request.append(line)  # b"traceparent: ...\r\n"
    else:
        client.last_traceparent = b""
    key = base64.b64encode(os.urandom(16))
    session._accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
    request.append(b"Sec-WebSocket-Key: " + key + b"\r\n\r\n")
    try:
        session._write(b"".join(request))
        await session.handshake
    except BaseException:
        session.abort()
        raise
