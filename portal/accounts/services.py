from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from .models import Membership, Team


@transaction.atomic
def team_create(*, name: str, owner: AbstractBaseUser) -> Team:
    team = Team.objects.create(name=name)
    Membership.objects.create(team=team, user=owner, role=Membership.Role.OWNER)
    return team


@transaction.atomic
def membership_set(*, team: Team, user: AbstractBaseUser, role: str) -> Membership:
    membership, _ = Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    return membership
