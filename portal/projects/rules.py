"""The projects' rules on plain values: the one place both the forms and the services ask.

A form (the browser) and a serializer (the API) only turn input into typed values; what is
allowed is decided here, so the two cannot refuse different things or say it differently.
Each check returns messages (an empty list when the value is fine) rather than raising, so a
caller can collect every problem of a document at once.
"""

import re
import ssl
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from portal.common import human_duration
from workers.engine.stop_criteria import CriteriaError, parse_rules
from workers.engine.targets import BadTargetURL, parse_target_url

from . import profiles

# A page slower than the longest request timeout (600 s) cannot be measured; no system we load
# serves a million pages a second.
THRESHOLD_MAXIMA = {
    "threshold_apd_ms": 600_000,
    "threshold_p95_ms": 600_000,
    "threshold_min_pages_per_s": 1_000_000,
    "threshold_ttfe_p95_ms": 600_000,
    "threshold_gap_p95_ms": 600_000,
    "threshold_rtt_p95_ms": 600_000,
}
MAX_LEVELS = 100
NOT_A_CHOICE = "Select a valid choice. That choice is not one of the available choices."
REQUIRED = "This field is required."


def name_taken(model, *, project, name: str, exclude_pk=None, message: str) -> list[str]:
    """``name`` is already used by another ``model`` row of ``project`` (case-insensitively)."""
    name = (name or "").strip()
    if not name:
        return [REQUIRED]
    if model.objects.filter(project=project, name__iexact=name).exclude(pk=exclude_pk).exists():
        return [message.format(name=name)]
    return []


MAX_CA_BUNDLE_BYTES = 1024 * 1024  # the engine's MAX_CA_BUNDLE: a bundle of a few hundred certificates
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)


def clean_ca_bundle(text: str) -> tuple[str, list[str]]:
    """(the PEM certificates, []) or (text, [why not]): a private CA's certificates, each one parsed.

    Only CERTIFICATE blocks are taken (a private key pasted by mistake is refused, not stored);
    text outside the blocks (a bundle's comments) is left out. "" stays "" (no bundle).
    """
    text = (text or "").replace("\r\n", "\n").strip()
    if not text:
        return "", []
    if len(text.encode()) > MAX_CA_BUNDLE_BYTES:
        return text, [f"A CA bundle is at most {MAX_CA_BUNDLE_BYTES // 1024} KB of PEM certificates."]
    blocks = list(_PEM_BLOCK.finditer(text))
    if not blocks:
        return text, [
            "This is not a PEM certificate bundle: give the CA's certificates as PEM text, each between "
            "-----BEGIN CERTIFICATE----- and -----END CERTIFICATE----- (convert a .der or .cer file with "
            "openssl x509 -inform der -in ca.der -out ca.pem)."
        ]
    others = sorted({m.group(1) for m in blocks if m.group(1) != "CERTIFICATE"})
    if others:
        return text, [f"The bundle has a {', '.join(others)} block: give certificates only (never a private key)."]
    certificates = []
    for number, block in enumerate(blocks, start=1):
        pem = block.group(0) + "\n"
        try:
            ssl.PEM_cert_to_DER_cert(pem)
            ssl.create_default_context().load_verify_locations(cadata=pem)
        except (ssl.SSLError, ValueError) as exc:
            return text, [f"Certificate {number} of the bundle does not parse as an X.509 certificate ({exc})."]
        certificates.append(pem)
    return "".join(certificates), []


def clean_base_url(url: str) -> tuple[str, list[str]]:
    """(scheme://host[:port], []) or (url, [why not]): only a target the engine can connect to."""
    url = (url or "").strip()
    if url and "://" not in url:
        url = f"http://{url}"  # as the form's URLField(assume_scheme="http")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return url, ["Use an http:// or https:// URL."]  # htp://… and ftp://… alike
    try:
        URLValidator()(url)
    except ValidationError:
        # The strict parser says what is wrong (127.1: another IPv4 spelling; a space; a bad port) where it can.
        try:
            parse_target_url(url)
        except BadTargetURL as exc:
            return url, [str(exc)]
        return url, ["Enter a valid URL."]
    if not parts.hostname:
        return url, ["Give a host name, e.g. http://shop.test:8080"]
    if parts.username or parts.password:
        return url, ["Leave credentials out of the URL; put them in a step's headers."]
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return url, [
            "Give only scheme, host and port (e.g. http://shop.test:8080); paths belong in the test cases' steps."
        ]
    try:
        # The strict parser that the allowlist check and the engine's connections read it with.
        parse_target_url(url)
    except BadTargetURL as exc:
        return url, [str(exc)]
    return f"{parts.scheme}://{parts.netloc}", []


def configuration_errors(items: list[dict]) -> list[str]:
    """An ordered [{"key", "value"}] configuration: keys present, without spaces, each once."""
    errors, seen = [], {}
    for number, item in enumerate(items, start=1):
        key = str(item.get("key", "")).strip()
        if not key:
            errors.append(f"item {number}: give a key")
        elif any(c.isspace() for c in key):
            errors.append(f"item {number}: the key “{key}” has a space; write keys without spaces, e.g. sql.max_dop")
        elif key in seen:
            errors.append(f"item {number}: key {key} appears twice (first as item {seen[key]})")
        else:
            seen[key] = number
    return errors


