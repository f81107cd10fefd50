"""Bounds on long-polls (``GET /api/v1/runs/<code>/?wait=S``), which hold a web thread while they wait.

Eight long-polls from one read token held every gunicorn thread (2 workers × 4 threads) and the
login page hung (issue 30). A long-poll now needs a slot of each kind below, or it answers at once
with the run's current state (and ``X-Plimsoll-Wait: capped``, ``Retry-After``):

- one of this process's long-poll slots: half its threads (``post_worker_init`` in
  gunicorn.conf.py tells it the worker's ``--threads``), so the other half always serve pages;
  ``PLIMSOLL_LONG_POLLS_PER_PROCESS`` sets it instead. Threads are per process, so this is the
  cap that keeps each process responsive, whatever the others do;
- one of the account's slots over the whole site (``PLIMSOLL_LONG_POLLS_PER_USER``, counted in the
  shared cache by ``portal.limits``), so one account cannot take every process's slots, however
  many tokens it makes; and, for a token, one of that token's (``PLIMSOLL_LONG_POLLS_PER_TOKEN``);
- with ``PLIMSOLL_LONG_POLLS_TOTAL`` set, one of the whole site's: the per-process caps already bound
  the site's long-polls by its processes; this bounds them (and their reads of the database, twice a
  second each) whatever the number of web machines.

A process told to stop (SIGTERM, see ``stop_waiting``) answers its held long-polls at once the same way.
"""

import threading

from django.conf import settings

from portal import limits

# Seconds to wait before asking again after a capped answer (sent as Retry-After).
RETRY_AFTER_S = 5

_lock = threading.Lock()
_held = 0
_per_process_from_server: int | None = None
# Set when the process is told to stop (gunicorn.conf.py, on SIGTERM: a restart or a deploy): held
# long-polls answer at once instead of keeping the worker up to its graceful timeout, and then being cut.
_stopping = threading.Event()


def stop_waiting() -> None:
    """The process is stopping: every held long-poll answers now, and new ones answer at once."""
    _stopping.set()


def pause(seconds: float) -> bool:
    """Waits ``seconds`` between two reads of a long-polled run; True when the process is stopping (answer now)."""
    return _stopping.wait(seconds)


def configure_for_threads(threads: int) -> None:
    """Called by gunicorn in each worker: half its threads may long-poll (none with a single thread)."""
    global _per_process_from_server
    _per_process_from_server = threads // 2


def per_process_cap() -> int:
    if settings.PLIMSOLL_LONG_POLLS_PER_PROCESS is not None:
        return settings.PLIMSOLL_LONG_POLLS_PER_PROCESS
    if _per_process_from_server is not None:
        return _per_process_from_server
    return 2  # runserver and tests: threads without a fixed pool


class Slot:
    """A long-poll's place: one of the process's, and the shared ones (``limits.Slots``: the account's, the token's)."""

    def __init__(self, shared: limits.Slots) -> None:
        self.shared = shared

    def release(self) -> None:
        global _held
        try:
            self.shared.release()  # a failing cache is logged there: the shared counts expire with their TTL
        finally:
            # The process's own count goes back whatever the cache did, or the process would lose a slot for good.
            with _lock:
                _held -= 1


def acquire(*, user_id: int, token_id: int | None, wait_s: float) -> Slot | None:
    """A slot to long-poll for ``wait_s`` seconds as this account (and token), or None: answer now.

    A failing shared cache answers now too (the state at once costs nothing; a thread held without a
    count does), and leaves the process's own count as it was.
    """
    global _held
    with _lock:
        if _stopping.is_set() or _held >= per_process_cap():
            return None
        _held += 1
    # The account's cap first: tokens are free to make, so one account's tokens share it.
    caps = [(f"longpoll:user-{user_id}", settings.PLIMSOLL_LONG_POLLS_PER_USER)]
    if settings.PLIMSOLL_LONG_POLLS_TOTAL:  # the whole site's, when the operator sets one
        caps.insert(0, ("longpoll:all", settings.PLIMSOLL_LONG_POLLS_TOTAL))
    if token_id is not None:
        caps.append((f"longpoll:token-{token_id}", settings.PLIMSOLL_LONG_POLLS_PER_TOKEN))
    shared = limits.slots_acquire(caps, ttl=wait_s + 10)
    if shared is None:
        with _lock:
            _held -= 1
        return None
    return Slot(shared)
