"""Confirmed mail addresses and the limits on mail (issue 30: an e-mail channel was an open relay).

A fresh account could make an e-mail channel for 40 addresses it did not own and press *Send test*
ten times. Now:

- each address of an e-mail channel is confirmed by its owner first (``addresses_request`` mails a
  single-use link, ``address_confirm`` takes it); deliveries and tests go to confirmed addresses only;
- confirmation mails are limited per address (over the whole site) and per requesting user;
- notification mails are limited per recipient and per team (the sender), and *Send test* per user.

The confirmation mail names nobody and nothing the requester typed: its link opens a page on this
site that says which team asks, and the address's owner confirms there (a POST, so a mail scanner that
opens links confirms nothing).
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from portal import limits
from portal.tokens import token_hash, token_new

from .models import Channel, MailAddress

CONFIRM_DAYS = 3
RESEND_AFTER = timedelta(hours=24)  # a pending address is mailed again at most once a day


def _normal(email: str) -> str:
    return email.strip().lower()


def addresses_request(*, team, emails: list[str], requested_by) -> list[str]:
    """Mails a confirmation link to each of ``emails`` not yet confirmed for ``team``; returns those mailed.

    An address already mailed in the last day, or over a limit, is left pending without a new mail.
    """
    from portal.mail import mail_enqueue

    now = timezone.now()
    mailed = []
    for email in dict.fromkeys(_normal(e) for e in emails):
        address, _ = MailAddress.objects.get_or_create(team=team, email=email)
        if address.confirmed_at or (address.requested_at and now - address.requested_at < RESEND_AFTER):
            continue
        per_address, per_user = (
            settings.PLIMSOLL_MAIL_CONFIRMATIONS_PER_ADDRESS_DAY,
            settings.PLIMSOLL_MAIL_CONFIRMATIONS_PER_USER_HOUR,
        )
        # The requester's count first: a user over their own limit must not spend the address's (a few a day),
        # or they could keep an address from being confirmed by anyone else.
        if requested_by is not None:
            by_ok, _ = limits.take(f"mail-confirm-by:user-{requested_by.pk}", per_user, 3600)
            if not by_ok:
                continue
        to_ok, _ = limits.take(f"mail-confirm-to:{email}", per_address, 86400)
        if not to_ok:
            continue
        token, digest = token_new()
        MailAddress.objects.filter(pk=address.pk).update(
            token_hash=digest,
            requested_by=requested_by,
            requested_at=now,
            expires_at=now + timedelta(days=CONFIRM_DAYS),
        )
        mail_enqueue(
            template="address_confirm",
            to=[email],
            context={
                "url": settings.SITE_URL + reverse("notifications:address-confirm", args=[token]),
                "days": CONFIRM_DAYS,
            },
        )
        mailed.append(email)
    return mailed


def address_pending(token: str) -> MailAddress | None:
    """The unconfirmed, unexpired address this link confirms, or None."""
    return (
        MailAddress.objects.select_related("team", "requested_by")
        .filter(token_hash=token_hash(token), confirmed_at__isnull=True, expires_at__gt=timezone.now())
        .first()
    )


@transaction.atomic
def address_confirm(*, token: str) -> MailAddress | None:
    """Confirms the address of a pending link (once: the token is spent); None for a dead link."""
    address = address_pending(token)
    if address is None:
        return None
    claimed = MailAddress.objects.filter(pk=address.pk, confirmed_at__isnull=True).update(
        confirmed_at=timezone.now(), token_hash=""
    )
    return address if claimed else None


def address_states(channels) -> dict[str, bool]:
    """{address: confirmed?} for the e-mail channels' addresses (one query)."""
    channels = [c for c in channels if c.kind == Channel.Kind.EMAIL]
    if not channels:
        return {}
    wanted = {_normal(a) for c in channels for a in c.recipients}
    teams = {c.project.team_id for c in channels}
    confirmed = set(
        MailAddress.objects.filter(team_id__in=teams, email__in=wanted, confirmed_at__isnull=False).values_list(
            "email", flat=True
        )
    )
    return {a: a in confirmed for a in wanted}


def recipients_allowed(channel: Channel) -> tuple[list[str], list[str]]:
    """(addresses to send to now, reasons for the others): confirmed, and within the mail limits."""
    recipients = [_normal(a) for a in channel.recipients]
    confirmed = set(
        MailAddress.objects.filter(
            team_id=channel.project.team_id, email__in=recipients, confirmed_at__isnull=False
        ).values_list("email", flat=True)
    )
    allowed, held = [], []
    for email in recipients:
        if email not in confirmed:
            held.append(f"{email}: not confirmed yet")
            continue
        # The sending team's count first: a team over its limit must not spend a recipient's (their mail from
        # other teams would stop too).
        ok, _ = limits.take(f"mail-from:team-{channel.project.team_id}", settings.PLIMSOLL_MAIL_PER_TEAM_HOUR, 3600)
        if ok:
            ok, _ = limits.take(f"mail-to:{email}", settings.PLIMSOLL_MAIL_PER_RECIPIENT_HOUR, 3600)
        if ok:
            allowed.append(email)
        else:
            held.append(f"{email}: over the mail limit this hour")
    return allowed, held


def test_allowed(*, user) -> None:
    """*Send test* presses per user; raises limits.TooMany over the limit."""
    per = settings.PLIMSOLL_CHANNEL_TESTS_PER_USER_HOUR
    ok, wait = limits.take(f"channel-test:user-{user.pk}", per, 3600)
    if not ok:
        raise limits.TooMany(f"You sent {per} tests in the last hour: try again in {limits.minutes(wait)}.", wait)
