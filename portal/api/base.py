"""The one base for API views: every queryset passes through portal.accounts.access.

After PostHog's ``TeamAndOrgViewSetMixin``: subclasses implement ``safely_get_queryset``
and may not override ``get_queryset``, so that no endpoint can forget the team filter.
A token adds two limits of its own: it sees only its team, and its scope caps what it may
do (read < run < write); the user's current role still applies on top (access.require_write).
"""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.response import Response

from portal.accounts import access
from portal.accounts.models import ApiToken, ApiWrite


def request_token(request) -> ApiToken | None:
    return request.auth if isinstance(request.auth, ApiToken) else None


class TokenScope(permissions.BasePermission):
    """Unsafe methods need a token whose scope covers the action (``view.required_scope``, default write)."""

    def has_permission(self, request, view):
        token = request_token(request)
        if token is None or request.method in permissions.SAFE_METHODS:
            return True
        need = getattr(view, "required_scopes", {}).get(getattr(view, "action", None), ApiToken.Scope.WRITE)
        if not token.allows(need):
            raise exceptions.PermissionDenied(f"This token's scope is {token.scope}; this action needs a {need} token.")
        return True


class TeamScopedViewSet(viewsets.GenericViewSet):
    lookup_field = "code"
    lookup_value_regex = r"[^/]+"  # loose: a malformed code reaches the view and is a JSON 404
    permission_classes = [permissions.IsAuthenticated, TokenScope]
    # action → least scope, for actions that a run token may do (start and stop runs and trials).
    required_scopes: dict[str, str] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: implement safely_get_queryset; get_queryset scopes it to the teams")

    def safely_get_queryset(self):
        raise NotImplementedError

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular inspects views without a request user
            return self.safely_get_queryset().none()
        return self.scope_to_caller(self.safely_get_queryset())

    def scope_to_caller(self, queryset):
        """``queryset`` cut to the caller's teams (and to the token's team); usable for related objects too."""
        queryset = access.scoped(queryset, self.request.user)
        token = request_token(self.request)
        if token is not None:
            queryset = queryset.filter(**{queryset.model.team_path or "pk": token.team_id})
        return queryset

    def get_scoped(self, queryset, *, write: bool = False, **lookup):
        """One object of the caller's teams (404 otherwise); ``write=True`` needs an editor or owner (403)."""
        try:
            obj = access.get_for_user(self.request.user, self.scope_to_caller(queryset), **lookup)
        except DjangoValidationError:  # a malformed code: no such object
            raise Http404 from None
        if write:
            access.require_write(self.request.user, obj)
        return obj

    def check_object_permissions(self, request, obj):
        super().check_object_permissions(request, obj)
        if request.method not in permissions.SAFE_METHODS:
            access.require_write(request.user, obj)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        # Every change made through the API is recorded with its user and token name.
        user = getattr(request, "user", None)
        if (
            request.method not in permissions.SAFE_METHODS
            and response.status_code < 400
            and user is not None
            and user.is_authenticated
        ):
            token = request_token(request)
            ApiWrite.objects.create(
                user=user,
                token_name=token.name if token else "",
                method=request.method,
                path=request.get_full_path()[:500],
                status_code=response.status_code,
            )
        return response


class PartialUpdateMixin:
    """PATCH: the body's fields over the object's current document, then the PUT's path and rules.

    A PATCH cannot bypass a rule: it is the PUT a client would have sent with the fields it did not
    name left as they are. ``patch_base(obj)`` gives the current document (its writable fields).
    """

    def patch_base(self, obj) -> dict:
        raise NotImplementedError

    def partial_update(self, request, *args, **kwargs):
        self._patch_base = self.patch_base(self.get_object())
        return self.update(request, *args, **kwargs)

    def document(self):
        """The request's document: its body, merged over the current document on a PATCH."""
        data = self.request.data
        base = getattr(self, "_patch_base", None)
        if base is None:
            return data
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Send a JSON object of the fields to change."]})
        return {**base, **data}


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, instead of silently ignoring a typo."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(set(data) - writable)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class StrictModelSerializer(StrictSerializer, serializers.ModelSerializer):
    pass


class QueryParams(StrictSerializer):
    """Query parameters: the ones it names are checked (a bad value is a 400); the others (``page``,
    ``format`` …) are left to whatever reads them."""

    def to_internal_value(self, data):
        return super().to_internal_value({k: v for k, v in data.items() if k in self.fields})


class ListByCodes(mixins.ListModelMixin):
    """``list``, narrowed by the codes in the query that ``list_filter`` names: ``?project=<code>`` keeps
    the items whose ``project`` has that code (``?plan=`` their ``plan``, …); paginated."""

    list_filter: type[QueryParams]

    def list(self, request, *args, **kwargs):
        filters = self.list_filter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        items = self.get_queryset().filter(**{f"{name}__code": code for name, code in filters.validated_data.items()})
        page = self.paginate_queryset(items)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


# No docstring: drf-spectacular would take it as the description of every serializer using it.
class AbsoluteUrls:
    # For serializers: ``absolute(path)``, a full URL on the request's host (the path alone without a request).
    def absolute(self, path: str) -> str:
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request else path


def accepted(body: dict) -> Response:
    """202 for work queued in the background: the body names the item to poll (``url``), as does Location."""
    return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": body["url"]})


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"


UPLOAD_OVERHEAD = 1 << 20  # a multipart body's boundaries and small fields beside the file


def refuse_body_over(request, limit_mb: int, setting: str) -> None:
    """413 when the request says (Content-Length) that its body exceeds a ``limit_mb`` upload, before any is read.

    ``request.data`` would first receive the whole body, spooling it to a temporary file (a 10 GB
    body: 10 GB of disk and the transfer's time); the file's own size is checked after, for a
    body within ``UPLOAD_OVERHEAD`` of the limit.
    """
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit_mb * 1024 * 1024 + UPLOAD_OVERHEAD:
        raise BodyTooLarge(
            f"The upload is {length / 1024 / 1024:,.1f} MB; the limit is {limit_mb} MB ({setting}). "
            "Nothing was read or kept."
        )
