"""The HTTP layer behind one small interface, so a faster one can replace aiohttp.

The runner only knows ``HttpClient`` (one per virtual user) and ``Response``.
``AiohttpClient`` is the first implementation: each virtual user gets its own
session, hence its own cookie jar and its own keep-alive connections (at most 6,
as a browser opens per host), and every connection goes through the
allowlist's resolver and socket factory (see targets.py).

Bodies are decompressed here rather than by aiohttp so that ``bytes_in`` is the
body as it crossed the wire (compressed), which is what a tuning change such
as "pages compressed or not" changes, while checks see the decoded text.
"""

from __future__ import annotations

import asyncio
import functools
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Protocol

from .targets import DEFAULT_ALLOWLIST, Allowlist, TargetGuard

if TYPE_CHECKING:
    import aiohttp

USER_AGENT = "Plimsoll/0.1 (load test)"
MAX_REDIRECTS = 10


@dataclass(slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes  # decoded (decompressed) body
    bytes_in: int  # body bytes as received on the wire (before decompression)
    bytes_out: int  # request body bytes sent
    ttfb_s: float  # from sending the request to the response headers (after redirects)
    total_s: float  # from sending the request to the last body byte
    reason: str = ""
    hits: int = 1  # HTTP requests this took: 1 + redirects followed
    url: str = ""  # final URL, after redirects
    connect_s: float = 0.0  # time spent opening new connections (TCP + TLS) for this request; 0.0 = reused
    protocol: str = "http/1.1"  # the protocol of the final hop: "http/1.1" or "h2"


class HttpClient(Protocol):
    """What the runner needs from an HTTP layer; one instance per virtual user."""

    async def request(self, method: str, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> Response:
        """Send one request (following redirects) and read the whole body.

        Raises on transport failures and on ``timeout`` (TimeoutError); a
        response of any status is returned, not raised.
        """
        ...

    async def close(self) -> None: ...


class AiohttpClient:
    """An aiohttp session for one virtual user (create it inside the running loop)."""

    def __init__(self, allowlist: str | Allowlist | TargetGuard = DEFAULT_ALLOWLIST, *, limit: int = 6) -> None:
        import aiohttp  # here: the engine's own clients do without it, and its import costs ≈ 0.3 s of CPU

        guard = allowlist if isinstance(allowlist, TargetGuard) else TargetGuard(allowlist)
        self._resolver = guard.resolver()
        connector = aiohttp.TCPConnector(limit=limit, resolver=self._resolver, socket_factory=guard.socket_factory)
        self._session = aiohttp.ClientSession(
            connector=connector,
            # unsafe=True: keep cookies from IP-address hosts such as 127.0.0.1
            cookie_jar=aiohttp.CookieJar(unsafe=True),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None),  # request() enforces its own deadline
            headers={"User-Agent": USER_AGENT},
            trust_env=False,  # never route through an environment proxy: the allowlist checks the real target
            trace_configs=[_connect_trace()],
        )

    async def request(self, method: str, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> Response:
        start = time.perf_counter()
        timing = _ConnectTiming()
        async with asyncio.timeout(timeout):
            resp = await self._session.request(
                method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=True,
                max_redirects=MAX_REDIRECTS,
                trace_request_ctx=timing,
            )
            try:
                ttfb = time.perf_counter() - start
                raw = await resp.read()
            finally:
                resp.release()
        total = time.perf_counter() - start
        return Response(
            status=resp.status,
            headers=resp.headers,
            body=decode_body(raw, resp.headers.get("Content-Encoding", "")),
            bytes_in=len(raw),
            bytes_out=len(body),
            ttfb_s=ttfb,
            total_s=total,
            reason=resp.reason or "",
            hits=1 + len(resp.history),
            url=str(resp.url),
            connect_s=timing.connect_s,
        )

    @property
    def cookies(self) -> aiohttp.abc.AbstractCookieJar:
        return self._session.cookie_jar

    async def close(self) -> None:
        await self._session.close()
        await self._resolver.close()


class _ConnectTiming:
    """Per request: the time spent in aiohttp's connection creation (TCP connect + TLS), redirects included."""

    __slots__ = ("connect_s", "started")

    def __init__(self) -> None:
        self.connect_s = 0.0
        self.started = 0.0


async def _on_connect_start(session: object, ctx: SimpleNamespace, params: object) -> None:
    timing = ctx.trace_request_ctx
    if isinstance(timing, _ConnectTiming):
        timing.started = time.perf_counter()


async def _on_connect_end(session: object, ctx: SimpleNamespace, params: object) -> None:
    timing = ctx.trace_request_ctx
    if isinstance(timing, _ConnectTiming) and timing.started:
        timing.connect_s += time.perf_counter() - timing.started
        timing.started = 0.0


@functools.cache
def _connect_trace() -> aiohttp.TraceConfig:
    import aiohttp

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_on_connect_start)
    trace.on_connection_create_end.append(_on_connect_end)
    trace.freeze()
    return trace


def make_client(allowlist: str | Allowlist | TargetGuard = DEFAULT_ALLOWLIST) -> AiohttpClient:
    """The default client factory: a fresh client (cookies, connections) for one virtual user."""
    return AiohttpClient(allowlist)


class BodyDecodeError(ValueError):
    pass


def decode_body(raw: bytes, content_encoding: str) -> bytes:
    """Undo gzip/deflate (what aiohttp advertises by default without brotli); other codings pass through."""
    coding = content_encoding.strip().lower()
    if not raw or coding in ("", "identity"):
        return raw
    try:
        if coding in ("gzip", "x-gzip"):
            return zlib.decompress(raw, 16 + zlib.MAX_WBITS)
        if coding == "deflate":
            try:
                return zlib.decompress(raw)
            except zlib.error:  # some servers send raw deflate without the zlib header
                return zlib.decompress(raw, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise BodyDecodeError(f"could not decode the {coding} body ({exc})") from None
    return raw
