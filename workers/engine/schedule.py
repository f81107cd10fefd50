"""Load profiles as pure functions of time: when each virtual user runs, when each arrival is due.

Each kind's shape is its class in profiles.py; these functions ask the profile's kind.

Every time here is in seconds after the run's common start. Nothing here does
I/O or looks at a clock: the runner, the portal's preview chart and the tests
all read the same functions.

**Closed model** (``constant``, ``ramp``, ``steps``, ``pacing``). Users are
numbered ``k = 0 .. users-1`` across the whole run. A shard runs a subset of
the numbers (e.g. ``k % n_shards == shard_no``), so the ramps of several shards
interleave and add up to the plan's ramp; no shard needs to know about the
others. Each user has one window (several for ``steps``) in which it starts
steps:

- **Ramp-up**: user k starts at ``ramp_up * k / users``; user 0 starts at once.
- **Hold**: all users are active from ``ramp_up`` to ``ramp_up + hold`` (the
  measurement window).
- **Ramp-down**: user k stops starting new steps at
  ``ramp_up + hold + ramp_down * (users - 1 - k) / users``. The last user to
  start is the first to stop (the most recent arrivals leave first), and the
  active count falls by one every ``ramp_down / users`` seconds, linearly to 0
  by ``ramp_up + hold + ramp_down``. With ``ramp_down == 0`` everybody stops at
  the end of the hold.
- ``constant`` is a ramp without ramps; ``pacing`` has the ramp's windows (the
  pacing only changes what a user does inside its window).
- ``steps``: level i begins when level i-1 has ramped down and its ``quiet``
  seconds have passed; inside a level, its users ramp as above (relative to the
  level's start, with the level's ``users``). User k takes part in every level
  with more than k users, one window per level. The run ends when the last
  level has ramped down (its ``quiet`` is not waited for).

"Stops" means stops *starting* steps: a step in flight is finished, so the last
requests complete a little after these times.

**Open model** (``arrival_rate``). Iterations are due at a rate that ramps
linearly from ``rate_start`` to ``rate`` over ``ramp_up``, then stays at
``rate`` for ``hold``. Arrival j (``j = 0, 1, ...``) is due at the exact time
when the integral of the rate reaches j: deterministic spacing, no random
(Poisson) gaps, so the count over any period is the planned one to within one
arrival. Arrival 0 is due at 0 (when ``rate_start`` > 0, or at once anyway).
A shard takes the arrivals with ``j % shard_count == shard_no``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from .profiles import KINDS, ProfileKind
from .profiles import _ramp_active as _ramp_active
from .profiles import _ramp_window as _ramp_window
from .profiles import level_starts as level_starts


class LevelLike(Protocol):
    users: int
    ramp_up: float
    hold: float
    ramp_down: float
    quiet: float


class ProfileLike(Protocol):
    """What these functions read; ``plan.Profile`` has it all. Missing ``kind`` means ``ramp``."""

    users: int
    ramp_up: float
    hold: float
    ramp_down: float


CLOSED_KINDS = tuple(name for name, kind in KINDS.items() if not kind.open_model)


def kind_of(profile: Any) -> str:
    return getattr(profile, "kind", "ramp") or "ramp"


# -- closed model: user windows ------------------------------------------------------


def user_windows(k: int, profile: Any) -> list[tuple[float, float]]:
    """Every (start, stop) window of user ``k``: one, or one per level it takes part in for ``steps``."""
    kind = _kind(profile)
    if kind.open_model:
        return kind.user_windows(k, profile)  # raises: its users serve arrivals
    n = profile.users
    if not 0 <= k < n:
        raise ValueError(f"user number {k} is outside 0..{n - 1}")
    return kind.user_windows(k, profile)


def user_window(k: int, profile: Any) -> tuple[float, float]:
    """(start, stop) of user ``k`` for a single-window profile (constant, ramp, pacing): the first window."""
    return user_windows(k, profile)[0]


def active_users_at(t: float, profile: Any, user_ids: Iterable[int] | None = None) -> int:
    """How many of ``user_ids`` (default: all) are inside one of their windows at time ``t`` (start <= t < stop)."""
    if user_ids is None:
        return users_at(t, profile) or 0
    active = 0
    for k in user_ids:
        if any(start <= t < stop for start, stop in user_windows(k, profile)):
            active += 1
    return active


def users_at(t: float, profile: Any) -> int | None:
    """Users the plan has active at ``t`` for closed kinds; None for ``arrival_rate`` (it depends on the target)."""
    return _kind(profile).users_at(t, profile)


def _kind(profile: Any) -> ProfileKind:
    return KINDS[kind_of(profile)]


# -- open model: arrivals ---------------------------------------------------------------


def rate_at(t: float, profile: Any) -> float | None:
    """Iterations per second the plan starts at ``t``: the arrival rate, or users / pacing; None otherwise.

    For ``constant``, ``ramp`` and ``steps`` the rate follows the target's
    response times, so the plan does not set one.
    """
    return _kind(profile).rate_at(t, profile)


def arrivals_until(t: float, profile: Any) -> float:
    """The integral of the arrival rate from 0 to ``t``: how many arrivals are due before ``t`` (fractional)."""
    ramp_up, hold = profile.ramp_up, profile.hold
    r0, r1 = profile.rate_start, profile.rate
    t = min(max(t, 0.0), ramp_up + hold)
    if t <= ramp_up:
        return r0 * t + (r1 - r0) * t * t / (2 * ramp_up) if ramp_up > 0 else 0.0
    return (r0 + r1) * ramp_up / 2 + r1 * (t - ramp_up)


def arrival_time(j: int, profile: Any) -> float:
    """When arrival ``j`` is due: the t with ``arrivals_until(t) == j`` (may be >= the end: then it never comes)."""
    if j <= 0:
        return 0.0
    ramp_up = profile.ramp_up
    r0, r1 = profile.rate_start, profile.rate
    in_ramp = (r0 + r1) * ramp_up / 2
    if j < in_ramp:
        a = (r1 - r0) / ramp_up
        # a/2 t^2 + r0 t = j, in the form that stays exact when a is 0 or r0 is 0
        return 2 * j / (r0 + math.sqrt(max(r0 * r0 + 2 * a * j, 0.0)))
    return ramp_up + (j - in_ramp) / r1


def arrival_count(profile: Any) -> int:
    """How many arrivals the whole profile starts (before ``ramp_up + hold``)."""
    end = profile.ramp_up + profile.hold
    n = max(0, math.ceil(arrivals_until(end, profile)) - 1)
    # settle float rounding at the boundary with the function the runner uses
    while arrival_time(n, profile) < end:
        n += 1
    while n > 0 and arrival_time(n - 1, profile) >= end:
        n -= 1
    return n


def arrivals(profile: Any, shard: tuple[int, int] | None = None) -> Iterator[tuple[int, float]]:
    """(j, due time) of every arrival of ``shard`` = (shard_no, shard_count) (default: all), in order; lazy."""
    no, count = shard or (0, 1)
    end = profile.ramp_up + profile.hold
    j = no
    while True:
        t = arrival_time(j, profile)
        if t >= end:
            return
        yield j, t
        j += count


# -- the whole profile -------------------------------------------------------------------


def total_duration(profile: Any) -> float:
    """Seconds from the run's start until the last user stops starting steps (or the last arrival is due)."""
    return _kind(profile).duration(profile)


