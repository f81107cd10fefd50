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
