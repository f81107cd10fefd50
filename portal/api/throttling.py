from rest_framework.throttling import SimpleRateThrottle


class TokenRateThrottle(SimpleRateThrottle):
    """Requests per token (the browser's session counts per user); DRF answers 429 with Retry-After.

    The counts live in Django's default cache, which settings.CACHES makes one for all web processes
    (Redis, or files on the embedded default), so a token's budget is the same however many
    gunicorn workers answer it.
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
