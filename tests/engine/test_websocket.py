"""WebSocket session steps (workers/engine/ws.py) against the demo target's /ws and a server that breaks framing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
import time

import pytest

from workers.engine import errors
from workers.engine.h1 import H1Client
from workers.engine.plan import Plan, PlanError
from workers.engine.runner import run_sync
from workers.engine.targets import TargetNotAllowed
from workers.engine.ws import WsClosed, open_websocket

from .protocol_servers import StreamsServer


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    server = StreamsServer(tmp_path_factory.mktemp("ws"))
    yield server
    server.stop()


@pytest.fixture
def demo(streams):
    streams.set_knobs(**{"ws.drop_after": 0, "ws.delay_ms": 0})
    streams.reset()
    return streams


def _plan(base_url: str, actions: list, *, users: int = 1, hold: float = 0.5, **ws) -> dict:
    return {
        "base_url": base_url,
        "test_cases": [
            {
                "name": "W",
                "steps": [{"name": "chat", "path": "/ws", "websocket": {"actions": actions, **ws}}],
            }
        ],
        "profile": {"kind": "constant", "users": users, "hold": hold},
        "request_timeout": 2,
    }


ECHO = [
    {"send": '{"id": 7, "text": "hello"}'},
    {"expect": {"json": "$.id", "equals": "7"}, "extract": [{"name": "id", "source": "json", "expression": "$.id"}]},
    {"send": "id was {{id}}"},
    {"expect": {"regex": "^id was (\\d+)$"}},
    {"wait": 0.01},
]


@pytest.mark.serial  # four sessions within a 0.6 s hold
def test_a_session_sends_expects_extracts_and_times_each_round_trip(demo):
    totals = run_sync(_plan(demo.http_url, ECHO, users=2, hold=0.6), sink=None)

    served = demo.app.counters.snapshot()
    label = totals.labels["W: chat"]
    assert totals.errors == 0 and label.pages >= 4
    assert served["ws_sessions"] == label.pages
    assert label.ws_sent == served["ws_messages_in"] == 2 * label.pages
    assert label.ws_received == served["ws_messages_out"] == 2 * label.pages
    assert label.rtt_histogram.count == 2 * label.pages
    d = label.to_dict()
    assert d["ws_messages"] == {"sent": label.ws_sent, "received": label.ws_received}
    assert 0 < d["rtt_ms"]["p50"] < d["latency_ms"]["p50"]  # a round trip is a part of the session


@pytest.mark.serial  # round trips of at least the server's 40 ms
def test_a_slower_server_shows_in_the_round_trips(demo):
    demo.set_knobs(**{"ws.delay_ms": 40})
    totals = run_sync(_plan(demo.http_url, ECHO[:2], hold=0.3), sink=None)

    assert totals.errors == 0
    assert totals.labels["W: chat"].rtt_histogram.min >= 40_000


def test_the_handshake_carries_the_users_cookies_and_the_steps_headers(demo):
    async def go():
        client = H1Client()
        client.cookies.set_cookie("sid=abc123", "127.0.0.1", "/", True, True)
        session, _ = await open_websocket(client, demo.http_url.replace("http", "ws") + "/ws", {"X-Team": "blue"}, 2)
        try:
            await session.send("/handshake")
            message, _ = await session.receive(2)
            return message
        finally:
            await session.close()
            await client.close()

    assert json.loads(asyncio.run(go())) == {"cookie": "sid=abc123", "x-team": "blue"}


def test_receive_times_out_on_the_loops_deadline_wheel_and_an_outside_cancel_stays_a_cancel(demo):
    async def go():
        client = H1Client()
        session, _ = await open_websocket(client, demo.http_url.replace("http", "ws") + "/ws", {}, 2)
        try:
            t0 = time.perf_counter()
            with pytest.raises(TimeoutError, match="no message within 0.05 s"):
                await session.receive(0.05)
            waited = time.perf_counter() - t0
            await session.send("still open")
            message, _ = await session.receive(2)
            reader = asyncio.get_running_loop().create_task(session.receive(10))
            await asyncio.sleep(0.05)
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader
            return waited, message, asyncio.current_task().cancelling()
        finally:
            await session.close()
            await client.close()

    waited, message, cancelling = asyncio.run(go())
    assert 0.05 <= waited < 1.0  # the wheel fires at most a tick (10 ms) late; the machine is shared
    assert message == "still open" and cancelling == 0


@pytest.mark.serial  # two sessions within a 0.4 s hold
def test_a_session_the_server_closes_is_a_named_error_with_its_code_and_the_user_goes_on(demo):
    demo.set_knobs(**{"ws.drop_after": 1})
    totals = run_sync(_plan(demo.http_url, ECHO, hold=0.4), sink=None)

    served = demo.app.counters.snapshot()
    assert totals.pages >= 2 and totals.errors == totals.pages == served["ws_dropped"]
    assert totals.errors_by_kind == {errors.WS_CLOSED: totals.pages}
    assert (
        "the server closed the session (1011 dropped by the ws.drop_after knob)"
        in (totals.error_samples[errors.WS_CLOSED])
    )


@pytest.mark.serial  # two sessions within a 0.3 s hold
def test_a_message_over_the_limit_ends_the_session(demo):
    actions = [{"send": "x" * 5000}, {"expect": {"contains": "x"}}]
    totals = run_sync(_plan(demo.http_url, actions, hold=0.3, max_message_bytes=1000), sink=None)

    assert totals.pages >= 2 and totals.errors_by_kind == {errors.MESSAGE_TOO_BIG: totals.pages}


@pytest.mark.serial  # two upgrades within a 0.2 s hold
def test_an_unmatched_expectation_and_a_refused_upgrade_are_errors(demo):
    unmatched = run_sync(
        _plan(demo.http_url, [{"send": "a"}, {"expect": {"contains": "b"}, "timeout": 0.1}], hold=0.3), sink=None
    )
    plan = _plan(demo.http_url, [{"send": "a"}], hold=0.2)
    plan["test_cases"][0]["steps"][0]["path"] = "/not-a-socket"
    refused = run_sync(plan, sink=None)

    assert unmatched.errors_by_kind == {errors.CHECK_FAILED: unmatched.pages}
    assert unmatched.error_samples[errors.CHECK_FAILED] == "WS /ws -> no message matching contains 'b' within 0.1 s"
    assert refused.errors_by_kind == {errors.HTTP_STATUS: refused.pages} and refused.pages >= 2
    assert "the server refused the WebSocket upgrade (403)" in refused.error_samples[errors.HTTP_STATUS]


def test_the_allowlist_is_checked_when_the_session_connects(demo):
    async def go():
        client = H1Client("10.0.0.0/8")
        try:
            await open_websocket(client, demo.http_url.replace("http", "ws") + "/ws", {}, 2)
        finally:
            await client.close()

    with pytest.raises(TargetNotAllowed):
        asyncio.run(go())
    assert demo.app.counters.snapshot()["ws_sessions"] == 0


class _BadFramesServer:
    """Accepts the upgrade properly, then sends a frame with a reserved opcode (0xF): not RFC 6455."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def handle(reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            key = next(
                line.split(b":", 1)[1].strip()
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"sec-websocket-key")
            )
            accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n" + b"\x8f\x02ok"
            )
            await writer.drain()
            await reader.read()  # until the client closes
            writer.close()

        async def start():
            self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
            ready.set()

        self.thread = threading.Thread(target=lambda: (self.loop.run_until_complete(start()), self.loop.run_forever()))
        self.thread.daemon = True
        self.thread.start()
        ready.wait(5)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_malformed_frames_are_a_protocol_error():
    server = _BadFramesServer()
    try:
        totals = run_sync(_plan(server.url, [{"expect": {"contains": "ok"}, "timeout": 1}], hold=0.3), sink=None)
    finally:
        server.stop()
    assert totals.pages >= 1 and totals.errors_by_kind == {errors.PROTOCOL_ERROR: totals.pages}
    assert "invalid WebSocket data from the server" in totals.error_samples[errors.PROTOCOL_ERROR]


