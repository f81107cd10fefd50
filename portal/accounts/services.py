import hashlib
import hmac
import secrets
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from .models import ApiToken, Invitation, Membership, Team


@transaction.atomic
def team_create(*, name: str, owner: AbstractBaseUser) -> Team:
    team = Team.objects.create(name=name)
    Membership.objects.create(team=team, user=owner, role=Membership.Role.OWNER)
    return team


class LastOwner(ValueError):
    """Refused: the change would leave the team without an owner."""

    def __init__(self):
        super().__init__("A team needs at least one owner.")


def _is_last_owner(team: Team, user: AbstractBaseUser) -> bool:
    owners = Membership.objects.select_for_update().filter(team=team, role=Membership.Role.OWNER)
    return list(owners.values_list("user_id", flat=True)) == [user.pk]


@transaction.atomic
def membership_set(*, team: Team, user: AbstractBaseUser, role: str) -> Membership:
    """Adds ``user`` to ``team`` or changes their role; the last owner stays an owner (LastOwner)."""
    if role != Membership.Role.OWNER and _is_last_owner(team, user):
        raise LastOwner
    membership, _ = Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    return membership


# --------------------------------------------------------------------------------------
# Invitations (issue 13)
# --------------------------------------------------------------------------------------

INVITATION_DAYS = 7


class InvitationError(Exception):
    """An invitation that cannot be used, with the sentence the invitee reads."""


class InvitationForAnotherAddress(InvitationError):
    """The invitation names another address than the account's: a link is bound to the address it was sent to."""


INVITATION_REFUSALS = {
    "accepted": "This invitation has already been used. Ask the team's owner for a new one if you still need it.",
    "revoked": "This invitation was withdrawn by the team's owner.",
    "expired": "This invitation has expired (invitations last 7 days). Ask the team's owner for a new one.",
    "unknown": "This invitation link is not valid. Check that you copied the whole link.",
}


def invitation_url(token: str) -> str:
    from django.conf import settings
    from django.urls import reverse

    return settings.SITE_URL + reverse("accounts:invitation", args=[token])


