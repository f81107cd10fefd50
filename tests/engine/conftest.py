"""A tiny HTTP target on loopback for the engine's end-to-end tests.

It runs an aiohttp application in its own thread and event loop (so the engine
under test has the main thread's loop to itself), counts every request it
serves, and has pages that fail, answer slowly, set and check cookies, redirect
and compress. Load in tests goes only here: 127.0.0.1 (and 127.0.0.2 for the
allowlist tests, still loopback).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter

import pytest
from aiohttp import web


class TargetServer:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.hits: Counter[str] = Counter()  # path -> requests served
        self.rows: Counter[str] = Counter()  # the ``u`` query parameter (a data-set row) -> requests with it
        self.whoami_by_sid: Counter[str] = Counter()
        self.issued_sids: set[str] = set()
        self.unknown_sid_requests = 0
        self._sids = itertools.count(1)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"target-{host}", daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("the test target did not start")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def served(self) -> int:
        with self._lock:
            return sum(self.hits.values())

    def reset(self) -> None:
        with self._lock:
            self.hits.clear()
            self.rows.clear()
            self.whoami_by_sid.clear()
            self.issued_sids.clear()
            self.unknown_sid_requests = 0

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    # -- the application --

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._count])
        app.router.add_get("/", self._home)
        app.router.add_get("/error", self._error)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/login", self._login)
        app.router.add_get("/whoami", self._whoami)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/redirect-out", self._redirect_out)
        app.router.add_get("/gzip", self._gzip)
        app.router.add_post("/echo", self._echo)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    @web.middleware
    async def _count(self, request: web.Request, handler):
        with self._lock:
            self.hits[request.path] += 1
            if "u" in request.query:
                self.rows[request.query["u"]] += 1
        return await handler(request)

    async def _home(self, request: web.Request) -> web.Response:
        return web.Response(text="<h1>Welcome to the demo</h1>", content_type="text/html")

    async def _error(self, request: web.Request) -> web.Response:
        return web.Response(status=500, text="Traceback (most recent call last): boom")

    async def _slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("d", "1")))
        return web.Response(text="slow but fine")

    async def _login(self, request: web.Request) -> web.Response:
        sid = str(next(self._sids))
        with self._lock:
            self.issued_sids.add(sid)
        response = web.Response(text="logged in")
        response.set_cookie("sid", sid)
        return response

    async def _whoami(self, request: web.Request) -> web.Response:
        sid = request.cookies.get("sid")
        with self._lock:
            if sid not in self.issued_sids:
                self.unknown_sid_requests += 1
                return web.Response(status=401, text="who are you?")
            self.whoami_by_sid[sid] += 1
        return web.Response(text=f"you are user {sid}")

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/")

    async def _redirect_out(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def _gzip(self, request: web.Request) -> web.Response:
        response = web.Response(text="Welcome " * 2000)
        response.enable_compression()
        return response

    async def _echo(self, request: web.Request) -> web.Response:
        return web.Response(body=await request.read())


@pytest.fixture(scope="session")
def _target_server():
    server = TargetServer("127.0.0.1")
    yield server
    server.stop()


@pytest.fixture
def target(_target_server: TargetServer) -> TargetServer:
    """The loopback test target, with its counters reset."""
    _target_server.reset()
    return _target_server


@pytest.fixture(scope="session")
def _other_server():
    server = TargetServer("127.0.0.2")
    yield server
    server.stop()


@pytest.fixture
def other_target(_other_server: TargetServer) -> TargetServer:
    """A second target on 127.0.0.2: loopback, but outside an allowlist of 127.0.0.1/32."""
    _other_server.reset()
    return _other_server
