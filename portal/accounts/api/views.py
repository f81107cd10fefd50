import re

from django.contrib.auth import get_user_model
from django.db.models import Prefetch
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.accounts import access
from portal.accounts.forms import InvitationForm, MemberAddForm
from portal.accounts.models import ApiToken, Invitation, Membership, Team
from portal.accounts.services import (
    INVITATION_DAYS,
    TOKEN_DEFAULT_DAYS,
    LastOwner,
    invitation_create,
    invitation_revoke,
    membership_remove,
    membership_set,
    token_create,
    token_revoke,
)
from portal.api.base import StrictSerializer, TeamScopedViewSet, request_token
from portal.api.errors import error_responses
from portal.common import Invalid


class MemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.get_username", read_only=True)

    class Meta:
        model = Membership
        fields = ("username", "role")
        read_only_fields = fields


class TeamSerializer(serializers.ModelSerializer):
    members = MemberSerializer(source="memberships", many=True, read_only=True)

    class Meta:
        model = Team
        fields = ("code", "name", "members")
        read_only_fields = fields


class MemberWriteSerializer(StrictSerializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.EDITOR)


class InvitationSerializer(serializers.ModelSerializer):
    team = serializers.UUIDField(source="team.code", read_only=True)
    invited_by = serializers.CharField(source="invited_by.get_username", read_only=True, allow_null=True, default=None)
    accepted_by = serializers.CharField(
        source="accepted_by.get_username", read_only=True, allow_null=True, default=None
    )
    state = serializers.SerializerMethodField(help_text="pending, accepted, revoked or expired")

    class Meta:
        model = Invitation
        fields = (
            "id",
            "team",
            "email",
            "role",
            "state",
            "invited_by",
            "created_at",
            "expires_at",
            "accepted_at",
            "accepted_by",
            "revoked_at",
        )
        read_only_fields = fields

    def get_state(self, invitation) -> str:
        return invitation.state(timezone.now())


class InvitationCreatedSerializer(InvitationSerializer):
    url = serializers.CharField(
        read_only=True, help_text="The invitation link, shown this once (it is also mailed); only its hash is stored"
    )

    class Meta(InvitationSerializer.Meta):
        fields = (*InvitationSerializer.Meta.fields, "url")
        read_only_fields = fields


class InvitationWriteSerializer(StrictSerializer):
    email = serializers.CharField(max_length=254)
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.EDITOR)


INVITATION_EXAMPLE = OpenApiExample(
    "An invitation, created",
    value={
        "id": 17,
        "team": "a1b2c3d4-0000-4000-8000-000000000009",
        "email": "erin@example.com",
        "role": "editor",
        "state": "pending",
        "invited_by": "alice",
        "created_at": "2026-11-24T17:00:00Z",
        "expires_at": "2026-12-01T17:00:00Z",
        "accepted_at": None,
        "accepted_by": None,
        "revoked_at": None,
        "url": "https://plimsoll.example/invitations/Xq3vT9aBc7…/",
    },
    response_only=True,
)


