"""Garbage collection during a run: no full collections while the load is on.

A run holds many long-lived objects (thousands of users, their clients, connections
and coroutines) and makes many short-lived ones (a request's buffers). CPython's full
(generation 2) collection walks every long-lived object: with 10,000 users it paused
the event loop for 300-500 ms about every other second, which is loop lag the target
never caused (measured with ``make bench`` scale; with the collector off, lag p99 fell to
a few ms).

So, while a run runs:

- automatic full collections are off (generation 2's threshold is out of reach);
- ten times a second (the runner's ``GC_TICK_S``), the young generations are collected
  and what survives them is frozen (``gc.freeze``: moved where collections never look;
  O(1)). Often, because the automatic young collections do not see most of the work:
  objects that are untracked and tracked again (a coroutine's tuples and lists as a user
  runs, a frozen object touched anew) land in generation 0 without counting as
  allocations, so generation 0 grows past its threshold unnoticed. Once a second it
  held ~46,000 objects at 10,000 users and the collection paused the loop for ~20 ms;
  in tenths of a second the pauses are a tenth as long, for the same total work;
- when many users have left (the ramp-down of a large level: at least ``FULL_AFTER_CLOSED``
  sessions since the last full collection), their clients may be cyclic garbage among the
  frozen objects: then everything is unfrozen and fully collected once, while the load is
  going down anyway (a few sessions are not worth a pause: they wait for the run's end);
- at the end, the collector is put back as it was and frozen objects are released.

Young cycles (exceptions with their tracebacks, say) still die in the automatic
generation 0 and 1 collections, which are cheap.
"""

from __future__ import annotations

import gc

NEVER = 1_000_000_000
# Closed user sessions that justify a full collection during the run (a large level ending).
FULL_AFTER_CLOSED = 1000


class GcPolicy:
    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None
        self._closed_seen = 0

    def start(self) -> None:
        """Before the run's start: the one full collection here may take a while in a big process."""
        self._saved = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(self._saved[0], self._saved[1], NEVER)

    def tick(self, sessions_closed: int) -> None:
        """Every ``GC_TICK_S``; ``sessions_closed`` counts the user sessions (clients) closed so far."""
        if self._saved is None:
            return
        if sessions_closed - self._closed_seen >= FULL_AFTER_CLOSED:
            self._closed_seen = sessions_closed
            gc.unfreeze()
            gc.collect()
        else:
            gc.collect(1)
        gc.freeze()

    def stop(self) -> None:
        if self._saved is None:
            return
        gc.unfreeze()
        gc.set_threshold(*self._saved)
        self._saved = None
