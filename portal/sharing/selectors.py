"""Reads of share links: the link a token opens, a project's links."""

from django.db.models import Q, QuerySet
from django.utils import timezone

from portal.projects.models import Project
from portal.tokens import token_hash

from .models import ShareLink


def share_by_token(token: str) -> ShareLink | None:
    """The link ``token`` opens, if it works now: not expired, not revoked, its project still sharing.

    Every other case is None, so the caller answers them all alike and reveals nothing.
    """
    if not token or len(token) > 100:
        return None
    return (
        ShareLink.objects.select_related("project", "run", "experiment", "environment", "plan")
        .filter(token_hash=token_hash(token), revoked_at__isnull=True, expires_at__gt=timezone.now())
        .exclude(Q(project__sharing__enabled=False))
        .first()
    )


def share_links(project: Project) -> QuerySet[ShareLink]:
    """All links of a project, newest first, with what the Shared links page shows."""
    return ShareLink.objects.filter(project=project).select_related("created_by").order_by("-created_at")
