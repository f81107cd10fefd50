"""The plan: what a run does, as the portal snapshots it (a JSON-safe dict).

``Plan.from_dict`` is the only way in. It validates everything the engine will
rely on and names the bad field with its path
(``test_cases[0].steps[1].method: must be one of GET, POST, ...``), so the
portal and the API can show the message as it is. Unknown keys are refused
too: a typo such as ``think_tme`` would otherwise silently run a different test.
``to_dict()`` returns the full form with every default filled in, and
``Plan.from_dict(p.to_dict()) == p``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from . import variables
from .otlp import traces_url
from .stop_criteria import CriteriaError
from .stop_criteria import Rule as StopRule
from .stop_criteria import parse_rules as parse_stop_criteria

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
THINK_TIME_MODES = ("fixed", "uniform", "exponential")
MAX_REQUEST_TIMEOUT = 600.0  # the histogram's range (10 min)
MAX_USERS = 1_000_000
MAX_LEVELS = 100
MAX_RATE = 1_000_000.0  # arrivals per second
BODY_TYPES = ("raw", "form", "json")
EXTRACT_SOURCES = variables.SOURCES  # regex, json, form_field, header
DATA_SET_MODES = ("sequential", "random", "unique")
MAX_EXTRACTIONS = 50  # per step
MAX_RESOURCES = 200  # per step
MAX_DATA_SET_COLUMNS = 100
MAX_DATA_SET_ROWS = 1_000_000
PROTOCOLS = ("auto", "http1", "h2c")  # docs/protocols.md
STREAM_KINDS = ("sse", "chunked")
WS_CHECKS = ("contains", "regex", "json")
MAX_WS_ACTIONS = 1000
MAX_CA_BUNDLE = 1_000_000  # characters of PEM


class PlanError(ValueError):
    """A plan that cannot run; the message starts with the path of the bad field."""


@dataclass(frozen=True)
class Extraction:
    """A value taken from a step's response for later steps: ``{{name}}``."""

    name: str
    source: str  # regex | json | form_field | header
    expression: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "expression": self.expression}


@dataclass(frozen=True)
class DataSet:
    """Rows of values for a test case's iterations; each column is a variable (see datasets.py)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    mode: str = "sequential"  # sequential | random | unique

    def to_dict(self) -> dict[str, Any]:
        return {"columns": list(self.columns), "rows": [list(r) for r in self.rows], "mode": self.mode}


@dataclass(frozen=True)
class Stream:
    """A streamed response (server-sent events or a chunked body of lines), timed event by event (streams.py)."""

    kind: str  # sse | chunked
    idle_timeout: float = 10.0  # seconds without a byte before the stream is an error (stream_stalled)
    last_event_contains: str = ""  # "": no check; else the last event's data must contain it (check_failed)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "idle_timeout": self.idle_timeout, "last_event_contains": self.last_event_contains}


@dataclass(frozen=True)
class WsAction:
    """One action of a WebSocket session: send a message, expect one, or wait."""

    kind: str  # send | expect | wait
    text: str = ""  # send: the message ({{variables}} filled in)
    check: str = ""  # expect: contains | regex | json
    value: str = ""  # expect: the text, the pattern, or the JSON path
    equals: str | None = None  # expect json: the value the path must have (None: only present)
    timeout: float | None = None  # expect: seconds (None: the step's timeout)
    seconds: float = 0.0  # wait
    extract: tuple[Extraction, ...] = ()  # expect: values from the matching message (regex or json)

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "send":
            return {"send": self.text}
        if self.kind == "wait":
            return {"wait": self.seconds}
        expect: dict[str, Any] = {self.check: self.value}
        if self.equals is not None:
            expect["equals"] = self.equals
        return {"expect": expect, "timeout": self.timeout, "extract": [e.to_dict() for e in self.extract]}


@dataclass(frozen=True)
class WebSocket:
    """A WebSocket session step: connect to the step's path (ws:// or wss://), run the actions, hold, close."""

    actions: tuple[WsAction, ...]
    hold: float = 0.0  # seconds the session stays open after the last action
    max_message_bytes: int = 1 << 20  # a larger message ends the session (message_too_big)

    def to_dict(self) -> dict[str, Any]:
        return {
            "actions": [a.to_dict() for a in self.actions],
            "hold": self.hold,
            "max_message_bytes": self.max_message_bytes,
        }


