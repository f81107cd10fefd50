from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from portal import limits

from . import selectors, services
from .forms import (
    InvitationForm,
    InvitedSignUpForm,
    MailingPasswordResetForm,
    MemberAddForm,
    RoleForm,
    SignUpForm,
    TokenForm,
)
from .models import ApiToken, Invitation, Membership, Team
from .services import LastOwner, membership_remove, membership_set, token_create, token_revoke
from .throttle import LOCKOUT_RECORD_DAYS, client_ip, lockouts_for_owner


def _get_team_for_owner(request, code) -> Team:
    """The team, if the user is a member (else 404); 403 unless they own it."""
    team = get_object_or_404(Team, code=code, memberships__user=request.user)
    if not team.memberships.filter(user=request.user, role=Membership.Role.OWNER).exists():
        raise PermissionDenied("Only a team's owners manage its members.")
    return team


@login_required
def teams(request):
    memberships = Membership.objects.select_related("team").filter(user=request.user).order_by("team__name")
    teams = (
        Team.objects.filter(memberships__user=request.user)
        .prefetch_related(
            Prefetch("memberships", queryset=Membership.objects.select_related("user").order_by("user__username"))
        )
        .order_by("name")
    )
    my_roles = {m.team_id: m.role for m in memberships}
    lockouts = lockouts_for_owner(request.user)
    rows = [(team, my_roles[team.id], MemberAddForm(team=team), lockouts.get(team.id, [])) for team in teams]
    owned = [m.team_id for m in memberships if m.role == Membership.Role.OWNER]
    pending = {}
    for invitation in selectors.invitations_pending(owned):
        pending.setdefault(invitation.team_id, []).append(invitation)
    for team, *_ in rows:
        team.pending_invitations = pending.get(team.id, [])
    context = {
        "rows": rows,
        "nav": "teams",
        "roles": Membership.Role.choices,
        "invitation_form": InvitationForm(),
        "lockout_days": LOCKOUT_RECORD_DAYS,
    }
    return render(request, "accounts/teams.html", context)


@login_required
@require_POST
def member_add(request, code):
    team = _get_team_for_owner(request, code)
    form = MemberAddForm(request.POST, team=team)
    if form.is_valid():
        membership_set(team=team, user=form.cleaned_data["user"], role=form.cleaned_data["role"])
        messages.success(request, f"{form.cleaned_data['username']} added to {team}.")
    else:
        for error in form.errors.values():
            messages.error(request, error[0])
    return redirect("accounts:teams")


@login_required
@require_POST
def member_role(request, code, user_id):
    team = _get_team_for_owner(request, code)
    membership = get_object_or_404(Membership, team=team, user_id=user_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose owner, editor or viewer.")
        return redirect("accounts:teams")
    try:
        membership_set(team=team, user=membership.user, role=form.cleaned_data["role"])
    except LastOwner as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{membership.user} is now {form.cleaned_data['role']} of {team}.")
    return redirect("accounts:teams")


@login_required
@require_POST
def member_remove(request, code, user_id):
    team = _get_team_for_owner(request, code)
    membership = get_object_or_404(Membership, team=team, user_id=user_id)
    try:
        membership_remove(membership=membership)
    except LastOwner as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{membership.user} removed from {team}.")
    return redirect("accounts:teams")


# --------------------------------------------------------------------------------------
# Invitations and sign-up (issue 13)
# --------------------------------------------------------------------------------------


@login_required
@require_POST
def invitation_create(request, code):
    team = _get_team_for_owner(request, code)
    form = InvitationForm(request.POST)
    if form.is_valid():
        try:
            services.invitation_create(
                team=team, email=form.cleaned_data["email"], role=form.cleaned_data["role"], invited_by=request.user
            )
        except limits.TooMany as exc:
            messages.error(request, str(exc))
            return redirect("accounts:teams")
        days = services.INVITATION_DAYS
        messages.success(
            request, f"Invitation sent to {form.cleaned_data['email']}: the link works once, for {days} days."
        )
    else:
        for error in form.errors.values():
            messages.error(request, error[0])
    return redirect("accounts:teams")


@login_required
@require_POST
def invitation_revoke(request, code, pk):
    team = _get_team_for_owner(request, code)
    invitation = get_object_or_404(Invitation, team=team, pk=pk)
    if services.invitation_revoke(invitation=invitation):
        messages.success(request, f"The invitation to {invitation.email} is withdrawn: its link no longer works.")
    else:
        messages.info(request, f"The invitation to {invitation.email} was already used or withdrawn.")
    return redirect("accounts:teams")


def _invitation_refused(request, invitation):
    """The page for a link that no longer (or never) works: 404 for an unknown token, else 410."""
    state = invitation.state(timezone.now()) if invitation else "unknown"
    return render(
        request,
        "accounts/invitation_refused.html",
        {"message": services.INVITATION_REFUSALS[state], "state": state},
        status=404 if invitation is None else 410,
    )


@sensitive_post_parameters("password1", "password2")
@never_cache
def invitation(request, token):
    """The invitee's page: create an account, or (logged in) join the team; then the team is theirs."""
    invitation = selectors.invitation_by_token(token)
    if invitation is None or invitation.state(timezone.now()) != "pending":
        return _invitation_refused(request, invitation)
    form = None if request.user.is_authenticated else InvitedSignUpForm(request.POST or None, email=invitation.email)
    if request.method == "POST" and (form is None or form.is_valid()):
        try:
            # The new account and the claim on the invitation together: a link used meanwhile makes no account.
            with transaction.atomic():
                user = request.user if form is None else form.save()
                membership = services.invitation_accept(invitation=invitation, user=user)
        except services.InvitationForAnotherAddress as exc:
            return render(
                request, "accounts/invitation_refused.html", {"message": str(exc), "state": "another"}, status=403
            )
        except services.InvitationError:
            invitation.refresh_from_db()
            return _invitation_refused(request, invitation)
        if form is not None:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, f"Welcome to {invitation.team}: you are {membership.get_role_display().lower()}.")
        return redirect("accounts:teams")
    context = {"invitation": invitation, "form": form, "already": None}
    if request.user.is_authenticated:
        context["already"] = Membership.objects.filter(team=invitation.team, user=request.user).first()
        context["for_another_address"] = not invitation.is_for(request.user)
    return render(request, "accounts/invitation.html", context, status=400 if form and form.errors else 200)


