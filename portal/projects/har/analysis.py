"""The entries into a ``Preview``: the journey's site and every host's fate, the entries grouped into pages,
the steps with their think times, the secret fields and the correlations, and the notes."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from .correlation import _apply, correlate
from .model import (
    MAX_THINK_TIME,
    Choices,
    Entry,
    HarError,
    HostInfo,
    Preview,
)
from .steps import _secret_fields, _step

MAX_STEPS = 200
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")  # what a step can send

# Third-party requests that only measure the visitor or style the page: never part of the load.
NOISE_HOSTS = {
    "google-analytics.com": "analytics",
    "analytics.google.com": "analytics",
    "googletagmanager.com": "analytics (tag manager)",
    "doubleclick.net": "advertising",
    "googlesyndication.com": "advertising",
    "facebook.net": "analytics (Facebook pixel)",
    "facebook.com": "analytics (Facebook pixel)",
    "hotjar.com": "analytics (Hotjar)",
    "segment.io": "analytics (Segment)",
    "segment.com": "analytics (Segment)",
    "newrelic.com": "monitoring (New Relic)",
    "nr-data.net": "monitoring (New Relic)",
    "sentry.io": "error reporting (Sentry)",
    "clarity.ms": "analytics (Microsoft Clarity)",
    "fonts.googleapis.com": "third-party fonts",
    "fonts.gstatic.com": "third-party fonts",
    "use.typekit.net": "third-party fonts",
}


def classify_hosts(entries: list[Entry], allowed: Callable[[str], str | None]) -> tuple[str, list[HostInfo]]:
    """The journey's origin and every host with its fate. ``allowed(url)`` returns why a URL is refused, or None."""
    counts: dict[str, int] = {}
    for e in entries:
        if e.url:
            counts[e.origin] = counts.get(e.origin, 0) + 1
    reasons: dict[str, str | None] = {}
    for origin in counts:
        host = urlsplit(origin).hostname or ""
        noise = next(
            (why for suffix, why in NOISE_HOSTS.items() if host == suffix or host.endswith("." + suffix)), None
        )
        reasons[origin] = f"third-party noise: {noise}" if noise else allowed(origin + "/")
    typed = _has_resource_types(entries)
    documents = [e for e in entries if e.url and _is_document(e, typed)]
    main = next((e.origin for e in documents + entries if e.url and reasons[e.origin] is None), None)
    if main is None:
        listing = "; ".join(f"{urlsplit(o).netloc}: {r}" for o, r in reasons.items()) or "no http(s) requests"
        raise HarError(
            f"None of the recorded hosts is an allowed target ({listing}). Record the journey against "
            "the system under test, or ask an administrator to allow its host (PLIMSOLL_ALLOWED_TARGETS)."
        )
    hosts = []
    for origin, n in counts.items():
        reason = reasons[origin]
        if origin == main:
            hosts.append(
                HostInfo(
                    urlsplit(origin).netloc, n, True, "the journey's site: steps go to the environment", origin, True
                )
            )
        elif reason is None:
            hosts.append(
                HostInfo(
                    urlsplit(origin).netloc,
                    n,
                    False,
                    f"another site than {urlsplit(main).netloc}: "
                    "a test case's steps all go to one environment's base URL",
                    origin,
                    True,
                )
            )
        else:
            hosts.append(HostInfo(urlsplit(origin).netloc, n, False, reason, origin, False))
    return main, hosts


def _has_resource_types(entries: list[Entry]) -> bool:
    """Whether the recorder typed its entries (Chromium's _resourceType); asked once per recording, not per entry."""
    return any(x.resource_type for x in entries)


def _is_document(e: Entry, typed: bool) -> bool:
    """``typed``: ``_has_resource_types`` of the recording (scanning it for each entry made HAR analysis quadratic)."""
    if e.resource_type:
        return e.resource_type == "document"
    if typed:
        return False
    # Firefox and older recorders have no _resourceType: an HTML response the browser asked HTML for.
    accept = next((v for k, v in e.request_headers if k.lower() == "accept"), "")
    return "text/html" in e.mime and ("text/html" in accept or e.method != "GET")


