"""Server metrics read from a team's own Prometheus instead of scraped by Plimsoll.

A server names itself in its environment's Prometheus by label matchers (``instance="web-01:9100"``);
its counter set becomes one query, ``{__name__=~"m1|m2|…", <matchers>}``, read as an instant query
at each scrape round of a live run, or with ``query_range`` for a run in the past. Either way the
samples go through ``exposition.extract_samples``, the code that reads a scrape, so the stored raw
values (and every figure, table and hint computed from them) are the same as a scrape's.

Every request goes through ``portal.outbound`` (allowlist, site-services denylist, hard timeout, size
cap). The optional bearer token is stored encrypted (Fernet, keyed from SECRET_KEY). Every failure is
a message for the run's gaps or the environment's page, never an exception out of a scrape round.
"""

from __future__ import annotations

import re
import urllib.parse
from collections import defaultdict

from portal.tokens import SealBroken, seal, unseal
from workers.engine import safejson

from .countersets import CounterSet
from .exposition import ExpositionError, extract_samples, metric_names

QUERY_TIMEOUT_S = 2.0  # an instant query for a few series answers in milliseconds
RANGE_TIMEOUT_S = 20.0  # a run's whole window, once, off the live path
MAX_BYTES = 8_000_000
MAX_SERIES = 2000  # a counter set has a few dozen series per server; thousands means the matchers are too loose
MAX_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series in one query_range

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\\n]|\\.)*)"\s*(?:,|$)')


class PrometheusError(Exception):
    """Why Prometheus gave no figures (the message is shown as the gap's reason or on the environment page)."""


def parse_selector(text: str) -> list[tuple[str, str, str]]:
    """The label matchers of ``text`` (``a="x", b=~"y.*"``), braces optional; raises ValueError for the form."""
    text = (text or "").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if not text:
        raise ValueError('Give at least one label matcher, e.g. instance="web-01:9100".')
    if len(text) > 300:
        raise ValueError("At most 300 characters of label matchers.")
    matchers, pos = [], 0
    while pos < len(text):
        m = _MATCHER.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(
                f'Not a label matcher at “{text[pos : pos + 30]}”: write label="value" (or !=, =~, !~), '
                "separated by commas."
            )
        name, op, value = m.groups()
        if name == "__name__":
            raise ValueError("The metric names come from the counter set: match labels only, not __name__.")
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"The regular expression for {name} is not valid: {exc}.") from None
        matchers.append((name, op, value))
        pos = m.end()
    return matchers


def selector_text(matchers: list[tuple[str, str, str]]) -> str:
    return ", ".join(f'{name}{op}"{value}"' for name, op, value in matchers)


def query_for(counter_set: CounterSet, selector: str) -> str:
    """The one PromQL selector that reads every metric the counter set needs for one server."""
    names = "|".join(re.escape(n) for n in metric_names(counter_set))
    return "{" + f'__name__=~"{names}", ' + selector_text(parse_selector(selector)) + "}"


# The token: encrypted at rest, decrypted only to send it.


def token_encrypt(token: str) -> str:
    return seal("prometheus token", token)


def token_decrypt(stored: str) -> str:
    try:
        return unseal("prometheus token", stored)
    except SealBroken:
        raise PrometheusError(
            "The stored Prometheus token cannot be read (the site's SECRET_KEY changed): enter it again."
        ) from None


def check_prometheus_url(url: str) -> str:
    """The base URL as it will be queried (no trailing slash); raises ValueError with a message for the form."""
    from portal.outbound import OutboundRefused, check

    url = (url or "").strip().rstrip("/")
    try:
        parsed, _ = check(url)
    except OutboundRefused as exc:
        raise ValueError(str(exc)) from None
    if "?" in url or "#" in url:
        raise ValueError("Give the Prometheus base URL, without a query, e.g. http://prometheus:9090.")
    del parsed
    return url


# Queries.


