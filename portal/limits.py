"""Counts shared by every web process, changed atomically: rate limits and concurrency slots.

Both live in Django's default cache (settings.CACHES: Redis on the real stack, files under var/ on
the embedded default). A read-then-write on a cache is not atomic, so parallel requests would each
pass a limit that only one of them should (issue 28: 8 clients got 800 and 717 requests through a
600/min limit). Here every check-and-count is one step: a Lua script on Redis (one command, nothing
runs beside it) or the same steps under an exclusive file lock per key (the embedded default is one
machine).

- ``take(key, limit, window)``: a sliding window (the API's rate limit, mail and account limits);
- ``slot_acquire(key, cap, ttl)`` / ``slot_release``: at most ``cap`` holders at once (long-polls),
  each slot expiring after ``ttl`` seconds so a killed process cannot keep one for ever;
- ``slots_acquire(caps, ttl)``: one slot under each of several keys, all or none (``Slots``): what
  long-polls (portal.api.longpoll) and *Try it* (portal.projects.tryit) hold while they hold a thread.
"""

import contextlib
import fcntl
import hashlib
import logging
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.core.cache import cache as default_cache
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger(__name__)

# KEYS[1]: a sorted set of request times; ARGV: window (s), limit, a unique member.
# Redis's own clock, so that web machines with skewed clocks share one window.
_SLIDING_WINDOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000))
  return {1, '0'}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tostring(tonumber(oldest[2]) + window - now)}
"""

# KEYS[1]: a sorted set of holders scored by their expiry; ARGV: cap, ttl (s), the holder.
_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000))
  return 1
end
return 0
"""


def _redis(cache: RedisCache, key: str):
    key = cache.make_and_validate_key(key)
    return key, cache._cache.get_client(key, write=True)


@contextlib.contextmanager
def _locked(key: str):
    locks = Path(settings.VAR_DIR) / "limit-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / hashlib.sha256(key.encode()).hexdigest()[:32], "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def take(key: str, limit: int, window: float, *, cache=None) -> tuple[bool, float]:
    """Counts one event under ``key`` if fewer than ``limit`` happened in the last ``window`` seconds.

    Returns (allowed, seconds until the oldest counted event leaves the window when refused).
    """
    cache = cache or default_cache
    if isinstance(cache, RedisCache):
        redis_key, client = _redis(cache, key)
        allowed, wait = client.eval(_SLIDING_WINDOW, 1, redis_key, window, limit, uuid.uuid4().hex)
        return bool(allowed), float(wait)
    with _locked(key):
        now = time.time()
        history = [t for t in cache.get(key, []) if t > now - window]  # newest first
        if len(history) >= limit:
            return False, history[-1] + window - now
        cache.set(key, [now, *history], window)
        return True, 0.0


def slot_acquire(key: str, cap: int, ttl: float, *, cache=None) -> str | None:
    """One of ``cap`` slots under ``key`` for at most ``ttl`` seconds: its holder id, or None when all are taken."""
    cache = cache or default_cache
    holder = uuid.uuid4().hex
    if cap <= 0:
        return None
    if isinstance(cache, RedisCache):
        redis_key, client = _redis(cache, key)
        return holder if client.eval(_SLOT, 1, redis_key, cap, ttl, holder) else None
    with _locked(key):
        now = time.time()
        holders = {h: expires for h, expires in cache.get(key, {}).items() if expires > now}
        if len(holders) >= cap:
            return None
        holders[holder] = now + ttl
        cache.set(key, holders, ttl)
        return holder


def slot_release(key: str, holder: str, *, cache=None) -> None:
    cache = cache or default_cache
    if isinstance(cache, RedisCache):
        redis_key, client = _redis(cache, key)
        client.zrem(redis_key, holder)
        return
    with _locked(key):
        holders = cache.get(key, {})
        if holders.pop(holder, None) is not None:
            now = time.time()
            live = {h: e for h, e in holders.items() if e > now}
            cache.set(key, live, max([e - now for e in live.values()], default=1))


class Slots:
    """Slots held under several shared keys (an account's, a token's …), given back together by ``release``."""

    def __init__(self) -> None:
        self.taken: list[tuple[str, str]] = []

    def release(self) -> None:
        """Gives every slot back; a failing cache is logged, not raised: the slots then expire with their TTL.

        Callers release in a ``finally`` beside counts of their own (a process's long-polls): an error
        raised here would skip those, and the process would lose a slot for good (issue 30).
        """
        try:
            for key, holder in self.taken:
                slot_release(key, holder)
        except Exception:
            log.warning("slots %s not given back to the shared cache", self.taken, exc_info=True)
        self.taken = []


def slots_acquire(caps: list[tuple[str, int]], ttl: float) -> Slots | None:
    """One slot under each ``(key, cap)``, in order, for at most ``ttl`` seconds; None when one is full.

    All or none: those taken before a full one are given back. A failing shared cache is None too
    (logged), with nothing kept: refusing costs a retry, a thread held without a count costs the site.
    """
    slots = Slots()
    try:
        for key, cap in caps:
            holder = slot_acquire(key, cap, ttl=ttl)
            if holder is None:
                break
            slots.taken.append((key, holder))
    except Exception:
        log.warning("slots %s: the shared cache failed, refusing", [key for key, _ in caps], exc_info=True)
    if len(slots.taken) < len(caps):
        slots.release()
        return None
    return slots


class TooMany(Exception):
    """A limit refused an action; the message is for the user, ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = max(1, round(retry_after))


def minutes(seconds: float) -> str:
    """``"in 12 minutes"``-style wording for a wait."""
    whole = max(1, round(seconds / 60))
    return f"{whole} minute{'s' if whole != 1 else ''}" if whole < 120 else f"{round(whole / 60)} hours"