def group_pages(entries: list[Entry], main: str, ws_origins: frozenset[str] = frozenset()) -> list[list[Entry]]:
    """The journey's pages, each [main request, followed redirects..., sub-requests...]; other sites left out.

    A page starts at each top-level document (also when a HAR page holds several navigations,
    as Playwright's do); a document that a redirect led to joins the redirecting page, since the
    engine follows redirects itself. A non-GET sub-request (an XHR post) becomes a page of its own.
    """
    pages: list[list[Entry]] = []
    awaiting_redirect: str | None = None
    typed = _has_resource_types(entries)
    last_http: list[Entry] | None = None  # the page sub-requests join (never a WebSocket session)
    for e in entries:
        if e.websocket and e.url and e.origin in ws_origins:  # a session on another allowed origin
            pages.append([e])
            awaiting_redirect = None
            continue
        if e.origin != main or not e.url:
            continue
        if e.websocket:  # a session of its own, wherever it was opened; sub-requests after it join the page
            pages.append([e])
            awaiting_redirect = None
            continue
        document = _is_document(e, typed)
        if pages and awaiting_redirect and e.url == awaiting_redirect:
            pages[-1].append(e)
        elif document or last_http is None or e.method != "GET":
            pages.append([e])
            last_http = pages[-1]
        else:
            last_http.append(e)
        location = e.redirect_url or e.response_header("location") or ""
        awaiting_redirect = urljoin(e.url, location) if 300 <= e.status < 400 and location else None
    return pages


def analyze(entries: list[Entry], *, allowed: Callable[[str], str | None], choices: Choices | None = None) -> Preview:
    """The preview of the test case these entries make, with ``choices`` applied."""
    choices = choices or Choices()
    main, hosts = classify_hosts(entries, allowed)
    # WebSocket sessions of another allowed origin (a realtime server beside the site) are kept, with their
    # own ws:// or wss:// URL: a session step may name its origin, checked like the base URL.
    # (The origins with a session are gathered in one pass: asking every host about every entry was
    # quadratic, 8,000 entries on as many loopback ports took 28 s.)
    with_sessions = {e.origin for e in entries if e.websocket}
    ws_origins = frozenset(
        host.origin for host in hosts if host.origin != main and host.allowed and host.origin in with_sessions
    )
    for host in hosts:
        if host.origin in ws_origins:
            host.kept = True
            host.reason = "its WebSocket sessions are steps with their own ws:// or wss:// URL; other requests dropped"
    pages = group_pages(entries, main, ws_origins)
    notes = []
    odd = [page for page in pages if page[0].method not in METHODS]
    if odd:
        names = ", ".join(sorted({page[0].method for page in odd}))
        notes.append(
            f"{len(odd)} request{'' if len(odd) == 1 else 's'} with a method a step cannot send ({names}) left out."
        )
        pages = [page for page in pages if page[0].method in METHODS]
    if not pages:
        raise HarError(f"The recording has no page of {urlsplit(main).netloc} a step can send.")
    if len(pages) > MAX_STEPS:
        notes.append(f"The recording has {len(pages)} pages; the first {MAX_STEPS} are imported.")
        pages = pages[:MAX_STEPS]
    steps = [_step(page, choices, main) for page in pages]
    seen: dict[str, int] = {}
    for step in steps:  # results are reported per step name: two pages must not share one
        seen[step.name] = seen.get(step.name, 0) + 1
        if seen[step.name] > 1:
            step.name = f"{step.name} ({seen[step.name]})"
    for i, (page, step) in enumerate(zip(pages, steps, strict=True)):
        if i + 1 < len(pages):
            end = max(_ended(e) for e in page)
            gap = pages[i + 1][0].started - end
            step.think_time = round(min(max(gap, 0.0), MAX_THINK_TIME), 1)
        else:
            step.think_time = 0.0
    secret_fields = _secret_fields(steps, choices)
    correlations = correlate(steps)
    for c in correlations:
        c.accepted = c.name not in choices.rejected
        if c.accepted:
            _apply(c, steps)
    dropped = sum(h.requests for h in hosts if not h.kept)
    if dropped:
        notes.append(f"{dropped} request{'' if dropped == 1 else 's'} to other sites dropped (see the hosts).")
    h2 = sum(1 for step in steps if step.recorded_protocol == "h2")
    if h2:
        notes.append(
            f"{h2} of {len(steps)} pages were recorded over HTTP/2: to load the system as the browser did, choose "
            "the protocol Automatic (HTTP/2 over TLS when offered) for an https:// environment, or h2c for an "
            "http:// one, on the environment or the plan (docs/protocols.md)."
        )
    sessions = sum(1 for step in steps if step.ws_actions is not None)
    if sessions:
        notes.append(
            f"{sessions} WebSocket session{'' if sessions == 1 else 's'} recorded: each is a step at the moment it "
            "was opened, its frames sent and expected in order (the other steps wait for it to end)."
        )
    return Preview(main, steps, hosts, correlations, secret_fields, notes)


def _ended(e: Entry) -> float:
    """When an entry ended: a WebSocket session at its last frame, a request when its response did."""
    end = e.started + e.duration
    if e.ws_messages:
        end = max(end, e.ws_messages[-1].time)
    return end
