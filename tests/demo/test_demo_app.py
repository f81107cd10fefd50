"""Tests of the Plimsoll demo target (demo/), the bundled system under test.

No Django here: one demo server runs on an ephemeral loopback port in a
background thread with its own event loop, and each test drives it with an
aiohttp client inside ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import gzip
import re
import sqlite3
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from demo.app import STATE, create_app
from demo.workitems import INDEX_NAME, WorkItems

ITEMS = 50_000
ROOT = Path(__file__).resolve().parents[2]


class ServerThread:
    """Runs an aiohttp app on 127.0.0.1:<free port> in a thread with its own loop."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _start(self) -> int:
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return self.runner.addresses[0][1]

    def start(self) -> str:
        self.thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(60)
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("demo") / "demo.sqlite3"
    app = create_app(db, items=ITEMS)
    thread = ServerThread(app)
    base = thread.start()
    yield base, app, db
    thread.stop()


def client(**kwargs) -> aiohttp.ClientSession:
    # unsafe=True: aiohttp's cookie jar ignores cookies from IP hosts otherwise.
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True), **kwargs)


async def get_json(s: aiohttp.ClientSession, url: str):
    async with s.get(url) as r:
        assert r.status == 200
        return await r.json()


async def set_knobs(s: aiohttp.ClientSession, base: str, **knobs):
    async with s.post(f"{base}/_demo/knobs", json=knobs) as r:
        assert r.status == 200, await r.text()
        return await r.json()


# -- pages -------------------------------------------------------------------------
def test_pages_are_realistic_html(base):
    async def scenario():
        async with client() as s:
            for path, low, high in [
                ("/", 5_000, 60_000),
                ("/articles", 5_000, 60_000),
                ("/articles/1", 10_000, 40_000),
                ("/articles/50", 10_000, 40_000),
                ("/search", 5_000, 60_000),
                ("/search?q=Area+042", 5_000, 60_000),
            ]:
                async with s.get(base + path) as r:
                    body = await r.read()
                    assert r.status == 200, path
                    assert r.content_type == "text/html"
                    assert low <= len(body) <= high, (path, len(body))
                    assert b"Plimsoll demo target" in body
            async with s.get(base + "/") as r:
                home = await r.text()
            assert 'href="/articles"' in home
            assert 'href="/search?q=Area+001"' in home
            async with s.get(base + "/articles/7") as r1, s.get(base + "/articles/7") as r2:
                assert await r1.read() == await r2.read()  # deterministic

    asyncio.run(scenario())


@pytest.mark.parametrize("path", ["/articles/0", "/articles/51", "/articles/abc", "/no-such-page"])
def test_unknown_pages_are_404(base, path):
    async def scenario():
        async with client() as s, s.get(base + path) as r:
            assert r.status == 404
            assert "text/html" in r.headers["Content-Type"]

    asyncio.run(scenario())


