"""Secrets that open doors (share links, invitations): random, shown once, stored hashed.

A token is 32 random bytes (256 bits) in URL-safe base64. Only its SHA-256 is stored, so a
copy of the database opens nothing; a plain hash suffices because the token is random and
long (no dictionary to try), and it can be looked up by equality. The first characters are
kept apart as a *prefix* so people can tell their links apart in lists.
"""

import hashlib
import secrets

PREFIX_LENGTH = 6


def token_new() -> tuple[str, str]:
    """A fresh token and its hash; show the token once, store the hash."""
    token = secrets.token_urlsafe(32)
    return token, token_hash(token)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_prefix(token: str) -> str:
    return token[:PREFIX_LENGTH]


# Secrets Plimsoll must send on (a team's Prometheus bearer token, a Grafana service-account token) cannot be
# hashed: they are sealed instead (Fernet, AES-128-CBC with an HMAC), with a key derived from SECRET_KEY and
# the secret's purpose, so one purpose's sealed value never opens as another's. Never shown back.


class SealBroken(ValueError):
    """A sealed secret that cannot be opened (the site's SECRET_KEY changed, or the value was altered)."""


def _fernet(purpose: str):
    import base64

    from cryptography.fernet import Fernet
    from django.conf import settings

    key = hashlib.sha256(f"plimsoll {purpose}\0".encode() + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def seal(purpose: str, secret: str) -> str:
    """``secret`` encrypted for storage ("" stays "")."""
    return _fernet(purpose).encrypt(secret.encode()).decode() if secret else ""


def unseal(purpose: str, stored: str) -> str:
    """The secret ``seal`` stored ("" stays ""); raises SealBroken."""
    from cryptography.fernet import InvalidToken

    if not stored:
        return ""
    try:
        return _fernet(purpose).decrypt(stored.encode()).decode()
    except InvalidToken:
        raise SealBroken(purpose) from None
