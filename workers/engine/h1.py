"""The engine's own HTTP/1.1 client: ``asyncio.Protocol`` + httptools (llhttp).

Why: aiohttp spends ~120 µs of CPU per request; a bare protocol on uvloop ~10 µs.
The engine's speed is its HTTP layer's speed, so ``H1Client`` implements the
``HttpClient`` interface of http.py directly on transports, keeping what a
browser-like virtual user needs and nothing else.

One ``H1Client`` per virtual user, created inside the running loop:

* **Connections**: a keep-alive pool per origin (scheme, host, port), at most
  ``limit`` (6, as a browser) connections each; further requests wait for a
  free connection in arrival order (FIFO hand-off). Idle connections are reused
  most recent first; a connection the server closed (``Connection: close``,
  EOF, reset) or that broke the framing (parser error, bytes nobody asked for)
  is discarded and a fresh one opened when needed.
* **Retry rule**: a request that fails on a *reused* connection before any byte
  of its response arrived (the server closed the idle connection while we were
  sending) is sent again once, on a new connection (or one another request
  has just finished with, if all ``limit`` are busy), if its method is
  idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE; RFC 9110 §9.2.2). A
  connection already seen closed before writing is never used, whatever the
  method (nothing was sent). A POST or PATCH that failed after being written
  is not resent: the server may have applied it. Nothing else is retried.
* **Target safety**: every connection resolves its host with
  ``loop.getaddrinfo`` and goes through the client's ``TargetGuard``: a host
  name must resolve only to allowed addresses (``check_resolved``) unless the
  name itself is allowed, and the socket comes from ``guard.socket_factory``,
  which refuses an address outside the allowlist (IP literals, redirects) with
  ``TargetNotAllowed`` before any ``connect()``.
* **Requests**: one ``transport.write()`` per request. The request line and
  the headers that depend only on (method, URL, headers) are built once and
  cached; the hot path adds the Cookie header and Content-Length, and, with
  ``client.trace`` set (tracecontext.py), a W3C ``traceparent`` line: one per
  ``request()`` call (the same on its redirect hops), kept in
  ``client.last_traceparent`` (``last_trace_id`` decodes its trace id); a
  step's own ``traceparent`` header wins.
  Defaults: Host, User-Agent, ``Accept: */*``, ``Accept-Encoding: gzip, deflate,
  br``; a user header overrides a default of the same name (any case). A user
  ``Cookie`` header replaces the jar's cookies; user Content-Length and
  Transfer-Encoding are ignored (the body is always sent with Content-Length).
* **Responses**: httptools' response parser; body by Content-Length, chunked,
  or until close; none for HEAD, 1xx, 204 and 304; interim 1xx responses are
  skipped. Keep-alive per ``parser.should_keep_alive()`` (HTTP/1.1 rules).
  ``Response.headers`` is a ``Headers`` dict: lower-case names, case-insensitive
  lookups, repeated fields joined with ", " except Set-Cookie (``getall``).
* **Bodies**: gzip, deflate (zlib or raw) and br are decoded; ``bytes_in`` is
  the body bytes as received (compressed, without headers), summed over the
  redirect hops, and ``bytes_out`` the request body bytes sent, over all hops.
* **Redirects**: 301/302 (POST becomes GET), 303 (GET, no body, except HEAD),
  307/308 (same method and body), relative Location resolved against the
  current URL, at most ``http.MAX_REDIRECTS`` followed (``TooManyRedirects``),
  each hop checked by the allowlist when it connects, cookies applied between
  hops; ``Response.hits`` = 1 + redirects. Authorization and a user Cookie
  header are dropped when a redirect leaves the origin.
* **Cookies**: a small RFC 6265 jar per client (``CookieJar``): Domain (host-only
  by default; IP hosts such as 127.0.0.1 work, exact match only), Path (with the
  default-path rule), Expires/Max-Age (Max-Age wins; a past date or
  Max-Age <= 0 deletes), Secure (sent and accepted only over https or to a
  loopback host, the browsers' "potentially trustworthy" rule). No public
  suffix list (a load test targets the sites its author named), SameSite
  and HttpOnly are accepted and ignored (there are no scripts and no sites).
* **Timings**: ``ttfb_s`` from the call to the final response's headers,
  ``total_s`` to its last body byte (both taken in the parser's callbacks,
  so the wait for the task to be scheduled again is not counted), pool waits,
  connects and redirect hops included. ``Response.connect_s`` (also
  ``client.last_connect_s``) is the time the request spent opening connections
  (resolution, TCP, TLS, over all hops; 0 when every hop reused one).
* **Timeout**: the whole request (pool wait, connect, redirects, body) runs
  under one deadline with ``asyncio.timeout()``'s semantics (the task is
  cancelled and the cancellation becomes ``TimeoutError``), but through a
  shared per-loop deadline wheel (``_Deadlines``) that costs ~0.5 µs instead of
  ~6 µs, firing at most 10 ms late. On expiry the connection in use is aborted,
  never returned to the pool.

Not supported: HTTP/2, proxies, pipelining, ``Expect: 100-continue`` (an
interim 100 is skipped), streaming bodies (a response is read whole into
memory), chunked uploads, upgrades (a 101 is returned as a response and its
connection closed), TLS session resumption across connections.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import errno
import ipaddress
import socket
import ssl
import time
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from http.cookiejar import http2time
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import brotli
from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

from .http import MAX_REDIRECTS, USER_AGENT, BodyDecodeError, Response, decode_body
from .streams import StreamObserver
from .targets import DEFAULT_ALLOWLIST, Allowlist, TargetGuard
from .tracecontext import TraceContext, trace_id_of

__all__ = [
    "CookieJar",
    "H1Client",
    "Headers",
    "HttpProtocolError",
    "InvalidURL",
    "ServerDisconnected",
    "TooManyRedirects",
    "make_h1_client",
]

DEFAULT_LIMIT = 6  # connections per origin, as a browser opens
ACCEPT_ENCODING = "gzip, deflate, br"
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
REDIRECTS = frozenset({301, 302, 303, 307, 308})
CLOSE_GRACE_S = 1.0  # close(): how long a graceful close (TLS close_notify) may take before an abort
_PREPARED_CACHE_MAX = 4096
HTTP11 = "http/1.1"  # Response.protocol of a request sent over HTTP/1.1
_now = time.perf_counter
# _exchange builds a Response positionally, in this order of its fields.
_RESPONSE_FIELDS = (
    *("status", "headers", "body", "bytes_in", "bytes_out", "ttfb_s", "total_s"),
    *("reason", "hits", "url", "connect_s", "protocol"),
)
if tuple(f.name for f in dataclasses.fields(Response)) != _RESPONSE_FIELDS:
    raise ImportError("http.Response's fields changed: H1Client._exchange must follow their order")
_time_ns = time.time_ns
_current_task = asyncio.current_task
# The running task of a loop, read directly: asyncio.current_task() is a Python function on 3.11 (the
# loop lookup and the call cost ~0.4 µs a request); where the dict is not there, current_task() is used.
_current_tasks: dict[Any, asyncio.Task[Any]] | None = getattr(asyncio.tasks, "_current_tasks", None)


class HttpProtocolError(ConnectionError):
    """The server's bytes are not a valid HTTP/1.1 response (classified as connection_error)."""