@dataclass(frozen=True)
class Step:
    """One page: a request (plus its resources), its checks, its extractions and the think time after it."""

    name: str
    path: str
    method: str = "GET"
    headers: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    body_type: str = "raw"  # raw | form | json
    body: str = ""
    think_time: float = 0.0
    timeout: float | None = None  # None: the plan's request_timeout
    expect_status: int | None = 200  # None: any 2xx or 3xx
    text_present: str = ""  # "": no check
    text_absent: str = ""
    max_duration_ms: float | None = None  # a slower page is an error (check_failed)
    extract: tuple[Extraction, ...] = ()
    resources: tuple[str, ...] = ()  # paths fetched in parallel after the main response
    stream: Stream | None = None  # the main response is a stream (docs/protocols.md)
    websocket: WebSocket | None = None  # the step is a WebSocket session (docs/protocols.md)

    def to_dict(self) -> dict[str, Any]:
        d = self._fields()
        if self.stream is not None:  # left out when unset, so plans written before it read back the same
            d["stream"] = self.stream.to_dict()
        if self.websocket is not None:
            d["websocket"] = self.websocket.to_dict()
        return d

    def _fields(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "headers": dict(self.headers),
            "body_type": self.body_type,
            "body": self.body,
            "think_time": self.think_time,
            "timeout": self.timeout,
            "expect_status": self.expect_status,
            "text_present": self.text_present,
            "text_absent": self.text_absent,
            "max_duration_ms": self.max_duration_ms,
            "extract": [e.to_dict() for e in self.extract],
            "resources": list(self.resources),
        }


@dataclass(frozen=True)
class TestCase:
    """A navigation path: ordered steps, chosen by the mix with ``weight``, optionally fed by a data set."""

    __test__ = False  # not a pytest class, despite the name

    name: str
    steps: tuple[Step, ...]
    weight: int = 1
    data_set: DataSet | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weight": self.weight,
            "data_set": None if self.data_set is None else self.data_set.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
        }


@dataclass(frozen=True)
class Level:
    """One level of a ``steps`` profile: ramp up to ``users``, hold (measured), ramp down to 0, stay quiet."""

    users: int
    hold: float
    ramp_up: float = 0.0
    ramp_down: float = 0.0
    quiet: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "users": self.users,
            "ramp_up": self.ramp_up,
            "hold": self.hold,
            "ramp_down": self.ramp_down,
            "quiet": self.quiet,
        }


@dataclass(frozen=True)
class Profile:
    """The load profile, of one of the kinds in ``profiles.KINDS`` (docs/plan-format.md; shapes in profiles.py).

    ``users`` is, for every kind, how many virtual-user numbers the profile
    uses, which is what shards split: the users of ``constant``, ``ramp`` and
    ``pacing``, the largest level of ``steps``, ``max_users`` of
    ``arrival_rate``. Fields a kind does not use keep their defaults
    (``steps`` keeps its durations in ``levels``).
    """

    users: int
    hold: float
    ramp_up: float = 0.0
    ramp_down: float = 0.0
    kind: str = "ramp"
    levels: tuple[Level, ...] = ()
    pacing: float = 0.0  # pacing: seconds between the starts of a user's iterations
    rate: float = 0.0  # arrival_rate: iterations started per second during the hold
    rate_start: float = 0.0  # arrival_rate: the rate at the start of the ramp-up

    @property
    def max_users(self) -> int:
        return self.users

    @property
    def open_model(self) -> bool:
        """Iterations arrive at a rate (arrival_rate) instead of being looped by users."""
        return self._kind.open_model

    @property
    def timed_from_intended_start(self) -> bool:
        """The first page of an iteration is timed from when the iteration was due (no coordinated omission)."""
        return self._kind.timed_from_intended_start

    @property
    def _kind(self):
        from .profiles import kind_of

        return kind_of(self)

    def to_dict(self) -> dict[str, Any]:
        return self._kind.to_dict(self)