def server_errors(*, metrics_url: str, counter_set: str) -> tuple[str, dict[str, list[str]]]:
    """(the metrics URL as it will be scraped, errors by field): an endpoint needs its counter set."""
    from portal.telemetry.countersets import CHOICES
    from portal.telemetry.scrape import check_metrics_url

    errors: dict[str, list[str]] = {}
    url = (metrics_url or "").strip()
    if url:
        try:
            url = check_metrics_url(url)
        except ValueError as exc:
            errors["metrics_url"] = [f"This metrics endpoint cannot be scraped: {exc}"]
    if counter_set and counter_set not in {key for key, _ in CHOICES}:
        errors["counter_set"] = [NOT_A_CHOICE]
    elif url and not counter_set and "metrics_url" not in errors:
        errors["counter_set"] = ["Choose the counter set that matches the endpoint's exporter."]
    return url, errors


def prometheus_errors(*, selector: str, counter_set: str, prometheus_url: str) -> tuple[str, dict[str, list[str]]]:
    """(the server's label matchers, normalised; errors by field): they need a Prometheus and a counter set."""
    from portal.telemetry.promql import parse_selector, selector_text

    selector = (selector or "").strip()
    if not selector:
        return "", {}
    try:
        selector = selector_text(parse_selector(selector))
    except ValueError as exc:
        return selector, {"prometheus_selector": [str(exc)]}
    if not prometheus_url:
        return selector, {"prometheus_selector": ["Give the environment's Prometheus URL to read servers from it."]}
    if not counter_set:
        return selector, {"counter_set": ["Choose the counter set of the exporter Prometheus scrapes on this server."]}
    return selector, {}


def model_field_errors(instance, *, exclude=()) -> dict[str, list[str]]:
    """The model fields' own validators (ranges, lengths, choices), with the messages a ModelForm shows."""
    try:
        instance.clean_fields(exclude=list(exclude))
    except ValidationError as exc:
        return {name: list(messages) for name, messages in exc.message_dict.items()}
    return {}


def threshold_errors(values: dict) -> dict[str, list[str]]:
    """Sane upper bounds, so that a slip ("1e30") is refused rather than failing every run."""
    errors = {}
    for name, most in THRESHOLD_MAXIMA.items():
        value = values.get(name)
        if value is not None and value > most:
            errors[name] = [f"Ensure this value is less than or equal to {most}."]
    return errors


def stop_criteria_errors(value, *, longest_hold: float | None) -> list[str]:
    """Why a plan's stop criteria (a list of rules, docs/plan-format.md) cannot be kept; empty when they can.

    A rule whose window is longer than every measured part of the profile would never be evaluated:
    refused, rather than giving a soak a guard that never watches.
    """
    try:
        rules = parse_rules(value)
    except CriteriaError as exc:
        return [str(exc)]
    if longest_hold is not None:
        for i, rule in enumerate(rules):
            if rule.window_s > longest_hold:
                return [
                    f"Rule {i + 1} (“{rule.text}”): its window is longer than the measured part of the profile "
                    f"({human_duration(longest_hold)}), so it would never be evaluated"
                ]
    return []


def profile_duration_error(kind: str, values: dict) -> str | None:
    """Why the profile's fields make a run longer than PLIMSOLL_MAX_RUN_SECONDS (not for steps: see levels)."""
    names = profiles.kind_named(kind).duration_keys
    if not names:
        return None
    parts = [values.get(name) for name in names]
    if any(p is None for p in parts):
        return None
    total, limit = sum(parts), settings.PLIMSOLL_MAX_RUN_SECONDS
    if total <= limit:
        return None
    words = [name.replace("_", "-") for name in names]  # "ramp-up", "hold", "ramp-down"
    if len(words) == 1:
        what = f"The {words[0]} lasts"
    else:
        what = f"{', '.join(words[:-1])} and {words[-1]} add up to"
        what = what[0].upper() + what[1:]
    return f"{what} {human_duration(total)}; the longest run allowed is {human_duration(limit)}."


def levels_error(levels: list) -> str | None:
    """Why a steps profile's levels (objects with users, ramp_up, hold, ramp_down, quiet) cannot run."""
    if not levels:
        return "Add at least one level."
    if len(levels) > MAX_LEVELS:
        return f"A steps profile has at most {MAX_LEVELS} levels."
    # As Plan.duration: the run ends when the last level has ramped down, before its quiet time.
    total = sum(level.duration for level in levels) - levels[-1].quiet
    limit = settings.PLIMSOLL_MAX_RUN_SECONDS
    if total > limit:
        return (
            f"The {len(levels)} levels add up to {human_duration(total)}; "
            f"the longest run allowed is {human_duration(limit)}."
        )
    return None
