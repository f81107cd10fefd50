from rest_framework.throttling import SimpleRateThrottle


class TokenRateThrottle(SimpleRateThrottle):
    """Requests per token (the browser's session counts per user); DRF answers 429 with Retry-After."""

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