class ServerDisconnected(ConnectionResetError):
    """The connection closed before the response was complete."""


class TooManyRedirects(HttpProtocolError):
    pass


class InvalidURL(ValueError):
    pass


# -- response headers ------------------------------------------------------------------------------


class Headers(dict):
    """Response headers: lower-case names, case-insensitive lookups.

    A repeated field is joined with ", " (RFC 9110 §5.3), except Set-Cookie
    whose value is its first occurrence; ``getall(name)`` gives every value.
    Iteration yields the lower-case names.
    """

    _multi: dict[str, list[str]] | None = None  # repeated fields, every value

    def __getitem__(self, key: str) -> str:
        return dict.__getitem__(self, key.lower())

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self, key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and dict.__contains__(self, key.lower())

    def getall(self, key: str) -> list[str]:
        key = key.lower()
        if self._multi is not None and key in self._multi:
            return list(self._multi[key])
        value = dict.get(self, key)
        return [] if value is None else [value]

    def _add(self, name: str, value: str) -> None:
        old = dict.get(self, name)
        if old is None:
            dict.__setitem__(self, name, value)
            return
        multi = self._multi
        if multi is None:
            multi = self._multi = {}
        values = multi.get(name)
        if values is None:
            values = multi[name] = [old]
        values.append(value)
        if name != "set-cookie":
            dict.__setitem__(self, name, old + ", " + value)


_dict_get = dict.get


# -- cookies ---------------------------------------------------------------------------------------


class Cookie:
    __slots__ = ("name", "value", "domain", "host_only", "path", "secure", "expires", "created")

    def __init__(
        self,
        name: str,
        value: str,
        domain: str,
        host_only: bool,
        path: str,
        secure: bool,
        expires: float | None,
        created: int,
    ) -> None:
        self.name = name
        self.value = value
        self.domain = domain
        self.host_only = host_only
        self.path = path
        self.secure = secure
        self.expires = expires
        self.created = created

    def __repr__(self) -> str:
        return f"Cookie({self.name}={self.value!r}, domain={self.domain!r}, path={self.path!r})"


