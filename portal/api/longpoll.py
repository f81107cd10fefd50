"""Bounds on long-polls (``GET /api/v1/runs/<code>/?wait=S``), which hold a web thread while they wait.

Eight long-polls from one read token held every gunicorn thread (2 workers × 4 threads) and the
login page hung (issue 30). A long-poll now needs two slots, or it answers at once with the run's
current state (and ``X-Plimsoll-Wait: capped``, ``Retry-After``):

- one of this process's long-poll slots: half its threads (``post_worker_init`` in
  gunicorn.conf.py tells it the worker's ``--threads``), so the other half always serve pages;
  ``PLIMSOLL_LONG_POLLS_PER_PROCESS`` sets it instead. Threads are per process, so this is the
  cap that keeps each process responsive, whatever the others do;
- one of the token's slots over the whole site (``PLIMSOLL_LONG_POLLS_PER_TOKEN``, counted in the
  shared cache by ``portal.limits``), so one token cannot take every process's slots.
"""

import threading

from django.conf import settings

from portal import limits

# Seconds to wait before asking again after a capped answer (sent as Retry-After).
RETRY_AFTER_S = 5

_lock = threading.Lock()
_held = 0
_per_process_from_server: int | None = None


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
    def __init__(self, key: str, holder: str):
        self.key, self.holder = key, holder

    def release(self) -> None:
        global _held
        limits.slot_release(self.key, self.holder)
        with _lock:
            _held -= 1


def acquire(ident: str, wait_s: float) -> Slot | None:
    """A slot to long-poll for ``wait_s`` seconds as ``ident`` (a token or a user), or None: answer now."""
    global _held
    with _lock:
        if _held >= per_process_cap():
            return None
        _held += 1
    key = f"longpoll:{ident}"
    holder = limits.slot_acquire(key, settings.PLIMSOLL_LONG_POLLS_PER_TOKEN, ttl=wait_s + 10)
    if holder is None:
        with _lock:
            _held -= 1
        return None
    return Slot(key, holder)
