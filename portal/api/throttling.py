"""The API's rate limit: a sliding window per token, counted atomically for the whole site.

DRF's ``SimpleRateThrottle`` reads a token's history from the cache, appends and writes it back:
two requests answered at once both read the same history, both pass, and one write is lost, so
8 parallel clients got 800 and 717 requests through a 600/min limit (issue 28). Here the read,
the decision and the write are one step (``portal.limits.take``).
"""

from rest_framework.throttling import SimpleRateThrottle

from portal import limits


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
        allowed, self._wait = limits.take(self.key, self.num_requests, self.duration, cache=self.cache)
        return allowed

    def wait(self):
        """Seconds until the oldest request in the window leaves it (DRF rounds it up for Retry-After)."""
        return max(self._wait, 0.0)