class CookieJar:
    """A virtual user's cookies (RFC 6265, without a public suffix list; see the module docstring)."""

    _CACHE_MAX = 256

    def __init__(self) -> None:
        self._cookies: dict[tuple[str, str, str], Cookie] = {}
        self._seq = 0
        # (host, path, secure) -> (b"Cookie: ...\r\n" or b"", valid until (time.time()))
        self._cache: dict[tuple[str, str, bool], tuple[bytes, float]] = {}

    def __len__(self) -> int:
        return len(self._cookies)

    def __iter__(self) -> Iterator[Cookie]:
        return iter(list(self._cookies.values()))

    def clear(self) -> None:
        self._cookies.clear()
        self._cache.clear()

    def get(self, name: str, domain: str | None = None) -> str | None:
        """The value of a live cookie called ``name`` (on ``domain`` if given), or None."""
        now = time.time()
        for c in self._cookies.values():
            if c.name == name and (domain is None or c.domain == domain) and (c.expires is None or c.expires > now):
                return c.value
        return None

    def set_cookie(self, header: str, host: str, request_path: str, secure: bool, is_ip: bool) -> None:
        """Store (or delete) the cookie of one Set-Cookie header received from ``host``."""
        name_value, *attrs = header.split(";")
        name, eq, value = name_value.partition("=")
        name = name.strip()
        if not eq or not name:
            return
        value = value.strip()
        now = time.time()
        expires: float | None = None
        max_age: float | None = None
        domain = ""
        path = ""
        secure_only = False
        for attr in attrs:
            key, _, val = attr.partition("=")
            key = key.strip().lower()
            val = val.strip()
            if key == "expires":
                t = http2time(val)
                if t is not None:
                    expires = float(t)
            elif key == "max-age":
                if val.lstrip("-").isdigit():
                    delta = int(val)
                    max_age = now + delta if delta > 0 else float("-inf")
            elif key == "domain":
                if val:
                    domain = val.lstrip(".").lower()
            elif key == "path":
                if val.startswith("/"):
                    path = val
            elif key == "secure":
                secure_only = True
        if max_age is not None:
            expires = max_age
        if secure_only and not secure:
            return  # a Secure cookie from an insecure origin is ignored
        if domain:
            if domain != host and (is_ip or not host.endswith("." + domain)):
                return  # a cookie for another site
            host_only = domain == host and is_ip
        else:
            domain, host_only = host, True
        if not path:
            path = _default_path(request_path)
        key3 = (domain, path, name)
        self._cache.clear()
        if expires is not None and expires <= now:
            self._cookies.pop(key3, None)
            return
        old = self._cookies.get(key3)
        created = old.created if old is not None else self._seq
        self._seq += 1
        self._cookies[key3] = Cookie(name, value, domain, host_only, path, secure_only, expires, created)

    def header(self, host: str, path: str, secure: bool, is_ip: bool) -> bytes:
        """``b"Cookie: a=1; b=2\\r\\n"`` for a request, or ``b""`` (cached until the jar or a cookie expires)."""
        key = (host, path, secure)
        now = time.time()
        hit = self._cache.get(key)
        if hit is not None and now < hit[1]:
            return hit[0]
        matched: list[Cookie] = []
        valid_until = float("inf")
        expired: list[tuple[str, str, str]] = []
        for key3, c in self._cookies.items():
            if c.expires is not None and c.expires <= now:
                expired.append(key3)
                continue
            if c.host_only or is_ip:
                if host != c.domain:
                    continue
            elif host != c.domain and not host.endswith("." + c.domain):
                continue
            cp = c.path
            if path != cp and not (path.startswith(cp) and (cp.endswith("/") or path[len(cp)] == "/")):
                continue
            if c.secure and not secure:
                continue
            matched.append(c)
            if c.expires is not None and c.expires < valid_until:
                valid_until = c.expires
        for key3 in expired:
            del self._cookies[key3]
        if expired:
            self._cache.clear()
        if matched:
            matched.sort(key=lambda c: (-len(c.path), c.created))
            text = "; ".join(f"{c.name}={c.value}" if c.name else c.value for c in matched)
            value = b"Cookie: " + _encode_header_value(text) + b"\r\n"
        else:
            value = b""
        if len(self._cache) >= self._CACHE_MAX:
            self._cache.clear()
        self._cache[key] = (value, valid_until)
        return value


def _default_path(request_path: str) -> str:
    """RFC 6265 §5.1.4."""
    if not request_path.startswith("/") or request_path.count("/") == 1:
        return "/"
    return request_path[: request_path.rfind("/")]


# -- prepared requests -----------------------------------------------------------------------------


class _Prepared:
    """Everything about a request that depends only on (method, URL, user headers): built once, cached."""

    __slots__ = (
        "method",
        "url",
        "origin",
        "scheme",
        "host",
        "port",
        "ip",
        "secure",
        "path",
        "block",
        "tail",
        "full",
        "user_cookie",
        "user_trace",
        "close",
        "head",
        "idempotent",
        "target",
        "authority",
        "fields",
        "h2",
    )


_prepared: dict[tuple[str, str, tuple[tuple[str, str], ...]], _Prepared] = {}
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def _prepare(method: str, url: str, headers: Mapping[str, str] | None) -> _Prepared:
    key = (method, url, tuple(headers.items()) if headers else ())
    p = _prepared.get(key)
    if p is None:
        p = _build(method, url, key[2])
        if len(_prepared) >= _PREPARED_CACHE_MAX:
            _prepared.clear()
        _prepared[key] = p
    return p


