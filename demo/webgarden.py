"""A web garden: the number of worker processes behind the work-item page (a demo, simulated).

This imitates the TFS seed story: the application tier's web services ran in one IIS
worker process, and a request spent most of its time inside that process waiting on a
single-threaded stage (a back-end call, a serialised section), not on CPU. Throughput
stopped growing with users while every server's CPU stayed low; the fix was a web
garden sized to the cores (``maxProcesses`` = cores - 1).

The demo target is one asyncio process, so the processes are simulated honestly in the
one way that matters to the story: ``/workitems/{id}`` must get one of
``web_garden.processes`` slots (an asyncio semaphore) and holds it for
``STAGE_SECONDS`` while it "waits on the back end" (an ``await asyncio.sleep``: no
CPU). One process serves at most ``1 / STAGE_SECONDS`` (100) such pages per second,
whatever the users, at a few per cent CPU; N processes serve N times as many, until
the CPU becomes the limit. Other pages are not affected, so the other stories keep
their figures.

Why 10 ms: far enough below the ~2,000 pages/s the demo serves on a 2-core machine
that the plateau of one process (100/s) is clearly not the CPU, and long enough that
a Python load generator on the same machine reaches it with a few users.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from demo.counters import Counters

MAX_PROCESSES = 16
STAGE_SECONDS = 0.010
"""How long one work-item request holds its worker process (a constant, not a knob)."""


class WebGarden:
    """``processes`` slots for the work-item page's single-threaded stage."""

    def __init__(self, counters: Counters) -> None:
        self._counters = counters
        self._processes = 1
        self._slots = asyncio.Semaphore(1)

    def set_processes(self, processes: int) -> None:
        # A new semaphore: requests holding a slot of the old one finish on it, new ones use the new size.
        self._processes = processes
        self._slots = asyncio.Semaphore(processes)

    async def serve(self) -> None:
        """Queue for a worker process, then hold it for the stage."""
        counters = self._counters
        slots = self._slots
        started = time.perf_counter()
        counters.web_garden_queued += 1
        try:
            await slots.acquire()
        finally:
            counters.web_garden_queued -= 1
        counters.web_garden_queue_wait_s += time.perf_counter() - started
        counters.web_garden_busy += 1
        try:
            await asyncio.sleep(STAGE_SECONDS)
        finally:
            counters.web_garden_busy -= 1
            slots.release()