def measurement_windows(profile: Any) -> list[tuple[float, float, str]]:
    """The parts that count for summaries and verdicts: each level's hold for ``steps``, else the hold."""
    return _kind(profile).windows(profile)


def whole_seconds(start: float, end: float) -> tuple[int, int]:
    """The whole seconds [lo, hi) that lie inside [start, end); a window shorter than that gets its cover.

    Results are kept per second, so a window is summarised over the seconds it
    covers entirely: the portal's reports and the command line's summary alike.
    """
    lo, hi = math.ceil(start), math.floor(end)
    if hi <= lo:
        lo, hi = math.floor(start), math.ceil(end)
    return lo, hi


def measurement_window(profile: Any) -> tuple[float, float]:
    """The first measurement window as (start, end), for callers that know a single one."""
    start, end, _ = measurement_windows(profile)[0]
    return start, end


def preview(profile: Any, points: int = 200) -> dict[str, Any]:
    """The planned shape for a chart: ``{"kind", "duration", "t", "users" | "rate", "windows"}``.

    ``t`` has ``points`` evenly spaced times from 0 to the end, plus the
    corners of the shape (so a level's edges are drawn where they are), and
    one point just before each corner so vertical edges stay vertical.
    ``users`` for closed kinds (``pacing`` adds ``rate``, the iterations per
    second it starts); ``rate`` (iterations/s) for ``arrival_rate``.
    ``windows`` are the measurement windows as ``{"start", "end", "label"}``.
    """
    points = max(2, int(points))
    duration = total_duration(profile)
    times = {duration * i / (points - 1) for i in range(points)}
    for c in _kind(profile).corners(profile):
        if 0 <= c <= duration:
            times.add(c)
            if c > 0:
                times.add(max(0.0, c - min(1e-3, duration / (points * 100))))
    t = sorted(times)
    out: dict[str, Any] = {"kind": kind_of(profile), "duration": duration, "t": [round(x, 6) for x in t]}
    kind = _kind(profile)
    if kind.open_model:
        out["rate"] = [_rate_for_chart(x, profile, duration) for x in t]
        out["max_users"] = profile.users
    else:
        out["users"] = [users_at(x, profile) for x in t]
        if kind.rate_at(0.0, profile) is not None:  # a closed model that sets its rate (pacing)
            out["rate"] = [round(rate_at(x, profile) or 0.0, 6) for x in t]
    out["windows"] = [{"start": a, "end": b, "label": label} for a, b, label in measurement_windows(profile)]
    return out


def _rate_for_chart(t: float, profile: Any, duration: float) -> float:
    # the end point of the run shows the rate held up to it rather than the 0 that follows
    x = min(t, math.nextafter(duration, 0.0)) if duration > 0 else t
    return round(rate_at(x, profile) or 0.0, 6)


def shard_user_ids(users: int, n_shards: int, shard_no: int) -> list[int]:
    """The user numbers of one shard: every ``n_shards``-th user, so shard ramps interleave."""
    if not 0 <= shard_no < n_shards:
        raise ValueError(f"shard number {shard_no} is outside 0..{n_shards - 1}")
    return list(range(shard_no, users, n_shards))