@pytest.mark.parametrize(
    ("websocket", "message"),
    [
        ({"actions": [{"send": "a", "wait": 1}]}, r"actions\[0\]: must be an object with one of send, expect or wait"),
        ({"actions": [{"expect": {"regex": "("}}]}, r"actions\[0\]\.expect\.regex: not a valid regular expression"),
        ({"actions": [{"expect": {"contains": "a", "equals": "b"}}]}, r"actions\[0\]\.expect\.equals: unknown key"),
        ({"actions": [], "max_message_bytes": 0}, r"websocket\.max_message_bytes: must be within"),
    ],
)
def test_websocket_steps_are_validated(websocket, message):
    plan = _plan("http://127.0.0.1:1", [])
    plan["test_cases"][0]["steps"][0]["websocket"] = websocket
    with pytest.raises(PlanError, match=message):
        Plan.from_dict(plan)
    ok = _plan("http://127.0.0.1:1", ECHO, hold=1, max_message_bytes=4096)
    assert Plan.from_dict(Plan.from_dict(ok).to_dict()) == Plan.from_dict(ok)


def test_a_session_may_name_its_own_wss_origin_trusted_by_the_plans_ca_bundle(demo):
    # The base URL is another origin (nothing listens there): the session goes to wss:// on the TLS port.
    plan = _plan("http://127.0.0.1:1", ECHO, hold=0.4)
    plan["test_cases"][0]["steps"][0]["path"] = demo.https_url.replace("https://", "wss://") + "/ws"
    plan["ca_bundle"] = demo.ca_pem

    totals = run_sync(plan, sink=None)

    assert totals.errors == 0 and totals.pages >= 1
    assert demo.app.counters.snapshot()["ws_sessions"] == totals.pages


