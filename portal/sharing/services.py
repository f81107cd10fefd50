"""Writes of share links: create, revoke, record an opening, turn a project's sharing on or off."""

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal.projects.models import Project
from portal.tokens import token_new, token_prefix

from .models import ProjectSharing, ShareEvent, ShareLink

MIN_DAYS, MAX_DAYS, DEFAULT_DAYS = 1, 365, 30


class ShareError(Exception):
    """A link that cannot be made, with the reason people read."""


@transaction.atomic
def share_create(
    *,
    project: Project,
    kind: str,
    title: str,
    user: AbstractBaseUser,
    days: int = DEFAULT_DAYS,
    note: str = "",
    **target,
) -> tuple[ShareLink, str]:
    """A new link to one object of ``project`` and its token (shown once, never stored).

    ``target`` names what it opens: ``run``; ``before_code`` and ``after_code``; ``experiment``;
    or ``environment`` and ``plan``. The caller has checked that these belong to the project
    and that ``user`` may write in it.
    """
    if not MIN_DAYS <= days <= MAX_DAYS:
        raise ShareError(f"A link lasts from {MIN_DAYS} day to {MAX_DAYS} days.")
    if not sharing_enabled(project):
        raise ShareError("Sharing is turned off for this project: a team owner can turn it on.")
    token, digest = token_new()
    link = ShareLink.objects.create(
        project=project,
        kind=kind,
        title=title[:200],
        note=note.strip()[:200],
        token_hash=digest,
        prefix=token_prefix(token),
        created_by=user,
        expires_at=timezone.now() + timedelta(days=days),
        **target,
    )
    ShareEvent.objects.create(link=link, action=ShareEvent.Action.CREATED, user=user)
    return link, token


@transaction.atomic
def share_revoke(*, link: ShareLink, user: AbstractBaseUser) -> bool:
    """Stops the link at once; False when it was already revoked."""
    revoked = ShareLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    if revoked:
        ShareEvent.objects.create(link=link, action=ShareEvent.Action.REVOKED, user=user)
    return bool(revoked)


def share_opened(*, link: ShareLink) -> None:
    """Counts one opening of the page (its chart data does not count)."""
    now = timezone.now()
    ShareLink.objects.filter(pk=link.pk).update(open_count=F("open_count") + 1, last_opened_at=now)
    ShareEvent.objects.create(link=link, action=ShareEvent.Action.OPENED)


def sharing_enabled(project: Project) -> bool:
    return not ProjectSharing.objects.filter(project=project, enabled=False).exists()


def sharing_set(*, project: Project, enabled: bool, user: AbstractBaseUser) -> None:
    """Turns sharing on or off for a project; off, its existing links stop working (they are kept)."""
    ProjectSharing.objects.update_or_create(project=project, defaults={"enabled": enabled, "changed_by": user})
