"""Drift between an environment's ledger and its target's actual configuration.

Two environments on one target, or a target restarted with its knobs reset while the ledger says
*on*, drift silently: runs then name a configuration they did not measure. Where the target reports
its configuration (``Environment.config_url``: a JSON object of key → value, as the demo target's
``/_demo/knobs``), *Verify* reads it through ``portal.outbound`` (the outbound allowlist, a bounded
time, a bounded body) and compares it key by key with the ledger.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

from portal import outbound
from workers.engine import safejson

from .models import Environment

TIMEOUT_S = 5.0
_TRUE, _FALSE = {"on", "true", "yes", "1", "enabled"}, {"off", "false", "no", "0", "disabled"}


def _same(ledger: str, actual) -> bool:
    """A ledger value (text) against a reported one (JSON): on/true/1 alike, numbers by value."""
    if isinstance(actual, bool):
        actual = "on" if actual else "off"
    a, b = str(ledger).strip().lower(), str(actual).strip().lower()
    if a == b:
        return True
    if {a, b} <= _TRUE or {a, b} <= _FALSE:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


@dataclass
class Verification:
    url: str
    error: str = ""
    drifted: list[dict] = field(default_factory=list)  # [{"key", "ledger", "actual"}]
    agreed: list[str] = field(default_factory=list)
    unreported: list[str] = field(default_factory=list)  # in the ledger, not reported by the target
    unrecorded: list[str] = field(default_factory=list)  # reported by the target, not in the ledger

    def record(self, at) -> dict:
        """What to keep of it (a tuning change's ``verification``): the figures and when they were read."""
        return {"at": at.isoformat(), **asdict(self)}


def configuration_drift(environment: Environment, ledger: list[dict] | None = None) -> Verification:
    """Reads the target's configuration and compares it with the ledger (raises nothing: errors are reported).

    ``ledger``: the configuration to compare with ([{key, value}]; a run's snapshot), else the environment's.
    """
    result = Verification(url=environment.config_url)
    if not environment.config_url:
        result.error = "This environment has no configuration URL: edit it to name where the target reports one."
        return result
    try:
        response = outbound.request("GET", environment.config_url, timeout=TIMEOUT_S, max_bytes=200_000)
    except (outbound.OutboundRefused, outbound.OutboundFailed) as exc:
        result.error = str(exc)
        return result
    if response.status != 200:
        result.error = f"{environment.config_url} answered {response.status}, not its configuration."
        return result
    try:
        actual = safejson.loads(response.body)
    except (ValueError, UnicodeDecodeError):
        actual = None
    if not isinstance(actual, dict):
        result.error = f"{environment.config_url} did not answer a JSON object of key → value."
        return result
    ledger = {
        item["key"]: item.get("value", "") for item in (environment.configuration if ledger is None else ledger) or []
    }
    for key, value in ledger.items():
        if key not in actual:
            result.unreported.append(key)
        elif _same(value, actual[key]):
            result.agreed.append(key)
        else:
            result.drifted.append({"key": key, "ledger": value, "actual": actual[key]})
    result.unrecorded = sorted(k for k in actual if k not in ledger)
    return result


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a base URL, with the scheme's default port; None when it has no host."""
    parts = urlsplit(url or "")
    if not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return parts.scheme, parts.hostname.lower(), port


def same_origin_environments(environment: Environment) -> list[Environment]:
    """The team's other environments whose base URL names the same scheme, host and port."""
    mine = origin(environment.base_url)
    if mine is None:
        return []
    others = Environment.objects.filter(project__team_id=environment.project.team_id).exclude(pk=environment.pk)
    return [e for e in others.select_related("project").order_by("project__name", "name") if origin(e.base_url) == mine]
