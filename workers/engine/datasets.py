"""Data sets: which row of values an iteration gets.

A test case may carry a data set (columns and rows, see plan.py's
``DataSet``). Each iteration of that test case takes one row, and the row's
columns become the iteration's first variables (``{{username}}``). One
``DataFeed`` per test case and run hands the rows out, by the data set's mode:

* ``sequential``: each user walks the rows in order, user *k* starting at row
  *k* (wrapping around), so users spread over the rows from their first
  iteration and a user's *i*-th iteration of the case takes row ``(k + i) % n``;
* ``random``: a random row per iteration, drawn from the user's own generator (a
  seeded run is reproducible);
* ``unique``: every row at most once across the whole run. Shards share no
  state, so each takes a fixed part of the rows: shard *s* of *S* takes the rows
  whose index ``i % S == s``, in order. When a shard's part is used up,
  ``take`` returns None: the iteration is not started and counts as dropped.
  (A shard whose users run faster than others' runs out first: a row of
  another shard's part is never borrowed, since that would need shards to talk.)
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class DataFeed:
    """Hands out the rows of one test case's data set within one run (or shard of a run)."""

    __slots__ = ("columns", "mode", "_rows", "_n", "_next_by_user", "_unique", "_taken")

    def __init__(
        self, columns: Sequence[str], rows: Sequence[Sequence[str]], mode: str, shard: tuple[int, int] = (0, 1)
    ) -> None:
        shard_no, shard_count = shard
        if shard_count < 1 or not 0 <= shard_no < shard_count:
            raise ValueError(f"bad shard {shard!r}: want (shard_no, shard_count) with 0 <= shard_no < shard_count")
        if mode not in ("sequential", "random", "unique"):
            raise ValueError(f"unknown data set mode {mode!r}")
        if not rows:
            raise ValueError("a data set needs at least one row")
        self.columns = tuple(columns)
        self.mode = mode
        self._rows = rows
        self._n = len(rows)
        self._next_by_user: dict[int, int] = {}
        self._unique = range(shard_no, self._n, shard_count)  # this shard's part, for unique mode
        self._taken = 0

    def take(self, user: int, rng: random.Random) -> dict[str, str] | None:
        """The row for ``user``'s next iteration as {column: value}; None when a unique data set is used up."""
        mode = self.mode
        if mode == "sequential":
            i = self._next_by_user.get(user, user)
            self._next_by_user[user] = i + 1
            row = self._rows[i % self._n]
        elif mode == "random":
            row = self._rows[rng.randrange(self._n)]
        else:
            if self._taken >= len(self._unique):
                return None
            row = self._rows[self._unique[self._taken]]
            self._taken += 1
        return dict(zip(self.columns, row, strict=True))

    def skip(self, n: int) -> None:
        """Unique mode: count ``n`` rows as used (a continuation of a shard that took them before its handoff)."""
        self._taken = min(len(self._unique), self._taken + max(0, n))

    @property
    def taken(self) -> int:
        """Rows of this shard's part handed out (unique mode), those skipped included."""
        return self._taken

    @property
    def remaining(self) -> int | None:
        """Rows this shard can still hand out in unique mode (None for the modes that never run out)."""
        return len(self._unique) - self._taken if self.mode == "unique" else None