# -- login -------------------------------------------------------------------------
def _csrf_from_form(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([0-9a-f]+)"', html).group(1)


def test_login_flow(base):
    async def scenario():
        async with client() as s:
            async with s.get(base + "/account", allow_redirects=False) as r:
                assert r.status == 302
                assert r.headers["Location"] == "/login"
            async with s.get(base + "/login") as r:
                token = _csrf_from_form(await r.text())
            assert s.cookie_jar.filter_cookies(URL(base))["csrftoken"].value == token
            form = {"username": "alice", "password": "alice", "csrfmiddlewaretoken": token}
            async with s.post(base + "/login", data=form, allow_redirects=False) as r:
                assert r.status == 302
                assert r.headers["Location"] == "/account"
            async with s.get(base + "/account") as r:
                assert r.status == 200
                assert "Welcome, alice" in await r.text()
            async with s.get(base + "/logout", allow_redirects=False) as r:
                assert r.status == 302
            async with s.get(base + "/account", allow_redirects=False) as r:
                assert r.status == 302

    asyncio.run(scenario())


def test_login_rejects_bad_csrf_and_bad_password(base):
    async def scenario():
        async with client() as s:
            async with s.get(base + "/login") as r:
                token = _csrf_from_form(await r.text())
            bad = {"username": "demo", "password": "demo", "csrfmiddlewaretoken": "0" * 64}
            async with s.post(base + "/login", data=bad, allow_redirects=False) as r:
                assert r.status == 403
                assert "CSRF verification failed" in await r.text()
            wrong = {"username": "demo", "password": "nope", "csrfmiddlewaretoken": token}
            async with s.post(base + "/login", data=wrong, allow_redirects=False) as r:
                assert r.status == 403
                assert "Invalid user name or password" in await r.text()
            async with s.get(base + "/account", allow_redirects=False) as r:
                assert r.status == 302
        # A valid token but without the session cookie it belongs to.
        async with client() as fresh:
            good = {"username": "demo", "password": "demo", "csrfmiddlewaretoken": token}
            async with fresh.post(base + "/login", data=good, allow_redirects=False) as r:
                assert r.status == 403

    asyncio.run(scenario())


# -- counters ----------------------------------------------------------------------
def test_counters_are_exact_and_ignore_admin_paths(base):
    paths = ["/", "/articles", "/articles/3", "/articles/99", "/search?q=Area+001", "/nope"] * 4
    expected_by_path = {
        "/": 4,
        "/articles": 4,
        "/articles/{id}": 8,
        "/search": 4,
        "<unmatched>": 4 + 1,  # the POST below
    }

    async def scenario():
        sent = 0
        async with client() as s:
            for path in paths:
                async with s.get(base + path) as r:
                    sent += len(await r.read())
                # Admin requests in between must not count.
                await get_json(s, f"{base}/_demo/knobs")
                async with s.get(f"{base}/metrics") as r:
                    await r.read()
            async with s.post(base + "/nope") as r:  # 404 for an unknown path
                sent += len(await r.read())
            async with s.head(base + "/") as r:  # counted, no body bytes
                assert r.status == 200
            counters = await get_json(s, f"{base}/_demo/counters")
            assert counters["requests"] == len(paths) + 2
            assert counters["by_path"] == {**expected_by_path, "/": 5}
            assert counters["by_status"] == {"200": 17, "404": 9}
            assert counters["bytes_sent"] == sent
            assert counters["in_flight"] == 0
            assert counters["service_time_ms_total"] > 0
            mean = counters["service_time_ms_total"] / counters["requests"]
            assert counters["service_time_ms_mean"] == pytest.approx(mean, abs=0.002)

            async with s.post(f"{base}/_demo/counters/reset") as r:
                zero = await r.json()
            assert zero["requests"] == 0
            assert zero["by_path"] == {}
            assert zero["bytes_sent"] == 0
            assert (await get_json(s, f"{base}/_demo/counters"))["requests"] == 0

    asyncio.run(scenario())


def test_counters_exact_under_concurrency(base):
    async def scenario():
        async with client() as s:

            async def one(i):
                async with s.get(f"{base}/articles/{1 + i % 50}") as r:
                    return len(await r.read())

            sizes = await asyncio.gather(*(one(i) for i in range(60)))
            counters = await get_json(s, f"{base}/_demo/counters")
            assert counters["requests"] == 60
            assert counters["by_path"] == {"/articles/{id}": 60}
            assert counters["bytes_sent"] == sum(sizes)
            assert counters["in_flight"] == 0

    asyncio.run(scenario())


# -- knobs -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        {"no.such.knob": "on"},
        {"compression": "maybe"},
        {"search.index": 1},
        {"latency_ms": -1},
        {"latency_ms": "abc"},
        {"latency_ms": True},
        {"latency_ms": 10, "compression": "sideways"},  # nothing applied if one is bad
        [1, 2],
    ],
)
def test_knob_validation(base, body):
    async def scenario():
        async with client() as s:
            before = await get_json(s, f"{base}/_demo/knobs")
            async with s.post(f"{base}/_demo/knobs", json=body) as r:
                assert r.status == 400
                assert "error" in await r.json()
            assert await get_json(s, f"{base}/_demo/knobs") == before

    asyncio.run(scenario())


