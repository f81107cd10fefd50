from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from .forms import MemberAddForm, RoleForm
from .models import Membership, Team
from .services import membership_set


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
    rows = [(team, my_roles[team.id], MemberAddForm(team=team)) for team in teams]
    return render(request, "accounts/teams.html", {"rows": rows, "nav": "teams", "roles": Membership.Role.choices})


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
    elif (
        membership.role == Membership.Role.OWNER
        and form.cleaned_data["role"] != Membership.Role.OWNER
        and (team.memberships.filter(role=Membership.Role.OWNER).count() == 1)
    ):
        messages.error(request, "A team needs at least one owner.")
    else:
        membership_set(team=team, user=membership.user, role=form.cleaned_data["role"])
        messages.success(request, f"{membership.user} is now {form.cleaned_data['role']} of {team}.")
    return redirect("accounts:teams")


@login_required
@require_POST
def member_remove(request, code, user_id):
    team = _get_team_for_owner(request, code)
    membership = get_object_or_404(Membership, team=team, user_id=user_id)
    if membership.role == Membership.Role.OWNER and team.memberships.filter(role=Membership.Role.OWNER).count() == 1:
        messages.error(request, "A team needs at least one owner.")
    else:
        membership.delete()
        messages.success(request, f"{membership.user} removed from {team}.")
    return redirect("accounts:teams")
