"""Reads of accounts: invitations by token, pending invitations of a team."""

from django.db.models import QuerySet
from django.utils import timezone

from portal.tokens import token_hash

from .models import Invitation, Team


def invitation_by_token(token: str) -> Invitation | None:
    """The invitation a link's token opens, whatever its state; None for an unknown token."""
    if not token or len(token) > 100:
        return None
    return Invitation.objects.select_related("team", "invited_by").filter(token_hash=token_hash(token)).first()


def invitations_pending(teams: QuerySet[Team] | list[Team]) -> QuerySet[Invitation]:
    """Invitations of these teams that can still be used, newest first."""
    return (
        Invitation.objects.filter(
            team__in=teams, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
        )
        .select_related("invited_by")
        .order_by("-created_at")
    )