def test_a_sessions_own_origin_is_checked_by_the_allowlist_before_the_run(demo):
    plan = _plan(demo.http_url, ECHO, hold=0.2)
    plan["test_cases"][0]["steps"][0]["path"] = "ws://127.0.0.2:9/ws"
    parsed = Plan.from_dict(plan)
    assert parsed.target_urls() == [demo.http_url, "ws://127.0.0.2:9/ws"]

    with pytest.raises(TargetNotAllowed, match=r"ws://127\.0\.0\.2:9 resolves to 127\.0\.0\.2, which is not in"):
        run_sync(plan, sink=None, allowlist="127.0.0.1/32")
    assert demo.app.counters.snapshot()["ws_sessions"] == 0


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("wss://{{host}}/ws", r"the host of a ws:// or wss:// URL cannot be a \{\{variable\}\}"),
        ("wss://127.1/ws", r"127\.1"),
        ("ftp://127.0.0.1/ws", r"must start with '/'"),
    ],
)
def test_a_sessions_own_url_is_parsed_strictly(path, message):
    plan = _plan("http://127.0.0.1:1", ECHO)
    plan["test_cases"][0]["steps"][0]["path"] = path
    with pytest.raises(PlanError, match=message):
        Plan.from_dict(plan)


def test_only_a_session_may_name_a_ws_url():
    plan = _plan("http://127.0.0.1:1", ECHO)
    step = plan["test_cases"][0]["steps"][0]
    del step["websocket"]
    step["path"] = "ws://127.0.0.1:1/ws"
    with pytest.raises(PlanError, match=r"path: must start with '/'"):
        Plan.from_dict(plan)


def test_a_request_after_a_session_on_the_same_client_keeps_its_deadline(demo):
    # A user's first step a session, its next a request under a timeout: the session set up the client's
    # loop, and the request then found no deadlines for it ('NoneType' object has no attribute 'arm').
    plan = _plan(demo.http_url, ECHO, hold=0.4)
    plan["test_cases"][0]["steps"].append({"name": "page", "path": "/page"})
    plan["test_cases"][0]["steps"].append({"name": "ask", "path": "/sse", "stream": {"kind": "sse"}})

    totals = run_sync(plan, sink=None)

    assert totals.errors == 0, totals.error_samples
    assert totals.labels["W: page"].pages >= 1 and totals.labels["W: ask"].pages >= 1


def _frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = False) -> bytes:
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    bit = 0x80 if masked else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + n.to_bytes(8, "big")
    if masked:
        key = b"\x01\x02\x03\x04"
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        head += key
    return head + payload


