"""``Authorization: Bearer <secret>`` for the API: a hashed, scoped, expiring token (portal.accounts.ApiToken)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from portal.accounts.services import token_authenticate


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None  # not ours: the session may still authenticate the browser
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization: Bearer takes exactly one token.")
        try:
            secret = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("The token is not valid text.") from None
        token = token_authenticate(secret)
        if token is None:
            # One message for unknown, revoked and expired: the caller learns nothing about other tokens.
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired token.")
        return token.user, token

    def authenticate_header(self, request):
        # Makes DRF answer 401 (not 403) to a request without credentials.
        return self.keyword


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token from the Tokens page or `manage.py create_token`.",
        }
