"""Every request the portal itself sends (hooks today; webhooks, metrics scrapes later) goes through here.

Why one helper: a check and a connection that each resolve the host name are two
targets, and DNS can answer an allowed address to the first and a forbidden one to
the second (rebinding). So ``request`` parses the URL with the one strict parser
(``parse_url``: the same one the forms and the allowlist check use), resolves the
host **once**, checks every address against the allowlist, and connects to exactly
a checked address, sending the original Host header and TLS server name. It follows
no redirect (a 3xx is an answer like any other), never uses a proxy (http.client
reads no proxy settings), caps the body at ``max_bytes`` and the whole exchange, look-up
included, at ``timeout`` seconds (a timer closes the socket, so a server dripping a byte at
a time cannot hold it longer).

Two allowlists, one denylist. ``notifications_allowlist`` (PLIMSOLL_OUTBOUND_ALLOWED) is where
the portal's own requests may go: webhooks, metrics scrapes, tuning changes' hooks; it is what
``request`` and ``check`` use unless told otherwise. ``targets_allowlist``
(PLIMSOLL_ALLOWED_TARGETS) is where load may go. Both refuse ``site_denylist``: the host:ports
of the site's own services (PLIMSOLL_SITE_SERVICES: database, broker, cache, mail server, the
portal itself), and ``check`` refuses them whatever allowlist it is given, so that no
answer of Redis or PostgreSQL ever reaches a delivery log or a metrics gap.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from workers.engine.targets import (
    Allowlist,
    BadTargetURL,
    Denylist,
    TargetNotAllowed,
    TargetURL,
    checked_addresses,
    getaddrinfo_addresses,
    parse_allowlist,
    parse_target_url,
)

USER_AGENT = "Plimsoll"


class OutboundRefused(ValueError):
    """URL malformed or target not allowed; message is for the user."""


class OutboundFailed(Exception):
    """Network error, timeout, or response too large; message is for the user."""


@dataclass(frozen=True)
class OutboundResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    address: str  # the address connected to: one the allowlist check passed
    elapsed_s: float


# The resolver ``request`` uses: (host, port) -> addresses. Tests swap it with ``resolver_for_tests``
# to reproduce DNS rebinding deterministically; nothing else changes it.
_resolve: Callable[[str, int], list[str]] = getaddrinfo_addresses


@contextlib.contextmanager
def resolver_for_tests(resolve: Callable[[str, int], list[str]]) -> Iterator[None]:
    """Test-only: answer name look-ups with ``resolve`` (e.g. one that changes its answer on each call)."""
    global _resolve
    previous, _resolve = _resolve, resolve
    try:
        yield
    finally:
        _resolve = previous


def parse_url(url: str) -> TargetURL:
    """The strict parser (http/https only, no control characters, no userinfo, valid brackets and port)."""
    try:
        return parse_target_url(url)
    except BadTargetURL as exc:
        raise OutboundRefused(str(exc)) from None


# The site's services resolved to addresses, for this long: a DNS answer per service per request would be too many.
_DENYLIST_TTL_S = 60.0
_denylist_cache: dict[tuple, tuple[float, Denylist]] = {}


def site_denylist() -> Denylist:
    """The site's own services (settings.PLIMSOLL_SITE_SERVICES), refused whatever an allowlist says."""
    from django.conf import settings

    key = tuple(tuple(e) for e in settings.PLIMSOLL_SITE_SERVICES)
    now = time.monotonic()
    cached = _denylist_cache.get(key)
    if cached is None or cached[0] < now:
        cached = (now + _DENYLIST_TTL_S, Denylist(key))
        _denylist_cache.clear()
        _denylist_cache[key] = cached
    return cached[1]


def targets_allowlist() -> Allowlist:
    """Where load may go (PLIMSOLL_ALLOWED_TARGETS), without the site's own services: give it to the engine."""
    from django.conf import settings

    return parse_allowlist(settings.PLIMSOLL_ALLOWED_TARGETS, denied=site_denylist())


def notifications_allowlist() -> Allowlist:
    """Where webhooks, metrics scrapes and hooks may go (PLIMSOLL_OUTBOUND_ALLOWED), without the site's services."""
    from django.conf import settings

    return parse_allowlist(settings.PLIMSOLL_OUTBOUND_ALLOWED, denied=site_denylist())


# How long saving a URL waits for its name to resolve (a name that does not resolve in time is not refused).
_SAVE_RESOLVE_S = 2.0


def site_service_refusal(url: str) -> str | None:
    """Why ``url`` is one of the site's own services, by its name, its address or what its name resolves to now.

    For forms that save a URL to call later (a webhook, a Grafana channel): ``http://localhost:5432`` is
    refused as ``http://127.0.0.1:5432`` is. A name that does not resolve now (or not within a couple of
    seconds) is not refused here: the request itself is checked again, resolved, each time it is sent.
    """
    parsed = parse_url(url)
    try:
        addresses = _bounded(_resolve, _SAVE_RESOLVE_S)(parsed.host, parsed.port)
    except (OSError, UnicodeError):
        addresses = []
    try:
        Allowlist((), site_denylist()).refuse_denied(parsed.origin, parsed.host, parsed.port, [parsed.host, *addresses])
    except TargetNotAllowed as exc:
        return f"{exc}."
    return None