@dataclass(frozen=True)
class Thresholds:
    """Pass/fail rules; carried for the portal, which judges. The engine ignores them."""

    apd_ms: float | None = None
    p95_ms: float | None = None
    error_rate_pct: float | None = None
    min_pages_per_s: float | None = None
    # Streams and WebSocket sessions (issue 26): in the dict only when set, as a plan's newer keys.
    ttfe_p95_ms: float | None = None
    gap_p95_ms: float | None = None
    rtt_p95_ms: float | None = None
    min_h2_share_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "apd_ms": self.apd_ms,
            "p95_ms": self.p95_ms,
            "error_rate_pct": self.error_rate_pct,
            "min_pages_per_s": self.min_pages_per_s,
            **{k: getattr(self, k) for k in PROTOCOL_THRESHOLDS if getattr(self, k) is not None},
        }


PROTOCOL_THRESHOLDS = ("ttfe_p95_ms", "gap_p95_ms", "rtt_p95_ms", "min_h2_share_pct")


@dataclass(frozen=True)
class Plan:
    base_url: str
    test_cases: tuple[TestCase, ...]
    profile: Profile
    think_time_mode: str = "fixed"
    request_timeout: float = 30.0
    thresholds: Thresholds = field(default_factory=Thresholds)
    protocol: str = "auto"  # auto (ALPN over TLS) | http1 | h2c (cleartext HTTP/2 with prior knowledge)
    tls_verify: bool = True  # verify the server's certificate (against the system CAs and ca_bundle)
    ca_bundle: str = ""  # PEM certificates trusted in addition to the system's (a private CA)
    trace_context: bool = True  # a W3C traceparent on every request (tracecontext.py)
    trace_sample_rate: float = 1.0  # the share of requests flagged sampled (0..1)
    otlp_endpoint: str = ""  # an OTLP/HTTP receiver: sampled requests' spans exported there (otlp.py)
    # Rules that end the run early when the target is plainly broken; carried for the portal, which
    # evaluates them (stop_criteria.py). The engine ignores them, as it does thresholds.
    stop_criteria: tuple[StopRule, ...] = ()

    def url_for(self, step: Step) -> str:
        if step.websocket is not None and _is_ws_url(step.path):
            return step.path  # a WebSocket step may name its own ws:// or wss:// origin
        return self.base_url + step.path

    def target_urls(self) -> list[str]:
        """Every origin the plan connects to, for the allowlist check before a run: the base URL and the
        absolute ws:// or wss:// URLs of WebSocket steps (their hosts are never placeholders)."""
        urls = [self.base_url]
        for tc in self.test_cases:
            for step in tc.steps:
                if step.websocket is not None and _is_ws_url(step.path) and step.path not in urls:
                    urls.append(step.path)
        return urls

    @staticmethod
    def label(test_case: TestCase, step: Step) -> str:
        """The name results are reported under: ``"<test case name>: <step name>"``."""
        return f"{test_case.name}: {step.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "test_cases": [tc.to_dict() for tc in self.test_cases],
            "profile": self.profile.to_dict(),
            "think_time_mode": self.think_time_mode,
            "request_timeout": self.request_timeout,
            "thresholds": self.thresholds.to_dict(),
            "protocol": self.protocol,
            "tls_verify": self.tls_verify,
            "ca_bundle": self.ca_bundle,
            # Only when not the default: plans saved before trace context keep their exact form.
            **({} if self.trace_context else {"trace_context": False}),
            **({} if self.trace_sample_rate == 1.0 else {"trace_sample_rate": self.trace_sample_rate}),
            **({"otlp_endpoint": self.otlp_endpoint} if self.otlp_endpoint else {}),
            **({"stop_criteria": [r.to_dict() for r in self.stop_criteria]} if self.stop_criteria else {}),
        }

    @classmethod
    def from_dict(cls, d: Any) -> Plan:
        """Validate a plan dict; raises PlanError naming the first bad field."""
        _obj(d, "plan", required=("base_url", "test_cases", "profile"), optional=_PLAN_OPTIONAL)
        base_url = _base_url(d["base_url"], "base_url")
        cases = d["test_cases"]
        if not isinstance(cases, list) or not cases:
            raise PlanError("test_cases: must be a non-empty list")
        test_cases = tuple(_test_case(tc, f"test_cases[{i}]") for i, tc in enumerate(cases))
        seen: dict[str, int] = {}
        for i, tc in enumerate(test_cases):
            if tc.name in seen:
                first = seen[tc.name]
                raise PlanError(f"test_cases[{i}].name: duplicate test case name {tc.name!r} (see test_cases[{first}])")
            seen[tc.name] = i
        mode = d.get("think_time_mode", "fixed")
        if mode not in THINK_TIME_MODES:
            raise PlanError(f"think_time_mode: must be one of {', '.join(THINK_TIME_MODES)}")
        timeout = _number(d.get("request_timeout", 30.0), "request_timeout", minimum=0.0, exclusive=True)
        if timeout > MAX_REQUEST_TIMEOUT:
            raise PlanError(f"request_timeout: must be at most {MAX_REQUEST_TIMEOUT:g} s")
        thresholds = d.get("thresholds")
        protocol = d.get("protocol", "auto")
        if protocol not in PROTOCOLS:
            raise PlanError(f"protocol: must be one of {', '.join(PROTOCOLS)}")
        tls_verify = d.get("tls_verify", True)
        if not isinstance(tls_verify, bool):
            raise PlanError("tls_verify: must be true or false")
        ca_bundle = _ca_bundle(d.get("ca_bundle", ""), "ca_bundle")
        trace_context = d.get("trace_context", True)
        if not isinstance(trace_context, bool):
            raise PlanError("trace_context: must be true or false")
        sample_rate = _number(d.get("trace_sample_rate", 1.0), "trace_sample_rate", minimum=0.0)
        if sample_rate > 1.0:
            raise PlanError("trace_sample_rate: must be between 0 and 1")
        otlp_endpoint = d.get("otlp_endpoint", "")
        if not isinstance(otlp_endpoint, str) or len(otlp_endpoint) > 500:
            raise PlanError("otlp_endpoint: must be a URL (at most 500 characters), or empty")
        if otlp_endpoint:
            try:
                traces_url(otlp_endpoint)
            except ValueError as exc:
                raise PlanError(str(exc)) from None
        try:
            stop_criteria = tuple(parse_stop_criteria(d.get("stop_criteria", [])))
        except CriteriaError as exc:
            raise PlanError(str(exc)) from None
        return cls(
            base_url=base_url,
            test_cases=test_cases,
            profile=_profile(d["profile"], "profile"),
            think_time_mode=mode,
            request_timeout=timeout,
            thresholds=Thresholds() if thresholds is None else _thresholds(thresholds, "thresholds"),
            protocol=protocol,
            tls_verify=tls_verify,
            ca_bundle=ca_bundle,
            trace_context=trace_context,
            trace_sample_rate=float(sample_rate),
            otlp_endpoint=otlp_endpoint.strip(),
            stop_criteria=stop_criteria,
        )

    @classmethod
    def single_page(
        cls,
        url: str,
        *,
        users: int,
        hold: float,
        think_time: float = 0.0,
        think_time_mode: str = "fixed",
        ramp_up: float = 0.0,
        timeout: float = 30.0,
        rate: float | None = None,
    ) -> Plan:
        """A one-page test (the CLI's ``--url``): one test case with one GET of ``url``, any 2xx/3xx accepted.

        With ``rate``, an ``arrival_rate`` profile: ``rate`` iterations per second
        (ramping from 0 over ``ramp_up``, if any), at most ``users`` users.
        """
        parts = urlsplit(url)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return cls.from_dict(
            {
                "base_url": f"{parts.scheme}://{parts.netloc}",
                "test_cases": [
                    {
                        "name": "Page",
                        "steps": [{"name": path, "path": path, "think_time": think_time, "expect_status": None}],
                    }
                ],
                "profile": (
                    {"users": users, "ramp_up": ramp_up, "hold": hold}
                    if rate is None
                    else {
                        "kind": "arrival_rate",
                        "rate": rate,
                        "rate_start": 0.0 if ramp_up > 0 else rate,
                        "ramp_up": ramp_up,
                        "hold": hold,
                        "max_users": users,
                    }
                ),
                "request_timeout": timeout,
                "think_time_mode": think_time_mode,
            }
        )


