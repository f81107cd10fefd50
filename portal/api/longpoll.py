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

import logging
import threading

from django.conf import settings

from portal import limits

log = logging.getLogger(__name__)

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
        try:
            limits.slot_release(self.key, self.holder)
        except Exception:  # the shared cache failed: the shared count expires with its TTL
            log.warning("long-poll slot %s not given back to the shared cache", self.key, exc_info=True)
        finally:
            # The process's own count goes back whatever the cache did, or the process would lose a slot for good.
            with _lock:
                _held -= 1


def acquire(ident: str, wait_s: float) -> Slot | None:
    """A slot to long-poll for ``wait_s`` seconds as ``ident`` (a token or a user), or None: answer now.

    A failing shared cache answers now too (the state at once costs nothing; a thread held without a
    count does), and leaves the process's own count as it was.
    """
    global _held
    with _lock:
        if _held >= per_process_cap():
            return None
        _held += 1
    key = f"longpoll:{ident}"
    try:
        holder = limits.slot_acquire(key, settings.PLIMSOLL_LONG_POLLS_PER_TOKEN, ttl=wait_s + 10)
    except Exception:
        log.warning("long-poll slot %s: the shared cache failed, answering at once", key, exc_info=True)
        holder = None
    if holder is None:
        with _lock:
            _held -= 1
        return None
    return Slot(key, holder)
