"""The closed-model ramp: when each virtual user starts and stops.

Users are numbered ``k = 0 .. users-1`` across the whole run, and every time here
is in seconds after the run's common start. A shard runs a subset of the numbers
(e.g. ``k % n_shards == shard_no``), so the ramps of several shards interleave
and add up to the plan's ramp; no shard needs to know about the others.

- **Ramp-up**: user k starts at ``ramp_up * k / users``; user 0 starts at once.
- **Hold**: all users are active from ``ramp_up`` to ``ramp_up + hold`` (the
  measurement window).
- **Ramp-down**: user k stops starting new steps at
  ``ramp_up + hold + ramp_down * (users - 1 - k) / users``. The last user to
  start is the first to stop (the most recent arrivals leave first), and the
  active count falls by one every ``ramp_down / users`` seconds, linearly to 0
  by ``ramp_up + hold + ramp_down``. With ``ramp_down == 0`` everybody stops at
  the end of the hold.

"Stops" means stops *starting* steps: a step in flight is finished, so the last
requests complete a little after these times.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class ProfileLike(Protocol):
    users: int
    ramp_up: float
    hold: float
    ramp_down: float


def user_window(k: int, profile: ProfileLike) -> tuple[float, float]:
    """(start, stop) of user ``k`` in seconds after the run's start."""
    n = profile.users
    if not 0 <= k < n:
        raise ValueError(f"user number {k} is outside 0..{n - 1}")
    start = profile.ramp_up * k / n
    stop = profile.ramp_up + profile.hold + profile.ramp_down * (n - 1 - k) / n
    return start, stop


def active_users_at(t: float, profile: ProfileLike, user_ids: Iterable[int] | None = None) -> int:
    """How many of ``user_ids`` (default: all) are inside their window at time ``t`` (start <= t < stop)."""
    ids = range(profile.users) if user_ids is None else user_ids
    active = 0
    for k in ids:
        start, stop = user_window(k, profile)
        if start <= t < stop:
            active += 1
    return active


def total_duration(profile: ProfileLike) -> float:
    """Seconds from the run's start until the last user stops starting steps."""
    return profile.ramp_up + profile.hold + profile.ramp_down


def measurement_window(profile: ProfileLike) -> tuple[float, float]:
    """The part that counts for summaries and verdicts: after ramp-up, before ramp-down."""
    return profile.ramp_up, profile.ramp_up + profile.hold


def shard_user_ids(users: int, n_shards: int, shard_no: int) -> list[int]:
    """The user numbers of one shard: every ``n_shards``-th user, so shard ramps interleave."""
    if not 0 <= shard_no < n_shards:
        raise ValueError(f"shard number {shard_no} is outside 0..{n_shards - 1}")
    return list(range(shard_no, users, n_shards))
