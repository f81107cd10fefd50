"""The one gate between a user and tenant data.

Every view and API endpoint reaches tenant objects through these helpers, so that
nobody can forget the team filter: another team's object is a 404 (its existence is
not revealed), and a viewer who tries to change something gets a 403.

A tenant model declares ``team_path``, the ORM path from it to its ``Team``
(``"team"`` for a project, ``"project__team"`` for what lives in a project).
"""

from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Model, QuerySet
from django.http import Http404

from .models import Membership, Team


def scoped(queryset: QuerySet, user) -> QuerySet:
    """The rows of ``queryset`` that belong to one of ``user``'s teams."""
    if not user.is_authenticated:
        return queryset.none()
    path = queryset.model.team_path
    prefix = f"{path}__" if path else ""  # a Team's own path is ""
    return queryset.filter(**{f"{prefix}memberships__user": user})


def team_of(obj: Model) -> Team:
    team = obj
    for part in filter(None, obj.team_path.split("__")):
        team = getattr(team, part)
    return team


def membership_for(user, team: Team) -> Membership | None:
    if not user.is_authenticated:
        return None
    return Membership.objects.filter(team=team, user=user).first()


def can_write(user, obj: Model) -> bool:
    """Whether ``user`` may change ``obj`` (owner or editor of its team): pages show their forms by it."""
    membership = membership_for(user, team_of(obj))
    return membership is not None and membership.can_write


def require_write(user, obj: Model) -> None:
    """Raises PermissionDenied (403) unless ``user`` may change ``obj`` (owner or editor)."""
    membership = membership_for(user, team_of(obj))
    if membership is None:
        raise Http404
    if not membership.can_write:
        raise PermissionDenied("Viewers can read but not change anything in this team.")


def get_for_user(user, queryset: QuerySet, *, write: bool = False, **lookup) -> Model:
    """One object of the user's teams, or 404; with ``write=True``, 403 for viewers.

    A malformed lookup value (``?plan=x`` for a UUID code, a number too large for its
    column) names no object either: 404, not the ValidationError or ValueError Django raises.
    """
    try:
        obj = scoped(queryset, user).get(**lookup)
    except (queryset.model.DoesNotExist, ValueError, ValidationError, OverflowError):
        raise Http404 from None
    if write:
        require_write(user, obj)
    return obj


def writable_teams(user) -> QuerySet:
    return Team.objects.filter(
        memberships__user=user, memberships__role__in=[Membership.Role.OWNER, Membership.Role.EDITOR]
    ).distinct()
