"""What a HAR import reads and proposes, as plain dataclasses; the limits the steps share."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from workers.engine import variables

MAX_PATH = 2000  # the Step model's limit
MAX_THINK_TIME = 3600.0


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