def test_knobs_get_post_and_schema(base):
    async def scenario():
        async with client() as s:
            assert await get_json(s, f"{base}/_demo/knobs") == {
                "search.index": "off",
                "compression": "off",
                "latency_ms": 0,
                "errors_pct": 0,
                "tempdb.files": 1,
                "token_cache.cap": 0,
                "token_cache.pressure": 100_000,
                "token_cache.cleanup_us_per_entry": 5,
                "documents.storage": "database",
                "web_garden.processes": 1,
            }
            new = await set_knobs(s, base, compression="on", latency_ms="5")
            assert new["compression"] == "on"
            assert new["latency_ms"] == 5
            schema = await get_json(s, f"{base}/_demo/knobs/schema")
            assert {k["name"] for k in schema} == {
                "search.index",
                "compression",
                "latency_ms",
                "errors_pct",
                "tempdb.files",
                "token_cache.cap",
                "token_cache.pressure",
                "token_cache.cleanup_us_per_entry",
                "documents.storage",
                "web_garden.processes",
            }
            assert all(k["description"] for k in schema)
            stories = {k["name"]: k["description"] for k in schema}
            assert "TFS" in stories["search.index"]
            assert "tempdb" in stories["tempdb.files"] and "-T1118" in stories["tempdb.files"]
            assert "TokenAndPermUserStore" in stories["token_cache.cap"] and "-T4618" in stories["token_cache.cap"]
            assert "Remote BLOB Storage" in stories["documents.storage"]
            async with s.post(f"{base}/_demo/knobs", data="not json") as r:
                assert r.status == 400

    asyncio.run(scenario())


@pytest.mark.serial  # admin pages within 0.1 s
def test_latency_knob_delays_pages_not_admin(base):
    async def scenario():
        async with client() as s:
            await set_knobs(s, base, latency_ms=120)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            async with s.get(base + "/articles") as r:
                await r.read()
            assert loop.time() - t0 >= 0.12
            t0 = loop.time()
            await get_json(s, f"{base}/_demo/counters")
            assert loop.time() - t0 < 0.1
            counters = await get_json(s, f"{base}/_demo/counters")
            assert counters["service_time_ms_mean"] >= 120

    asyncio.run(scenario())


def test_errors_knob_answers_that_exact_share_of_pages_503_and_not_admin(base):
    async def scenario():
        async with client() as s:
            await set_knobs(s, base, errors_pct=25)
            statuses = []
            for _ in range(20):
                async with s.get(f"{base}/") as r:
                    statuses.append(r.status)
                    assert "Service Unavailable" in await r.text() if r.status == 503 else True
            assert statuses == [200, 200, 200, 503] * 5
            async with s.get(f"{base}/_demo/counters") as r:  # admin paths are never refused
                assert r.status == 200
                counters = await r.json()
            assert counters["by_status"] == {"200": 15, "503": 5}
            await set_knobs(s, base, errors_pct=100)
            for _ in range(3):
                async with s.get(f"{base}/search?q=x") as r:
                    assert r.status == 503
            await set_knobs(s, base, errors_pct=0)
            async with s.get(f"{base}/") as r:
                assert r.status == 200

    asyncio.run(scenario())


def test_compression_knob(base):
    async def scenario():
        async with client(auto_decompress=False) as s:
            gz = {"Accept-Encoding": "gzip, deflate"}
            async with s.get(base + "/articles/5", headers=gz) as r:
                plain = await r.read()
                assert "Content-Encoding" not in r.headers
            await set_knobs(s, base, compression="on")
            async with client() as fresh:  # so the counters only see the next requests
                await fresh.post(f"{base}/_demo/counters/reset")
            async with s.get(base + "/articles/5", headers=gz) as r:
                assert r.headers["Content-Encoding"] == "gzip"
                compressed = await r.read()
            assert gzip.decompress(compressed) == plain
            assert len(compressed) < len(plain) / 2
            async with s.get(base + "/articles/5", headers={"Accept-Encoding": "identity"}) as r:
                assert "Content-Encoding" not in r.headers
                assert await r.read() == plain
            async with s.get(base + "/articles/5", headers={"Accept-Encoding": "gzip;q=0"}) as r:
                assert "Content-Encoding" not in r.headers
            counters = await get_json(s, f"{base}/_demo/counters")
            assert counters["bytes_sent"] == len(compressed) + 2 * len(plain)

    asyncio.run(scenario())


# -- search and the index knob -----------------------------------------------------
def _plan(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id, title, state FROM work_items WHERE area = ? ORDER BY id LIMIT 50",
            ("Area 001",),
        ).fetchall()
    return " ".join(row[3] for row in rows)


