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
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
THINK_TIME_MODES = ("fixed", "uniform", "exponential")
MAX_REQUEST_TIMEOUT = 600.0  # the histogram's range (10 min)
MAX_USERS = 1_000_000


class PlanError(ValueError):
    """A plan that cannot run; the message starts with the path of the bad field."""


@dataclass(frozen=True)
class Step:
    """One page: a request, its checks and the think time after it."""

    name: str
    path: str
    method: str = "GET"
    headers: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    body: str = ""
    think_time: float = 0.0
    expect_status: int | None = 200  # None: any 2xx or 3xx
    text_present: str = ""  # "": no check
    text_absent: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "headers": dict(self.headers),
            "body": self.body,
            "think_time": self.think_time,
            "expect_status": self.expect_status,
            "text_present": self.text_present,
            "text_absent": self.text_absent,
        }


@dataclass(frozen=True)
class TestCase:
    """A navigation path: ordered steps, chosen by the mix with ``weight``."""

    __test__ = False  # not a pytest class, despite the name

    name: str
    steps: tuple[Step, ...]
    weight: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, "steps": [s.to_dict() for s in self.steps]}


@dataclass(frozen=True)
class Profile:
    """Closed-model load profile: ``users`` virtual users with a linear ramp (see schedule.py)."""

    users: int
    hold: float
    ramp_up: float = 0.0
    ramp_down: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"users": self.users, "ramp_up": self.ramp_up, "hold": self.hold, "ramp_down": self.ramp_down}


@dataclass(frozen=True)
class Thresholds:
    """Pass/fail rules; carried for the portal, which judges. The engine ignores them."""

    apd_ms: float | None = None
    p95_ms: float | None = None
    error_rate_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"apd_ms": self.apd_ms, "p95_ms": self.p95_ms, "error_rate_pct": self.error_rate_pct}


@dataclass(frozen=True)
class Plan:
    base_url: str
    test_cases: tuple[TestCase, ...]
    profile: Profile
    think_time_mode: str = "fixed"
    request_timeout: float = 30.0
    thresholds: Thresholds = field(default_factory=Thresholds)

    def url_for(self, step: Step) -> str:
        return self.base_url + step.path

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
        return cls(
            base_url=base_url,
            test_cases=test_cases,
            profile=_profile(d["profile"], "profile"),
            think_time_mode=mode,
            request_timeout=timeout,
            thresholds=Thresholds() if thresholds is None else _thresholds(thresholds, "thresholds"),
        )

    @classmethod
    def single_page(
        cls, url: str, *, users: int, hold: float, think_time: float = 0.0, ramp_up: float = 0.0, timeout: float = 30.0
    ) -> Plan:
        """A one-page test (the CLI's ``--url``): one test case with one GET of ``url``, any 2xx/3xx accepted."""
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
                "profile": {"users": users, "ramp_up": ramp_up, "hold": hold},
                "request_timeout": timeout,
            }
        )


_PLAN_OPTIONAL = ("think_time_mode", "request_timeout", "thresholds")
_CASE_OPTIONAL = ("weight",)
_STEP_OPTIONAL = ("method", "headers", "body", "think_time", "expect_status", "text_present", "text_absent")


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


def _test_case(d: Any, path: str) -> TestCase:
    _obj(d, path, required=("name", "steps"), optional=_CASE_OPTIONAL)
    name = _string(d["name"], f"{path}.name", non_empty=True, max_len=200)
    weight = _int(d.get("weight", 1), f"{path}.weight", minimum=1)
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
    return TestCase(name=name, steps=parsed, weight=weight)


def _step(d: Any, path: str) -> Step:
    _obj(d, path, required=("name", "path"), optional=_STEP_OPTIONAL)
    name = _string(d["name"], f"{path}.name", non_empty=True, max_len=200)
    method = d.get("method", "GET")
    if method not in METHODS:
        raise PlanError(f"{path}.method: must be one of {', '.join(METHODS)}")
    step_path = _string(d["path"], f"{path}.path", non_empty=True, max_len=8000)
    if not step_path.startswith("/"):
        raise PlanError(f"{path}.path: must start with '/'")
    if any(c in step_path for c in " \r\n\t"):
        raise PlanError(f"{path}.path: must not contain spaces or line breaks (percent-encode them)")
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
    return Step(
        name=name,
        method=method,
        path=step_path,
        headers=MappingProxyType(dict(headers)),
        body=_string(d.get("body", ""), f"{path}.body", max_len=10_000_000),
        think_time=_number(d.get("think_time", 0.0), f"{path}.think_time"),
        expect_status=expect,
        text_present=_string(d.get("text_present", ""), f"{path}.text_present"),
        text_absent=_string(d.get("text_absent", ""), f"{path}.text_absent"),
    )


def _profile(d: Any, path: str) -> Profile:
    _obj(d, path, required=("users", "hold"), optional=("ramp_up", "ramp_down"))
    profile = Profile(
        users=_int(d["users"], f"{path}.users", minimum=1, maximum=MAX_USERS),
        ramp_up=_number(d.get("ramp_up", 0.0), f"{path}.ramp_up"),
        hold=_number(d["hold"], f"{path}.hold"),
        ramp_down=_number(d.get("ramp_down", 0.0), f"{path}.ramp_down"),
    )
    if profile.ramp_up + profile.hold + profile.ramp_down <= 0:
        raise PlanError(f"{path}: ramp_up + hold + ramp_down must be greater than 0")
    return profile


def _thresholds(d: Any, path: str) -> Thresholds:
    _obj(d, path, required=(), optional=("apd_ms", "p95_ms", "error_rate_pct"))
    values = {key: None if d.get(key) is None else _number(d[key], f"{path}.{key}") for key in d}
    return Thresholds(**values)
