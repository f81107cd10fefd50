"""Contention on a shared allocation structure: one "tempdb file" or several.

This imitates the seed story of the SharePoint (MOSS) site whose SQL Server
spent its time waiting on tempdb allocation pages (KB 328551): every query that
needs temporary space takes the allocation latch of one tempdb data file, for a
short time, and with a single file every concurrent query queues behind the
same latch. The fix was one file per processor with round-robin allocation
(``-T1118``).

Here every page that does "database work" (``/search``, ``/articles/{id}``,
the ``/documents`` pages) allocates once before it works: it takes one of the
``tempdb.files`` asyncio locks, chosen round-robin, and holds it for
``ALLOCATION_SECONDS``. The hold is an ``await asyncio.sleep`` so that it costs
no CPU and behaves the same on a busy or an idle machine; only its ordering
matters. With one file the pages that allocate cannot exceed
``1 / ALLOCATION_SECONDS`` per second (200/s) and, with N users waiting, each
page queues for about ``N * ALLOCATION_SECONDS`` (100 ms for 20 users). With 8
files the ceiling is 1,600/s, above what the demo target serves for
``/search`` on a 2-core machine, so the queue mostly disappears.

Why 5 ms: the allocation must be long enough that one file, not the CPU, is
the bottleneck for an indexed search (about 1,700 pages/s with 20 users on a
2-core machine, so the ceiling must sit far below that), and short enough that
a single allocation is invisible to one user. With 2 ms the single-file
ceiling (500/s) is too close to what a Python client in the same machine can
drive, and the effect drowns in noise.

Every allocation counts; one that found its lock taken also counts as a wait,
with the time it waited (``Counters.tempdb_*``, shown at ``/_demo/counters``
and ``/metrics``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from demo.counters import Counters

MAX_FILES = 16
ALLOCATION_SECONDS = 0.005
"""How long one allocation holds its file's lock (a constant, not a knob)."""
WAIT_MIN_SECONDS = 20e-6


class TempDb:
    """``MAX_FILES`` allocation locks, of which the first ``files`` are in use."""

    def __init__(self, counters: Counters) -> None:
        self._counters = counters
        self._locks = [asyncio.Lock() for _ in range(MAX_FILES)]
        self._next = 0

    async def allocate(self, files: int) -> None:
        """Allocate from one of the first ``files`` files, round-robin.

        Queues for that file's lock, holds it ``ALLOCATION_SECONDS`` and releases
        it; the caller then does its work without any lock.
        """
        lock = self._locks[self._next % files]
        self._next += 1
        counters = self._counters
        counters.tempdb_allocations += 1
        started = time.perf_counter()
        contended = lock.locked()
        await lock.acquire()  # a free lock is taken without yielding to the loop
        waited = time.perf_counter() - started
        # A released lock may still have a woken waiter ahead of us, so "locked()"
        # alone misses some waits; a real wait always lasts far more than 20 µs.
        if contended or waited > WAIT_MIN_SECONDS:
            counters.tempdb_lock_waits += 1
            counters.tempdb_lock_wait_s += waited
        try:
            await asyncio.sleep(ALLOCATION_SECONDS)
        finally:
            lock.release()
