"""The demo target's seed-story knobs, each shown by a real measurement and a negative case.

* ``tempdb.files``: one shared allocation lock makes concurrent database pages
  queue; eight locks mostly remove the queue;
* ``token_cache.cap``: an uncapped token cache grows one entry per page until
  its clean-ups stall every page; a capped one stays small and cheap;
* ``documents.storage``: documents round-trip byte for byte in the database and
  in the blob folder, switching moves them, and large ones are slower from the
  database.

One server per module runs on 127.0.0.1 in a background thread (as in
``test_demo_app.py``); every load loop is bounded by a deadline. The factors
asserted are far below the measured ones (see each test) so that a busy 2-core
machine does not make them flaky.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics

import aiohttp
import pytest

from demo.app import STATE, create_app
from demo.documents import MAX_UPLOAD_BYTES, SEEDED, seed_bytes
from demo.tempdb import ALLOCATION_SECONDS
from demo.tokencache import CLEANUP_INTERVAL_SECONDS, CLEANUP_SECONDS_PER_ENTRY, PRESSURE_ENTRIES
from tests.demo.test_demo_app import ServerThread, client, get_json, set_knobs

ITEMS = 5_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("demo-seeds") / "demo.sqlite3"
    app = create_app(db, items=ITEMS)
    thread = ServerThread(app)
    base = thread.start()
    yield base, app, db, thread
    thread.stop()


def on_server_loop(server, fn, *args):
    """Run ``fn(*args)`` on the server's own event loop (its state is not thread-safe)."""

    async def call():
        return fn(*args)

    thread = server[3]
    return asyncio.run_coroutine_threadsafe(call(), thread.loop).result(10)


