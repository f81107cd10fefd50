"""A security-token cache that grows until its clean-up stalls every page, unless capped.

This imitates the seed story of the SharePoint (MOSS) site that degraded after
about 80 minutes at load (KB 927396): SQL Server's TokenAndPermUserStore cache
gained entries with every dynamic query and never shrank; once it was large,
each clean-up walked the whole cache while holding the cache's single lock, and
queries piled up behind it. Throughput suddenly dropped by 30-50 % and then
oscillated. Freeing the cache restored performance at once, until it grew
again; the lasting fix was ``-T4618``, which caps the number of entries.

Here every page request issues one token (its key is a sequence number, so the
growth depends only on the number of requests, never on wall time, and a test
that sends N requests after a reset finds exactly N entries) while holding the
cache's asyncio lock. Tokens stay valid for the life of the process, so a
clean-up frees nothing: only the ``token_cache.cap`` knob (oldest first) or a
reset (``POST /_demo/counters/reset``, like ``DBCC FREESYSTEMCACHE``) shrinks the
cache.

A clean-up runs at the first page request that comes ``CLEANUP_INTERVAL_SECONDS``
after the previous clean-up ended, with the lock held, so every page request
waits for it. Below ``PRESSURE_ENTRIES`` entries it only checks the size and
costs nothing. Above, the host is "under memory pressure" and the clean-up
walks every entry, modelled as ``CLEANUP_SECONDS_PER_ENTRY`` of awaited time per
entry (no CPU is burnt, so the stall is the same on any machine). The
constants give:

* a flat steady state until the cache passes 100,000 entries, that is until
  100,000 page requests since the last reset (25 s at 4,000 pages/s, the rate
  20 users without think time get from ``/`` on a 2-core machine);
* then a sudden drop: each clean-up stalls every page for 0.5 s (and more as
  the cache keeps growing) after every 0.5 s of service, so throughput falls
  by half or more at once and stays down, oscillating with the clean-ups
  (measured with 20 users on ``/``: about 3,000 pages/s for 33 s, then 500 to
  1,500 pages/s for the rest of a 90 s run);
* with a cap at or below 100,000 (1,024 in the story) clean-ups stay free and
  throughput stays flat; a cap above it only postpones the stall.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from demo.counters import Counters

PRESSURE_ENTRIES = 100_000
"""Above this many entries each clean-up walks the whole cache (the default of ``token_cache.pressure``)."""
CLEANUP_SECONDS_PER_ENTRY = 5e-6
"""Modelled cost of walking one entry: 0.5 s for 100,000 entries (the default of ``token_cache.cleanup_us_per_entry``).

A lower ``token_cache.pressure`` with a higher cost per entry gives the same stall after fewer pages
(30,000 entries at 20 µs: 0.6 s), so a test's soak can be short."""
CLEANUP_INTERVAL_SECONDS = 0.5
"""Time from the end of one clean-up to the next (triggered by a page request)."""


class TokenCache:
    """Tokens issued by page requests, oldest first, with a lock and a clean-up."""

    def __init__(self, counters: Counters) -> None:
        self._counters = counters
        self._entries: dict[int, int] = {}
        self._oldest = 1  # tokens are numbered 1, 2, ... and evicted in that order
        self._issued = 0
        self.cap = 0  # 0: no cap
        self.pressure = PRESSURE_ENTRIES  # the knob token_cache.pressure
        self.seconds_per_entry = CLEANUP_SECONDS_PER_ENTRY  # the knob token_cache.cleanup_us_per_entry
        self.lock = asyncio.Lock()
        self._last_cleanup_end = float("-inf")

    def __len__(self) -> int:
        return len(self._entries)

    def issue(self, count: int = 1) -> None:
        """Add ``count`` new tokens, evicting the oldest beyond the cap."""
        entries = self._entries
        for _ in range(count):
            self._issued += 1
            entries[self._issued] = self._issued
        self._trim()

    def set_cap(self, cap: int) -> None:
        self.cap = cap
        self._trim()

    def clear(self) -> None:
        self._entries.clear()
        self._oldest = self._issued + 1
        self._counters.token_cache_entries = 0

    def _trim(self) -> None:
        entries = self._entries
        if self.cap:
            while len(entries) > self.cap:
                del entries[self._oldest]
                self._oldest += 1
        self._counters.token_cache_entries = len(entries)

    async def on_page_request(self) -> None:
        """Issue this request's token; run the clean-up first if one is due.

        Taking a free asyncio lock does not yield to the loop, so a page only
        waits here while a clean-up holds the lock.
        """
        async with self.lock:
            if time.monotonic() - self._last_cleanup_end >= CLEANUP_INTERVAL_SECONDS:
                await self._cleanup()
            self.issue()

    async def _cleanup(self) -> None:
        started = time.perf_counter()
        size = len(self._entries)
        if size > self.pressure:
            if self._counters.token_cache_first_stall_at is None:
                self._counters.token_cache_first_stall_at = time.time()
            await asyncio.sleep(size * self.seconds_per_entry)
        self._counters.token_cache_cleanups += 1
        self._counters.token_cache_cleanup_s += time.perf_counter() - started
        self._last_cleanup_end = time.monotonic()