class _ScriptServer:
    """Accepts the upgrade, waits for the client's first message, then sends ``script`` ``chunk`` bytes at a time
    (one byte: every frame split across reads); records every frame the client sends (opcode, unmasked payload).
    ``response`` (the key's accept token -> the handshake's response) replaces the proper 101. ``tail`` is sent
    whole after the script: bytes after a close must reach the client in the same read as the close's end, or a
    client that closes the socket with them unread sends a reset, and the reset drops the client's frames that are
    still unread in the server's buffer (a race a loaded machine lost)."""

    def __init__(self, script: bytes, chunk: int = 1, response=None, tail: bytes = b"") -> None:
        self.loop = asyncio.new_event_loop()
        self.received: list[tuple[int, bytes]] = []
        ready = threading.Event()

        async def read_frame(reader) -> tuple[int, bytes]:
            b0, b1 = await reader.readexactly(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(await reader.readexactly(2), "big")
            elif n == 127:
                n = int.from_bytes(await reader.readexactly(8), "big")
            assert b1 & 0x80, "a client frame must be masked"
            key = await reader.readexactly(4)
            data = await reader.readexactly(n)
            return b0 & 0x0F, bytes(b ^ key[i % 4] for i, b in enumerate(data))

        async def handle(reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            key = next(
                line.split(b":", 1)[1].strip()
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"sec-websocket-key")
            )
            accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
            if response is not None:
                writer.write(response(accept))
                await writer.drain()
                await reader.read()  # until the client closes
                writer.close()
                return
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
            self.received.append(await read_frame(reader))
            try:
                for i in range(0, len(script), chunk):
                    writer.write(script[i : i + chunk])
                    await writer.drain()
                    await asyncio.sleep(0)
                if tail:
                    writer.write(tail)
                    await writer.drain()
            except ConnectionError:  # the client closed before the end of the script: its close frame is read below
                pass
            try:
                while True:
                    opcode, data = await read_frame(reader)
                    self.received.append((opcode, data))
                    if opcode == 8:
                        writer.write(_frame(8, data[:2]))
                        await writer.drain()
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            writer.close()

        async def start():
            self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self.url = f"ws://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/"
            ready.set()

        self.thread = threading.Thread(target=lambda: (self.loop.run_until_complete(start()), self.loop.run_forever()))
        self.thread.daemon = True
        self.thread.start()
        ready.wait(5)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _session_against(
    script: bytes, sends: list[str], receive: int, max_message: int = 1 << 20, chunk: int = 1, tail: bytes = b""
):
    server = _ScriptServer(script, chunk, tail=tail)

    async def go():
        client = H1Client("127.0.0.1")
        try:
            session, _ = await open_websocket(client, server.url, {}, 2.0, max_message)
            got, error = [], None
            for text in sends:
                await session.send(text)
            try:
                for _ in range(receive):
                    got.append((await session.receive(2.0))[0])
            except Exception as exc:
                error = exc
            await session.close()
            return got, error, session.close_code
        finally:
            await client.close()

    try:
        got, error, close_code = asyncio.run(go())
        for _ in range(200):  # the client's close frame, read by the server's thread
            if any(opcode == 8 for opcode, _ in server.received):
                break
            time.sleep(0.01)
    finally:
        server.stop()
    return got, error, close_code, server.received


def test_frames_split_anywhere_control_frames_and_fragments_between_messages_arrive_whole_and_in_order():
    long_text = "é" * 200  # 400 bytes: the 16-bit length form
    script = (
        _frame(1, b"one")
        + _frame(2, b"\x00\xffbin")
        + _frame(1, long_text.encode())
        + _frame(9, b"are you there")  # a ping between messages: answered with a pong
        + _frame(1, b"two")
        + _frame(1, b"fra", fin=False)
        + _frame(0, b"gmen", fin=False)
        + _frame(0, b"ted")
        + _frame(1, b"")
        + _frame(1, b"last")
    )
    sends = ["hello", "x" * 300, "ünïcødé ✓", "y" * 70_000, ""]
    got, error, close_code, received = _session_against(script, sends, receive=7)
    assert error is None
    assert got == ["one", b"\x00\xffbin", long_text, "two", "fragmented", "", "last"]
    assert close_code == 1000  # the server's answer to the client's close
    texts = [data.decode() for opcode, data in received if opcode == 1]
    assert texts == sends  # every client frame masked and framed right, whatever its length
    assert (10, b"are you there") in received  # the pong
    assert received[-1][0] == 8  # and a proper close


def _close(code: int, reason: bytes = b"") -> bytes:
    return _frame(8, code.to_bytes(2, "big") + reason)


def test_control_frames_between_fragments_and_a_close_with_a_code_split_across_reads():
    close = _close(4001, "au revoir ✓".encode())
    script = (
        _frame(1, "ça ".encode()[:2], fin=False)  # a fragment ending inside a UTF-8 character
        + _frame(9, b"ping 1")  # a ping between fragments: answered at once
        + _frame(0, "ça ".encode()[2:] + b"va", fin=False)
        + _frame(10, b"unsolicited")  # a pong between fragments: ignored
        + _frame(0, b" bien")
        + _frame(2, b"\x00\x01", fin=False)
        + _frame(0, b"\x02")
        + close[:-1]
    )
    tail = close[-1:] + _frame(1, b"after the close: dropped")  # the close's last byte and a frame after it, whole
    got, error, close_code, received = _session_against(script, ["go"], receive=3, tail=tail)  # one byte per read
    assert got == ["ça va bien", b"\x00\x01\x02"]
    assert isinstance(error, WsClosed) and error.kind == errors.WS_CLOSED and error.code == 4001
    assert str(error) == "the server closed the session (4001 au revoir ✓)"
    assert close_code == 4001
    assert received[1] == (10, b"ping 1")  # the pong, with the ping's payload, before anything else
    assert received[-1] == (8, (4001).to_bytes(2, "big") + "au revoir ✓".encode())  # the close, echoed


_BIN = bytes(range(256)) * 300  # 76,800 bytes: the 64-bit length form


@pytest.mark.parametrize("chunk", [997, 1 << 20])  # reads that end anywhere in a frame; all at once
def test_16_and_64_bit_lengths_whole_and_in_fragments(chunk):
    script = (
        _frame(2, _BIN[:70_000], fin=False)  # a binary message in two fragments, the first over 65535 bytes
        + _frame(9, b"")  # an empty ping between them
        + _frame(0, _BIN[70_000:])
        + _frame(2, _BIN)  # whole, 64-bit length
        + _frame(1, b"s" * 65535)  # the longest 16-bit length
        + _frame(1, b"t" * 126)  # the shortest
        + _frame(1, b"u" * 125)  # the longest 7-bit one
        + _frame(8, b"")
    )
    got, error, close_code, received = _session_against(script, ["go"], receive=6, chunk=chunk)
    assert got == [_BIN, _BIN, "s" * 65535, "t" * 126, "u" * 125]
    assert isinstance(error, WsClosed) and close_code == 1005
    assert received[1:] == [(10, b""), (8, b"")]


def test_a_close_without_a_code_is_answered_with_an_empty_close():
    got, error, close_code, received = _session_against(_frame(1, b"fine") + _frame(8, b""), ["go"], receive=2)
    assert got == ["fine"]
    assert isinstance(error, WsClosed) and error.code == 1005 and close_code == 1005
    assert received[-1] == (8, b"")


@pytest.mark.parametrize(
    ("frame", "kind", "code"),
    [
        (_frame(1, b"\xff\xfe"), errors.PROTOCOL_ERROR, 1007),  # a text message that is not UTF-8
        (_frame(1, b"\xc3", fin=False) + _frame(0, b"("), errors.PROTOCOL_ERROR, 1007),  # nor in fragments
        (_frame(1, b"masked", masked=True), errors.PROTOCOL_ERROR, 1002),  # a server must not mask
        (b"\x81\x7e\x00\x05hello", errors.PROTOCOL_ERROR, 1002),  # a 16-bit length not in its shortest form
        (b"\x82\x7f" + (5).to_bytes(8, "big") + b"hello", errors.PROTOCOL_ERROR, 1002),  # nor a 64-bit one
        (b"\x82\x7f" + (1 << 63 | 70_000).to_bytes(8, "big"), errors.PROTOCOL_ERROR, 1002),  # its top bit set
        (b"\xc1\x02ok", errors.PROTOCOL_ERROR, 1002),  # a reserved bit (no extension was agreed)
        (_frame(3, b"x"), errors.PROTOCOL_ERROR, 1002),  # a reserved data opcode
        (_frame(11, b""), errors.PROTOCOL_ERROR, 1002),  # a reserved control opcode
        (_frame(0, b"x"), errors.PROTOCOL_ERROR, 1002),  # a continuation with no message under way
        (_frame(1, b"a", fin=False) + _frame(1, b"b"), errors.PROTOCOL_ERROR, 1002),  # a message inside one
        (_frame(9, b"p", fin=False), errors.PROTOCOL_ERROR, 1002),  # a fragmented control frame
        (_frame(9, b"p" * 126), errors.PROTOCOL_ERROR, 1002),  # a control frame over 125 bytes
        (_frame(8, b"\x03"), errors.PROTOCOL_ERROR, 1002),  # a close with a 1-byte payload
        (_close(1005), errors.PROTOCOL_ERROR, 1002),  # a code only an endpoint reports to itself
        (_close(2999), errors.PROTOCOL_ERROR, 1002),  # an unregistered code under 3000
        (_close(1000, b"\xff"), errors.PROTOCOL_ERROR, 1007),  # a close reason that is not UTF-8
        (_frame(1, b"z" * 200), "message_too_big", 1009),
        (_frame(1, b"z" * 60, fin=False) + _frame(0, b"z" * 60), "message_too_big", 1009),  # over it in fragments
    ],
)
def test_bad_frames_end_the_session_with_a_named_error_after_good_ones(frame, kind, code):
    # In one write: a client that closes with bytes unread resets the connection, and its close frame may be lost.
    script = _frame(1, b"fine") + frame
    got, error, _, received = _session_against(script, ["go"], receive=2, max_message=100, chunk=len(script))
    assert got == ["fine"]
    assert getattr(error, "kind", None) == kind, error
    assert received[-1] == (8, code.to_bytes(2, "big")), received  # the client's close says why


def _handshake_against(response) -> BaseException:
    server = _ScriptServer(b"", response=response)

    async def go():
        client = H1Client("127.0.0.1")
        try:
            with pytest.raises(Exception) as info:
                await open_websocket(client, server.url, {}, 2.0)
            return info.value
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    finally:
        server.stop()


_UPGRADE = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"


@pytest.mark.parametrize(
    ("response", "kind", "words"),
    [
        (lambda accept: b"HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno", "http_status", "(403)"),
        (lambda accept: _UPGRADE + b"Sec-WebSocket-Accept: AAAA\r\n\r\n", "protocol_error", "Bad accept token"),
        (
            lambda accept: b"HTTP/1.1 101 OK\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n",
            "protocol_error",
            "Upgrade: WebSocket",
        ),
        (
            lambda accept: _UPGRADE + b"Sec-WebSocket-Accept: " + accept + b"\r\nSec-WebSocket-Extensions: x\r\n\r\n",
            "protocol_error",
            "an extension the client did not offer",
        ),
        (lambda accept: b"SSH-2.0-OpenSSH\r\n\r\n", "protocol_error", "not an HTTP/1.1 status line"),
    ],
)
def test_a_handshake_refused_or_answered_wrong_is_a_named_error(response, kind, words):
    error = _handshake_against(response)
    assert getattr(error, "kind", None) == kind, error
    assert words in str(error)


def test_a_handshake_never_answered_times_out_within_the_steps_timeout():
    # A server that takes the upgrade and never answers: the handshake's deadline (the loop's deadline wheel, as
    # a request's) ends it with a TimeoutError (kind timeout) about the timeout after, not before, and the session's
    # connection is closed; a cancellation from outside stays a cancellation.
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    url = f"ws://127.0.0.1:{port}/"

    async def go():
        client = H1Client("127.0.0.1")
        try:
            start = time.perf_counter()
            with pytest.raises(TimeoutError) as info:
                await open_websocket(client, url, {}, 0.3)
            took = time.perf_counter() - start
            assert errors.classify(info.value)[0] == errors.TIMEOUT
            assert 0.3 <= took < 1.5, took
            task = asyncio.ensure_future(open_websocket(client, url, {}, 5.0))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await client.close()

    try:
        asyncio.run(go())
        conn, _ = listener.accept()  # the first connection: closed by the client when its handshake timed out
        conn.settimeout(2)
        assert conn.recv(4096).startswith(b"GET / HTTP/1.1\r\n")
        while conn.recv(4096):
            pass
        conn.close()
    finally:
        listener.close()


def test_masking_keys_are_not_shared_with_a_forked_process():
    # The keys come from one pool per process: a child forked with keys left in the pool draws its own.
    import os

    from workers.engine import ws

    ws._keys_pop() if ws._keys else ws._new_key()  # the pool is filled
    assert ws._keys
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first key, to the parent
        try:
            os.write(write, (ws._keys_pop() if ws._keys else ws._new_key()).to_bytes(4, "big"))
        finally:
            os._exit(0)
    os.close(write)
    child = int.from_bytes(os.read(read, 4), "big")
    os.close(read)
    os.waitpid(pid, 0)
    parent = ws._keys_pop() if ws._keys else ws._new_key()
    assert child != parent
