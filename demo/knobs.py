"""Configuration knobs of the demo target, flipped by tuning through ``/_demo/knobs``.

Each knob is one entry in a registry: its name, how to parse and validate a
value, its default, a description, and an optional ``apply`` coroutine that
makes the change real (for example building an index). Later knobs (lock
contention, a growing token cache, blob storage) are one more entry each.
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


KNOBS = [
    Knob(
        "search.index",
        on_off,
        "off",
        "Index ix_work_items_area on the custom field work_items.area searched by "
        "/search. Off: every search scans the whole table. On: index lookup.",
        "on/off",
        _apply_search_index,
    ),
    Knob(
        "compression",
        on_off,
        "off",
        "Gzip-compress page responses for clients that send Accept-Encoding: gzip.",
        "on/off",
    ),
    Knob(
        "latency_ms",
        int_range(0, 60_000),
        0,
        "Extra server-side delay in milliseconds added to every page (not /_demo/).",
        "integer 0..60000",
    ),
]
