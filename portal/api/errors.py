"""One JSON shape for every API error: ``{"status", "code", "detail", "fields"?, "run"?}``.

400 carries field-level messages (the same as the forms', since both run the same rules);
409 names the run that holds a busy environment; 422 says why a target is refused.
"""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from portal.common import Invalid
from portal.limits import TooMany
from portal.projects.services import InUse
from portal.runs.services import EnvironmentBusy, RunError


class TargetRefused(Exception):
    """The plan's target is outside the allowlist (or cannot be resolved): nothing was sent."""


def _fields(detail) -> dict:
    if isinstance(detail, dict):
        return {name: _messages(value) for name, value in detail.items()}
    return {"non_field_errors": _messages(detail)}


def _messages(value) -> list | dict:
    if isinstance(value, dict) and value and all(isinstance(k, int) for k in value):
        # A nested list's errors by position (steps, levels, mix): one entry per item, {} when it is fine.
        return [_messages(value[i]) if i in value else {} for i in range(max(value) + 1)]
    if isinstance(value, dict):
        return _fields(value)
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return [_fields(v) for v in value]  # one entry per item of a nested list (steps)
        return [str(v) for v in value]
    return [str(value)]


def _body(status_code: int, code: str, detail: str, **extra) -> dict:
    return {"status": status_code, "code": code, "detail": detail, **extra}


def api_exception_handler(exc, context):
    if isinstance(exc, Invalid):  # a service's refusal: the same messages as the forms show
        exc = exceptions.ValidationError(exc.errors)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    if isinstance(exc, EnvironmentBusy):
        run = exc.run
        return Response(
            _body(409, "environment_busy", str(exc), run=str(run.code), run_number=run.number),
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024 // 1024
        return Response(
            _body(413, "too_large", f"The request body is larger than {limit} MB; upload data sets as files."),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, IntegrityError):
        # A concurrent request took the name (or the row) between the check and the write.
        return Response(
            _body(409, "conflict", "That was changed a moment ago (a name taken, say); read it again and retry."),
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, TooMany):  # an abuse limit (portal.limits): invitations per team, …
        response = Response(_body(429, "throttled", str(exc)), status=status.HTTP_429_TOO_MANY_REQUESTS)
        response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, InUse):
        return Response(_body(409, "in_use", str(exc)), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, TargetRefused):
        return Response(_body(422, "target_not_allowed", str(exc)), status=422)
    if isinstance(exc, RunError):
        return Response(
            _body(400, "invalid", str(exc), fields={"non_field_errors": [str(exc)]}),
            status=status.HTTP_400_BAD_REQUEST,
        )
    response = exception_handler(exc, context)
    if response is None:
        return None  # a bug: Django's 500, logged as usual
    if isinstance(exc, exceptions.ValidationError):
        response.data = _body(400, "invalid", "The request has errors; see fields.", fields=_fields(exc.detail))
    else:
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else str(response.data)
        code = getattr(detail, "code", None) or getattr(exc, "default_code", "error")
        response.data = _body(response.status_code, str(code), str(detail))
    return response


class ErrorSerializer(serializers.Serializer):
    status = serializers.IntegerField()
    code = serializers.CharField()
    detail = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.JSONField(), required=False, help_text="400 only: messages per field"
    )
    run = serializers.UUIDField(required=False, help_text="409 only: the run that holds the environment")
    run_number = serializers.IntegerField(required=False)


def error_responses(*codes: int) -> dict:
    """The error responses of an operation, for its schema."""
    words = {
        400: "Invalid input: messages per field",
        401: "No valid token or session",
        403: "Your role or the token's scope does not allow this",
        404: "No such object in your teams",
        409: "A conflict: the environment is busy (names the run that holds it), or the object is in use",
        413: "The request body is too large",
        422: "The target is outside the allowlist",
        429: "Too many requests: retry after the Retry-After header's seconds",
    }
    return {code: OpenApiResponse(ErrorSerializer, description=words[code]) for code in (401, 429, *codes)}


def write_schemas(
    *,
    request,
    answer,
    create: str,
    update: str,
    partial_update: str,
    destroy: str,
    partial_request=None,
    destroy_errors: tuple[int, ...] = (403, 404),
) -> dict:
    """A document's create, update (PUT), partial update (PATCH) and destroy, for ``extend_schema_view(**…)``:
    each summary, the request (``partial_request`` for PATCH when it differs), the answer and the errors."""
    errors = error_responses(400, 403, 404)
    return {
        "create": extend_schema(summary=create, request=request, responses={201: answer, **errors}),
        "update": extend_schema(summary=update, request=request, responses={200: answer, **errors}),
        "partial_update": extend_schema(
            summary=partial_update, request=partial_request or request, responses={200: answer, **errors}
        ),
        "destroy": extend_schema(summary=destroy, responses={204: None, **error_responses(*destroy_errors)}),
    }


def bad_request(request, exception=None):
    """Django's 400 (``handler400``: a request it refuses before any view, as an empty or foreign Host
    header, or a malformed multipart body) in the API's JSON shape under /api/, so an automation client
    reads every error the same way; the site's own 400 page elsewhere."""
    from django.http import JsonResponse
    from django.views import defaults

    if request.path.startswith("/api/"):
        detail = "The request could not be read (its Host header, or its body's framing, is malformed)."
        return JsonResponse(_body(400, "bad_request", detail), status=400)
    return defaults.bad_request(request, exception)
