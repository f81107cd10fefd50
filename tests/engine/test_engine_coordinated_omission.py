"""No coordinated omission: in pacing and arrival_rate, a stalled server cannot hide its stalls.

A closed-model user that waits 1 s for a stalled response simply sends fewer
requests during the stall, so the stall is one sample among thousands and
vanishes from the percentiles. Arrival-rate and pacing runs keep the schedule:
every iteration that was due during the stall is timed from when it was due.
"""

import asyncio
import threading
import time

from aiohttp import web

from workers.engine.http import Response
from workers.engine.plan import Plan
from workers.engine.runner import run, run_sync

STALL_PERIOD_S = 10.0
STALL_S = 1.0


class StallingServer:
    """Loopback HTTP server whose every response waits while wall time is in [origin + 10k, origin + 10k + 1)."""

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self.served = 0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="stalling-target", daemon=True)
        self._thread.start()
        if not ready.wait(5):
            raise RuntimeError("the stalling target did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._page)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _page(self, request: web.Request) -> web.Response:
        phase = (time.time() - self.origin) % STALL_PERIOD_S
        if phase < STALL_S:
            await asyncio.sleep(STALL_S - phase)  # until the stall ends, like a server stuck in a GC pause
        self.served += 1
        return web.Response(text="ok")

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def plan(url, profile, think_time=0.0):
    return Plan.from_dict(
        {
            "base_url": url,
            "test_cases": [{"name": "A", "steps": [{"name": "Home", "path": "/", "think_time": think_time}]}],
            "profile": profile,
            "request_timeout": 5.0,
        }
    )


def test_a_stall_shows_in_open_and_paced_runs_but_hides_in_a_closed_one():
    # given: a target stalling 1 s every 10 s, the first stall 3 s into the run; three runs at
    # about 50 pages/s each, side by side: an arrival rate, a paced one and a closed one
    start_at = time.time() + 0.5
    server = StallingServer(origin=start_at + 3.0)
    hold = 11.0
    try:
        runs = {
            "arrival_rate": plan(server.url, {"kind": "arrival_rate", "rate": 50, "hold": hold, "max_users": 100}),
            "pacing": plan(server.url, {"kind": "pacing", "users": 5, "pacing": 0.1, "hold": hold}),
            "closed": plan(server.url, {"kind": "constant", "users": 2, "hold": hold}, think_time=0.04),
        }

        async def together():
            return await asyncio.gather(*(run(p, sink=None, start_at=start_at) for p in runs.values()))

        totals = dict(zip(runs, asyncio.run(together()), strict=True))
    finally:
        server.stop()

    p99 = {name: t.histogram.percentile(99) / 1000 for name, t in totals.items()}
    print(
        "p99 ms: "
        + ", ".join(
            f"{name} {p99[name]:.0f} (n={t.histogram.count}, max {t.histogram.max / 1000:.0f})"
            for name, t in totals.items()
        )
    )
    # then: every iteration due during the stall waited for it, and says so
    assert totals["arrival_rate"].iterations_started == 550
    assert totals["arrival_rate"].iterations_dropped == 0
    assert p99["arrival_rate"] >= 500
    assert p99["pacing"] >= 500
    assert totals["arrival_rate"].histogram.max / 1000 < 1000 + 300  # no more than the stall, plus noise
    # while the closed model, slowed down by the stall itself, hides it below its 99th percentile
    assert p99["closed"] < 250
    assert p99["arrival_rate"] > 3 * p99["closed"]
    assert totals["closed"].histogram.max / 1000 >= 500  # the stall happened to it too: it just hid it
    assert all(t.errors == 0 for t in totals.values())


class OneStall:
    """A fake client: 2 ms per request, but its third request takes 1 s."""

    def __init__(self):
        self.calls = 0

    async def request(self, method, url, headers, body, timeout):
        self.calls += 1
        delay = 1.0 if self.calls == 3 else 0.002
        await asyncio.sleep(delay)
        return Response(200, {}, b"ok", 2, 0, delay, delay)

    async def close(self):
        pass


def test_pacing_times_each_late_iteration_from_when_it_was_due():
    # given: one user paced at 10 iterations/s whose third request takes 1 s
    p = plan("http://127.0.0.1:9", {"kind": "pacing", "users": 1, "pacing": 0.1, "hold": 2.0})

    totals = run_sync(p, sink=None, client_factory=OneStall)

    # then: the iterations due during that second start back to back afterwards, each timed from its due time
    label = totals.labels["A: Home"]
    on_the_wire = label.ttfb_histogram  # what the requests took once sent: only one was slow
    assert on_the_wire.count == label.histogram.count == 20
    assert on_the_wire.percentile(90) / 1000 < 50
    # the slow one plus those due at 0.3 ... 1.1 s, late by 0.9 ... 0.1 s: at least 9 of the 20 samples
    assert label.histogram.percentile(60) / 1000 > 100
    assert label.histogram.percentile(40) / 1000 < 50
    assert label.histogram.max / 1000 >= 950
    assert totals.iterations_dropped == 0  # it caught up before the end
