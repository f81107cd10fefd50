"""Pieces every app shares."""

import uuid

from django.db import models


class TimeStamped(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def new_code() -> uuid.UUID:
    return uuid.uuid4()


def human_duration(seconds: float) -> str:
    """A length of time as people say it: 45 s, 12 min 5 s, 3 h 2 min (portal.formatting.seconds)."""
    from portal.formatting import seconds as written

    return written(seconds)


def plural(count, word: str) -> str:
    """``count`` and ``word``, with an s unless there is exactly one: "1 user", "2 users", "1,000 rows"."""
    shown = f"{count:,}" if isinstance(count, int) else str(count)
    return f"{shown} {word}{'' if count == 1 else 's'}"
