"""Pieces every app shares."""

import os
import secrets
import uuid
from collections.abc import Iterable
from pathlib import Path

from django.db import models


class TimeStamped(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Invalid(Exception):
    """A service refused its input: ``errors`` maps fields to messages.

    A nested list's field (a plan's ``levels`` or ``mix``, an environment's ``servers``) holds one
    dict per item, ``{}`` for the items that are fine. Forms show these beside their fields; the API
    answers 400 with them (portal.api.errors).
    """

    def __init__(self, errors: dict):
        self.errors = errors
        super().__init__("; ".join(f"{name}: {messages}" for name, messages in errors.items()))


def is_fragment(request) -> bool:
    """HTMX asks for a page region (a boosted link wants the whole page)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted


def task(name: str):
    """The Celery task ``workers.tasks.<name>``, found by its name, as Celery addresses tasks.

    Services enqueue work this way rather than by importing ``workers.tasks``: that module runs
    every app's services, so importing it would make each app depend on all the others (the
    import contracts in pyproject.toml keep the apps layered). The module is loaded on first use.
    """
    import importlib

    from celery import current_app

    full = f"workers.tasks.{name}"
    if full not in current_app.tasks:
        importlib.import_module("workers.tasks")
    return current_app.tasks[full]


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


def write_private(path: Path, data: bytes | Iterable[bytes]) -> int:
    """Writes ``data`` (bytes, or an upload's ``chunks()``) to ``path``, readable by its owner only; its size.

    Chunk by chunk, so a large upload is never whole in memory; through a temporary name beside it,
    so a reader sees the whole file or none. Nothing is left behind when writing fails.
    """
    tmp = path.with_name(path.name + f".{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    size = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in (data,) if isinstance(data, bytes) else data:
                f.write(chunk)
                size += len(chunk)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size