async def load(s: aiohttp.ClientSession, url: str, users: int, seconds: float, think: float = 0.0) -> list[float]:
    """``users`` concurrent loops of GET ``url`` for ``seconds``; the latency of each request.

    A short ``think`` time keeps the offered load below what this process can
    drive even on a busy machine, so that only the server's queue moves the figures.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    latencies: list[float] = []

    async def user():
        while loop.time() < deadline:
            started = loop.time()
            async with s.get(url) as r:
                await r.read()
                assert r.status == 200, url
            latencies.append(loop.time() - started)
            if think:
                await asyncio.sleep(think)

    await asyncio.gather(*(user() for _ in range(users)))
    return latencies


# -- tempdb.files --------------------------------------------------------------------
def test_one_tempdb_file_queues_database_pages_eight_files_do_not(base):
    users, seconds, think = 20, 2.0, 0.05  # up to 400 searches/s offered

    async def measure(s, files):
        await set_knobs(s, base, **{"tempdb.files": files})
        await s.post(f"{base}/_demo/counters/reset")
        latencies = await load(s, f"{base}/search?q=Area+042", users, seconds, think)
        return statistics.mean(latencies), len(latencies), await get_json(s, f"{base}/_demo/counters")

    async def scenario():
        async with client() as s:
            await set_knobs(s, base, **{"search.index": "on"})
            await load(s, f"{base}/search?q=Area+001", 5, 0.3)  # warm up
            one = await measure(s, 1)
            eight = await measure(s, 8)
            # Pages without database work never allocate, whatever the knob says.
            await set_knobs(s, base, **{"tempdb.files": 1})
            await s.post(f"{base}/_demo/counters/reset")
            await load(s, f"{base}/articles", users, 0.5)
            home = await get_json(s, f"{base}/_demo/counters")
            return one, eight, home

    (apd_1, pages_1, c_1), (apd_8, pages_8, c_8), home = asyncio.run(scenario())
    print(
        f"tempdb: 1 file APD {apd_1 * 1000:.1f} ms ({pages_1} pages, {c_1['tempdb_lock_waits']} waits), "
        f"8 files APD {apd_8 * 1000:.1f} ms ({pages_8} pages, {c_8['tempdb_lock_waits']} waits)"
    )
    # One file: searches queue behind one 5 ms allocation, so at most ~200 pages/s for
    # 400 offered, and APD ~ users x 5 ms - think = 50 ms or more. Eight files: no queue
    # to speak of. Measured here: 1 file ~60 ms vs 8 files ~10 ms. (With no think time
    # at all, from another process: 109 ms vs 14 ms.)
    assert apd_1 >= (users * ALLOCATION_SECONDS - think) * 0.8
    assert pages_1 <= seconds / ALLOCATION_SECONDS * 1.1 + users
    assert apd_1 > 3.0 * apd_8, (apd_1, apd_8)
    assert pages_8 > 1.4 * pages_1, (pages_1, pages_8)
    # Every search allocated once; nearly every one waited with one file, far fewer with eight.
    assert c_1["tempdb_allocations"] == c_1["requests"] == pages_1
    assert c_1["tempdb_lock_waits"] >= 0.8 * pages_1
    assert c_1["tempdb_lock_wait_ms_total"] / 1000 / pages_1 >= (users * ALLOCATION_SECONDS - think) * 0.6
    wait_per_page_8 = c_8["tempdb_lock_wait_ms_total"] / pages_8
    assert wait_per_page_8 < 0.3 * c_1["tempdb_lock_wait_ms_total"] / pages_1
    assert home["requests"] > 0 and home["tempdb_allocations"] == home["tempdb_lock_waits"] == 0


def test_articles_and_documents_allocate_too(base):
    async def scenario():
        async with client() as s:
            for path in ("/articles/3", "/documents", "/documents/1", "/search?q=Area+002", "/search", "/"):
                async with s.get(base + path) as r:
                    await r.read()
                    assert r.status == 200, path
            return await get_json(s, f"{base}/_demo/counters")

    counters = asyncio.run(scenario())
    assert counters["tempdb_allocations"] == 4  # not the search form without a query, nor the home page


# -- token_cache.cap -----------------------------------------------------------------
def test_token_cache_grows_one_entry_per_page_and_the_cap_bounds_it(base, server):
    cache = server[1][STATE].token_cache

    async def pages(s, n):
        for i in range(n):
            async with s.get(base + ("/articles", "/", "/nope")[i % 3]) as r:
                await r.read()

    async def scenario():
        async with client() as s:
            await pages(s, 150)
            await get_json(s, f"{base}/_demo/knobs")  # admin requests add no token
            uncapped = await get_json(s, f"{base}/_demo/counters")
            await set_knobs(s, base, **{"token_cache.cap": 100})  # trims at once, oldest first
            trimmed = await get_json(s, f"{base}/_demo/counters")
            await pages(s, 60)
            capped = await get_json(s, f"{base}/_demo/counters")
            await set_knobs(s, base, **{"token_cache.cap": 0})
            await pages(s, 30)
            again = await get_json(s, f"{base}/_demo/counters")
            async with s.post(f"{base}/_demo/counters/reset") as r:
                cleared = await r.json()
            return uncapped, trimmed, capped, again, cleared

    uncapped, trimmed, capped, again, cleared = asyncio.run(scenario())
    assert uncapped["requests"] == uncapped["token_cache_entries"] == 150
    assert trimmed["token_cache_entries"] == 100
    assert capped["token_cache_entries"] == 100 and capped["requests"] == 210
    assert again["token_cache_entries"] == 130
    assert cleared["token_cache_entries"] == 0 == len(cache)
    # Small caches are below the memory-pressure threshold: their clean-ups cost nothing.
    assert again["token_cache_cleanup_ms_total"] < 50


def test_cleanup_of_a_large_cache_stalls_pages_and_grows_with_the_cache(base, server):
    cache = server[1][STATE].token_cache

    async def timed_page(s):
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with s.get(base + "/") as r:
            await r.read()
        return loop.time() - started

    async def cleanup_at(s, size):
        """Grow the cache to ``size``, then time the page that runs the next clean-up."""
        on_server_loop(server, cache.issue, size - len(cache))
        before = await get_json(s, f"{base}/_demo/counters")
        await asyncio.sleep(CLEANUP_INTERVAL_SECONDS + 0.05)  # the clean-up is now due
        page = await timed_page(s)
        after = await get_json(s, f"{base}/_demo/counters")
        assert after["token_cache_cleanups"] == before["token_cache_cleanups"] + 1
        return page, after["token_cache_cleanup_ms_total"] - before["token_cache_cleanup_ms_total"]

    async def scenario():
        async with client() as s:
            small = await cleanup_at(s, PRESSURE_ENTRIES - 1_000)
            large = await cleanup_at(s, PRESSURE_ENTRIES + 10_000)
            larger = await cleanup_at(s, PRESSURE_ENTRIES + 60_000)
            return small, large, larger

    (small_page, small_ms), (large_page, large_ms), (larger_page, larger_ms) = asyncio.run(scenario())
    print(f"token cache clean-ups: {small_ms:.1f} ms, {large_ms:.1f} ms, {larger_ms:.1f} ms")
    assert small_ms < 20 and small_page < 0.3
    expected_large = (PRESSURE_ENTRIES + 10_000) * CLEANUP_SECONDS_PER_ENTRY  # 0.55 s
    expected_larger = (PRESSURE_ENTRIES + 60_000) * CLEANUP_SECONDS_PER_ENTRY  # 0.80 s
    assert expected_large * 1000 <= large_ms < expected_large * 1000 * 1.5 + 200
    assert expected_larger * 1000 <= larger_ms < expected_larger * 1000 * 1.5 + 200
    assert large_page >= expected_large and larger_page >= expected_larger  # the page waited for it


def test_a_lower_pressure_with_a_higher_cost_per_entry_stalls_as_long_after_fewer_pages(base, server):
    """The knobs a short soak uses (tests/e2e/soak.py): the stall of 100,000 entries after 20,000."""
    cache = server[1][STATE].token_cache

    async def cleanup_ms_at(s, size):
        on_server_loop(server, cache.issue, size - len(cache))
        before = await get_json(s, f"{base}/_demo/counters")
        await asyncio.sleep(CLEANUP_INTERVAL_SECONDS + 0.05)  # the clean-up is now due
        async with s.get(base + "/") as r:
            await r.read()
        after = await get_json(s, f"{base}/_demo/counters")
        assert after["token_cache_cleanups"] == before["token_cache_cleanups"] + 1
        return after["token_cache_cleanup_ms_total"] - before["token_cache_cleanup_ms_total"]

    async def scenario():
        async with client() as s:
            await s.post(f"{base}/_demo/counters/reset")
            new = await set_knobs(s, base, **{"token_cache.pressure": 20_000, "token_cache.cleanup_us_per_entry": 25})
            assert new["token_cache.pressure"] == 20_000 and new["token_cache.cleanup_us_per_entry"] == 25
            try:
                below = await cleanup_ms_at(s, 19_000)
                above = await cleanup_ms_at(s, 20_500)
            finally:
                await set_knobs(
                    s, base, **{"token_cache.pressure": PRESSURE_ENTRIES, "token_cache.cleanup_us_per_entry": 5}
                )
                await s.post(f"{base}/_demo/counters/reset")
            return below, above

    below, above = asyncio.run(scenario())
    print(f"pressure 20,000 at 25 µs per entry: clean-ups {below:.1f} ms, {above:.1f} ms")
    assert below < 20  # below the (lowered) line a clean-up is free
    expected = 20_500 * 25e-6 * 1000  # 512 ms: at the default 5 µs it would be 102 ms
    assert expected <= above < expected * 1.5 + 200


def test_uncapped_cache_past_the_threshold_cuts_throughput_a_capped_one_does_not(base, server):
    cache = server[1][STATE].token_cache
    users, seconds, think = 20, 3.0, 0.05  # up to 400 pages/s offered
    large = PRESSURE_ENTRIES + 100_000  # each clean-up stalls every page for 1 s

    async def throughput(s):
        latencies = await load(s, f"{base}/", users, seconds, think)
        return len(latencies) / seconds, max(latencies)

    async def scenario():
        async with client() as s:
            await load(s, f"{base}/", 5, 0.3)  # warm up
            # Uncapped, below the threshold: flat; past it: every clean-up stalls all pages.
            on_server_loop(server, cache.issue, PRESSURE_ENTRIES - 30_000 - len(cache))
            steady = await throughput(s)
            on_server_loop(server, cache.issue, large - len(cache))
            before = await get_json(s, f"{base}/_demo/counters")
            degraded = await throughput(s)
            after = await get_json(s, f"{base}/_demo/counters")
            # The same growth, capped at 1,000 entries (-T4618 capped at 1,024).
            await s.post(f"{base}/_demo/counters/reset")
            await set_knobs(s, base, **{"token_cache.cap": 1000})
            on_server_loop(server, cache.issue, large)
            capped = await throughput(s)
            return steady, degraded, capped, before, after, await get_json(s, f"{base}/_demo/counters")

    (steady, _), (degraded, degraded_max), (capped, capped_max), before, after, counters = asyncio.run(scenario())
    stalled = (after["token_cache_cleanup_ms_total"] - before["token_cache_cleanup_ms_total"]) / 1000
    print(
        f"token cache: {steady:.0f} pages/s below the threshold; {degraded:.0f} pages/s past it uncapped "
        f"({stalled:.2f} s of {seconds:.0f} s stalled, slowest page {degraded_max * 1000:.0f} ms); "
        f"{capped:.0f} pages/s capped at 1,000"
    )
    # Each 0.5 s of service is followed by a 1 s clean-up: a third of the throughput
    # (measured: 375 -> 125 pages/s). Capped: no stall, the steady throughput (~375).
    assert stalled >= 0.4 * seconds
    assert degraded_max >= large * CLEANUP_SECONDS_PER_ENTRY
    # the first walking clean-up is stamped when it begins; a reset forgets it
    assert before["token_cache_first_stall_at"] is None
    assert after["token_cache_first_stall_at"] is not None
    assert counters["token_cache_first_stall_at"] is None
    assert degraded < 0.6 * steady, (steady, degraded)
    assert counters["token_cache_entries"] == 1000
    assert counters["token_cache_cleanups"] >= 2
    assert counters["token_cache_cleanup_ms_total"] < 50
    assert capped > 0.75 * steady, (steady, capped)
    assert capped_max < PRESSURE_ENTRIES * CLEANUP_SECONDS_PER_ENTRY


# -- documents.storage ---------------------------------------------------------------
def _bodies_in_db(db) -> dict[int, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, storage FROM documents WHERE body IS NOT NULL"))


def _blob_files(server) -> set[str]:
    return set(os.listdir(server[1][STATE].documents.blob_dir))


async def download(s, base, doc_id):
    async with s.get(f"{base}/documents/{doc_id}") as r:
        assert r.status == 200, doc_id
        return await r.read(), r.headers


def test_seeded_documents_are_listed_and_download_byte_exact(base):
    async def scenario():
        async with client() as s:
            async with s.get(f"{base}/documents") as r:
                assert r.status == 200 and r.content_type == "text/html"
                listing = await r.text()
            for i, (name, size) in enumerate(SEEDED, 1):
                assert f'<a href="/documents/{i}">{name}</a>' in listing
                body, headers = await download(s, base, i)
                assert len(body) == size and body == seed_bytes(i, size)
                assert headers["X-Demo-Storage"] == "database"
                assert headers["Content-Type"] == "application/octet-stream"
                assert name in headers["Content-Disposition"]
            for path in ("/documents/999999", "/documents/abc", "/documents/0"):
                async with s.get(base + path) as r:
                    assert r.status == 404, path
            return await get_json(s, f"{base}/_demo/counters")

    counters = asyncio.run(scenario())
    assert counters["bytes_sent"] > sum(size for _, size in SEEDED)  # downloads are counted


def test_uploads_round_trip_in_both_storages_and_switching_moves_every_document(base, server):
    db = server[2]
    raw = os.urandom(300_000)
    text = b"minutes of the tuning meeting\n" * 1000

    async def upload_raw(s, body, name):
        async with s.post(f"{base}/documents", params={"name": name}, data=body) as r:
            assert r.status == 201, await r.text()
            created = await r.json()
            assert r.headers["Location"] == created["url"] == f"/documents/{created['id']}"
            return created

    async def upload_form(s, body, name):
        form = aiohttp.FormData()
        form.add_field("title", "not a file")
        form.add_field("file", body, filename=name, content_type="text/plain")
        async with s.post(f"{base}/documents", data=form) as r:
            assert r.status == 201, await r.text()
            return await r.json()

    async def scenario():
        async with client() as s:
            a = await upload_raw(s, raw, "raw.bin")
            b = await upload_form(s, text, "minutes.txt")
            assert (a["storage"], a["size"], b["storage"], b["size"]) == ("database", len(raw), "database", len(text))
            ids = [i for i, _ in enumerate(SEEDED, 1)] + [a["id"], b["id"]]
            assert set(_bodies_in_db(db)) >= set(ids)
            assert not _blob_files(server) & {f"{i}.bin" for i in ids}
            assert (await download(s, base, a["id"]))[0] == raw
            body, headers = await download(s, base, b["id"])
            assert body == text and headers["Content-Type"] == "text/plain"

            await set_knobs(s, base, **{"documents.storage": "blob"})
            assert not set(_bodies_in_db(db)) & set(ids)
            assert _blob_files(server) >= {f"{i}.bin" for i in ids}
            c = await upload_raw(s, b"x" * 70_000, "in-blob.bin")
            assert c["storage"] == "blob" and f"{c['id']}.bin" in _blob_files(server)
            for doc_id, expected in [(a["id"], raw), (b["id"], text), (c["id"], b"x" * 70_000), (6, None)]:
                body, headers = await download(s, base, doc_id)
                assert headers["X-Demo-Storage"] == "blob"
                assert body == (expected if expected is not None else seed_bytes(6, SEEDED[5][1]))

            await set_knobs(s, base, **{"documents.storage": "database"})
            assert set(_bodies_in_db(db)) >= set(ids) | {c["id"]}
            assert not any(name.endswith(".bin") for name in _blob_files(server))
            assert (await download(s, base, c["id"]))[0] == b"x" * 70_000
            body, headers = await download(s, base, a["id"])
            assert body == raw and headers["X-Demo-Storage"] == "database"

    asyncio.run(scenario())


def test_large_documents_are_slower_from_the_database(base):
    users, rounds = 3, 5
    big_id, big_size = len(SEEDED), SEEDED[-1][1]
    upload_body = os.urandom(big_size)

    async def downloads(s):
        async def user():
            times = []
            for _ in range(rounds):
                started = asyncio.get_running_loop().time()
                body, _ = await download(s, base, big_id)
                times.append(asyncio.get_running_loop().time() - started)
                assert len(body) == big_size
            return times

        return statistics.mean(t for times in await asyncio.gather(*(user() for _ in range(users))) for t in times)

    async def uploads(s):
        times = []
        for _ in range(3):
            started = asyncio.get_running_loop().time()
            async with s.post(f"{base}/documents", params={"name": "big.bin"}, data=upload_body) as r:
                assert r.status == 201
            times.append(asyncio.get_running_loop().time() - started)
        return statistics.mean(times)

    async def scenario():
        async with client() as s:
            await set_knobs(s, base, **{"tempdb.files": 8})  # keep the allocation queue out of it
            results = {}
            for storage in ("blob", "database"):
                await set_knobs(s, base, **{"documents.storage": storage})
                await download(s, base, big_id)  # warm the file and page caches
                results[storage] = await downloads(s), await uploads(s)
            return results

    results = asyncio.run(scenario())
    (db_down, db_up), (blob_down, blob_up) = results["database"], results["blob"]
    print(
        f"2 MB document, {users} users: download {db_down * 1000:.1f} ms from the database vs "
        f"{blob_down * 1000:.1f} ms from the blob folder; upload {db_up * 1000:.1f} vs {blob_up * 1000:.1f} ms"
    )
    # 256 pages x >= 0.1 ms: at least 26 ms more per transfer (measured: 3-5x slower).
    assert db_down > 1.5 * blob_down, (db_down, blob_down)
    assert db_up > 1.5 * blob_up, (db_up, blob_up)


def test_upload_limits(base, server):
    async def chunks(total):
        sent = 0
        while sent < total:
            n = min(256 * 1024, total - sent)
            sent += n
            yield b"\0" * n

    async def scenario():
        async with client() as s:
            count = len(await asyncio.to_thread(server[1][STATE].documents.listing))
            too_big = b"\0" * (MAX_UPLOAD_BYTES + 1)
            async with s.post(f"{base}/documents", data=too_big) as r:
                assert r.status == 413
            # Without a Content-Length (chunked), the limit applies while reading.
            async with s.post(f"{base}/documents", data=chunks(MAX_UPLOAD_BYTES + 100_000)) as r:
                assert r.status == 413
            with aiohttp.MultipartWriter("form-data") as form:
                form.append("no file here").set_content_disposition("form-data", name="title")
            async with s.post(f"{base}/documents", data=form) as r:
                assert r.status == 400
            assert len(await asyncio.to_thread(server[1][STATE].documents.listing)) == count
            async with s.post(f"{base}/documents", data=b"\1" * MAX_UPLOAD_BYTES) as r:
                assert r.status == 201
                assert (await r.json())["size"] == MAX_UPLOAD_BYTES
            counters = await get_json(s, f"{base}/_demo/counters")
            assert counters["by_status"] == {"201": 1, "400": 1, "413": 2}

    asyncio.run(scenario())


# -- validation and metrics ----------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        {"tempdb.files": 0},
        {"tempdb.files": 17},
        {"tempdb.files": "eight"},
        {"tempdb.files": 2.5},
        {"tempdb.files": True},
        {"token_cache.cap": -1},
        {"token_cache.cap": 1_000_001},
        {"token_cache.cap": None},
        {"documents.storage": "s3"},
        {"documents.storage": 1},
        {"tempdb.files": 8, "token_cache.cap": 1000, "documents.storage": "tape"},
    ],
)
def test_bad_values_of_the_new_knobs_are_rejected_and_change_nothing(base, body):
    async def scenario():
        async with client() as s:
            before = await get_json(s, f"{base}/_demo/knobs")
            async with s.post(f"{base}/_demo/knobs", json=body) as r:
                assert r.status == 400
                assert "error" in await r.json()
            assert await get_json(s, f"{base}/_demo/knobs") == before

    asyncio.run(scenario())


def test_new_counters_in_json_and_metrics(base):
    async def scenario():
        async with client() as s:
            values = await set_knobs(s, base, **{"tempdb.files": "2", "token_cache.cap": "5000"})
            assert values["tempdb.files"] == 2 and values["token_cache.cap"] == 5000
            await load(s, f"{base}/articles/9", 10, 0.3)
            counters = await get_json(s, f"{base}/_demo/counters")
            async with s.get(f"{base}/metrics") as r:
                return counters, await r.text()

    counters, text = asyncio.run(scenario())
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert counters["tempdb_allocations"] == counters["requests"] > 0
    assert int(samples["demo_tempdb_allocations_total"]) == counters["tempdb_allocations"]
    assert int(samples["demo_tempdb_lock_waits_total"]) == counters["tempdb_lock_waits"] > 0
    assert float(samples["demo_tempdb_lock_wait_seconds_total"]) == pytest.approx(
        counters["tempdb_lock_wait_ms_total"] / 1000, abs=1e-5
    )
    assert int(samples["demo_token_cache_entries"]) == counters["token_cache_entries"] == counters["requests"]
    assert int(samples["demo_token_cache_cleanups_total"]) == counters["token_cache_cleanups"]
    assert "demo_token_cache_cleanup_seconds_total" in samples
    assert samples['demo_knob_info{knob="tempdb.files",value="2"}'] == "1"
    assert samples['demo_knob_info{knob="documents.storage",value="database"}'] == "1"