@pytest.mark.serial  # a search's time with and without the index
def test_search_index_knob_changes_plan_not_results(base, server):
    db = server[2]
    workitems = server[1][STATE].workitems

    async def search_all(s, areas):
        bodies, times = [], []
        for area in areas:
            async with s.get(f"{base}/search", params={"q": area}) as r:
                assert r.status == 200
                bodies.append(await r.read())
                times.append(float(r.headers["X-Demo-Query-Ms"]))
        return bodies, statistics.median(times)

    async def scenario():
        areas = ["Area 001", "Area 042", "Area 100", "Area 042", "No such area"]
        async with client() as s:
            assert (await get_json(s, f"{base}/_demo/knobs"))["search.index"] == "off"
            assert "SCAN work_items" in _plan(db)
            assert INDEX_NAME not in _plan(db)
            off_bodies, off_ms = await search_all(s, areas)

            await set_knobs(s, base, **{"search.index": "on"})
            assert f"USING INDEX {INDEX_NAME}" in _plan(db)
            assert any(INDEX_NAME in step for step in workitems.query_plan())
            on_bodies, on_ms = await search_all(s, areas)

            await set_knobs(s, base, **{"search.index": "off"})
            assert INDEX_NAME not in _plan(db)

        assert on_bodies == off_bodies
        assert b"work items in area <b>Area 042</b>" in on_bodies[1]
        assert b"0 work items" in on_bodies[-1]
        # A full scan of 50,000 rows vs an index lookup: typically 20x or more.
        assert off_ms > 3 * on_ms, (off_ms, on_ms)

    asyncio.run(scenario())


def test_workitems_db_is_reused_or_regenerated(tmp_path):
    db = tmp_path / "w.sqlite3"
    first = WorkItems(db, 500)
    assert first.ensure_populated() is True
    total, rows = first.search("Area 001")
    first.close()
    again = WorkItems(db, 500)
    assert again.ensure_populated() is False
    assert again.search("Area 001") == (total, rows)
    again.close()
    bigger = WorkItems(db, 800)
    assert bigger.ensure_populated() is True
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM work_items").fetchone() == (800,)
    bigger.close()


# -- metrics -----------------------------------------------------------------------
SAMPLE = re.compile(r'^(demo_[a-z_]+)(\{([a-z_]+="(?:[^"\\]|\\.)*",?)+\})? (-?[0-9.]+(e[+-]?[0-9]+)?)$')


def test_metrics_is_prometheus_text(base):
    async def scenario():
        async with client() as s:
            for _ in range(3):
                async with s.get(base + "/") as r:
                    await r.read()
            async with s.get(f"{base}/metrics") as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("text/plain")
                return await r.text()

    text = asyncio.run(scenario())
    declared: dict[str, str] = {}
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert line.split(" ", 3)[2].startswith("demo_")
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge")
            declared[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"not a Prometheus sample line: {line!r}"
            assert m.group(1) in declared, f"sample before its # TYPE: {line!r}"
            samples[line.rsplit(" ", 1)[0]] = float(m.group(4))
    assert samples["demo_requests_total"] == 3  # /metrics itself is not counted
    assert samples['demo_requests_by_path_total{path="/"}'] == 3
    assert samples['demo_responses_by_status_total{status="200"}'] == 3
    assert samples["demo_in_flight_requests"] == 0
    assert samples['demo_process_cpu_seconds_total{mode="user"}'] > 0
    assert samples['demo_knob_info{knob="compression",value="off"}'] == 1


# -- the command line --------------------------------------------------------------
def test_cli_starts_prints_url_and_stops_on_sigterm(tmp_path):
    cmd = [sys.executable, "-m", "demo", "--port", "0", "--db", str(tmp_path / "d.sqlite3")]
    cmd += ["--items", "1000", "--knob", "latency_ms=1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        m = re.fullmatch(r"Plimsoll demo target listening on (http://127\.0\.0\.1:\d+)", line)
        assert m, line

        async def scenario():
            async with client() as s:
                assert (await get_json(s, f"{m.group(1)}/_demo/knobs"))["latency_ms"] == 1
                async with s.get(m.group(1) + "/") as r:
                    assert r.status == 200

        asyncio.run(scenario())
        proc.terminate()
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