class TokenSerializer(serializers.ModelSerializer):
    team = serializers.UUIDField(source="team.code", read_only=True)

    class Meta:
        model = ApiToken
        fields = ("id", "name", "team", "scope", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at")
        read_only_fields = fields


@extend_schema_view(
    list=extend_schema(
        summary="Your teams and their members", responses={200: TeamSerializer(many=True), **error_responses()}
    ),
    retrieve=extend_schema(summary="One of your teams", responses={200: TeamSerializer, **error_responses(404)}),
)
class TeamViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = TeamSerializer

    def safely_get_queryset(self):
        members = Membership.objects.select_related("user").order_by("user__username")
        return Team.objects.prefetch_related(Prefetch("memberships", queryset=members)).order_by("name")

    def _team_for_owner(self, code) -> Team:
        """The team (404 outside your teams); 403 unless you own it: only owners manage members."""
        team = self.get_scoped(Team.objects.all(), code=code)
        membership = access.membership_for(self.request.user, team)
        if not membership.can_manage:
            raise exceptions.PermissionDenied("Only a team's owners manage its members.")
        return team

    @extend_schema(
        summary="Add a member or change a member's role (owners only)",
        request=MemberWriteSerializer,
        responses={200: TeamSerializer, **error_responses(400, 403, 404)},
    )
    @action(detail=True, methods=["post"])
    def members(self, request, code=None):
        team = self._team_for_owner(code)
        serializer = MemberWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user = get_user_model().objects.filter(username=data["username"].strip()).first()
        if user is None or not team.memberships.filter(user=user).exists():
            # A new member: the page's form and its messages ("There is no user called …").
            form = MemberAddForm(data, team=team)
            if not form.is_valid():
                raise serializers.ValidationError({k: list(v) for k, v in form.errors.items()})
            user = form.cleaned_data["user"]
        try:
            membership_set(team=team, user=user, role=data["role"])
        except LastOwner as exc:
            raise serializers.ValidationError({"role": [str(exc)]}) from None
        return Response(TeamSerializer(self.safely_get_queryset().get(pk=team.pk)).data)

    @extend_schema(
        methods=["GET"],
        summary="The team's invitations, newest first (owners only); ?state=pending for the open ones",
        responses={200: InvitationSerializer(many=True), **error_responses(403, 404)},
    )
    @extend_schema(
        methods=["POST"],
        summary=f"Invite someone by e-mail with a role (owners only): a single-use link, mailed, "
        f"valid {INVITATION_DAYS} days",
        request=InvitationWriteSerializer,
        responses={201: InvitationCreatedSerializer, **error_responses(400, 403, 404)},
        examples=[INVITATION_EXAMPLE],
    )
    @action(detail=True, methods=["get", "post"], pagination_class=None)
    def invitations(self, request, code=None):
        team = self._team_for_owner(code)
        if request.method == "GET":
            rows = team.invitations.select_related("team", "invited_by", "accepted_by").order_by("-created_at", "-id")
            now = timezone.now()
            if request.query_params.get("state") == "pending":
                rows = rows.filter(accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=now)
            return Response(InvitationSerializer(rows, many=True).data)
        body = InvitationWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # The page's form: the same address checks and messages.
        form = InvitationForm(body.validated_data)
        if not form.is_valid():
            raise serializers.ValidationError({k: list(v) for k, v in form.errors.items()})
        invitation, token = invitation_create(
            team=team, email=form.cleaned_data["email"], role=form.cleaned_data["role"], invited_by=request.user
        )
        invitation.url = request.build_absolute_uri(reverse("accounts:invitation", args=[token]))
        return Response(InvitationCreatedSerializer(invitation).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Withdraw a pending invitation (owners only): its link stops working at once",
        request=None,
        responses={204: None, **error_responses(403, 404, 409)},
    )
    @action(detail=True, methods=["delete"], url_path=r"invitations/(?P<invitation_id>[^/]+)")
    def invitation_revoke(self, request, code=None, invitation_id=None):
        team = self._team_for_owner(code)
        if not re.fullmatch(r"[0-9]{1,18}", str(invitation_id)):
            raise exceptions.NotFound("No such invitation of this team.")
        invitation = team.invitations.filter(pk=int(invitation_id)).first()
        if invitation is None:
            raise exceptions.NotFound("No such invitation of this team.")
        if not invitation_revoke(invitation=invitation) and invitation.accepted_at is not None:
            return Response(
                {
                    "status": 409,
                    "code": "already_accepted",
                    "detail": f"The invitation to {invitation.email} was already used: remove the member instead.",
                },
                status=status.HTTP_409_CONFLICT,
            )
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Remove a member (owners only; a team keeps at least one owner)",
        request=None,
        responses={204: None, **error_responses(400, 403, 404)},
    )
    @action(detail=True, methods=["delete"], url_path=r"members/(?P<username>[^/]+)")
    def member_remove(self, request, code=None, username=None):
        team = self._team_for_owner(code)
        # A NUL byte names nobody (PostgreSQL refuses it in a text comparison: a 500, not a 404).
        members = team.memberships.filter(user__username=username) if "\x00" not in username else None
        membership = members.select_related("user", "team").first() if members is not None else None
        if membership is None:
            raise exceptions.NotFound("No such member of this team.")
        try:
            membership_remove(membership=membership)
        except LastOwner as exc:
            raise serializers.ValidationError({"username": [str(exc)]}) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenCreatedSerializer(TokenSerializer):
    secret = serializers.CharField(read_only=True, help_text="Shown this once; only its hash is stored")

    class Meta(TokenSerializer.Meta):
        fields = (*TokenSerializer.Meta.fields, "secret")
        read_only_fields = fields


class TokenCreateSerializer(StrictSerializer):
    team = serializers.UUIDField(help_text="A team you own")
    name = serializers.CharField(max_length=100, help_text="What uses it, e.g. “GitLab deploy pipeline”")
    scope = serializers.ChoiceField(choices=ApiToken.Scope.choices, default=ApiToken.Scope.RUN)
    expires_days = serializers.IntegerField(
        min_value=1,
        max_value=3650,
        allow_null=True,
        default=TOKEN_DEFAULT_DAYS,
        help_text="Days until it expires (default 90); null: never",
    )


@extend_schema_view(
    list=extend_schema(
        summary="Your API tokens (never their secrets)",
        responses={200: TokenSerializer(many=True), **error_responses()},
    ),
    destroy=extend_schema(summary="Revoke one of your tokens", responses={204: None, **error_responses(403, 404)}),
    create=extend_schema(
        summary="A new token of a team you own, for onboarding scripts: signed in (not with a token); "
        "the secret shown once",
        request=TokenCreateSerializer,
        responses={201: TokenCreatedSerializer, **error_responses(400, 403, 404)},
    ),
)
class TokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet):
    """Tokens are created on the Tokens page, with ``manage.py create_token``, or here by a team's owner signed in.

    Creating one here needs a session, not a token: a leaked token cannot mint itself a successor
    that outlives its revocation. The secret is in the answer of the create call only.
    """

    serializer_class = TokenSerializer
    lookup_field = "id"

    def safely_get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user).select_related("team")

    def check_object_permissions(self, request, obj):
        # Your own token: revoking it needs no editor role (a viewer may revoke their read token).
        for permission in self.get_permissions():
            if not permission.has_object_permission(request, self, obj):
                self.permission_denied(request)

    def destroy(self, request, *args, **kwargs):
        token_revoke(token=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    def create(self, request, *args, **kwargs):
        if request_token(request) is not None:
            raise exceptions.PermissionDenied("Tokens are created signed in (a session), not with another token.")
        body = TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        team = self.get_scoped(Team.objects.all(), code=data["team"])
        membership = access.membership_for(request.user, team)
        if membership is None or membership.role != Membership.Role.OWNER:
            raise exceptions.PermissionDenied("Only the team's owners create tokens through the API.")
        try:
            token, secret = token_create(
                user=request.user, team=team, name=data["name"], scope=data["scope"], expires_days=data["expires_days"]
            )
        except ValueError as exc:
            raise Invalid({"non_field_errors": [str(exc)]}) from None
        token.secret = secret
        return Response(TokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)
