"""A HAR 1.2 recording into the steps of a test case: plain functions, no Django.

``load(raw)`` checks that the bytes are a HAR worth importing and returns its entries;
``analyze(entries, allowed=..., choices=...)`` turns them into a ``Preview``: the pages
found (each top-level document a step, its sub-requests the step's resources), think
times from the gaps, the hosts kept or dropped with the reason, every header kept or
dropped with the rule that decided it, and the **correlations**: values a response set
(a hidden input such as a CSRF token, a JSON id, a ``Location``, a token in a link)
that a later request sends back, proposed as extractions with the later uses replaced
by ``{{variable}}``. The user's choices (``Choices``) reject correlations, keep a secret
header or a recorded password, and the preview is computed again from the file.

Nothing here stores anything; the portal's service saves the steps of an accepted preview.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import parse_qsl, quote, quote_plus, urljoin, urlsplit

from workers.engine import safejson, variables

MAX_HAR_BYTES = 50 * 1024 * 1024  # the upload limit; Chromium's "Save all as HAR" of a long session stays below
# JSON values (objects, arrays, members, items) a HAR may hold: parsed, each costs 32 to 64 bytes, so 50 MB of
# "[],[],…" took 1.3 GB and 15 s (a recording: 4.6 times its size). Playwright's compact HAR of 50 MB holds 4.7 M.
MAX_JSON_VALUES = 6_000_000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
MAX_BODY_CHARS = 64 * 1024  # a request body larger than this (binary, base64, a file upload) is dropped, with a note
MAX_RESPONSE_CHARS = 5 * 1024 * 1024  # response text searched for correlations
MAX_JSON_LEAVES = 500  # per response: more would propose noise
MAX_STEPS = 200
MAX_PATH = 2000  # the Step model's limit
MAX_THINK_TIME = 3600.0
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")  # what a step can send
TEXT_TYPES = ("text/", "application/json", "application/javascript", "application/xml", "+json", "+xml")

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

# Header rules, in the order they are tried; each says why a header is kept or dropped.
SECRET_HEADERS = {"cookie", "authorization", "proxy-authorization"}
ENGINE_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade"}
BROWSER_HEADERS = {"upgrade-insecure-requests", "cache-control", "pragma", "purpose", "dnt", "priority"}
CONDITIONAL_HEADERS = {"if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range"}
ORIGIN_HEADERS = {"referer", "origin"}
RULE_SECRET = "secret: removed unless you keep it (the engine's cookie jar sends each user's own cookies)"
RULE_ENGINE = "set by the engine for each request"
RULE_PSEUDO = "HTTP/2 pseudo-header, not a header"
RULE_BROWSER = "browser-specific (fetch metadata, client hints, cache control)"
RULE_CONDITIONAL = "conditional request: would measure the browser's cache, not the server"
RULE_ORIGIN = "names the recorded site; the engine sends requests to the environment's base URL"
RULE_BODY_TYPE = "set by the step's body type"
RULE_ENCODING = "set by the engine (it asks for gzip itself)"
RULE_KEPT = "sent by the application"
RULE_KEPT_SECRET = "secret, kept because you chose to keep it"

USER_LIKE = re.compile(r"user|e-?mail|login|account", re.IGNORECASE)
PASSWORD_LIKE = re.compile(r"pass(word|wd|phrase|code)?|pwd|secret|\bpin\b|otp", re.IGNORECASE)
TOKEN_LIKE = re.compile(r"^(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9_\-.~%+/=]{8,}$")
_BOUNDARY = r"A-Za-z0-9_\-"


class HarError(ValueError):
    """The file cannot be imported; the message tells the user what to do instead."""


@dataclass
class Entry:
    """One recorded request and its response, reduced to what an import needs."""

    index: int
    started: float  # seconds since the epoch
    duration: float  # seconds
    method: str
    url: str
    request_headers: list[tuple[str, str]]
    post_mime: str
    post_text: str | None  # None: no body, or one too large or binary to keep
    post_note: str
    status: int
    response_headers: list[tuple[str, str]]
    response_text: str | None
    redirect_url: str
    resource_type: str  # Chromium's _resourceType: document, script, xhr, ... ("" when absent)
    pageref: str
    mime: str
    http_version: str = ""  # the protocol the browser used: "h2", "http/1.1", "h3" ("" when not recorded)
    ws_messages: list[WsMessage] | None = None  # a WebSocket entry's frames (Chrome's _webSocketMessages)

    @property
    def websocket(self) -> bool:
        return self.url[:5] == "ws://" or self.url[:6] == "wss://"

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``, a WebSocket's as the page's: ws:// as http://, wss:// as https://."""
        parts = urlsplit(self.url)
        scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
        return f"{scheme}://{parts.netloc}"

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def path(self) -> str:
        parts = urlsplit(self.url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def response_header(self, name: str) -> str | None:
        return next((v for k, v in self.response_headers if k.lower() == name), None)


@dataclass
class WsMessage:
    """One recorded WebSocket frame: sent or received, when (epoch seconds), its opcode (1 text, 2 binary), data."""

    sent: bool
    time: float
    opcode: int
    data: str


@dataclass
class HostInfo:
    host: str
    requests: int
    kept: bool
    reason: str
    origin: str = ""  # scheme://host[:port] (a WebSocket's as http(s)://)
    allowed: bool = False  # an allowed target, not third-party noise


@dataclass
class HeaderRule:
    name: str
    value: str
    kept: bool
    rule: str


@dataclass
class SecretField:
    """A password-like field of a recorded form or JSON body: replaced by ``{{variable}}`` unless kept."""

    step: int  # index in Preview.steps
    field: str
    variable: str
    kept: bool
    secret: bool = True  # a password (replaced unless kept); else the login's user name (kept unless varied)


@dataclass
class Correlation:
    name: str
    source: str  # an engine extraction source: form_field, json, header, regex
    expression: str
    value: str
    step: int  # the step whose response sets it
    uses: list[int] = field(default_factory=list)  # the later steps that send it back
    accepted: bool = True
    kind: str = ""  # in words: "hidden form field", "JSON value", ...

    @property
    def value_preview(self) -> str:
        return self.value if len(self.value) <= 16 else f"{self.value[:12]}… ({len(self.value)} characters)"


@dataclass
class PreviewStep:
    name: str
    method: str
    path: str
    headers: dict[str, str]
    body_type: str
    body: str
    think_time: float
    expect_status: int | None
    resources: list[str]
    extract: list[dict] = field(default_factory=list)
    header_rules: list[HeaderRule] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entry: Entry | None = None  # the main request
    final: Entry | None = None  # the response the engine sees (after the redirects it follows)
    recorded_protocol: str = ""  # "h2", "http/1.1", "h3": what the browser used ("" when not recorded)
    ws_actions: list[dict] | None = None  # a WebSocket session's actions (the engine's format); None: a request

    def to_fields(self) -> dict:
        """The fields of a portal Step (and of the engine's step) for this page."""
        fields = {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "headers": dict(self.headers),
            "body_type": self.body_type,
            "body": self.body,
            "think_time": self.think_time,
            "expect_status": self.expect_status,
            "extract": [dict(item) for item in self.extract],
            "resources": list(self.resources),
        }
        if self.recorded_protocol:
            fields["recorded_protocol"] = self.recorded_protocol
        if self.ws_actions is not None:
            fields.update(kind="websocket", ws_actions=[dict(a) for a in self.ws_actions])
        return fields


@dataclass
class Choices:
    """What the user decided in the preview; the defaults are the safe choices."""

    rejected: set[str] = field(default_factory=set)  # correlation names not to apply
    keep_headers: set[str] = field(default_factory=set)  # secret header names (lower case) to keep
    keep_fields: set[str] = field(default_factory=set)  # password-like fields whose recorded value is kept
    vary_fields: set[str] = field(default_factory=set)  # a login's user-name fields posted as {{variable}}
    variables: dict[str, str] = field(default_factory=dict)  # password-like field -> {{variable}} to post instead


@dataclass
class Preview:
    base_url: str
    steps: list[PreviewStep]
    hosts: list[HostInfo]
    correlations: list[Correlation]
    secret_fields: list[SecretField]
    notes: list[str]

    def step_fields(self) -> list[dict]:
        return [step.to_fields() for step in self.steps]

    def variables_needed(self) -> list[str]:
        """The ``{{names}}`` that no extraction provides: a data set must (the login's password)."""
        extracted = {item["name"] for step in self.steps for item in step.extract}
        texts = [t for s in self.steps for t in (s.path, s.body, *s.headers.values())]
        used = dict.fromkeys(name for text in texts for name in variables.placeholders(text))
        return [name for name in used if name not in extracted]


# -- loading -------------------------------------------------------------------------------------------


def load(raw: bytes, *, max_bytes: int = MAX_HAR_BYTES, max_values: int = MAX_JSON_VALUES) -> list[Entry]:
    """The entries of a HAR file, in the order they started; HarError says why a file is refused."""
    if len(raw) > max_bytes:
        raise HarError(
            f"The file is {len(raw) / 1024 / 1024:.1f} MB; the limit is {max_bytes // 1024 // 1024} MB. "
            "Record only the journey you want to test (start recording just before it)."
        )
    if not raw.strip():
        raise HarError("The file is empty. Save the recording with your browser's “Save all as HAR”.")
    if (values := _json_values(raw, max_values)) > max_values:
        raise HarError(
            f"The file holds {values:,} JSON values, more than {max_values:,}, the limit (a recording of 50 MB holds "
            "about 5 million); nothing was imported. Record only the journey you want to test."
        )
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise HarError("The file is not UTF-8 text, so it is not a HAR file (HAR is JSON).") from None
    except RecursionError:  # "[[[[…" nested deeper than the parser goes: no HAR nests more than a few levels
        raise HarError("The file's JSON is nested too deep to be a HAR (a HAR nests a few levels).") from None
    except json.JSONDecodeError as exc:
        raise HarError(
            f"The file is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}). A HAR file is JSON: "
            "save it with “Save all as HAR” in the browser's network panel, or Playwright's record_har_path."
        ) from None
    log = doc.get("log") if isinstance(doc, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("entries"), list):
        raise HarError(
            "This JSON is not a HAR: a HAR has a “log” object with a list of “entries”. "
            "Save the recording with “Save all as HAR” in the browser's network panel."
        )
    if not log["entries"]:
        raise HarError("The HAR has no requests (its log has no entries): record the journey again.")
    entries = [_entry(i, e) for i, e in enumerate(log["entries"])]
    entries.sort(key=lambda e: (e.started, e.index))
    return entries


def _json_values(raw: bytes, limit: int) -> int:
    """The JSON values and members ``raw`` holds (``{``, ``[``, ``,`` and ``:`` outside strings), before parsing it;
    0 when its bytes alone show it is under ``limit``.

    The marks are counted in the bytes first, strings included: a file under the limit that way needs no
    more. Only over it are the strings taken out (a regex, in C) and the marks counted again.
    """
    if len(raw) <= limit:
        return 0  # a value takes at least one byte
    marks = (b"{", b"[", b",", b":")
    if sum(raw.count(mark) for mark in marks) <= limit:
        return 0
    structure = _JSON_STRING.sub(b"", raw)
    return sum(structure.count(mark) for mark in marks)


def _entry(index: int, e: object) -> Entry:
    """One HAR entry; any field of the wrong shape is a HarError naming the entry, never a crash."""
    try:
        return _entry_fields(index, e)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise HarError(
            f"This is not a valid HAR: entry {index + 1} lacks a request method and URL, a response or a "
            f"start time, or has one of the wrong type ({type(exc).__name__}: {exc})."
        ) from None


def _entry_fields(index: int, e: dict) -> Entry:
    request, response = e["request"], e["response"]
    method, url = str(request["method"]).upper(), str(request["url"])
    started = datetime.fromisoformat(str(e["startedDateTime"]).replace("Z", "+00:00")).timestamp()
    scheme = urlsplit(url).scheme
    messages = e.get("_webSocketMessages")
    websocket = scheme in ("ws", "wss") or (
        str(e.get("_resourceType") or "") == "websocket" and scheme in ("http", "https")
    )
    if websocket:
        # Chrome records the session's URL as ws:// or wss:// (some tools keep http(s)): one spelling.
        url = {"http": "ws", "https": "wss"}.get(scheme, scheme) + url[len(scheme) :]
    elif scheme not in ("http", "https"):
        url = ""  # data:, blob:, chrome-extension: ... dropped below
    post_text, post_note, post_mime = _post_body(request.get("postData"))
    content = response.get("content") or {}
    if not isinstance(content, dict):
        content = {}
    return Entry(
        index=index,
        started=started,
        duration=max(float(e.get("time") or 0), 0) / 1000,
        method=method,
        url=url,
        request_headers=_headers(request.get("headers")),
        post_mime=post_mime,
        post_text=post_text,
        post_note=post_note,
        status=int(response.get("status") or 0),
        response_headers=_headers(response.get("headers")),
        response_text=_response_text(content),
        redirect_url=str(response.get("redirectURL") or ""),
        resource_type=str(e.get("_resourceType") or ""),
        pageref=str(e.get("pageref") or ""),
        mime=str(content.get("mimeType") or "").lower(),
        http_version=_protocol(request.get("httpVersion") or response.get("httpVersion")),
        ws_messages=_ws_messages(messages) if websocket else None,
    )


def _protocol(version: object) -> str:
    """A HAR ``httpVersion`` in the engine's words: "h2", "http/1.1", "h3" ("" when absent or unknown)."""
    v = str(version or "").strip().lower()
    if v in ("h2", "http/2", "http/2.0", "h2c"):
        return "h2"
    if v in ("h3", "http/3", "http/3.0") or v.startswith("h3-"):
        return "h3"
    if v in ("http/1.1", "http/1.0"):
        return v
    return ""


def _ws_messages(raw: object) -> list[WsMessage]:
    """Chrome's ``_webSocketMessages`` ([{type: send|receive, time, opcode, data}]) in time order."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise TypeError("_webSocketMessages is not a list")
    out = []
    for m in raw:
        if not isinstance(m, dict) or m.get("type") not in ("send", "receive"):
            raise ValueError("a _webSocketMessages item has no type send or receive")
        out.append(WsMessage(m["type"] == "send", float(m["time"]), int(m.get("opcode", 1)), str(m.get("data", ""))))
    out.sort(key=lambda m: m.time)
    return out


def _headers(raw: object) -> list[tuple[str, str]]:
    if not isinstance(raw, list):
        return []
    return [(str(h.get("name", "")), str(h.get("value", ""))) for h in raw if isinstance(h, dict) and h.get("name")]


def _post_body(post: object) -> tuple[str | None, str, str]:
    """(body text or None, a note when it was dropped, its MIME type)."""
    if not isinstance(post, dict):
        return None, "", ""
    mime = str(post.get("mimeType") or "")
    text = post.get("text")
    if text is None and isinstance(post.get("params"), list):
        text = "&".join(
            f"{quote_plus(str(p.get('name', '')))}={quote_plus(str(p.get('value', '')))}" for p in post["params"]
        )
    if not isinstance(text, str):
        return None, "", mime
    if post.get("encoding") == "base64" or "\x00" in text:
        return None, f"its {len(text):,}-character binary body was dropped (a step's body is text)", mime
    if len(text) > MAX_BODY_CHARS:
        return None, f"its {len(text):,}-character body was dropped (over {MAX_BODY_CHARS // 1024} KB)", mime
    return text, "", mime


def _response_text(content: dict) -> str | None:
    text, mime = content.get("text"), str(content.get("mimeType") or "").lower()
    if not isinstance(text, str) or not any(t in mime for t in TEXT_TYPES):
        return None
    if content.get("encoding") == "base64":
        if len(text) > MAX_RESPONSE_CHARS * 4 // 3:
            return None
        try:
            return base64.b64decode(text).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return None
    return text[:MAX_RESPONSE_CHARS]


# -- pages and hosts -------------------------------------------------------------------------------


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


# -- headers and bodies --------------------------------------------------------------------------


def header_rules(e: Entry, body_type: str, keep: set[str]) -> list[HeaderRule]:
    rules = []
    for name, value in e.request_headers:
        low = name.lower()
        if low.startswith(":"):
            rules.append(HeaderRule(name, value, False, RULE_PSEUDO))
        elif low in SECRET_HEADERS:
            rules.append(HeaderRule(name, value, low in keep, RULE_KEPT_SECRET if low in keep else RULE_SECRET))
        elif low in ENGINE_HEADERS:
            rules.append(HeaderRule(name, value, False, RULE_ENGINE))
        elif low == "accept-encoding":
            rules.append(HeaderRule(name, value, False, RULE_ENCODING))
        elif low.startswith("sec-") or low in BROWSER_HEADERS:
            rules.append(HeaderRule(name, value, False, RULE_BROWSER))
        elif low in CONDITIONAL_HEADERS:
            rules.append(HeaderRule(name, value, False, RULE_CONDITIONAL))
        elif low in ORIGIN_HEADERS:
            rules.append(HeaderRule(name, value, False, RULE_ORIGIN))
        elif low == "content-type" and body_type != "raw":
            rules.append(HeaderRule(name, value, False, RULE_BODY_TYPE))
        elif not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            rules.append(HeaderRule(name, value, False, "not a valid header name"))
        else:
            rules.append(HeaderRule(name, value, True, RULE_KEPT))
    return rules


def _body_type(e: Entry) -> str:
    mime = e.post_mime.lower()
    if "application/x-www-form-urlencoded" in mime:
        return "form"
    if "json" in mime and e.post_text is not None:
        try:
            safejson.loads(e.post_text, max_depth=safejson.MAX_DEPTH)  # walked recursively below
            return "json"
        except ValueError:
            return "raw"
    return "raw"


def _form_pairs(text: str) -> list[tuple[str, str]]:
    return parse_qsl(text, keep_blank_values=True)


def _encode_form(pairs: list[tuple[str, str]]) -> str:
    """A form body where values that are ``{{placeholders}}`` stay as they are (the engine encodes their value)."""
    return "&".join(f"{quote_plus(k)}={v if variables.PLACEHOLDER.fullmatch(v) else quote_plus(v)}" for k, v in pairs)


def _variable_name(hint: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", hint).strip("_") or "value"
    if base[0].isdigit():
        base = "v_" + base
    base = base[:40]
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


# -- correlation -----------------------------------------------------------------------------------


def _producers(final: Entry, followed: bool) -> list[tuple[str, str, str, str, str]]:
    """(name hint, source, expression, value, kind) of the values a response sets."""
    out = []
    text = final.response_text or ""
    if text and "<input" in text.lower():
        for m in variables._INPUT_TAG.finditer(text):
            attrs = variables.input_attributes(m.group(1))
            name, value = attrs.get("name", ""), attrs.get("value", "")
            hidden = attrs.get("type", "").lower() == "hidden" and name and len(value) >= 4
            # Only when the engine's extraction finds this very value (the first input of that name).
            if hidden and variables.form_field(text, name) == value:
                out.append((name, "form_field", name, value, "hidden form field"))
    if text and "json" in final.mime:
        try:
            doc = safejson.loads(text, max_depth=safejson.MAX_DEPTH)  # its leaves are walked recursively
        except ValueError:
            doc = None
        for path, value in _json_leaves(doc):
            out.append(
                (
                    str(path[-1]) if path and isinstance(path[-1], str) else "id",
                    "json",
                    variables.format_jsonpath(path),
                    value,
                    "JSON value",
                )
            )
    location = final.response_header("location")
    if location and not followed and len(location) >= 4:
        out.append(("location", "header", "Location", location, "Location header"))
    return out


def _json_leaves(doc: object, path: tuple = (), out: list | None = None) -> list[tuple[tuple, str]]:
    out = [] if out is None else out
    if len(out) >= MAX_JSON_LEAVES:
        return out
    if isinstance(doc, dict):
        for k, v in doc.items():
            _json_leaves(v, (*path, str(k)), out)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:50]):
            _json_leaves(v, (*path, i), out)
    elif isinstance(doc, bool) or doc is None:
        pass
    elif isinstance(doc, int) and abs(doc) >= 10:
        out.append((path, str(doc)))
    elif isinstance(doc, str) and len(doc) >= 4 and not doc.isspace():
        out.append((path, doc))
    return out


def _request_texts(step: PreviewStep) -> list[str]:
    return [step.path, step.body, *step.headers.values()]


def _use_pattern(value: str) -> re.Pattern:
    forms = dict.fromkeys([value, quote_plus(value), quote(value, safe="")])
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    return re.compile(rf"(?<![{_BOUNDARY}])(?:{alternatives})(?![{_BOUNDARY}])")


def _url_tokens(step: PreviewStep) -> list[tuple[str, str]]:
    """(parameter, value) of the query parameters that look like server-made tokens."""
    query = urlsplit(step.path).query
    return [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if TOKEN_LIKE.match(v)]


def _regex_for(text: str, param: str, value: str) -> str | None:
    """A regex whose first group finds ``value`` in ``text`` (as the engine applies it), or None."""
    for pattern in (rf"[?&;]{re.escape(param)}=([^&\"'<>\s#]+)", rf"{re.escape(param)}=([^&\"'<>\s#]+)"):
        m = re.search(pattern, text)
        if m and m.group(1) in (value, value.replace("&", "&amp;")):
            return pattern
    return None


def _forms(value: str) -> list[str]:
    """The ways a value appears in a request: as it is, form-encoded, percent-encoded."""
    return list(dict.fromkeys([value, quote_plus(value), quote(value, safe="")]))


def correlate(steps: list[PreviewStep]) -> list[Correlation]:
    """Values that a step's response set and a later step sends back, earliest producer first.

    A substring test over the joined request texts weeds out the (many) values no later request
    sends before the exact, bounded regex runs: a 200-page recording stays well under a second.
    """
    found: list[Correlation] = []
    taken: set[str] = set()
    claimed: set[str] = set()
    texts = ["\n".join(_request_texts(s)) for s in steps]
    for i, step in enumerate(steps):
        if step.final is None:
            continue
        sent = "\n".join(texts[: i + 1])  # what the client sent up to this response: an echo is no correlation
        later = "\n".join(texts[i + 1 :])
        followed = step.final is not step.entry
        for hint, source, expression, value, kind in _producers(step.final, followed):
            if not any(f in later for f in _forms(value)):
                continue
            if any(value in known or known in value for known in claimed):
                continue  # one value, one variable: an id and the Location that contains it are one correlation
            pattern = _use_pattern(value)
            if pattern.search(sent):
                continue  # the client sent it first: an echo, not a value the server made
            uses = [k for k in range(i + 1, len(steps)) if pattern.search(texts[k])]
            if uses:
                claimed.add(value)
                found.append(Correlation(_variable_name(hint, taken), source, expression, value, i, uses, kind=kind))
        # Tokens in later URLs that this response's text contains (a link such as /report?token=…).
        text = step.final.response_text or ""
        for j in range(i + 1, len(steps)):
            for param, value in _url_tokens(steps[j]):
                if value not in text or value in sent or any(value in known or known in value for known in claimed):
                    continue
                regex = _regex_for(text, param, value)
                if regex is None:
                    continue
                pattern = _use_pattern(value)
                uses = [k for k in range(j, len(steps)) if pattern.search(texts[k])]
                claimed.add(value)
                found.append(
                    Correlation(_variable_name(param, taken), "regex", regex, value, i, uses, kind="token in a URL")
                )
    return found


def _apply(correlation: Correlation, steps: list[PreviewStep]) -> None:
    pattern = _use_pattern(correlation.value)
    placeholder = "{{" + correlation.name + "}}"
    steps[correlation.step].extract.append(
        {"name": correlation.name, "source": correlation.source, "expression": correlation.expression}
    )
    for k in correlation.uses:
        s = steps[k]
        s.path = pattern.sub(placeholder, s.path)
        s.headers = {name: pattern.sub(placeholder, v) for name, v in s.headers.items()}
        if s.body_type == "form":
            s.body = _encode_form([(n, placeholder if v == correlation.value else v) for n, v in _form_pairs(s.body)])
        elif s.body_type == "json":
            s.body = json.dumps(_json_replace(json.loads(s.body), {correlation.value: placeholder}))
        else:
            s.body = pattern.sub(placeholder, s.body)


def _json_replace(doc: object, replacements: dict[str, str], secret: Callable[[str], str | None] | None = None):
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            swap = secret(k) if secret and isinstance(v, str | int | float) and not isinstance(v, bool) else None
            out[k] = swap if swap is not None else _json_replace(v, replacements, secret)
        return out
    if isinstance(doc, list):
        return [_json_replace(v, replacements, secret) for v in doc]
    if isinstance(doc, str | int) and not isinstance(doc, bool) and str(doc) in replacements:
        return replacements[str(doc)]
    return doc


# -- the preview -----------------------------------------------------------------------------------


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


MAX_WS_TEXT = 500  # a received message longer than this is expected by its beginning
WS_MIN_WAIT = 0.05  # gaps shorter than this between frames are not waits (the recording's own jitter)


def _ws_step(main: Entry, choices: Choices, site: str) -> PreviewStep:
    """A recorded WebSocket session: frames sent become send actions, frames received expect actions
    (the text they carried), the time before each send a wait."""
    notes, actions = [], []
    previous = main.started + main.duration  # the handshake's end
    binary = 0
    for m in main.ws_messages or []:
        if m.opcode != 1:  # binary frames (2) and control frames: a session step sends and expects text
            binary += 1
            continue
        gap = m.time - previous
        previous = m.time
        if m.sent:
            if gap >= WS_MIN_WAIT:
                actions.append({"wait": round(min(gap, MAX_THINK_TIME), 2)})
            actions.append({"send": m.data})
        elif m.data:
            text = m.data if len(m.data) <= MAX_WS_TEXT else m.data[:MAX_WS_TEXT]
            action: dict = {"expect": {"contains": text}}
            if gap > 10:  # a push that came late: give it twice the time it took
                action["timeout"] = float(min(600, round(gap * 2)))
            actions.append(action)
    if binary:
        notes.append(f"{binary} binary frame{'' if binary == 1 else 's'} left out (a session step sends text)")
    long = sum(1 for m in main.ws_messages or [] if not m.sent and m.opcode == 1 and len(m.data) > MAX_WS_TEXT)
    if long:
        notes.append(f"{long} long message{'' if long == 1 else 's'} expected by the first {MAX_WS_TEXT} characters")
    if not main.ws_messages:
        notes.append("no frames were recorded (Chrome saves them with “Save all as HAR with content”)")
    sent, expected = sum(1 for a in actions if "send" in a), sum(1 for a in actions if "expect" in a)
    notes.append(f"WebSocket session: {sent} message{'' if sent == 1 else 's'} sent, {expected} expected")
    rules = header_rules(main, "raw", choices.keep_headers)
    name = (urlsplit(main.url).path or "/")[:77]
    return PreviewStep(
        name=f"WS {name}",
        method="GET",
        path=main.path[:MAX_PATH] if main.origin == site else main.url,
        headers={r.name: r.value for r in rules if r.kept},
        body_type="raw",
        body="",
        think_time=0.0,
        expect_status=None,
        resources=[],
        header_rules=rules,
        notes=notes,
        entry=main,
        final=main,
        recorded_protocol=main.http_version,
        ws_actions=actions,
    )


def _step(page: list[Entry], choices: Choices, site: str) -> PreviewStep:
    main = page[0]
    if main.websocket:
        return _ws_step(main, choices, site)
    chain = [main]
    for e in page[1:]:
        previous = chain[-1]
        location = previous.redirect_url or previous.response_header("location") or ""
        if 300 <= previous.status < 400 and location and e.url == urljoin(previous.url, location):
            chain.append(e)
        else:
            break
    final = chain[-1]
    body_type = _body_type(main)
    rules = header_rules(main, body_type, choices.keep_headers)
    path = main.path
    notes = []
    if len(chain) > 1:
        hops = " → ".join(e.path for e in chain[1:])
        notes.append(f"follows the redirect to {hops} (the engine follows redirects itself)")
    if main.post_note:
        notes.append(main.post_note)
    if len(path) > MAX_PATH:
        notes.append(f"its {len(path):,}-character URL was cut to {MAX_PATH}")
        path = path[:MAX_PATH]
    # A dict, kept in order: a list's ``in`` made a page of 16,000 sub-requests quadratic.
    found: dict[str, None] = {}
    for e in page[len(chain) :]:
        if e.method == "GET" and (sub := e.path) != path and len(sub) <= MAX_PATH and " " not in sub:
            found[sub] = None
    resources = list(found)
    if len(resources) > 100:
        notes.append(f"{len(resources) - 100} resources beyond the first 100 dropped")
        resources = resources[:100]
    status = final.status if 200 <= final.status <= 599 else None
    if final.status == 304:  # the browser's cache answered; without its conditional headers the server sends 200
        status = None
        notes.append("recorded as 304 Not Modified (the browser's cache): any 2xx/3xx is accepted")
    elif status is None:
        notes.append(f"recorded with status {final.status or 'none'} (blocked or cancelled): any 2xx/3xx is accepted")
    name = (urlsplit(main.url).path or "/")[:80]  # with "OPTIONS " and " (123)" within the Step's 100
    if main.http_version == "h2":
        notes.append("recorded over HTTP/2")
    return PreviewStep(
        name=f"{main.method} {name}" if main.method != "GET" else name,
        method=main.method,
        path=path,
        headers={r.name: r.value for r in rules if r.kept},
        body_type=body_type,
        body=main.post_text or "",
        think_time=0.0,
        expect_status=status,
        resources=resources,
        header_rules=rules,
        notes=notes,
        entry=main,
        final=final,
        recorded_protocol=main.http_version,
    )


def _secret_fields(steps: list[PreviewStep], choices: Choices) -> list[SecretField]:
    """Password-like form and JSON fields become ``{{variable}}`` unless the user keeps the recorded value.

    In a body that posts a password, the user-name field (``username``, ``email``, ``login`` …) is
    offered too, kept as recorded unless the user asks for a variable: a data set of many users
    then logs each virtual user in as someone else.
    """
    found: list[SecretField] = []
    for i, step in enumerate(steps):
        if step.body_type == "form":
            pairs = _form_pairs(step.body)
            login = any(PASSWORD_LIKE.search(name) for name, _ in pairs)
            out = []
            for name, value in pairs:
                swap = _field_choice(i, name, login, choices, found)
                out.append((name, value if swap is None else swap))
            step.body = _encode_form(out)
        elif step.body_type == "json":
            doc = json.loads(step.body)
            login = _has_password_key(doc)

            def swap(key: str, i=i, login=login) -> str | None:
                return _field_choice(i, key, login, choices, found)

            step.body = json.dumps(_json_replace(doc, {}, swap))
    return found


def _has_password_key(doc: object) -> bool:
    if isinstance(doc, dict):
        return any(PASSWORD_LIKE.search(str(k)) or _has_password_key(v) for k, v in doc.items())
    if isinstance(doc, list):
        return any(_has_password_key(v) for v in doc)
    return False


def _field_choice(step: int, name: str, login: bool, choices: Choices, found: list[SecretField]) -> str | None:
    """The placeholder a field is posted as, or None to post the recorded value; records the field for the preview."""
    if PASSWORD_LIKE.search(name):
        kept = name in choices.keep_fields
    elif login and USER_LIKE.search(name):
        kept = name not in choices.vary_fields
    else:
        return None
    variable = _chosen_variable(name, choices)
    found.append(SecretField(step, name, variable, kept, secret=bool(PASSWORD_LIKE.search(name))))
    return None if kept else "{{" + variable + "}}"


def _chosen_variable(field_name: str, choices: Choices) -> str:
    chosen = choices.variables.get(field_name, "").strip()
    if chosen and re.fullmatch(variables.NAME.pattern, chosen):
        return chosen
    return _variable_name(field_name, set())
