"""The demo's ``web_garden.processes`` knob: one process caps /workitems at low CPU, more scale it.

Same harness as ``test_demo_seed_knobs.py`` (one server in a background thread, bounded
load loops). The cap of one process is 1 / STAGE_SECONDS = 100 pages/s; the asserted
factors are far below the measured ones so that a busy machine does not make them flaky.
"""

from __future__ import annotations

import asyncio
import resource

import pytest

from demo.webgarden import STAGE_SECONDS
from tests.demo.test_demo_app import client, get_json, set_knobs
from tests.demo.test_demo_seed_knobs import (
    load,
    server,  # noqa: F401  (the module's demo server fixture)
)


def _throughput(base: str, users: int, seconds: float) -> tuple[float, float]:
    """(pages/s, CPU seconds per page of this process, which runs the server and the client)."""

    async def scenario():
        async with client() as s:
            return await load(s, f"{base}/workitems/7", users, seconds)

    before = resource.getrusage(resource.RUSAGE_SELF)
    latencies = asyncio.run(scenario())
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return len(latencies) / seconds, cpu / max(1, len(latencies))


def test_one_process_plateaus_at_low_cpu_and_more_processes_scale(base):
    one, cpu_per_page = _throughput(base, users=20, seconds=2.0)
    ceiling = 1 / STAGE_SECONDS
    # 20 users without think time, yet one process serves no more than its stage allows.
    assert one <= ceiling * 1.1, one
    assert one >= ceiling * 0.5, one
    # The plateau is not the CPU: at this rate the server and the client together use well under a core.
    assert one * cpu_per_page < 0.7, (one, cpu_per_page)

    async def four():
        async with client() as s:
            values = await set_knobs(s, base, **{"web_garden.processes": 4})
            assert values["web_garden.processes"] == 4
            return await get_json(s, f"{base}/_demo/counters")

    assert asyncio.run(four())["web_garden_processes"] == 4
    more, _ = _throughput(base, users=20, seconds=2.0)
    assert more > one * 2.2, (one, more)


def test_other_pages_do_not_wait_for_the_web_garden(base):
    async def scenario():
        async with client() as s:
            return await load(s, f"{base}/", 10, 1.0)

    assert len(asyncio.run(scenario())) > 1.5 / STAGE_SECONDS  # more than one process could serve


@pytest.mark.parametrize("value", [0, 17, "two"])
def test_bad_process_counts_are_refused(base, value):
    async def scenario():
        async with client() as s, s.post(f"{base}/_demo/knobs", json={"web_garden.processes": value}) as r:
            return r.status, await get_json(s, f"{base}/_demo/knobs")

    status, knobs = asyncio.run(scenario())
    assert status == 400
    assert knobs["web_garden.processes"] == 1


def test_metrics_show_the_web_garden(base):
    async def scenario():
        async with client() as s:
            await set_knobs(s, base, **{"web_garden.processes": 3})
            async with s.get(f"{base}/metrics") as r:
                return await r.text()

    text = asyncio.run(scenario())
    assert "demo_web_garden_processes 3" in text
    assert "# TYPE demo_web_garden_queue_wait_seconds_total counter" in text