def _build(method: str, url: str, user_headers: tuple[tuple[str, str], ...]) -> _Prepared:
    if not method or not method.isascii() or any(ch in method for ch in " \r\n\t:/"):
        raise InvalidURL(f"bad HTTP method {method!r}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidURL(f"{url}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InvalidURL(f"{url} is not an http:// or https:// URL")
    host = parts.hostname
    if not host:
        raise InvalidURL(f"{url} has no host")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise InvalidURL(f"{url}: bad host name ({exc})") from None
    default_port = 443 if scheme == "https" else 80
    if port is None:
        port = default_port
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        ip = None
    path = parts.path or "/"
    if not path.startswith("/"):
        path = "/" + path
    target = path + ("?" + parts.query if parts.query else "")
    if not target.isascii() or any(ch in target for ch in ' \r\n\t"<>`{}|\\^'):
        target = quote(target, safe="/%:@!$&'()*+,;=-._~?[]")
    host_header = f"[{host}]" if ip is not None and ip.version == 6 else host
    if port != default_port:
        host_header += f":{port}"

    fields: dict[str, tuple[str, str]] = {
        "host": ("Host", host_header),
        "user-agent": ("User-Agent", USER_AGENT),
        "accept": ("Accept", "*/*"),
        "accept-encoding": ("Accept-Encoding", ACCEPT_ENCODING),
    }
    if parts.username is not None:
        creds = f"{parts.username}:{parts.password or ''}".encode()
        fields["authorization"] = ("Authorization", "Basic " + base64.b64encode(creds).decode("ascii"))
    for name, value in user_headers:
        lname = name.lower()
        if lname in ("content-length", "transfer-encoding"):
            continue
        if lname in fields and lname not in ("host", "user-agent", "accept", "accept-encoding", "authorization"):
            # a repeated user header (only possible with a multidict)
            fields[lname] = (name, fields[lname][1] + ", " + value)
        else:
            fields[lname] = (name, value)

    lines = [f"{method} {target} HTTP/1.1\r\n".encode("ascii")]
    for name, value in fields.values():
        if not name or not name.isascii() or any(ch in name for ch in " \t\r\n:"):
            raise InvalidURL(f"bad header name {name!r}")
        lines.append(name.encode("ascii") + b": " + _encode_header_value(str(value)) + b"\r\n")

    p = _Prepared()
    p.method = method
    p.url = url
    p.origin = (scheme, host, port)
    p.scheme = scheme
    p.host = host
    p.port = port
    p.ip = ip
    p.secure = scheme == "https" or (ip is not None and ip.is_loopback) or host in _LOOPBACK_NAMES
    p.path = path.split("?", 1)[0]
    p.block = b"".join(lines)
    p.tail = b"Content-Length: 0\r\n\r\n" if method in ("POST", "PUT", "PATCH") else b"\r\n"
    p.full = p.block + p.tail
    p.user_cookie = "cookie" in fields
    p.user_trace = "traceparent" in fields  # the step sets its own: ours is not added
    p.close = "connection" in fields and "close" in fields["connection"][1].lower()
    p.head = method == "HEAD"
    p.idempotent = method in IDEMPOTENT
    p.target = target
    p.authority = host_header
    p.fields = tuple((lname, str(value)) for lname, (_, value) in fields.items())
    p.h2 = None  # HTTP/2 header block, built by h2.py on first use
    return p


def _encode_header_value(value: str) -> bytes:
    if "\r" in value or "\n" in value or "\0" in value:
        raise InvalidURL(f"a header value contains a line break: {value[:60]!r}")
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


# -- decoding --------------------------------------------------------------------------------------


def decode(raw: bytes, content_encoding: str) -> bytes:
    """Undo the Content-Encoding (gzip, deflate, br; a list is undone last first)."""
    if not raw:
        return raw
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    data = raw
    for coding in reversed(codings):
        if coding == "br":
            try:
                data = brotli.decompress(data)
            except brotli.error as exc:
                raise BodyDecodeError(f"could not decode the br body ({exc})") from None
        else:
            data = decode_body(data, coding)
    return data


# -- one connection --------------------------------------------------------------------------------


class _StrayResponse(Exception):
    pass


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 connection: the protocol that parses responses, one request at a time."""

    __slots__ = (
        "transport",
        "parser",
        "waiter",
        "closed",
        "discarded",
        "got_bytes",
        "reset_parser",
        "head",
        "status",
        "reason",
        "headers",
        "raw_headers",
        "chunks",
        "interim",
        "headers_done",
        "t_headers",
        "t_done",
        "keep_alive",
        "lost_waiter",
        "served",
        "pool",
        "observer",
    )

    def __init__(self) -> None:
        self.observer: StreamObserver | None = None  # fed every body piece of a streamed response
        self.transport: asyncio.Transport | None = None
        self.parser = HttpResponseParser(self)
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.discarded = False
        self.got_bytes = False
        self.reset_parser = False
        self.head = False
        self.status = 0
        self.reason = ""
        self.headers = Headers()
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.interim = False
        self.headers_done = False
        self.t_headers = 0.0
        self.t_done = 0.0
        self.keep_alive = False
        self.lost_waiter: asyncio.Future[None] | None = None
        self.served = 0  # responses completed on this connection
        self.pool: _Pool | None = None

    # -- used by the client --

    def start(self, waiter: asyncio.Future[None], head: bool, observer: StreamObserver | None = None) -> None:
        self.observer = observer
        if self.reset_parser:
            self.parser = HttpResponseParser(self)
            self.reset_parser = False
        self.waiter = waiter
        self.head = head
        self.got_bytes = False
        self.headers_done = False

    def body(self) -> bytes:
        chunks = self.chunks
        if not chunks:
            return b""
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def stall(self, exc: BaseException) -> None:
        """A streamed response went idle too long (StreamObserver): fail the request, close the connection."""
        self._fail(exc)
        self.abort()

    # -- asyncio callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self.waiter is None:  # bytes nobody asked for: the framing cannot be trusted any more
            self.abort()
            return
        try:
            self.parser.feed_data(data)
        except HttpParserUpgrade:
            self.keep_alive = False
            if self.waiter is not None and self.headers_done:
                self._complete()
            self.abort()
        except HttpParserError as exc:
            if self.waiter is not None:
                self._fail(HttpProtocolError(f"invalid HTTP response ({exc or type(exc).__name__})"))
            self.abort()

    def eof_received(self) -> bool | None:
        self.closed = True  # never reused from now on
        return None  # close the transport; connection_lost() finishes a body delimited by the close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                if exc is None and self._ends_at_eof():
                    self.keep_alive = False
                    self.t_done = _now()
                    w.set_result(None)
                elif isinstance(exc, OSError):
                    w.set_exception(exc)
                else:
                    where = "in the middle of the response" if self.got_bytes else "without sending a response"
                    err = ServerDisconnected(f"the server closed the connection {where}")
                    if exc is not None:
                        err.__cause__ = exc
                    w.set_exception(err)
        lw = self.lost_waiter
        if lw is not None and not lw.done():
            lw.set_result(None)

    def _ends_at_eof(self) -> bool:
        """The response's headers are in and its body is delimited by the end of the connection."""
        if not self.headers_done or self.head:
            return False
        h = self.headers
        if _dict_get(h, "content-length") is not None:
            return False
        if "chunked" in _dict_get(h, "transfer-encoding", "").lower():
            return False
        return self.status not in (204, 304)

    def _complete(self) -> None:
        self.t_done = _now()
        self.served += 1
        w = self.waiter
        self.waiter = None
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        w = self.waiter
        self.waiter = None
        if w is not None and not w.done():
            w.set_exception(exc)

    # -- httptools callbacks --

    def on_message_begin(self) -> None:
        if self.waiter is None:
            raise _StrayResponse("a response that no request asked for")
        self.status = 0
        self.reason = ""
        self.raw_headers = []
        self.chunks = []
        self.interim = False

    def on_status(self, status: bytes) -> None:
        self.reason = status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        self.status = status
        if 100 <= status < 200 and status != 101:
            self.interim = True  # 100 Continue, 103 Early Hints: the final response follows
            return
        self.headers_done = True
        self.t_headers = _now()
        if self.observer is not None:
            self.observer.touch()
        self.headers = _response_headers(self.raw_headers)
        if self.head:
            # llhttp cannot be told that a HEAD response has no body: finish here, and use a fresh
            # parser for the next response on this connection.
            self.keep_alive = self.parser.should_keep_alive()
            self.reset_parser = True
            self._complete()

    def on_body(self, body: bytes) -> None:
        if self.waiter is None:  # a body after a HEAD response: the framing is broken, data_received aborts
            raise _StrayResponse("a body after a response without one")
        self.chunks.append(body)
        observer = self.observer
        if observer is not None:
            observer.feed(body)

    def on_message_complete(self) -> None:
        if self.interim or self.waiter is None:
            return
        self.keep_alive = self.parser.should_keep_alive()
        self._complete()


_headers_seen: dict[tuple[tuple[bytes, bytes], ...], dict[str, str]] = {}
_HEADERS_SEEN_MAX = 512


def _response_headers(raw: list[tuple[bytes, bytes]]) -> Headers:
    """The ``Headers`` of a response's raw fields.

    A server sends the same fields again and again (its Date changes once a second), so the
    decoded dict of a field list without repeats is remembered (at most ``_HEADERS_SEEN_MAX``
    lists, then forgotten all at once) and a hit is a copy of it: each response gets its own
    ``Headers``, equal to what decoding would have made.
    """
    key = tuple(raw)
    seen = _headers_seen.get(key)
    if seen is not None:
        return Headers(seen)
    h = Headers({n.decode("latin-1").lower(): v.decode("latin-1") for n, v in raw})
    if len(h) != len(raw):  # a repeated field
        h = Headers()
        for n, v in raw:
            h._add(n.decode("latin-1").lower(), v.decode("latin-1"))
        return h
    if len(_headers_seen) >= _HEADERS_SEEN_MAX:
        _headers_seen.clear()
    _headers_seen[key] = dict(h)
    return h


# -- the pool of one origin ------------------------------------------------------------------------


class _Pool:
    __slots__ = ("idle", "waiters", "count", "conns")

    def __init__(self) -> None:
        self.idle: list[_Conn] = []
        # Futures of requests waiting for a connection: resolved with an idle _Conn, or with None to
        # hand over a free slot (the waiter then opens a connection).
        self.waiters: deque[asyncio.Future[_Conn | None]] = deque()
        self.count = 0  # connection slots taken: connecting, idle or busy
        self.conns: set[_Conn] = set()


_tls_contexts: dict[bool, ssl.SSLContext] = {}


async def _connect_socket(loop: asyncio.AbstractEventLoop, sock: socket.socket, address: Any) -> None:
    """``loop.sock_connect`` for an address already resolved (uvloop's resolves it again, in its thread pool:
    ≈ 120 µs of CPU a connection on this machine, against ≈ 10 µs for the connect and the wait here)."""
    try:
        sock.connect(address)
        return
    except (BlockingIOError, InterruptedError):
        pass
    fd = sock.fileno()
    writable = loop.create_future()
    loop.add_writer(fd, _set_writable, writable)
    try:
        await writable
    finally:
        loop.remove_writer(fd)
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, f"Connect call failed {address}")  # asyncio's words: an errno picks the subclass