def _get(base_url: str, path: str, params: dict, token: str, timeout: float) -> list:
    """The ``data.result`` of one Prometheus API call; raises PrometheusError with a message for people."""
    from portal.outbound import OutboundFailed, OutboundRefused, request

    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    # Prometheus stops a query itself a little before Plimsoll stops waiting for it.
    params = {**params, "timeout": f"{max(100, int(timeout * 900))}ms"}
    url = f"{base_url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
    try:
        response = request("GET", url, timeout=timeout, max_bytes=MAX_BYTES, headers=headers)
    except (OutboundRefused, OutboundFailed) as exc:
        raise PrometheusError(f"Prometheus: {exc}"[:300]) from None
    if response.status in (401, 403):
        raise PrometheusError(f"Prometheus refused the token (HTTP {response.status}): check the environment's token.")
    try:
        answer = safejson.loads(response.body)
    except (ValueError, UnicodeDecodeError):
        answer = None
    if not isinstance(answer, dict):
        raise PrometheusError(f"HTTP {response.status} from Prometheus, and not its API's JSON (is it the right URL?)")
    if answer.get("status") != "success" or response.status != 200:
        kind = str(answer.get("errorType") or f"HTTP {response.status}")[:40]
        raise PrometheusError(f"Prometheus answered an error ({kind}): {str(answer.get('error') or '')[:160]}")
    result = (answer.get("data") or {}).get("result")
    if not isinstance(result, list):
        raise PrometheusError("Prometheus answered no result list (is it the right URL?)")
    if len(result) > MAX_SERIES:
        raise PrometheusError(
            f"The query matched {len(result):,} series (at most {MAX_SERIES:,}): narrow the server's label matchers."
        )
    return result


def _samples(series: dict, value: str) -> tuple[str, dict, float, str]:
    labels = dict(series.get("metric") or {})
    name = labels.pop("__name__", "")
    return name, labels, float(value), ""


def instant(
    base_url: str, token: str, selector: str, counter_set: CounterSet, at: float, *, timeout: float
) -> list[float | None]:
    """The counter set's raw values for one server at ``at`` (epoch seconds); raises PrometheusError."""
    query = query_for(counter_set, selector)
    result = _get(base_url, "/api/v1/query", {"query": query, "time": f"{at:.3f}"}, token, timeout)
    if not result:
        raise PrometheusError(f"No series in Prometheus match {selector_text(parse_selector(selector))}.")
    try:
        return extract_samples([_samples(s, s["value"][1]) for s in result], counter_set)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        if isinstance(exc, ExpositionError):
            raise PrometheusError(str(exc)) from None
        raise PrometheusError("Prometheus answered a result that is not an instant vector.") from None


def window(
    base_url: str,
    token: str,
    selector: str,
    counter_set: CounterSet,
    start: float,
    end: float,
    step: int,
    *,
    timeout: float = RANGE_TIMEOUT_S,
) -> dict[float, list[float | None] | str]:
    """Raw values at every ``step`` seconds from ``start`` to ``end`` (epoch seconds): {time: values or gap reason}.

    Read with ``query_range`` in pieces of at most MAX_POINTS steps; raises PrometheusError when a query fails.
    """
    query = query_for(counter_set, selector)
    at_time: dict[float, list] = defaultdict(list)
    piece_start = start
    while piece_start <= end:
        piece_end = min(end, piece_start + step * (MAX_POINTS - 1))
        params = {"query": query, "start": f"{piece_start:.3f}", "end": f"{piece_end:.3f}", "step": str(step)}
        try:
            for series in _get(base_url, "/api/v1/query_range", params, token, timeout):
                for t, value in series["values"]:
                    at_time[round(float(t), 3)].append(_samples(series, value))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PrometheusError("Prometheus answered a result that is not a range vector.") from exc
        piece_start = piece_end + step
    if not at_time:
        raise PrometheusError(f"No series in Prometheus match {selector_text(parse_selector(selector))} in the window.")
    out: dict[float, list | str] = {}
    n = int((end - start) // step) + 1
    for i in range(n):
        t = round(start + i * step, 3)
        samples = at_time.get(t)
        if not samples:
            out[t] = "no samples in Prometheus at this time"
            continue
        try:
            out[t] = extract_samples(samples, counter_set)
        except ExpositionError as exc:
            out[t] = str(exc)
    return out