_PLAN_OPTIONAL = (
    "think_time_mode",
    "request_timeout",
    "thresholds",
    "protocol",
    "tls_verify",
    "ca_bundle",
    "trace_context",
    "trace_sample_rate",
    "otlp_endpoint",
    "stop_criteria",
)
_CASE_OPTIONAL = ("weight", "data_set")
_STEP_OPTIONAL = (
    "method",
    "headers",
    "body_type",
    "body",
    "think_time",
    "timeout",
    "expect_status",
    "text_present",
    "text_absent",
    "max_duration_ms",
    "extract",
    "resources",
    "stream",
    "websocket",
)


def _obj(d: Any, path: str, *, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    if not isinstance(d, dict):
        raise PlanError(f"{path}: must be an object")
    for key in required:
        if key not in d:
            raise PlanError(f"{_join(path, key)}: is required")
    allowed = set(required) | set(optional)
    for key in d:
        if key not in allowed:
            raise PlanError(f"{_join(path, str(key))}: unknown key (allowed: {', '.join((*required, *optional))})")


def _join(path: str, key: str) -> str:
    return key if path == "plan" else f"{path}.{key}"


def _string(v: Any, path: str, *, non_empty: bool = False, max_len: int = 10_000) -> str:
    if not isinstance(v, str):
        raise PlanError(f"{path}: must be a string")
    if non_empty and not v.strip():
        raise PlanError(f"{path}: must not be empty")
    if len(v) > max_len:
        raise PlanError(f"{path}: must be at most {max_len} characters")
    return v


def _number(v: Any, path: str, *, minimum: float = 0.0, exclusive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise PlanError(f"{path}: must be a number")
    if v < minimum or (exclusive and v == minimum):
        raise PlanError(f"{path}: must be {'greater than' if exclusive else 'at least'} {minimum:g}")
    return float(v)


def _int(v: Any, path: str, *, minimum: int, maximum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise PlanError(f"{path}: must be an integer")
    if v < minimum or (maximum is not None and v > maximum):
        bound = f"at least {minimum}" if maximum is None else f"within {minimum}..{maximum}"
        raise PlanError(f"{path}: must be {bound}")
    return v


def _base_url(v: Any, path: str) -> str:
    url = _string(v, path, non_empty=True).strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError on a bad port
    except ValueError as exc:
        raise PlanError(f"{path}: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PlanError(f"{path}: must be an http:// or https:// URL with a host")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise PlanError(f"{path}: must not contain a query, a fragment or credentials")
    return url.rstrip("/")


def _ca_bundle(v: Any, path: str) -> str:
    """PEM text of one or more CA certificates, checked by loading it into a TLS context."""
    text = _string(v, path, max_len=MAX_CA_BUNDLE).strip()
    if not text:
        return ""
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise PlanError(f"{path}: must be PEM text with at least one -----BEGIN CERTIFICATE----- block")
    import ssl

    try:
        ssl.create_default_context().load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise PlanError(f"{path}: not a valid PEM certificate bundle ({exc})") from None
    return text + "\n"


def _test_case(d: Any, path: str) -> TestCase:
    _obj(d, path, required=("name", "steps"), optional=_CASE_OPTIONAL)
    name = _string(d["name"], f"{path}.name", non_empty=True, max_len=200)
    weight = _int(d.get("weight", 1), f"{path}.weight", minimum=1)
    data_set = d.get("data_set")
    if data_set is not None:
        data_set = _data_set(data_set, f"{path}.data_set")
    steps = d["steps"]
    if not isinstance(steps, list) or not steps:
        raise PlanError(f"{path}.steps: must be a non-empty list")
    parsed = tuple(_step(s, f"{path}.steps[{i}]") for i, s in enumerate(steps))
    names: dict[str, int] = {}
    for i, step in enumerate(parsed):
        if step.name in names:
            raise PlanError(
                f"{path}.steps[{i}].name: duplicate step name {step.name!r} in this test case "
                f"(see steps[{names[step.name]}]; results are reported per step name)"
            )
        names[step.name] = i
    return TestCase(name=name, steps=parsed, weight=weight, data_set=data_set)


def _step(d: Any, path: str) -> Step:
    _obj(d, path, required=("name", "path"), optional=_STEP_OPTIONAL)
    name = _string(d["name"], f"{path}.name", non_empty=True, max_len=200)
    method = d.get("method", "GET")
    if method not in METHODS:
        raise PlanError(f"{path}.method: must be one of {', '.join(METHODS)}")
    if d.get("websocket") is not None and isinstance(d["path"], str) and _is_ws_url(d["path"]):
        step_path = _ws_url(d["path"], f"{path}.path")
    else:
        step_path = _request_path(d["path"], f"{path}.path")
    headers = d.get("headers", {})
    if not isinstance(headers, dict):
        raise PlanError(f"{path}.headers: must be an object of header names to strings")
    for key, value in headers.items():
        if not isinstance(key, str) or not key or any(c in key for c in " :\r\n"):
            raise PlanError(f"{path}.headers: {key!r} is not a valid header name")
        if not isinstance(value, str) or "\r" in value or "\n" in value:
            raise PlanError(f"{path}.headers.{key}: must be a string without line breaks")
    expect = d.get("expect_status", 200)
    if expect is not None:
        expect = _int(expect, f"{path}.expect_status", minimum=100, maximum=599)
    body_type = d.get("body_type", "raw")
    if body_type not in BODY_TYPES:
        raise PlanError(f"{path}.body_type: must be one of {', '.join(BODY_TYPES)}")
    body = _string(d.get("body", ""), f"{path}.body", max_len=10_000_000)
    if body_type == "json":
        problem = variables.json_body_problem(body)
        if problem:
            raise PlanError(f"{path}.body: {problem}")
    timeout = d.get("timeout")
    if timeout is not None:
        timeout = _number(timeout, f"{path}.timeout", minimum=0.0, exclusive=True)
        if timeout > MAX_REQUEST_TIMEOUT:
            raise PlanError(f"{path}.timeout: must be at most {MAX_REQUEST_TIMEOUT:g} s")
    max_duration = d.get("max_duration_ms")
    if max_duration is not None:
        max_duration = _number(max_duration, f"{path}.max_duration_ms", minimum=0.0, exclusive=True)
    step = Step(
        name=name,
        method=method,
        path=step_path,
        headers=MappingProxyType(dict(headers)),
        body_type=body_type,
        body=body,
        think_time=_number(d.get("think_time", 0.0), f"{path}.think_time"),
        timeout=timeout,
        expect_status=expect,
        text_present=_string(d.get("text_present", ""), f"{path}.text_present"),
        text_absent=_string(d.get("text_absent", ""), f"{path}.text_absent"),
        max_duration_ms=max_duration,
        extract=_extractions(d.get("extract", []), f"{path}.extract"),
        resources=_resources(d.get("resources", []), f"{path}.resources"),
        stream=_stream(d.get("stream"), f"{path}.stream"),
        websocket=_websocket(d.get("websocket"), f"{path}.websocket"),
    )
    if step.websocket is not None and (step.method != "GET" or step.body or step.resources or step.stream is not None):
        raise PlanError(f"{path}.websocket: a WebSocket step has no method but GET, no body, resources or stream")
    return step


def _websocket(d: Any, path: str) -> WebSocket | None:
    if d is None:
        return None
    _obj(d, path, required=("actions",), optional=("hold", "max_message_bytes"))
    actions = d["actions"]
    if not isinstance(actions, list) or len(actions) > MAX_WS_ACTIONS:
        raise PlanError(f"{path}.actions: must be a list of at most {MAX_WS_ACTIONS} actions")
    parsed = tuple(_ws_action(a, f"{path}.actions[{i}]") for i, a in enumerate(actions))
    hold = _number(d.get("hold", 0.0), f"{path}.hold")
    max_bytes = _int(d.get("max_message_bytes", 1 << 20), f"{path}.max_message_bytes", minimum=1, maximum=1 << 26)
    return WebSocket(actions=parsed, hold=hold, max_message_bytes=max_bytes)


def _ws_action(d: Any, path: str) -> WsAction:
    if not isinstance(d, dict) or len({"send", "expect", "wait"} & set(d)) != 1:
        raise PlanError(f"{path}: must be an object with one of send, expect or wait")
    if "send" in d:
        _obj(d, path, required=("send",), optional=())
        return WsAction(kind="send", text=_string(d["send"], f"{path}.send", max_len=10_000_000))
    if "wait" in d:
        _obj(d, path, required=("wait",), optional=())
        return WsAction(kind="wait", seconds=_number(d["wait"], f"{path}.wait"))
    _obj(d, path, required=("expect",), optional=("timeout", "extract"))
    e = d["expect"]
    checks = [c for c in WS_CHECKS if isinstance(e, dict) and c in e]
    if len(checks) != 1:
        raise PlanError(f"{path}.expect: must be an object with one of {', '.join(WS_CHECKS)}")
    check = checks[0]
    _obj(e, f"{path}.expect", required=(check,), optional=("equals",) if check == "json" else ())
    value = _string(e[check], f"{path}.expect.{check}", non_empty=True)
    if check == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            raise PlanError(f"{path}.expect.regex: not a valid regular expression ({exc})") from None
    elif check == "json":
        try:
            variables.parse_jsonpath(value)
        except ValueError as exc:
            raise PlanError(f"{path}.expect.json: {exc}") from None
    equals = e.get("equals")
    if equals is not None:
        equals = _string(equals, f"{path}.expect.equals")
    timeout = d.get("timeout")
    if timeout is not None:
        timeout = _number(timeout, f"{path}.timeout", minimum=0.0, exclusive=True)
    extract = _extractions(d.get("extract", []), f"{path}.extract")
    for i, x in enumerate(extract):
        if x.source not in ("regex", "json"):
            raise PlanError(f"{path}.extract[{i}].source: a message has only regex or json extractions")
    return WsAction(kind="expect", check=check, value=value, equals=equals, timeout=timeout, extract=extract)


def _stream(d: Any, path: str) -> Stream | None:
    if d is None:
        return None
    _obj(d, path, required=("kind",), optional=("idle_timeout", "last_event_contains"))
    kind = d["kind"]
    if kind not in STREAM_KINDS:
        raise PlanError(f"{path}.kind: must be one of {', '.join(STREAM_KINDS)}")
    idle = _number(d.get("idle_timeout", 10.0), f"{path}.idle_timeout", minimum=0.0, exclusive=True)
    if idle > MAX_REQUEST_TIMEOUT:
        raise PlanError(f"{path}.idle_timeout: must be at most {MAX_REQUEST_TIMEOUT:g} s")
    contains = _string(d.get("last_event_contains", ""), f"{path}.last_event_contains", max_len=10_000)
    return Stream(kind=kind, idle_timeout=idle, last_event_contains=contains)


def _is_ws_url(text: str) -> bool:
    return text[:5].lower() == "ws://" or text[:6].lower() == "wss://"


def _ws_url(v: Any, path: str) -> str:
    """An absolute ws:// or wss:// URL (a WebSocket step on another origin than the base URL)."""
    from .targets import BadTargetURL, parse_target_url

    text = _string(v, path, non_empty=True, max_len=8000)
    origin_end = text.find("/", text.find("//") + 2)
    if "{{" in (text if origin_end < 0 else text[:origin_end]):
        raise PlanError(f"{path}: the host of a ws:// or wss:// URL cannot be a {{{{variable}}}} (checked first)")
    try:
        parse_target_url(variables.PLACEHOLDER.sub("x", text), websocket=True)
    except BadTargetURL as exc:
        raise PlanError(f"{path}: {exc}") from None
    return text


def _request_path(v: Any, path: str) -> str:
    text = _string(v, path, non_empty=True, max_len=8000)
    if not text.startswith("/"):
        raise PlanError(f"{path}: must start with '/'")
    if any(c in text for c in " \r\n\t"):
        raise PlanError(f"{path}: must not contain spaces or line breaks (percent-encode them)")
    return text


_IDENTIFIER = "must be an identifier (ASCII letters, digits and _, not starting with a digit)"


def _extractions(v: Any, path: str) -> tuple[Extraction, ...]:
    if not isinstance(v, list):
        raise PlanError(f"{path}: must be a list of extractions")
    if len(v) > MAX_EXTRACTIONS:
        raise PlanError(f"{path}: at most {MAX_EXTRACTIONS} extractions per step")
    out: list[Extraction] = []
    seen: dict[str, int] = {}
    for i, d in enumerate(v):
        here = f"{path}[{i}]"
        _obj(d, here, required=("name", "source", "expression"), optional=())
        name = _string(d["name"], f"{here}.name", non_empty=True, max_len=100)
        if not variables.NAME.fullmatch(name):
            raise PlanError(f"{here}.name: {_IDENTIFIER}")
        if name in seen:
            raise PlanError(f"{here}.name: {name!r} is already extracted by {path}[{seen[name]}]")
        seen[name] = i
        source = d["source"]
        if source not in EXTRACT_SOURCES:
            raise PlanError(f"{here}.source: must be one of {', '.join(EXTRACT_SOURCES)}")
        expression = _string(d["expression"], f"{here}.expression", non_empty=True, max_len=2000)
        if source == "regex":
            try:
                re.compile(expression)
            except re.error as exc:
                raise PlanError(f"{here}.expression: not a valid regular expression ({exc})") from None
        elif source == "json":
            try:
                variables.parse_jsonpath(expression)
            except ValueError as exc:
                raise PlanError(f"{here}.expression: not a supported JSONPath ({exc}; e.g. $.items[0].id)") from None
        elif source == "header" and any(c in expression for c in " :\r\n\t"):
            raise PlanError(f"{here}.expression: {expression!r} is not a valid header name")
        out.append(Extraction(name=name, source=source, expression=expression))
    return tuple(out)


def _resources(v: Any, path: str) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise PlanError(f"{path}: must be a list of paths")
    if len(v) > MAX_RESOURCES:
        raise PlanError(f"{path}: at most {MAX_RESOURCES} resources per step")
    return tuple(_request_path(p, f"{path}[{i}]") for i, p in enumerate(v))


def _data_set(d: Any, path: str) -> DataSet:
    _obj(d, path, required=("columns", "rows"), optional=("mode",))
    columns = d["columns"]
    if not isinstance(columns, list) or not columns:
        raise PlanError(f"{path}.columns: must be a non-empty list of names")
    if len(columns) > MAX_DATA_SET_COLUMNS:
        raise PlanError(f"{path}.columns: at most {MAX_DATA_SET_COLUMNS} columns")
    for i, c in enumerate(columns):
        if not isinstance(c, str) or not variables.NAME.fullmatch(c):
            raise PlanError(f"{path}.columns[{i}]: {_IDENTIFIER}")
        if columns.index(c) != i:
            raise PlanError(f"{path}.columns[{i}]: duplicate column {c!r}")
    rows = d["rows"]
    if not isinstance(rows, list) or not rows:
        raise PlanError(f"{path}.rows: must be a non-empty list of rows")
    if len(rows) > MAX_DATA_SET_ROWS:
        raise PlanError(f"{path}.rows: at most {MAX_DATA_SET_ROWS} rows")
    width = len(columns)
    parsed: list[tuple[str, ...]] = []
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise PlanError(f"{path}.rows[{i}]: must be a list of {width} values")
        if len(row) != width:
            raise PlanError(
                f"{path}.rows[{i}]: has {len(row)} value{'s' if len(row) != 1 else ''}, "
                f"but there {'are' if width != 1 else 'is'} {width} column{'s' if width != 1 else ''} "
                f"({', '.join(columns)})"
            )
        parsed.append(tuple(_cell(v, f"{path}.rows[{i}][{j}]") for j, v in enumerate(row)))
    mode = d.get("mode", "sequential")
    if mode not in DATA_SET_MODES:
        raise PlanError(f"{path}.mode: must be one of {', '.join(DATA_SET_MODES)}")
    return DataSet(columns=tuple(columns), rows=tuple(parsed), mode=mode)


def _cell(v: Any, path: str) -> str:
    """A data set value: a string, or a number (kept as its text)."""
    if isinstance(v, str):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return str(v)
    raise PlanError(f"{path}: must be a string or a number")


def _profile(d: Any, path: str) -> Profile:
    from . import profiles  # the kinds parse their own objects (profiles.py imports this module)

    return profiles.parse(d, path)


def _thresholds(d: Any, path: str) -> Thresholds:
    _obj(d, path, required=(), optional=("apd_ms", "p95_ms", "error_rate_pct", "min_pages_per_s", *PROTOCOL_THRESHOLDS))
    values = {key: None if d.get(key) is None else _number(d[key], f"{path}.{key}") for key in d}
    return Thresholds(**values)


def profile_from_dict(d: Any) -> Profile:
    """A load profile alone (a plan's ``profile``), validated as in a plan: for readers of a run's timing."""
    return _profile(d, "profile")