def _set_writable(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _tls_context(verify: bool) -> ssl.SSLContext:
    ctx = _tls_contexts.get(verify)
    if ctx is None:
        ctx = ssl.create_default_context()
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"])
        _tls_contexts[verify] = ctx
    return ctx


# -- deadlines -------------------------------------------------------------------------------------


class _Deadlines:
    """Request deadlines for one event loop, checked every ``TICK_S`` by a single timer.

    ``asyncio.timeout()`` costs ~6 µs per request on uvloop (a libuv timer
    started and stopped each time), a third of the whole request. Here arming
    and disarming are a set insert and discard in a bucket of deadlines rounded
    up to the next tick; one loop timer runs while any request is armed, and an
    expired request's task is cancelled, then ``request()`` turns that
    cancellation into TimeoutError exactly as ``asyncio.timeout()`` does
    (``uncancel()``, so an outside cancellation still wins). A timeout fires at
    most ``TICK_S`` after its deadline.
    """

    TICK_S = 0.01

    __slots__ = ("_buckets", "_fired", "_next", "_ticking")

    # No reference to the loop is kept here (the loop is passed in): the per-loop registry is a
    # WeakKeyDictionary, whose values must not keep their keys alive.
    def __init__(self) -> None:
        self._buckets: dict[int, set[asyncio.Task[Any]]] = {}
        self._fired: set[asyncio.Task[Any]] = set()
        self._next = 0  # the first bucket not expired yet
        self._ticking = False

    def arm(self, loop: asyncio.AbstractEventLoop, deadline: float, task: asyncio.Task[Any]) -> int:
        slot = int(deadline / self.TICK_S) + 1
        bucket = self._buckets.get(slot)
        if bucket is None:
            bucket = self._buckets[slot] = set()
        bucket.add(task)
        if not self._ticking:
            self._ticking = True
            self._next = int(loop.time() / self.TICK_S)
            loop.call_at(self._next * self.TICK_S + self.TICK_S, self._tick, loop)
        return slot

    def disarm(self, slot: int, task: asyncio.Task[Any]) -> None:
        bucket = self._buckets.get(slot)
        if bucket is not None:
            bucket.discard(task)
            if not bucket:
                del self._buckets[slot]
        if self._fired:
            self._fired.discard(task)

    def expired(self, task: asyncio.Task[Any]) -> bool:
        return task in self._fired

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now_slot = int(loop.time() / self.TICK_S)
        buckets = self._buckets
        while self._next <= now_slot:
            bucket = buckets.pop(self._next, None)
            self._next += 1
            if bucket:
                for task in bucket:
                    if not task.done():
                        self._fired.add(task)
                        task.cancel()
        if buckets:
            loop.call_at((now_slot + 1) * self.TICK_S, self._tick, loop)
        else:
            self._ticking = False


_deadlines_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = weakref.WeakKeyDictionary()


def _deadlines_of(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    d = _deadlines_by_loop.get(loop)
    if d is None:
        d = _deadlines_by_loop[loop] = _Deadlines()
    return d


# -- the client ------------------------------------------------------------------------------------


class H1Client:
    """An HTTP/1.1 client for one virtual user: its cookies and its connections (see the module docstring).

    ``verify=False`` accepts any TLS certificate (self-signed test targets);
    ``ssl_context`` replaces the default context (e.g. one trusting a private CA).
    """

    def __init__(
        self,
        allowlist: str | Allowlist | TargetGuard = DEFAULT_ALLOWLIST,
        *,
        limit: int = DEFAULT_LIMIT,
        verify: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._guard = allowlist if isinstance(allowlist, TargetGuard) else TargetGuard(allowlist)
        self._limit = limit
        self._verify = verify
        self._ssl_context = ssl_context
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deadlines: _Deadlines | None = None
        self._closed = False
        self.cookies = CookieJar()
        self.last_connect_s = 0.0  # connect time of the last request (0 on a reused connection)
        self.trace: TraceContext | None = None  # set: a W3C traceparent on every request (tracecontext.py)
        self.last_traceparent = b""  # the traceparent line sent with the last request (b"" without)
        self.spans = None  # set by export_spans: sampled requests' spans go to an otlp.SpanExporter

    @property
    def last_trace_id(self) -> str:
        """The trace id sent with the last request, or ``""``."""
        return trace_id_of(self.last_traceparent) if self.last_traceparent else ""

    def export_spans(self, exporter) -> None:
        """Each sampled request's span to ``exporter`` (otlp.SpanExporter) from now on.

        Recorded where the response is made (``_exchange``) or the request failed: one clock read and
        one tuple appended to the exporter's queue (capped: a full queue drops and counts). A client
        without an exporter pays one attribute check per request.
        """
        self.spans = exporter

    def _span_failed(self, tp: bytes, method: str, url: str, start: float, error: str) -> None:
        """A sampled request that got no response: its span, with ``error`` (the exception's class name)."""
        if tp and tp[-3] == 49:  # flags "01": sampled
            duration = _now() - start
            self.spans.add(tp, method, url, 0, _time_ns(), duration, error)

    async def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float | None,
        stream: StreamObserver | None = None,
    ) -> Response:
        """One request, its redirects and its whole body; ``stream`` (streams.py) observes a streamed body."""
        start = _now()
        if stream is not None:
            stream.start = start
        self.last_connect_s = 0.0
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            self._deadlines = _deadlines_of(loop)
        if self._closed:
            raise ConnectionError("the client is closed")
        if body and type(body) is not bytes:
            body = bytes(body)
        trace = self.trace
        tp = self.last_traceparent = trace.line() if trace is not None else b""
        if timeout is None:
            return await self._exchange(method, url, headers, body or b"", start, stream, tp)
        # The whole request under one deadline, like asyncio.timeout() but ~10x cheaper (see _Deadlines).
        task = _current_tasks.get(loop) if _current_tasks is not None else _current_task()
        if task is None:  # not in a task (a bare coroutine runner): the standard way
            try:
                async with asyncio.timeout(timeout):
                    return await self._exchange(method, url, headers, body or b"", start, stream, tp)
            except TimeoutError as exc:
                stalled = self._stalled(exc.__cause__ or exc.__context__, timeout)
                if stalled is None:
                    raise
                raise stalled from None
        deadlines = self._deadlines
        cancelling = task.cancelling()
        slot = deadlines.arm(loop, loop.time() + timeout, task)
        try:
            return await self._exchange(method, url, headers, body or b"", start, stream, tp)
        except asyncio.CancelledError as exc:
            if deadlines.expired(task) and task.uncancel() <= cancelling:
                if self.spans is not None:
                    self._span_failed(self.last_traceparent, method, url, start, "TimeoutError")
                err = self._stalled(exc, timeout) or TimeoutError(f"no complete response within {timeout:g} s")
                raise err from None
            raise
        finally:
            deadlines.disarm(slot, task)

    def _stalled(self, exc: BaseException | None, timeout: float) -> BaseException | None:
        """The error for a timeout that ``exc`` (the cancellation it caused) says is more precise, else None."""
        return None

    async def _exchange(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        start: float,
        stream: StreamObserver | None = None,
        tp: bytes = b"",
    ) -> Response:
        """The request and its redirects (``tp``: the traceparent line sent on each hop, or b"")."""
        prep = _prepare(method, url, headers)
        if tp and prep.user_trace:
            tp = self.last_traceparent = b""
        bytes_in = bytes_out = 0
        hops = 0
        while True:
            try:
                status, reason, hdrs, raw, t_headers, t_done, protocol = await self._hop(prep, body, stream, tp)
            except Exception as exc:
                if self.spans is not None:
                    self._span_failed(tp, method, url, start, type(exc).__name__)
                raise
            bytes_in += len(raw)
            bytes_out += len(body)
            multi = hdrs._multi
            if multi is not None and "set-cookie" in multi:
                for sc in multi["set-cookie"]:
                    self._store_cookie(sc, prep)
            else:
                sc = _dict_get(hdrs, "set-cookie")
                if sc is not None:
                    self._store_cookie(sc, prep)
            if status in REDIRECTS:
                location = _dict_get(hdrs, "location")
                if location:
                    if hops >= MAX_REDIRECTS:
                        raise TooManyRedirects(f"more than {MAX_REDIRECTS} redirects, the last to {location}")
                    hops += 1
                    prep, headers, body = self._follow(prep, headers, body, status, location)
                    continue
            break
        coding = _dict_get(hdrs, "content-encoding")
        spans = self.spans
        if spans is not None and tp and tp[-3] == 49:  # flags "01" (b"...-01\r\n"): a sampled request's span
            q = spans.queue
            if len(q) < spans.cap:
                q.append((tp, method, url, status, _time_ns(), t_done - start, ""))
            else:
                spans.dropped += 1
        # Positional, in the order of _RESPONSE_FIELDS (half the cost of keywords, on every request).
        return Response(
            status,
            hdrs,
            decode(raw, coding) if coding and raw else raw,
            bytes_in,
            bytes_out,
            t_headers - start,
            t_done - start,
            reason,
            1 + hops,
            prep.url,
            self.last_connect_s,
            protocol,
        )

    async def _hop(
        self, prep: _Prepared, body: bytes, stream: StreamObserver | None = None, tp: bytes = b""
    ) -> tuple[int, str, Headers, bytes, float, float, str]:
        """One request without redirects: (status, reason, headers, raw body, t_headers, t_done, protocol).

        The seam where ``h2.H2Client`` sends a hop over HTTP/2 instead.
        """
        conn = await self._roundtrip(prep, body, stream, tp)
        result = (conn.status, conn.reason, conn.headers, conn.body(), conn.t_headers, conn.t_done, HTTP11)
        self._finish(conn, prep.close)
        return result

    def _store_cookie(self, header: str, prep: _Prepared) -> None:
        self.cookies.set_cookie(header, prep.host, prep.path, prep.secure, prep.ip is not None)

    @staticmethod
    def _follow(
        prep: _Prepared, headers: Mapping[str, str], body: bytes, status: int, location: str
    ) -> tuple[_Prepared, Mapping[str, str], bytes]:
        url = urljoin(prep.url, location.strip()).split("#", 1)[0]
        method = prep.method
        if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
            method = "GET"
            body = b""
            if headers:
                headers = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "content-length")}
        nxt = _prepare(method, url, None)  # parses and checks the URL (http/https only)
        if headers and nxt.origin != prep.origin:
            # Credentials do not follow a redirect to another origin.
            headers = {k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")}
        return _prepare(method, url, headers), headers, body

    async def _roundtrip(
        self, prep: _Prepared, body: bytes, stream: StreamObserver | None = None, tp: bytes = b""
    ) -> _Conn:
        """Send one request and wait for its whole response; returns the connection holding it.

        ``tp`` (the ``traceparent`` line) is added here, at write time, so the
        prepared request line and headers stay cached per (method, URL, headers).
        """
        pool = self._pools.get(prep.origin)
        if pool is None:
            pool = self._pools[prep.origin] = _Pool()
        loop = self._loop
        retried = False
        idle = pool.idle
        while True:
            if idle and not retried and not self._closed:  # _acquire's first case, without its coroutine
                conn = idle.pop()
                reused = True
                if conn.closed or conn.transport.is_closing():
                    self._discard(pool, conn)
                    continue
            else:
                conn, reused = await self._acquire(pool, prep, fresh=retried)
                if conn.closed or conn.transport.is_closing():
                    self._discard(pool, conn)
                    if reused:
                        continue  # closed while it was handed over: nothing sent, take another
                    raise ServerDisconnected("the server closed the connection before the request was sent")
            if body:
                data = b"".join((prep.block, tp, self._cookie(prep), b"Content-Length: %d\r\n\r\n" % len(body), body))
            elif prep.user_cookie or not self.cookies._cookies:
                data = prep.block + tp + prep.tail if tp else prep.full
            else:
                cookie = self._cookie(prep)
                data = prep.block + tp + cookie + prep.tail if cookie or tp else prep.full
            waiter = loop.create_future()
            conn.start(waiter, prep.head, stream)
            if stream is not None:
                stream.begin(loop, conn.stall)
            conn.transport.write(data)
            try:
                await waiter
            except OSError:
                got_bytes = conn.got_bytes
                self._discard(pool, conn)
                if reused and not got_bytes and not retried and prep.idempotent and not self._closed:
                    retried = True  # the server closed this idle connection meanwhile: once more, on a new one
                    continue
                raise
            except BaseException:  # timeout, cancellation: the connection's state is unknown
                self._discard(pool, conn)
                raise
            return conn

    def _cookie(self, prep: _Prepared) -> bytes:
        if prep.user_cookie or not self.cookies._cookies:
            return b""
        return self.cookies.header(prep.host, prep.path, prep.secure, prep.ip is not None)

    def _finish(self, conn: _Conn, close: bool = False) -> None:
        """Return a connection whose response was read to its pool, or close it."""
        pool = conn.pool
        if close or not conn.keep_alive or conn.closed or self._closed:
            self._discard(pool, conn, graceful=True)
            return
        waiters = pool.waiters
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(conn)
                return
        pool.idle.append(conn)

    def _discard(self, pool: _Pool, conn: _Conn, graceful: bool = False) -> None:
        if conn.discarded:
            return
        conn.discarded = True
        pool.conns.discard(conn)
        if not conn.closed:
            if graceful:
                conn.closed = True
                conn.transport.close()
            else:
                conn.abort()
        self._free_slot(pool)

    @staticmethod
    def _free_slot(pool: _Pool) -> None:
        waiters = pool.waiters
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)  # the slot passes to the first waiter
                return
        pool.count -= 1

    async def _acquire(self, pool: _Pool, prep: _Prepared, fresh: bool) -> tuple[_Conn, bool]:
        idle = pool.idle
        while True:
            if self._closed:
                raise ConnectionError("the client is closed")
            if not fresh:
                while idle:
                    conn = idle.pop()
                    if not conn.closed and not conn.transport.is_closing():
                        return conn, True
                    self._discard(pool, conn)
            if pool.count < self._limit:
                pool.count += 1
                return await self._connect_in_slot(pool, prep), False
            waiter = self._loop.create_future()
            pool.waiters.append(waiter)
            try:
                got = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    handed = waiter.result()
                    if handed is None:
                        self._free_slot(pool)
                    else:
                        self._finish(handed)
                else:
                    try:
                        pool.waiters.remove(waiter)
                    except ValueError:
                        pass
                raise
            if self._closed:
                if got is not None:
                    self._discard(pool, got)
                else:
                    self._free_slot(pool)
                raise ConnectionError("the client is closed")
            if got is None:
                return await self._connect_in_slot(pool, prep), False
            if not got.closed:
                return got, True
            self._discard(pool, got)

    async def _connect_in_slot(self, pool: _Pool, prep: _Prepared) -> _Conn:
        try:
            conn = await self._connect(prep)
        except BaseException:
            self._free_slot(pool)
            raise
        if self._closed:
            conn.abort()
            self._free_slot(pool)
            raise ConnectionError("the client is closed")
        conn.pool = pool
        pool.conns.add(conn)
        return conn

    async def _connect(self, prep: _Prepared) -> _Conn:
        conn = _Conn()
        ctx = self._tls(prep) if prep.scheme == "https" else None
        await self._open(prep, conn, ctx)
        return conn

    def _tls(self, prep: _Prepared) -> ssl.SSLContext:
        """The TLS context of an HTTP/1.1 connection (made when first needed: loading the CAs takes time)."""
        return self._ssl_context or _tls_context(self._verify)

    async def _open(self, prep: _Prepared, protocol: asyncio.Protocol, ctx: ssl.SSLContext | None) -> None:
        """Resolve, check every address against the allowlist, connect ``protocol`` (TCP_NODELAY, TLS with ``ctx``).

        Adds the time taken to ``last_connect_s``.
        """
        loop = self._loop
        t0 = _now()
        guard = self._guard
        host, port = prep.host, prep.port
        if prep.ip is not None:
            family = socket.AF_INET6 if prep.ip.version == 6 else socket.AF_INET
            sockaddr: tuple[Any, ...] = (host, port, 0, 0) if family == socket.AF_INET6 else (host, port)
            infos: list[tuple[Any, ...]] = [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]
        else:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
            infos = list({info[4]: info for info in infos}.values())
            if not infos:
                raise OSError(f"{host} did not resolve to any address")
            # Refuses a name with any address outside the allowlist, or vouches for an allowed name's addresses.
            guard.check_resolved(host, [{"hostname": host, "host": i[4][0], "port": port} for i in infos])  # type: ignore[misc]
        server_hostname = host if ctx is not None else None
        errors: list[OSError] = []
        for info in infos:
            sock = guard.socket_factory(info)  # TargetNotAllowed here: nothing connected
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await _connect_socket(loop, sock, info[4])
            except OSError as exc:
                sock.close()
                errors.append(exc)
                continue
            except BaseException:
                sock.close()
                raise
            try:
                await loop.create_connection(lambda: protocol, sock=sock, ssl=ctx, server_hostname=server_hostname)
            except BaseException:
                if sock.fileno() != -1:
                    sock.close()
                raise
            self.last_connect_s += _now() - t0
            return
        if len(errors) == 1:
            raise errors[0]
        if all(isinstance(e, ConnectionRefusedError) for e in errors):
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"connection to {host}:{port} refused") from errors[-1]
        raise errors[-1]

    async def close(self) -> None:
        """Close every connection (gracefully, then abort what did not close within a second)."""
        self._closed = True
        loop = self._loop
        closing: dict[asyncio.Future[None], _Conn] = {}
        for pool in self._pools.values():
            while pool.waiters:
                w = pool.waiters.popleft()
                if not w.done():
                    w.set_exception(ConnectionError("the client is closed"))
            for conn in pool.conns:
                conn._fail(ConnectionError("the client is closed"))
                if conn.closed or conn.transport is None:
                    continue
                conn.closed = True
                if loop is not None and not loop.is_closed():
                    conn.lost_waiter = loop.create_future()
                    closing[conn.lost_waiter] = conn
                conn.transport.close()
            pool.idle.clear()
            pool.conns.clear()
        self._pools.clear()
        if closing:
            _, pending = await asyncio.wait(closing, timeout=CLOSE_GRACE_S)
            for fut in pending:
                closing[fut].transport.abort()
                fut.cancel()


def make_h1_client(allowlist: str | Allowlist | TargetGuard = DEFAULT_ALLOWLIST) -> H1Client:
    """The factory mirroring ``http.make_client``: a fresh H1Client (cookies, connections) for one virtual user."""
    return H1Client(allowlist)
