"""Configuration knobs of the demo target, flipped by tuning through ``/_demo/knobs``.

Each knob is one entry in a registry: its name, how to parse and validate a
value, its default, a description naming the seed story it replays, and an
optional ``apply`` coroutine that makes the change real (building an index,
trimming a cache, moving documents). Knobs without ``apply`` are read by the
middleware and the page handlers on every request. The defaults are the
*untuned* state of each story, so that a tuning change has something to fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

ApplyFn = Callable[[Any, Any], Awaitable[None]]  # (app state, new value)


class KnobError(ValueError):
    """An unknown knob or a value it does not accept (answered with HTTP 400)."""


def on_off(value: Any) -> str:
    if value in ("on", "off"):
        return value
    if isinstance(value, bool):  # accept JSON true/false as a convenience
        return "on" if value else "off"
    raise KnobError('expected "on" or "off"')


def one_of(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value in choices:
            return value
        raise KnobError("expected one of " + ", ".join(f'"{c}"' for c in choices))

    return parse


def int_range(low: int, high: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise KnobError(f"expected an integer from {low} to {high}")
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if not isinstance(value, int) or not low <= value <= high:
            raise KnobError(f"expected an integer from {low} to {high}")
        return value

    return parse


@dataclass(frozen=True)
class Knob:
    name: str
    parse: Callable[[Any], Any]
    default: Any
    description: str
    kind: str  # shown in the schema: "on/off" or "integer 0..60000"
    apply: ApplyFn | None = None


class KnobRegistry:
    """The knobs and their current values for one running app."""

    def __init__(self, knobs: list[Knob], state: Any) -> None:
        self._knobs = {k.name: k for k in knobs}
        self._state = state
        self.values: dict[str, Any] = {k.name: k.default for k in knobs}

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def validate(self, changes: Any) -> dict[str, Any]:
        """Parse every value first, so a bad request changes nothing."""
        if not isinstance(changes, dict):
            raise KnobError("expected a JSON object of knob names to values")
        parsed = {}
        for name, raw in changes.items():
            knob = self._knobs.get(name)
            if knob is None:
                raise KnobError(f"unknown knob {name!r}; known: {sorted(self._knobs)}")
            try:
                parsed[name] = knob.parse(raw)
            except KnobError as exc:
                raise KnobError(f"bad value {raw!r} for knob {name!r}: {exc}") from None
        return parsed

    async def set(self, changes: Any) -> dict[str, Any]:
        for name, value in self.validate(changes).items():
            knob = self._knobs[name]
            if knob.apply is not None:
                await knob.apply(self._state, value)
            self.values[name] = value
        return dict(self.values)

    async def apply_all(self) -> None:
        """Make the starting values real (e.g. drop an index left in a reused db)."""
        await self.set(dict(self.values))

    def schema(self) -> list[dict[str, Any]]:
        return [
            {
                "name": k.name,
                "kind": k.kind,
                "default": k.default,
                "value": self.values[k.name],
                "description": k.description,
            }
            for k in self._knobs.values()
        ]


# -- the knobs ------------------------------------------------------------------
async def _apply_search_index(state: Any, value: str) -> None:
    await asyncio.to_thread(state.workitems.set_index, value == "on")


async def _apply_token_cache_cap(state: Any, value: int) -> None:
    state.token_cache.set_cap(value)


async def _apply_token_cache_pressure(state: Any, value: int) -> None:
    state.token_cache.pressure = value


async def _apply_token_cache_cleanup_cost(state: Any, value: int) -> None:
    state.token_cache.seconds_per_entry = value / 1_000_000


async def _apply_web_garden(state: Any, value: int) -> None:
    state.web_garden.set_processes(value)
    state.counters.web_garden_processes = value


async def _apply_documents_storage(state: Any, value: str) -> None:
    await asyncio.to_thread(state.documents.migrate, value)


KNOBS = [
    Knob(
        "search.index",
        on_off,
        "off",
        "Index ix_work_items_area on the custom field work_items.area searched by "
        "/search. Off: every search scans the whole table. On: index lookup. "
        "Replays the TFS story (20 million work items): field indexes took searches from 11.8 s to 4.0 s.",
        "on/off",
        _apply_search_index,
    ),
    Knob(
        "compression",
        on_off,
        "off",
        "Gzip-compress HTML pages for clients that send Accept-Encoding: gzip. Replays the "
        "SharePoint (MOSS) story: one web server was not compressing its pages on a bandwidth-limited line.",
        "on/off",
    ),
    Knob(
        "latency_ms",
        int_range(0, 60_000),
        0,
        "Extra server-side delay in milliseconds added to every page (not /_demo/).",
        "integer 0..60000",
    ),
    Knob(
        "errors_pct",
        int_range(0, 100),
        0,
        "Share of pages (not /_demo/, not /metrics) answered 503 Service Unavailable without being served, "
        "spread evenly (at 25 every fourth page; at 100 every page): a target that breaks, for stop criteria.",
        "integer 0..100",
    ),
    Knob(
        "tempdb.files",
        int_range(1, 16),
        1,
        "Number of shared allocation locks ('tempdb files'). Pages that do database work (/search, "
        "/articles/{id}, /documents) each hold one, chosen round-robin, for 5 ms. 1: they all queue "
        "behind one lock (at most 200 such pages/s). 8: the queue mostly disappears. Replays the "
        "SharePoint (MOSS) story: tempdb allocation contention (KB 328551), fixed with one tempdb "
        "file per processor and -T1118.",
        "integer 1..16",
    ),
    Knob(
        "token_cache.cap",
        int_range(0, 1_000_000),
        0,
        "Most entries kept in the security-token cache (oldest dropped first); 0: no cap. Every page "
        "adds one entry; past 100,000 entries each clean-up (every 0.5 s) stalls every page for 5 µs "
        "per entry, so an uncapped cache halves throughput after 100,000 pages. Replays the SharePoint "
        "(MOSS) story: SQL Server's TokenAndPermUserStore grew until its clean-up stalled queries "
        "(KB 927396), capped with -T4618. POST /_demo/counters/reset empties the cache.",
        "integer 0..1000000 (0 = no cap)",
        _apply_token_cache_cap,
    ),
    Knob(
        "token_cache.pressure",
        int_range(1_000, 1_000_000),
        100_000,
        "Entries past which each clean-up of the security-token cache walks the whole cache and stalls "
        "(see token_cache.cap). A fast machine reaches 100,000 pages in a few seconds: raise this so that "
        "a soak's stall comes after its steady state.",
        "integer 1000..1000000",
        _apply_token_cache_pressure,
    ),
    Knob(
        "token_cache.cleanup_us_per_entry",
        int_range(1, 1_000),
        5,
        "Microseconds each clean-up of the security-token cache spends per entry once past "
        "token_cache.pressure (awaited, no CPU burnt). With a lower pressure, raise this to keep the stall "
        "as long: 30,000 entries at 20 µs stall for 0.6 s, like 100,000 at the default 5 µs.",
        "integer 1..1000",
        _apply_token_cache_cleanup_cost,
    ),
    Knob(
        "documents.storage",
        one_of("database", "blob"),
        "database",
        "Where document bodies live (/documents): 'database' (SQLite rows, read and written in 8 KB "
        "pages, each with a modelled cost: large documents are markedly slower) or 'blob' (files in a "
        "folder next to the database). Switching moves every document. Replays the SQL Server Remote "
        "BLOB Storage (RBS) with SharePoint 2010 story.",
        "database/blob",
        _apply_documents_storage,
    ),
    Knob(
        "web_garden.processes",
        int_range(1, 16),
        1,
        "Worker processes serving /workitems/{id} (simulated: a request holds one for 10 ms while it "
        "waits on the back end, using no CPU). 1: at most ~100 such pages/s however many users, while "
        "the CPU stays low (a software bottleneck); N: N times as many. Replays the TFS story: a web "
        "garden sized to the cores (IIS maxProcesses = cores - 1).",
        "integer 1..16",
        _apply_web_garden,
    ),
]
