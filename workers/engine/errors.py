"""Error kinds and the classifier that maps a failed request to one.

A report counts errors per kind and keeps one short sample message per kind and
interval, so a person reading a run sees "GET /search -> 500 Internal Server
Error" rather than a count alone, and the portal can chart errors by cause.
The kinds are few and stable on purpose: they are stored and compared across
runs.
"""

from __future__ import annotations

import errno
import ssl

from .targets import TargetNotAllowed

CONNECTION_REFUSED = "connection_refused"  # nothing listens: the target is down or saturated its backlog
CONNECTION_ERROR = "connection_error"  # any other transport failure: reset, DNS, bad response...
TIMEOUT = "timeout"  # no complete response within the plan's request_timeout
HTTP_STATUS = "http_status"  # a response, but not the expected status
CHECK_FAILED = "check_failed"  # expected status, but a text check failed
TARGET_NOT_ALLOWED = "target_not_allowed"  # refused by the allowlist before connecting
EXTRACTION_FAILED = "extraction_failed"  # a {{variable}} had no value (nothing sent), or an extraction found nothing
TLS_ERROR = "tls_error"  # the TLS handshake failed: certificate not trusted, wrong host name, no common protocol...
PROTOCOL_ERROR = "protocol_error"  # the server broke HTTP/2 (malformed frames or headers) or WebSocket framing
STREAM_RESET = "stream_reset"  # the server reset an HTTP/2 stream (RST_STREAM) before its response was complete
FLOW_CONTROL_STALLED = "flow_control_stalled"  # a body could not be sent in time: the peer's window stayed shut
STREAM_STALLED = "stream_stalled"  # a streamed response sent nothing for its idle timeout
STREAM_INCOMPLETE = "stream_incomplete"  # a streamed response ended in the middle of an event
WS_CLOSED = "ws_closed"  # the server closed a WebSocket session (or its connection) while the step needed it
MESSAGE_TOO_BIG = "message_too_big"  # a WebSocket message over the step's max_message_bytes

KINDS = (
    CONNECTION_REFUSED,
    CONNECTION_ERROR,
    TIMEOUT,
    HTTP_STATUS,
    CHECK_FAILED,
    TARGET_NOT_ALLOWED,
    EXTRACTION_FAILED,
    TLS_ERROR,
    PROTOCOL_ERROR,
    STREAM_RESET,
    FLOW_CONTROL_STALLED,
    STREAM_STALLED,
    STREAM_INCOMPLETE,
    WS_CLOSED,
    MESSAGE_TOO_BIG,
)

MAX_MESSAGE = 200


def classify(exc: BaseException) -> tuple[str, str]:
    """(kind, short description) of an exception raised while making a request.

    Looks through the exception's causes, because HTTP libraries wrap the
    socket error that tells what really happened (aiohttp raises
    ClientConnectorError from ConnectionRefusedError).
    """
    chain = list(_chain(exc))
    for e in chain:
        if isinstance(e, TargetNotAllowed):
            return TARGET_NOT_ALLOWED, short(str(e))
    for e in chain:
        kind = getattr(e, "kind", None)  # the engine's own named failures (h2.py, streams, WebSocket)
        if isinstance(kind, str) and kind in KINDS:
            return kind, short(str(e) or type(e).__name__)
    for e in chain:
        if isinstance(e, TimeoutError):
            return TIMEOUT, "timed out"
    for e in chain:
        if isinstance(e, ssl.SSLError | ssl.CertificateError):
            reason = getattr(e, "verify_message", None) or getattr(e, "reason", None) or str(e)
            return TLS_ERROR, short(f"TLS handshake failed: {reason}")
    for e in chain:
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return CONNECTION_REFUSED, "connection refused"
    text = " ".join(str(e) for e in chain)
    # Several addresses tried (e.g. ::1 and 127.0.0.1): the combined OSError lost the errno.
    if f"[Errno {errno.ECONNREFUSED}]" in text or "Connection refused" in text:
        return CONNECTION_REFUSED, "connection refused"
    if "not in the allowed targets" in text:
        return TARGET_NOT_ALLOWED, short(text)
    detail = str(exc) or type(exc).__name__
    return CONNECTION_ERROR, short(f"{type(exc).__name__}: {detail}" if str(exc) else detail)


def request_message(method: str, path: str, detail: str) -> str:
    """``"GET /search -> 500 Internal Server Error"``."""
    return short(f"{method} {path} -> {detail}")


def _chain(exc: BaseException):
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        context = None if e.__suppress_context__ else e.__context__
        todo.extend((e.__cause__, context, getattr(e, "os_error", None)))


def short(text: str) -> str:
    """One line, at most MAX_MESSAGE characters."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
