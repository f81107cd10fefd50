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