def invitation_create(*, team: Team, email: str, role: str, invited_by: AbstractBaseUser) -> tuple[Invitation, str]:
    """A pending invitation and its token (shown nowhere but in the mail sent after commit)."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from portal import limits
    from portal.mail import mail_enqueue
    from portal.tokens import token_new

    # Per team, per inviting user (an owner of several teams) and per invited address over the whole site (many
    # teams' owners aiming at one inbox). In that order: a refusal may have spent a count of the checks before it,
    # and those are the inviter's own, never the address's.
    day = 24 * 3600
    team_day, user_day, address_day = (
        settings.PLIMSOLL_INVITATIONS_PER_TEAM_DAY,
        settings.PLIMSOLL_INVITATIONS_PER_USER_DAY,
        settings.PLIMSOLL_INVITATIONS_PER_ADDRESS_DAY,
    )
    checks = (
        (f"invitations:team-{team.code}", team_day, f"{team} has sent {team_day} invitations"),
        (f"invitations-by:user-{invited_by.pk}", user_day, f"You have sent {user_day} invitations"),
        (f"invitations-to:{email.strip().lower()}", address_day, f"{email} has been sent {address_day} invitations"),
    )
    for key, per_day, what in checks:
        allowed, wait = limits.take(key, per_day, day)
        if not allowed:
            raise limits.TooMany(f"{what} in the last 24 hours: try again in {limits.minutes(wait)}.", wait)
    token, digest = token_new()
    invitation = Invitation.objects.create(
        team=team,
        email=email,
        role=role,
        token_hash=digest,
        invited_by=invited_by,
        expires_at=timezone.now() + timedelta(days=INVITATION_DAYS),
    )
    mail_enqueue(
        template="invitation",
        to=[email],
        context={
            "team": team.name,
            "role": invitation.get_role_display().lower(),
            "invited_by": invited_by.get_username(),
            "url": invitation_url(token),
            "days": INVITATION_DAYS,
        },
    )
    return invitation, token


def invitation_revoke(*, invitation: Invitation) -> bool:
    """Withdraws a pending invitation; False when it was already used or withdrawn."""
    from django.utils import timezone

    return bool(
        Invitation.objects.filter(pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
    )


def invitation_accept(*, invitation: Invitation, user: AbstractBaseUser) -> Membership:
    """``user`` joins the team with the invitation's role; the invitation is used up.

    Only the account of the invited address may accept (issue 30: an owner's invitation forwarded,
    or leaked, let any logged-in account in). The conditional UPDATE claims the invitation, so two
    clicks (or two tabs) let in one person once. A user already in the team keeps the higher of the two roles.
    """
    from django.utils import timezone

    if not invitation.is_for(user):
        raise InvitationForAnotherAddress(
            f"This invitation is for {invitation.email}, and you are logged in as {user.get_username()} with "
            "another address. Log out and open the link again to create an account for that address, or ask "
            "the team's owner to invite your own address."
        )
    now = timezone.now()
    with transaction.atomic():
        claimed = Invitation.objects.filter(
            pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=now
        ).update(accepted_at=now, accepted_by=user)
        if not claimed:
            invitation.refresh_from_db()
            raise InvitationError(INVITATION_REFUSALS[invitation.state(now)])
        existing = Membership.objects.filter(team=invitation.team, user=user).first()
        rank = {Membership.Role.VIEWER: 0, Membership.Role.EDITOR: 1, Membership.Role.OWNER: 2}
        if existing is not None and rank[existing.role] >= rank[invitation.role]:
            return existing
        return membership_set(team=invitation.team, user=user, role=invitation.role)


@transaction.atomic
def membership_remove(*, membership: Membership) -> None:
    if _is_last_owner(membership.team, membership.user):
        raise LastOwner
    membership.delete()


TOKEN_DEFAULT_DAYS = 90


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_create(
    *, user: AbstractBaseUser, team: Team, name: str, scope: str, expires_days: int | None = TOKEN_DEFAULT_DAYS
) -> tuple[ApiToken, str]:
    """A new token and its secret, which is returned this once and never stored.

    The user must be a member of ``team``; a scope above the user's role is refused, although
    the role is checked again at every request (a demoted user's token loses what it lost).
    """
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise ValueError(f"{user} is not a member of {team}.")
    if scope not in ApiToken.Scope.values:
        raise ValueError(f"Unknown scope {scope!r}: choose read, run or write.")
    if scope != ApiToken.Scope.READ and not membership.can_write:
        raise ValueError(f"{user} is a viewer of {team}: a viewer's token can only read.")
    if expires_days is not None and not 1 <= expires_days <= 3650:
        raise ValueError("A token expires after 1 to 3650 days (or never).")
    secret = "plim_" + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        team=team,
        name=name.strip() or "token",
        scope=scope,
        prefix=secret[: ApiToken.PREFIX_LENGTH],
        secret_hash=token_hash(secret),
        expires_at=timezone.now() + timedelta(days=expires_days) if expires_days is not None else None,
    )
    return token, secret


def token_authenticate(secret: str) -> ApiToken | None:
    """The usable token with this secret, or None; its last use is recorded at most once a minute."""
    if not secret.startswith("plim_"):
        return None
    candidate = ApiToken.objects.select_related("user", "team").filter(secret_hash=token_hash(secret)).first()
    # The lookup is by hash (an index); compare again in constant time so that no branch depends on the secret.
    if candidate is None or not hmac.compare_digest(candidate.secret_hash, token_hash(secret)):
        return None
    now = timezone.now()
    if not candidate.is_usable(now) or not candidate.user.is_active:
        return None
    if candidate.last_used_at is None or now - candidate.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=candidate.pk).update(last_used_at=now)
        candidate.last_used_at = now
    return candidate


def token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