def check(
    url: str, allowlist: str | Allowlist | None = None, *, timeout: float | None = None
) -> tuple[TargetURL, list[str]]:
    """Parses ``url`` and resolves its host once; returns both when every address is allowed.

    With ``timeout``, a look-up that takes longer refuses the URL (it cannot be checked).
    ``allowlist`` defaults to ``notifications_allowlist()``; the site's own services are
    refused whatever it allows.
    """
    allow = notifications_allowlist() if allowlist is None else parse_allowlist(allowlist, denied=site_denylist())
    parsed = parse_url(url)
    resolve = _resolve if timeout is None else _bounded(_resolve, timeout)
    try:
        return parsed, checked_addresses(parsed, allow, resolve)
    except TargetNotAllowed as exc:
        raise OutboundRefused(f"{exc}.") from None


def _bounded(resolve: Callable[[str, int], list[str]], seconds: float) -> Callable[[str, int], list[str]]:
    """``resolve`` given at most ``seconds``: getaddrinfo has no timeout of its own."""

    def run(host: str, port: int) -> list[str]:
        outcome: dict = {}

        def look_up() -> None:
            try:
                outcome["addresses"] = resolve(host, port)
            except Exception as exc:  # handed to the caller below
                outcome["error"] = exc

        # A daemon thread: a look-up that never answers must not hold the process at exit.
        thread = threading.Thread(target=look_up, name="outbound-resolve", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            raise OSError(f"no answer within {seconds:g} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["addresses"]

    return run


def request(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: dict | None = None,
    timeout: float = 5.0,
    max_bytes: int = 1_000_000,
    allowlist: str | Allowlist | None = None,
) -> OutboundResponse:
    """Sends one request to an allowed target (see the module docstring); raises OutboundRefused/OutboundFailed."""
    started = time.monotonic()
    deadline = started + timeout
    parsed, addresses = check(url, allowlist, timeout=timeout)
    sock, address = _connect(parsed, addresses, deadline)
    # The deadline covers everything after the connection too: closing the socket ends any read.
    # What was read before the cut may parse as a (truncated) answer, so the cut itself decides.
    cut = threading.Event()
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, (sock, cut))
    timer.daemon = True
    timer.start()
    too_slow = OutboundFailed(f"{parsed.origin} did not answer within {timeout:g} s.")
    try:
        status, response_headers, data = _exchange(parsed, sock, method, body, headers or {}, max_bytes)
    except (OSError, ValueError, http.client.HTTPException) as exc:  # ValueError: a header http.client refuses
        if cut.is_set() or isinstance(exc, TimeoutError):
            raise too_slow from None
        raise OutboundFailed(f"The request to {parsed.origin} failed: {_reason(exc)}.") from None
    finally:
        timer.cancel()
        sock.close()
    if cut.is_set():
        raise too_slow
    return OutboundResponse(status, response_headers, data, address, time.monotonic() - started)


def _connect(parsed: TargetURL, addresses: list[str], deadline: float) -> tuple[socket.socket, str]:
    """A socket to the first checked address that accepts (TLS with the URL's host as server name)."""
    errors = []
    for address in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            sock = socket.create_connection((address, parsed.port), timeout=remaining)
        except OSError as exc:
            errors.append(f"{address}: {_reason(exc)}")
            continue
        if parsed.scheme == "https":
            try:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parsed.host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                errors.append(f"{address}: TLS failed ({_reason(exc)})")
                continue
        return sock, address
    if not errors:
        raise OutboundFailed(f"{parsed.origin} could not be reached in time.")
    raise OutboundFailed(f"{parsed.origin} could not be reached ({'; '.join(errors)}).")


def _exchange(
    parsed: TargetURL, sock: socket.socket, method: str, body: bytes | None, headers: dict, max_bytes: int
) -> tuple[int, dict[str, str], bytes]:
    # http.client only formats and parses here: the socket is ours, already connected to the checked address.
    conn = http.client.HTTPConnection(parsed.host_for_url.strip("[]"), parsed.port)
    conn.sock = sock
    sent = {"Host": parsed.host_header, "User-Agent": USER_AGENT, "Connection": "close"}
    sent.update({str(k): str(v) for k, v in headers.items()})
    conn.request(method.upper(), parsed.target, body=body, headers=sent)
    response = conn.getresponse()
    data = response.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OutboundFailed(f"{parsed.origin} answered more than {max_bytes:,} bytes; the answer was not kept.")
    return response.status, {k: v for k, v in response.getheaders()}, data


def _shut(sock: socket.socket, cut: threading.Event) -> None:
    cut.set()
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc) or type(exc).__name__
