"""Login throttling (django-axes): the client address, the lockout page, and the owners' record.

Axes counts failed logins per account and per client address on every login that goes
through ``django.contrib.auth.authenticate(request=...)``: the portal's login page, the
admin's, and any later form that authenticates with the request. After
``AXES_FAILURE_LIMIT`` failures the account (or the address) is refused, right password
or not, for ``AXES_COOLOFF_TIME``; the message is the same whether the account exists or not.
"""

from datetime import timedelta

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessFailureLog
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Sum
from django.shortcuts import render
from django.utils import timezone

from .models import Membership

LOCKOUT_RECORD_DAYS = 30


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' backend, except that an authenticate() without a request is left to the next backend.

    Only code calls authenticate() without a request (the test client's ``login()``, a shell);
    every login form passes the request, and is counted. Axes' own backend raises instead.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


class LoginThrottleHandler(AxesDatabaseHandler):
    """Axes' database handler with a limit per account and a (higher) one per client address.

    Axes has one limit for every lockout parameter; one per address as low as one per account
    would pause a whole office behind one NAT address after a few typos. The address's
    failures are scaled so that reaching PLIMSOLL_LOGIN_ADDRESS_FAILURE_LIMIT counts as
    reaching AXES_FAILURE_LIMIT.
    """

    def get_failures(self, request, credentials=None) -> int:
        limit, address_limit = settings.AXES_FAILURE_LIMIT, settings.PLIMSOLL_LOGIN_ADDRESS_FAILURE_LIMIT
        counted = []
        # One queryset per lockout parameter, in the order of AXES_LOCKOUT_PARAMETERS.
        attempts_list = self.get_user_attempts(request, credentials)
        for parameter, attempts in zip(settings.AXES_LOCKOUT_PARAMETERS, attempts_list, strict=True):
            failures = attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0
            counted.append(failures * limit // address_limit if parameter == "ip_address" else failures)
        return max(counted, default=0)


def client_ip(request) -> str | None:
    """The client's address: REMOTE_ADDR, or the one the trusted proxies saw.

    With ``PLIMSOLL_TRUSTED_PROXIES=N`` (N reverse proxies in front of the portal, each
    appending to X-Forwarded-For), the client is the Nth address from the right; anything
    further left was written by the client itself and cannot be trusted.
    """
    proxies = settings.PLIMSOLL_TRUSTED_PROXIES
    forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
    if proxies and len(forwarded) >= proxies:
        return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR")


def lockout_message() -> str:
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    return (
        "Too many failed logins for this account or from your address: logging in is paused for "
        f"{minutes} minutes. Your team's owners can see this lockout on their Teams page."
    )


def lockout_response(request, original_response=None, credentials=None):
    """The login page again, with the lockout message (HTTP 429), for the portal's and the admin's login."""
    form = AuthenticationForm(request)
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    form.fields["username"].initial = username
    context = {"form": form, "lockout": lockout_message(), "next": request.POST.get("next", "")}
    return render(request, "accounts/login.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)


def lockouts_for_owner(user) -> dict[int, list[AccessFailureLog]]:
    """Recent lockouts of the members of each team ``user`` owns: {team id: [records, newest first]}."""
    since = timezone.now() - timedelta(days=LOCKOUT_RECORD_DAYS)
    members: dict[str, list[int]] = {}
    for team_id, username in Membership.objects.filter(
        team__memberships__user=user, team__memberships__role=Membership.Role.OWNER
    ).values_list("team_id", "user__username"):
        members.setdefault(username, []).append(team_id)
    records: dict[int, list[AccessFailureLog]] = {}
    if not members:
        return records
    for record in AccessFailureLog.objects.filter(
        locked_out=True, username__in=list(members), attempt_time__gte=since
    ).order_by("-attempt_time")[:500]:
        for team_id in members[record.username]:
            records.setdefault(team_id, []).append(record)
    return records
