"""Bottleneck hints: what the servers' figures say about where the limit was, in plain words.

Plain functions over plain numbers (no Django), like ``portal/stats/analysis.py``. Each
hint carries the evidence that triggered it, and each rule is as narrow as its story, so
that a healthy run gets no hint at all:

* **software bottleneck** (the SharePoint finding): throughput stopped growing (the knee)
  while no server's CPU passed 70 % and the generator was healthy;
* **hardware bound**: a server's CPU above 90 % at the knee;
* **growing series** (the token-cache story): throughput fell while a series grew steadily;
* **generator limit**: the load generator was saturated, so the figures describe it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from portal.common import plural
from portal.stats.analysis import KNEE_WORDS

SOFTWARE_CPU_MAX_PCT = 70.0
HARDWARE_CPU_MIN_PCT = 90.0
FALL_MIN = 0.2  # throughput's last third at least 20 % below its first third
GROWTH_MIN = 1.5  # a series' last third at least 1.5 × its first third …
STEADY_MIN = 0.6  # … and rising in at least 60 % more of its steps than it falls (Kendall-like)


@dataclass(frozen=True)
class Hint:
    kind: str  # software | hardware | growing | generator
    text: str
    evidence: list[str] = field(default_factory=list)


def _pct(value: float) -> str:
    return f"{value:.0f} %"


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def knee_hints(
    *,
    knee_users: int | None,
    level_users: list[int],
    cpu_by_server: dict[str, list[float | None]],
    generator_saturated: str | None,
) -> list[Hint]:
    """Hints at the knee of a steps run: software bottleneck or hardware bound.

    ``cpu_by_server`` maps a server's name to its mean CPU % in each level's window (in the
    order of ``level_users``; None where it was not measured). The knee level and every
    level above it (the plateau) are read: a software bottleneck needs all of them below
    70 % on every server; a server above 90 % at the knee is hardware bound.
    """
    if knee_users is None or knee_users not in level_users or not cpu_by_server:
        return []
    at = level_users.index(knee_users)
    plateau = range(at, len(level_users))
    hints = []
    hot = {
        name: cpus[at]
        for name, cpus in cpu_by_server.items()
        if cpus[at] is not None and cpus[at] > HARDWARE_CPU_MIN_PCT
    }
    for name, cpu in hot.items():
        hints.append(
            Hint(
                "hardware",
                f"Hardware bound on {name}: its CPU was {_pct(cpu)} busy at the knee ({knee_users} users). "
                "More or faster processors on it should move the knee; tuning elsewhere will not.",
                [f"{name} CPU {_pct(cpu)} at {knee_users} users (above {_pct(HARDWARE_CPU_MIN_PCT)})"],
            )
        )
    measured = {
        name: [cpus[i] for i in plateau if cpus[i] is not None]
        for name, cpus in cpu_by_server.items()
        if any(cpus[i] is not None for i in plateau)
    }
    if not hot and measured and not generator_saturated:
        peak = {name: max(values) for name, values in measured.items()}
        if all(v <= SOFTWARE_CPU_MAX_PCT for v in peak.values()):
            evidence = [f"after {plural(knee_users, 'user')} (the knee) throughput {KNEE_WORDS}"]
            evidence += [
                f"{name} CPU at most {_pct(v)} from {plural(knee_users, 'user')} up" for name, v in peak.items()
            ]
            evidence.append("the load generator was healthy")
            hints.append(
                Hint(
                    "software",
                    f"A software bottleneck: throughput {KNEE_WORDS} while no server's CPU passed "
                    f"{_pct(SOFTWARE_CPU_MAX_PCT)}. Look at locks, pools, queues and single-threaded stages "
                    "(worker processes, connection pools, lock waits), not at hardware.",
                    evidence,
                )
            )
    return hints


def _thirds(values: list[float]) -> tuple[float, float]:
    n = max(1, len(values) // 3)
    return statistics.fmean(values[:n]), statistics.fmean(values[-n:])


def _steadiness(values: list[float]) -> float:
    """(rising steps − falling steps) / steps: 1 for a series that only grows."""
    ups = sum(1 for a, b in zip(values, values[1:], strict=False) if b > a)
    downs = sum(1 for a, b in zip(values, values[1:], strict=False) if b < a)
    return (ups - downs) / max(1, len(values) - 1)


def growing_series_hints(
    *,
    throughput: list[float],
    series: dict[str, list[float | None]],
    min_points: int = 6,
) -> list[Hint]:
    """Series that grew steadily while throughput fell, over one measured window.

    ``throughput`` is pages/s at each scrape of the window; ``series`` maps a series'
    display name to its values at the same scrapes. Throughput must have fallen by
    ``FALL_MIN`` (last third against first third); a series must have grown by
    ``GROWTH_MIN`` the same way and risen in most of its steps.
    """
    if len(throughput) < min_points:
        return []
    t_first, t_last = _thirds(throughput)
    if t_first <= 0 or t_last > (1 - FALL_MIN) * t_first:
        return []
    hints = []
    for name, raw in series.items():
        values = [v for v in raw if v is not None]
        if len(values) < min_points:
            continue
        first, last = _thirds(values)
        if last <= 0 or last < GROWTH_MIN * max(first, 0) or _steadiness(values) < STEADY_MIN:
            continue
        hints.append(
            Hint(
                "growing",
                f"{name} grew from {_num(values[0])} to {_num(values[-1])} while throughput fell: "
                "a leak or an unbounded cache.",
                [
                    f"pages/s fell from {_num(t_first)} to {_num(t_last)} (first → last third of the window)",
                    f"{name} {_num(first)} → {_num(last)}, rising in {_pct(100 * (1 + _steadiness(values)) / 2)} "
                    "of its steps",
                ],
            )
        )
    return hints


def generator_hint(saturated: str | None) -> list[Hint]:
    """The load generator was the limit: its figures describe the generator, not the servers."""
    if not saturated:
        return []
    return [
        Hint(
            "generator",
            "The load generator was the limit, not the servers: add workers or lower the users per shard "
            "before reading the servers' figures as the system's.",
            [saturated],
        )
    ]
