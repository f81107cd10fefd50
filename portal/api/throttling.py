"""The API's rate limit: a sliding window per token, counted atomically for the whole site.

DRF's ``SimpleRateThrottle`` reads a token's history from the cache, appends and writes it back:
two requests answered at once both read the same history, both pass, and one write is lost, so
8 parallel clients got 800 and 717 requests through a 600/min limit (issue 28). Here the read,
the decision and the write are one step: a Lua script on Redis (one command, nothing runs beside
it), and on the embedded default (files under var/, one machine) the same steps under an
exclusive file lock per token.
"""

import fcntl
import hashlib
import uuid
from pathlib import Path

from django.conf import settings
from django.core.cache.backends.redis import RedisCache
from rest_framework.throttling import SimpleRateThrottle

# KEYS[1]: the token's sorted set of request times; ARGV: window (s), limit, a unique member.
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


def _take_redis(cache: RedisCache, key: str, limit: int, window: int) -> tuple[bool, float]:
    key = cache.make_and_validate_key(key)
    client = cache._cache.get_client(key, write=True)
    allowed, wait = client.eval(_SLIDING_WINDOW, 1, key, window, limit, uuid.uuid4().hex)
    return bool(allowed), float(wait)


def _take_locked(cache, key: str, limit: int, window: int, now: float) -> tuple[bool, float]:
    locks = Path(settings.VAR_DIR) / "throttle-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / hashlib.sha256(key.encode()).hexdigest()[:32], "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        history = [t for t in cache.get(key, []) if t > now - window]
        if len(history) >= limit:
            return False, history[-1] + window - now  # newest first: the last one leaves the window first
        cache.set(key, [now, *history], window)
        return True, 0.0


class TokenRateThrottle(SimpleRateThrottle):
    """Requests per token (the browser's session counts per user); DRF answers 429 with Retry-After.

    The counts live in Django's default cache, which settings.CACHES makes one for all web processes
    (Redis, or files on the embedded default), so a token's budget is the same however many
    gunicorn workers and threads answer it at once.
    """

    scope = "token"

    def get_cache_key(self, request, view):
        token = request.auth
        if token is not None and hasattr(token, "prefix"):
            ident = f"token-{token.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"anon-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request, view):
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        if isinstance(self.cache, RedisCache):
            allowed, self._wait = _take_redis(self.cache, self.key, self.num_requests, self.duration)
        else:
            allowed, self._wait = _take_locked(self.cache, self.key, self.num_requests, self.duration, self.timer())
        return allowed

    def wait(self):
        """Seconds until the oldest request in the window leaves it (DRF rounds it up for Retry-After)."""
        return max(self._wait, 0.0)