def _over_client_limit(request, form, kind: str, per_hour: int, said: str) -> float:
    """Counts this request against the client address's hourly limit of ``kind``; over it, the form
    says so (``said`` … "from your address in the last hour") and the seconds to wait are returned, else 0."""
    allowed, wait = limits.take(f"{kind}:{client_ip(request)}", per_hour, 3600)
    if allowed:
        return 0.0
    form.add_error(None, f"{said} from your address in the last hour: try again in {limits.minutes(wait)}.")
    return max(1.0, wait)


def _too_many(response, wait: float):
    response["Retry-After"] = str(round(wait))
    return response


@sensitive_post_parameters("password1", "password2")
def signup(request):
    if not settings.PLIMSOLL_SIGNUP:
        raise Http404("Sign-up is turned off here: ask a team's owner for an invitation.")
    if request.user.is_authenticated:
        return redirect(settings.LOGIN_REDIRECT_URL)
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        per_hour = settings.PLIMSOLL_SIGNUPS_PER_CLIENT_HOUR
        if wait := _over_client_limit(request, form, "signup", per_hour, f"{per_hour} accounts were created"):
            return _too_many(render(request, "accounts/signup.html", {"form": form}, status=429), wait)
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, f"Welcome, {user.get_username()}: {user.teams.get()} is yours.")
        return redirect(settings.LOGIN_REDIRECT_URL)
    return render(request, "accounts/signup.html", {"form": form}, status=400 if form.errors else 200)


class PasswordResetView(auth_views.PasswordResetView):
    """Django's reset page, limited per client address (issue 30: reset mails were unlimited).

    Every request from the client counts, whether its address has an account or not, so the refusal
    tells nothing about any address. The mails to one address are limited too (MailingPasswordResetForm).
    """

    template_name = "accounts/password_reset.html"
    form_class = MailingPasswordResetForm

    def form_valid(self, form):
        per_hour = settings.PLIMSOLL_RESET_REQUESTS_PER_CLIENT_HOUR
        said = f"{per_hour} password resets were asked"
        if wait := _over_client_limit(self.request, form, "password-reset-from", per_hour, said):
            return _too_many(self.render_to_response(self.get_context_data(form=form), status=429), wait)
        return super().form_valid(form)


@login_required
def tokens(request):
    """The user's API tokens: create one (its secret shown this once), see when each was used, revoke."""
    form = TokenForm(request.POST or None, user=request.user)
    secret = None
    if request.method == "POST" and form.is_valid():
        try:
            token, secret = token_create(user=request.user, **form.cleaned_data)
        except ValueError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Token “{token.name}” created. Copy its secret now: it is not shown again.")
            form = TokenForm(user=request.user)
    rows = ApiToken.objects.filter(user=request.user).select_related("team")
    context = {"form": form, "secret": secret, "tokens": rows, "now": timezone.now(), "nav": "tokens"}
    return render(request, "accounts/tokens.html", context)


@login_required
@require_POST
def token_revoke_view(request, token_id):
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    token_revoke(token=token)
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("accounts:tokens")
