"""H1Client, the engine's own HTTP/1.1 client, against real servers on 127.0.0.1 only.

Servers (tests/engine/servers.py): an aiohttp application in a thread, raw
asyncio servers for misbehaving peers, a TLS copy with a self-signed
certificate, nginx when installed, and the bundled demo target. Every test runs
its coroutine in a fresh event loop (uvloop unless parametrized otherwise)
under a hard deadline, then checks that nothing leaked: no task left, no
ResourceWarning ("unclosed transport/socket").
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import re
import shutil
import ssl
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import quote

import pytest
import uvloop

from tests.engine import servers
from tests.engine.servers import COMPRESSED, LOCAL, PAYLOAD, AppServer, RawServer
from workers.engine import errors
from workers.engine.h1 import (
    CookieJar,
    H1Client,
    Headers,
    HttpProtocolError,
    ServerDisconnected,
    TooManyRedirects,
    make_h1_client,
)
from workers.engine.http import MAX_REDIRECTS, USER_AGENT, AiohttpClient
from workers.engine.targets import TargetGuard, TargetNotAllowed

T = 5.0  # request timeout in tests that do not test timeouts
LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


def run(coro_fn, *args, loop: str = "uvloop", limit_s: float = 15.0, **kwargs):
    """Run ``coro_fn(*args, **kwargs)`` in a fresh loop; fail on leftover tasks or ResourceWarnings."""

    async def main():
        result = await asyncio.wait_for(coro_fn(*args, **kwargs), limit_s)
        await asyncio.sleep(0.05)  # let transports finish closing
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not leftover, f"tasks left running: {leftover}"
        return result

    gc.collect()  # garbage left by earlier tests (other modules) is not this test's leak
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            result = runner.run(main())
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, leaks
    return result


async def get(client: H1Client, url: str, **kw):
    return await client.request(kw.pop("method", "GET"), url, kw.pop("headers", {}), kw.pop("body", b""), T)


def echo(resp) -> dict:
    return json.loads(resp.body)


# -- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _app():
    server = AppServer()
    yield server
    server.stop()


@pytest.fixture
def app(_app: AppServer) -> AppServer:
    _app.reset()
    return _app


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    try:
        return servers.self_signed_cert(tmp_path_factory.mktemp("tls"))
    except (OSError, servers.subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot make a self-signed certificate with openssl: {exc}")


@pytest.fixture(scope="module")
def _tls_app(cert):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*cert)
    server = AppServer(ssl_context=ctx)
    yield server
    server.stop()


@pytest.fixture
def tls_app(_tls_app: AppServer) -> AppServer:
    _tls_app.reset()
    return _tls_app


@pytest.fixture
def raw_server():
    started: list[RawServer] = []

    def start(handler) -> RawServer:
        server = RawServer(handler)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def nginx():
    if servers.NGINX is None:
        pytest.skip("nginx is not installed (/usr/sbin/nginx missing)")
    directory = Path(tempfile.mkdtemp(prefix="plimsoll-nginx-"))  # not under pytest's 0700 base: nginx's worker
    try:  # may run as nobody
        server = servers.Nginx(directory)
        yield server
        server.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    server = servers.DemoProcess(tmp_path_factory.mktemp("demo"), items=2000)
    yield server
    server.stop()


# -- connections and keep-alive ------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.serial  # every response within 1 s
def test_keep_alive_reuses_one_connection(app, loop):
    async def main():
        client = H1Client()
        try:
            connects = []
            for _ in range(20):
                resp = await get(client, f"{app.url}/hello")
                assert (resp.status, resp.reason, resp.body, resp.hits) == (200, "OK", b"hello", 1)
                assert resp.bytes_in == 5 and resp.bytes_out == 0
                assert 0 < resp.ttfb_s <= resp.total_s < 1
                assert resp.connect_s == client.last_connect_s < resp.ttfb_s
                connects.append(resp.connect_s)
            return connects
        finally:
            await client.close()

    connects = run(main, loop=loop)
    assert app.requests == 20
    assert app.connections == 1
    assert connects[0] > 0 and connects[1:] == [0.0] * 19


def test_connection_close_opens_a_fresh_connection(app):
    async def main():
        client = H1Client()
        try:
            for _ in range(3):
                resp = await get(client, f"{app.url}/close")
                assert resp.status == 200 and resp.body == b"bye"
                assert resp.headers["Connection"].lower() == "close"
            assert (await get(client, f"{app.url}/hello")).body == b"hello"
        finally:
            await client.close()

    run(main)
    assert app.requests == 4
    assert app.connections == 4


@pytest.mark.serial  # the seventh response waits one server delay, the batch within 2 s
def test_six_connections_at_most_and_fifo_wait(app):
    async def main():
        client = H1Client()
        try:
            started = time.perf_counter()
            resps = await asyncio.gather(*(get(client, f"{app.url}/slow?d=0.4") for _ in range(7)))
            assert all(r.status == 200 and r.body == b"slow" for r in resps)
            # the seventh waited for a free connection: two server delays
            totals = sorted(r.total_s for r in resps)
            assert totals[5] < 0.7 <= totals[6]
            assert time.perf_counter() - started < 2
        finally:
            await client.close()

    run(main)
    assert app.requests == 7
    assert app.connections == 6
    assert app.max_in_flight == 6
    assert app.max_open <= 6


def test_a_limit_of_one_serialises_requests_and_reuses_the_connection(app):
    async def main():
        client = H1Client(limit=1)
        try:
            resps = await asyncio.gather(*(get(client, f"{app.url}/slow?d=0.05") for _ in range(5)))
            assert [r.status for r in resps] == [200] * 5
        finally:
            await client.close()

    run(main)
    assert app.connections == 1
    assert app.max_in_flight == 1


@pytest.mark.serial  # a 0.6 s pause against a 0.2 s keep-alive
def test_idle_connection_closed_by_the_server_is_replaced():
    server = AppServer(keepalive_timeout=0.2)
    try:

        async def main():
            client = H1Client()
            try:
                assert (await get(client, f"{server.url}/hello")).status == 200
                await asyncio.sleep(0.6)  # the server closes the idle connection
                assert (await get(client, f"{server.url}/hello")).status == 200
                assert client.last_connect_s > 0
            finally:
                await client.close()

        run(main)
        assert server.connections == 2
    finally:
        server.stop()


def _stale_second_request(reply=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"):
    """Connection 1 answers one request, then reads the next and closes without answering; others answer all."""

    async def handler(reader, writer, number):
        server = handler.server
        answered = 0
        while await server.read_request(reader):
            if number == 1 and answered == 1:
                return  # the keep-alive race: closed just as the next request arrived
            writer.write(reply)
            await writer.drain()
            answered += 1

    return handler


def test_idempotent_request_on_a_stale_reused_connection_is_retried_once(raw_server):
    handler = _stale_second_request()
    server = handler.server = raw_server(handler)

    async def main():
        client = H1Client()
        try:
            assert (await get(client, server.url + "/")).body == b"ok"
            resp = await get(client, server.url + "/")
            assert resp.body == b"ok" and resp.hits == 1
        finally:
            await client.close()

    run(main)
    assert server.connections == 2
    assert server.requests == 3  # one lost on the stale connection, sent again on a new one


def test_post_on_a_stale_reused_connection_is_not_resent(raw_server):
    handler = _stale_second_request()
    server = handler.server = raw_server(handler)

    async def main():
        client = H1Client()
        try:
            assert (await get(client, server.url + "/", method="POST", body=b"1")).body == b"ok"
            with pytest.raises(ServerDisconnected) as info:
                await get(client, server.url + "/", method="POST", body=b"2")
            assert errors.classify(info.value)[0] == errors.CONNECTION_ERROR
            # the broken connection was dropped: the next request opens a new one
            assert (await get(client, server.url + "/", method="POST", body=b"3")).body == b"ok"
        finally:
            await client.close()

    run(main)
    assert server.connections == 2
    assert server.requests == 3


def test_a_fresh_connection_closed_without_response_is_not_retried(raw_server):
    async def handler(reader, writer, number):
        await handler.server.read_request(reader)

    server = handler.server = raw_server(handler)

    async def main():
        client = H1Client()
        try:
            with pytest.raises(ServerDisconnected, match="without sending a response"):
                await get(client, server.url + "/")
        finally:
            await client.close()

    run(main)
    assert server.connections == 1


# -- bodies ----------------------------------------------------------------------------------------------------


def test_chunked_response(app):
    async def main():
        client = H1Client()
        try:
            resp = await get(client, f"{app.url}/chunked?n=20")
            assert resp.headers["Transfer-Encoding"] == "chunked"
            assert resp.body == b"".join(f"chunk {i};".encode() for i in range(20))
            assert resp.bytes_in == len(resp.body)
            assert (await get(client, f"{app.url}/hello")).body == b"hello"
        finally:
            await client.close()

    run(main)
    assert app.connections == 1


@pytest.mark.parametrize("coding", ["gzip", "deflate", "deflate-raw", "br"])
def test_compressed_bodies_are_decoded_and_counted_compressed(app, coding):
    async def main():
        client = H1Client()
        try:
            resp = await get(client, f"{app.url}/coded/{coding}")
            assert resp.body == PAYLOAD
            assert resp.bytes_in == len(COMPRESSED[coding]) < len(PAYLOAD)
            sent = echo(await get(client, f"{app.url}/echo"))["headers"]
            assert sent["accept-encoding"] == "gzip, deflate, br"
        finally:
            await client.close()

    run(main)


def test_head_204_and_304_have_no_body_and_keep_the_connection(app):
    async def main():
        client = H1Client()
        try:
            head = await get(client, f"{app.url}/hello", method="HEAD")
            assert (head.status, head.body, head.bytes_in) == (200, b"", 0)
            assert head.headers["content-length"] == "5"
            for code in (204, 304):
                resp = await get(client, f"{app.url}/status/{code}")
                assert (resp.status, resp.body) == (code, b"")
            assert (await get(client, f"{app.url}/hello")).body == b"hello"
            head = await get(client, f"{app.url}/chunked", method="HEAD")
            assert head.body == b""
            assert (await get(client, f"{app.url}/hello")).body == b"hello"
        finally:
            await client.close()

    run(main)
    assert app.requests == 6
    assert app.connections <= 2  # a HEAD without Content-Length may close it (the client cannot tell its end)


def test_post_body_content_length_and_headers(app):
    async def main():
        client = H1Client()
        try:
            resp = await get(client, f"{app.url}/echo", method="POST", body=b"a=1&b=2")
            sent = echo(resp)
            assert (sent["method"], sent["body"]) == ("POST", "a=1&b=2")
            assert sent["headers"]["content-length"] == "7"
            assert sent["headers"]["user-agent"] == USER_AGENT
            assert sent["headers"]["host"] == f"{LOCAL}:{app.port}"
            assert resp.bytes_out == 7
            empty = echo(await get(client, f"{app.url}/echo", method="POST"))
            assert empty["headers"]["content-length"] == "0"
            custom = echo(
                await get(
                    client,
                    f"{app.url}/echo",
                    method="PUT",
                    body=b"x",
                    headers={"user-agent": "Mine/1", "X-Extra": "yes", "Content-Length": "999"},
                )
            )
            assert custom["method"] == "PUT"
            assert custom["headers"]["user-agent"] == "Mine/1"  # overrides the default, whatever the case
            assert custom["headers"]["x-extra"] == "yes"
            assert custom["headers"]["content-length"] == "1"  # the real length, always
        finally:
            await client.close()

    run(main)


def test_headers_are_case_insensitive_and_keep_repeated_fields():
    h = Headers({"content-type": "text/html"})
    h._add("set-cookie", "a=1")
    h._add("set-cookie", "b=2; Expires=Wed, 21 Oct 2099 07:28:00 GMT")
    h._add("vary", "Accept")
    h._add("vary", "Cookie")
    assert h["Content-Type"] == h.get("CONTENT-TYPE") == "text/html"
    assert "Set-Cookie" in h and "nope" not in h
    assert h.getall("Set-Cookie") == ["a=1", "b=2; Expires=Wed, 21 Oct 2099 07:28:00 GMT"]
    assert h["set-cookie"] == "a=1"
    assert h["Vary"] == "Accept, Cookie" and h.getall("vary") == ["Accept", "Cookie"]
    assert h.getall("missing") == []


def test_each_response_has_its_own_headers_when_a_server_repeats_them(raw_server):
    """Decoded header lists are remembered (h1._response_headers); every response still gets its own dict."""
    same = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Kind: Same\r\nContent-Type: text/plain\r\n\r\nok"
    repeated = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: a=1\r\nVary: Accept\r\n"
        b"Set-Cookie: b=2\r\nVary: Cookie\r\n\r\nok"
    )
    replies = [same, same, repeated, repeated, same]

    async def handler(reader, writer, number):
        for reply in replies:
            await handler.server.read_request(reader)
            writer.write(reply)
            await writer.drain()
        await handler.server.read_request(reader)  # kept alive: wait for the client to close it

    server = handler.server = raw_server(handler)

    async def main():
        client = H1Client()
        try:
            got = [await get(client, server.url + "/") for _ in replies]
        finally:
            await client.close()
        first, second, multi1, multi2, last = (r.headers for r in got)
        assert type(first) is Headers
        assert first == {"content-length": "2", "x-kind": "Same", "content-type": "text/plain"}
        assert second == first and second is not first
        first["x-kind"] = "changed by whoever read the first response"
        del first["content-type"]
        assert second["X-Kind"] == last["x-kind"] == "Same" and last["Content-Type"] == "text/plain"
        for h in (multi1, multi2):  # repeated fields: joined, every value kept, each time
            assert h.getall("Set-Cookie") == ["a=1", "b=2"] and h["vary"] == "Accept, Cookie"
        assert multi1 is not multi2 and multi1._multi is not multi2._multi
        assert client.cookies.get("a") == "1" and client.cookies.get("b") == "2"

    run(main)
    assert server.connections == 1


def test_body_delimited_by_close_interim_100_truncation_and_garbage(raw_server):
    replies = {
        1: b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",
        2: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal",
        3: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this",
        4: b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
        5: b"HTTP/1.0 200 OK\r\n\r\nold style",
    }

    async def handler(reader, writer, number):
        await handler.server.read_request(reader)
        writer.write(replies[number])
        await writer.drain()
        if number == 2:
            await handler.server.read_request(reader)  # kept alive: wait for the client to close it

    server = handler.server = raw_server(handler)

    async def main():
        client = H1Client()
        try:
            resp = await get(client, server.url + "/")
            assert resp.body == b"until the end" and resp.bytes_in == 13
            resp = await get(client, server.url + "/")
            assert (resp.status, resp.body) == (200, b"final")
            with pytest.raises(ServerDisconnected, match="in the middle"):
                await get(client, server.url + "/")
            with pytest.raises(HttpProtocolError) as info:
                await get(client, server.url + "/")
            assert errors.classify(info.value)[0] == errors.CONNECTION_ERROR
            assert (await get(client, server.url + "/")).body == b"old style"
        finally:
            await client.close()

    run(main)
    assert server.connections == 5


# -- redirects -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "method", "body"),
    [(301, "GET", ""), (302, "GET", ""), (303, "GET", ""), (307, "POST", "payload"), (308, "POST", "payload")],
)
def test_redirect_method_and_body_rules_for_a_post(app, code, method, body):
    async def main():
        client = H1Client()
        try:
            resp = await get(
                client,
                f"{app.url}/redirect/{code}?to=/echo",
                method="POST",
                body=b"payload",
                headers={"Content-Type": "text/plain"},
            )
            sent = echo(resp)
            assert (resp.status, resp.hits, resp.url) == (200, 2, f"{app.url}/echo")
            assert (sent["method"], sent["body"]) == (method, body)
            assert resp.bytes_out == 7 + len(body)
            assert ("content-type" in sent["headers"]) == (method == "POST")
        finally:
            await client.close()

    run(main)
    assert app.requests == 2
    assert app.connections == 1


def test_relative_and_absolute_locations_and_put_kept_on_302(app):
    async def main():
        client = H1Client()
        try:
            resp = await get(client, f"{app.url}/redirect/302?to=../dir/echo")
            assert resp.url == f"{app.url}/dir/echo" and echo(resp)["path"] == "/dir/echo"
            to = quote(f"{app.url}/redirect/303?to=other/echo", safe="")  # two hops, the second relative
            resp = await get(client, f"{app.url}/redirect/302?to={to}")
            assert (resp.hits, echo(resp)["path"]) == (3, "/redirect/other/echo")
            resp = await get(client, f"{app.url}/redirect/302?to=/echo", method="PUT", body=b"x")
            assert (echo(resp)["method"], echo(resp)["body"]) == ("PUT", "x")
            resp = await get(client, f"{app.url}/redirect/303?to=/echo", method="HEAD")
            assert resp.status == 200 and resp.hits == 2 and resp.body == b""
        finally:
            await client.close()

    run(main)


def test_a_redirect_loop_fails_after_max_redirects(app):
    async def main():
        client = H1Client()
        try:
            with pytest.raises(TooManyRedirects) as info:
                await get(client, f"{app.url}/loop")
            assert errors.classify(info.value)[0] == errors.CONNECTION_ERROR
        finally:
            await client.close()

    run(main)
    assert app.paths["/loop"] == MAX_REDIRECTS + 1


# -- cookies -----------------------------------------------------------------------------------------------------


def _set(*cookies: str) -> str:
    return "&".join("c=" + quote(c, safe="") for c in cookies)


def test_cookies_are_kept_sent_back_scoped_by_path_and_deleted(app):
    async def main():
        client = H1Client()
        other = H1Client()
        try:

            async def sent(path, who=client):
                return echo(await get(who, f"{app.url}{path}"))["cookie"]

            await get(client, f"{app.url}/setcookie?" + _set("sid=abc; Path=/; HttpOnly", "theme=dark"))
            assert await sent("/echo") == "sid=abc; theme=dark"
            # a Path cookie goes only below its path, and first (the longer path)
            await get(client, f"{app.url}/setcookie?" + _set("deep=1; Path=/dir"))
            assert await sent("/echo") == "sid=abc; theme=dark"
            assert await sent("/dir/echo") == "deep=1; sid=abc; theme=dark"
            # default path of a cookie set under /dir/ is /dir
            await get(client, f"{app.url}/dir/setcookie?" + _set("dflt=2"))
            assert "dflt=2" in await sent("/dir/echo") and "dflt" not in await sent("/echo")
            # deletion by Max-Age=0 and by a past Expires; replacement keeps one value
            await get(
                client,
                f"{app.url}/setcookie?"
                + _set("sid=; Max-Age=0; Path=/", "theme=x; Expires=Thu, 01 Jan 1970 00:00:00 GMT", "new=1"),
            )
            assert await sent("/echo") == "new=1"
            await get(client, f"{app.url}/setcookie?" + _set("new=2"))
            assert await sent("/echo") == "new=2"
            # a short Max-Age expires
            await get(client, f"{app.url}/setcookie?" + _set("brief=1; Max-Age=1"))
            assert "brief=1" in await sent("/echo")
            # Domain: the IP itself is accepted, another domain is refused
            await get(client, f"{app.url}/setcookie?" + _set(f"ipdom=1; Domain={LOCAL}", "evil=1; Domain=example.com"))
            got = await sent("/echo")
            assert "ipdom=1" in got and "evil" not in got
            # cookies set on a redirect hop travel with the next hop
            resp = await get(client, f"{app.url}/redirect/302?to=/echo&" + _set("hop=1; Path=/"))
            assert "hop=1" in echo(resp)["cookie"]
            # per virtual user
            assert await sent("/echo", other) == ""
            await asyncio.sleep(1.05)
            assert "brief" not in await sent("/echo")
            assert client.cookies.get("hop") == "1" and other.cookies.get("hop") is None
        finally:
            await client.close()
            await other.close()

    run(main)


def test_a_user_cookie_header_replaces_the_jar(app):
    async def main():
        client = H1Client()
        try:
            await get(client, f"{app.url}/setcookie?" + _set("sid=abc"))
            resp = await get(client, f"{app.url}/echo", headers={"Cookie": "mine=1"})
            assert echo(resp)["cookie"] == "mine=1"
        finally:
            await client.close()

    run(main)


def test_cookie_jar_rules_for_names_secure_and_order():
    jar = CookieJar()
    jar.set_cookie("a=1; Domain=example.com; Path=/", "www.example.com", "/x/y", secure=False, is_ip=False)
    jar.set_cookie("b=2", "www.example.com", "/x/y", secure=False, is_ip=False)  # host-only, default path /x
    jar.set_cookie("s=3; Secure", "www.example.com", "/", secure=False, is_ip=False)  # refused over http
    jar.set_cookie("s=4; Secure; Path=/", "www.example.com", "/", secure=True, is_ip=False)
    jar.set_cookie("bad=1; Domain=other.com", "www.example.com", "/", secure=False, is_ip=False)
    assert jar.header("www.example.com", "/x/z", False, False) == b"Cookie: b=2; a=1\r\n"  # longer path first
    assert jar.header("api.example.com", "/x", False, False) == b"Cookie: a=1\r\n"  # the domain cookie only
    assert jar.header("www.example.com", "/", True, False) == b"Cookie: a=1; s=4\r\n"  # same path: oldest first
    assert jar.header("www.example.com", "/xy", False, False) == b"Cookie: a=1\r\n"  # /x does not match /xy
    assert len(jar) == 3
    # on an IP host, Domain must be the IP itself, and is host-only
    jar.set_cookie("ip=1; Domain=127.0.0.1", "127.0.0.1", "/", secure=True, is_ip=True)
    jar.set_cookie("ip2=1; Domain=0.0.1", "127.0.0.1", "/", secure=True, is_ip=True)
    assert jar.header("127.0.0.1", "/", True, True) == b"Cookie: ip=1\r\n"
    assert jar.header("10.127.0.0.1", "/", True, True) == b""
    jar.clear()
    assert len(jar) == 0 and jar.header("www.example.com", "/", True, False) == b""


# -- timeouts, failures, target safety -------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.serial  # the timeout fires within 0.3 to 0.6 s
def test_timeout_raises_timeouterror_and_drops_the_connection(app, loop):
    async def main():
        client = H1Client()
        try:
            assert (await get(client, f"{app.url}/hello")).status == 200
            started = time.perf_counter()
            with pytest.raises(TimeoutError) as info:
                await client.request("GET", f"{app.url}/slow?d=2", {}, b"", 0.3)
            assert 0.3 <= time.perf_counter() - started < 0.6
            assert errors.classify(info.value)[0] == errors.TIMEOUT
            assert (await get(client, f"{app.url}/hello")).status == 200
            assert client.last_connect_s > 0  # not the timed-out connection
        finally:
            await client.close()

    run(main, loop=loop)
    assert app.connections == 2


@pytest.mark.serial  # a 0.05 s head start decides which request holds the connection
def test_timeout_while_waiting_for_a_connection_and_outside_cancellation(app):
    async def main():
        client = H1Client(limit=1)
        try:
            slow = asyncio.ensure_future(get(client, f"{app.url}/slow?d=0.5"))
            await asyncio.sleep(0.05)
            with pytest.raises(TimeoutError):
                await client.request("GET", f"{app.url}/hello", {}, b"", 0.2)
            assert (await slow).status == 200
            assert (await get(client, f"{app.url}/hello")).status == 200  # the slot was given back
            # a cancellation from outside stays a cancellation, and drops the connection in use
            task = asyncio.ensure_future(get(client, f"{app.url}/slow?d=2"))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await get(client, f"{app.url}/hello")).status == 200
        finally:
            await client.close()

    run(main)
    assert app.connections == 2


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.serial  # the server accepts the connection within the 0.3 s timeout
def test_timeout_during_a_stalled_tls_handshake(raw_server, loop):
    async def handler(reader, writer, number):
        await reader.read()  # reads the ClientHello, never answers

    server = raw_server(handler)

    async def main():
        client = H1Client(verify=False)
        try:
            with pytest.raises(TimeoutError):
                await client.request("GET", f"https://{LOCAL}:{server.port}/", {}, b"", 0.3)
        finally:
            await client.close()

    run(main, loop=loop)
    assert server.connections == 1


def test_deadlines_do_not_keep_closed_loops_alive(app):
    from workers.engine import h1

    async def main():
        client = H1Client()
        try:
            await client.request("GET", f"{app.url}/hello", {}, b"", 1)
        finally:
            await client.close()

    for loop in ("uvloop", "asyncio", "uvloop"):
        run(main, loop=loop)
    gc.collect()
    assert len(h1._deadlines_by_loop) == 0


def test_connection_refused_is_classified(app):
    async def main():
        client = H1Client()
        try:
            with pytest.raises(ConnectionRefusedError) as info:
                await get(client, f"http://{LOCAL}:{servers.free_port()}/")
            assert errors.classify(info.value)[0] == errors.CONNECTION_REFUSED
        finally:
            await client.close()

    run(main)


@pytest.mark.parametrize(
    ("allowlist", "url"),
    [
        ("127.0.0.0/8", "http://10.0.0.5:9/"),  # an IP literal outside: refused before any socket connects
        ("127.0.0.2/32", "APP/hello"),  # loopback, but not in this allowlist
        ("127.0.0.2/32", "http://localhost:PORT/hello"),  # a name resolving outside the allowlist
        ("127.0.0.1/32", "APP/redirect/302?to=http://127.0.0.2:PORT/echo"),  # a redirect outside
    ],
)
def test_targets_outside_the_allowlist_are_refused(app, allowlist, url):
    url = url.replace("APP", app.url).replace("PORT", str(app.port))

    class SpyGuard(TargetGuard):
        sockets: list = []

        def socket_factory(self, addr_info):
            sock = super().socket_factory(addr_info)
            self.sockets.append(addr_info[4])
            return sock

    guard = SpyGuard(allowlist)

    async def main():
        client = H1Client(guard)
        try:
            with pytest.raises(TargetNotAllowed) as info:
                await get(client, url)
            assert errors.classify(info.value)[0] == errors.TARGET_NOT_ALLOWED
        finally:
            await client.close()

    run(main)
    redirected = "redirect" in url
    assert app.requests == (1 if redirected else 0)
    # no socket was even created for the refused address (only for the first hop of the redirect)
    assert guard.sockets == ([(LOCAL, app.port)] if redirected else [])


def test_an_allowed_host_name_vouches_for_its_addresses(app):
    async def main():
        client = make_h1_client("localhost")
        try:
            assert (await get(client, f"http://localhost:{app.port}/hello")).body == b"hello"
            resp = await get(client, f"http://localhost:{app.port}/redirect/302?to={app.url}/echo")
            assert resp.status == 200 and resp.url == f"{app.url}/echo"
            with pytest.raises(TargetNotAllowed):
                await get(client, f"http://127.0.0.2:{app.port}/hello")
        finally:
            await client.close()

    run(main)


def test_bad_urls_raise_before_connecting():
    async def main():
        client = H1Client()
        try:
            for url in ("ftp://127.0.0.1/", "http:///nohost", "http://127.0.0.1:99999/"):
                with pytest.raises(ValueError):
                    await get(client, url)
            with pytest.raises(ValueError):
                await get(client, "http://127.0.0.1:9/", headers={"X": "a\r\nInjected: 1"})
        finally:
            await client.close()

    run(main)


# -- TLS -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_tls_with_verification_off_and_with_a_trusting_context(tls_app, cert, loop):
    async def main():
        insecure = H1Client(verify=False)
        ctx = ssl.create_default_context(cafile=str(cert[0]))
        trusting = H1Client(ssl_context=ctx)
        try:
            for _ in range(3):
                resp = await get(insecure, f"{tls_app.url}/coded/br")
                assert resp.body == PAYLOAD and resp.bytes_in == len(COMPRESSED["br"])
            assert (await get(trusting, f"{tls_app.url}/hello")).body == b"hello"
            assert (await get(trusting, f"https://localhost:{tls_app.port}/hello")).body == b"hello"
        finally:
            await insecure.close()
            await trusting.close()

    run(main, loop=loop)
    assert tls_app.connections == 3  # one per client and host


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_tls_verification_rejects_a_self_signed_certificate(tls_app, loop):
    async def main():
        client = H1Client()
        try:
            with pytest.raises(ssl.SSLCertVerificationError) as info:
                await get(client, f"{tls_app.url}/hello")
            assert errors.classify(info.value) == (errors.TLS_ERROR, "TLS handshake failed: self-signed certificate")
        finally:
            await client.close()

    run(main, loop=loop)
    assert tls_app.requests == 0


# -- close -------------------------------------------------------------------------------------------------------------


def test_close_with_requests_in_flight_leaves_nothing_behind(app):
    async def main():
        client = H1Client()
        tasks = [asyncio.ensure_future(get(client, f"{app.url}/slow?d=1")) for _ in range(8)]
        await asyncio.sleep(0.1)
        await client.close()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, ConnectionError) and "client is closed" in str(r) for r in results), results
        with pytest.raises(ConnectionError):
            await get(client, f"{app.url}/hello")

    run(main)


# -- other servers ------------------------------------------------------------------------------------------------


def test_nginx_static_files_keep_alive_gzip_head_304_and_close(nginx):
    async def main():
        client = H1Client()
        try:
            resp = await get(client, f"{nginx.url}/2k.txt")
            assert resp.status == 200 and resp.body == b"x" * 2047 + b"\n" and resp.bytes_in == 2048
            assert resp.headers["server"].startswith("nginx")
            for _ in range(10):
                assert (await get(client, f"{nginx.url}/2k.txt")).status == 200
                assert client.last_connect_s == 0
            big = await get(client, f"{nginx.url}/big.txt")
            assert big.headers["content-encoding"] == "gzip"
            assert big.headers["transfer-encoding"] == "chunked"
            assert big.body == PAYLOAD and big.bytes_in < len(PAYLOAD) // 10
            head = await get(client, f"{nginx.url}/2k.txt", method="HEAD")
            assert head.body == b"" and head.headers["content-length"] == "2048"
            etag = head.headers["etag"]
            cached = await get(client, f"{nginx.url}/2k.txt", headers={"If-None-Match": etag})
            assert (cached.status, cached.body) == (304, b"")
            redirected = await get(client, f"{nginx.url}/redirect")
            assert (redirected.status, redirected.hits, redirected.bytes_in > 2048) == (200, 2, True)
            assert (await get(client, f"{nginx.url}/missing")).status == 404
            assert client.last_connect_s == 0
            bye = await get(client, f"{nginx.url}/close")
            assert bye.body == b"bye" and bye.headers["connection"] == "close"
            assert (await get(client, f"{nginx.url}/2k.txt")).status == 200
            assert client.last_connect_s > 0
        finally:
            await client.close()

    run(main)


def test_demo_login_flow_compression_and_bytes_counted_like_the_server(demo):
    async def main():
        admin = H1Client()
        user = H1Client()
        try:
            await get(admin, f"{demo.url}/_demo/knobs", method="POST", body=b'{"compression": "on"}')
            form = await get(user, f"{demo.url}/login")
            token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', form.body).group(1).decode()
            body = f"csrfmiddlewaretoken={token}&username=demo&password=demo".encode()
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            account = await get(user, f"{demo.url}/login", method="POST", body=body, headers=headers)
            assert account.status == 200 and account.hits == 2 and account.url == f"{demo.url}/account"
            assert b"demo" in account.body
            await get(admin, f"{demo.url}/_demo/counters/reset", method="POST")
            page = await get(user, f"{demo.url}/articles")
            assert page.status == 200 and page.headers["content-encoding"] == "gzip"
            counters = echo(await get(admin, f"{demo.url}/_demo/counters"))
            assert counters["bytes_sent"] == page.bytes_in < len(page.body)
            out = await get(user, f"{demo.url}/logout")
            assert out.hits == 2 and user.cookies.get("demo_sessionid") is None
            assert (await get(user, f"{demo.url}/account")).url == f"{demo.url}/login"
            # the same pages as aiohttp's client sees them
            reference = AiohttpClient()
            try:
                for path in ("/", "/articles/7", "/search?q=Area+042"):
                    mine, theirs = await get(user, demo.url + path), await get(reference, demo.url + path)
                    assert (mine.status, mine.body, mine.bytes_in) == (theirs.status, theirs.body, theirs.bytes_in)
            finally:
                await reference.close()
        finally:
            await get(admin, f"{demo.url}/_demo/knobs", method="POST", body=b'{"compression": "off"}')
            await admin.close()
            await user.close()

    run(main, limit_s=30)


@pytest.mark.serial  # more than 50 requests in a 1 s hold: a rate
def test_the_runner_drives_h1_clients(app):
    from workers.engine.plan import Plan
    from workers.engine.runner import run_sync

    plan = Plan.from_dict(
        {
            "base_url": app.url,
            "test_cases": [
                {
                    "name": "Browse",
                    "steps": [
                        {"name": "Hello", "path": "/hello", "think_time": 0.01, "text_present": "hello"},
                        {"name": "Gzip", "path": "/coded/gzip", "think_time": 0.01, "text_present": "Jack"},
                        {"name": "Hop", "path": "/redirect/302?to=/hello", "think_time": 0.01},
                    ],
                }
            ],
            "profile": {"users": 5, "ramp_up": 0, "hold": 1.0},
            "request_timeout": 5,
        }
    )
    totals = run_sync(plan, sink=None, client_factory=functools.partial(make_h1_client, "127.0.0.0/8"))
    assert totals.errors == 0
    assert totals.requests == app.requests > 50
    assert app.connections == 5  # one kept-alive connection per virtual user
