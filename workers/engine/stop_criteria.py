"""Stop criteria: rules that end a run early when the target is plainly broken (issue 24 item 7).

A rule names a figure of the whole run (all pages, all shards) over a sliding window of its last
``window_s`` measured seconds, and a limit: ``{"metric": "error_rate_pct", "above": 50, "window_s": 60}``.
Error rate, APD and the percentiles stop a run when they rise *above* their limit, pages/s when it
falls *below* it. The engine carries them for the portal, which evaluates them (as it judges
thresholds): this module is plain Python so the plan's validator, the portal's forms and API, and
the evaluator share one definition, one text form and one set of messages.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# metric -> (direction, the words a report uses, unit)
METRICS: dict[str, tuple[str, str, str]] = {
    "error_rate_pct": ("above", "error rate", "%"),
    "apd_ms": ("above", "APD", "ms"),
    "p50_ms": ("above", "p50", "ms"),
    "p90_ms": ("above", "p90", "ms"),
    "p95_ms": ("above", "p95", "ms"),
    "p99_ms": ("above", "p99", "ms"),
    "pages_per_s": ("below", "pages/s", ""),
}
# The short names the text form takes besides the keys (``p95 > 3000 ms over 60 s``).
ALIASES = {words.lower(): key for key, (_d, words, _u) in METRICS.items()} | {
    "errors": "error_rate_pct",
    "error_rate": "error_rate_pct",
    "pages_per_s": "pages_per_s",
}
DEFAULT_WINDOW_S = 60
MIN_WINDOW_S, MAX_WINDOW_S = 5, 3600
MAX_RULES = 10
# A rule on the error rate, APD or a percentile needs this many pages in its window: 3 pages say nothing.
MIN_PAGES = 10
LIMIT_MAXIMA = {"error_rate_pct": 100.0, "pages_per_s": 1_000_000.0}
LATENCY_MAX_MS = 600_000.0


class CriteriaError(ValueError):
    """A malformed rule; the message names the rule and the field."""


@dataclass(frozen=True)
class Rule:
    metric: str
    limit: float
    window_s: int

    @property
    def direction(self) -> str:
        return METRICS[self.metric][0]

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, self.direction: self.limit, "window_s": self.window_s}

    @property
    def text(self) -> str:
        """``error rate > 50 % over 60 s`` — the rule as every reader shows it (and the form takes it)."""
        _direction, words, unit = METRICS[self.metric]
        op = ">" if self.direction == "above" else "<"
        return f"{words} {op} {_num(self.limit)}{f' {unit}' if unit else ''} over {self.window_s} s"

    def broken_by(self, value: float | None) -> bool:
        if value is None:
            return False
        return value > self.limit if self.direction == "above" else value < self.limit


def _num(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e15 else str(value)


def parse_rules(items: Any, path: str = "stop_criteria") -> list[Rule]:
    """The rules of a plan document; raises CriteriaError naming the first bad field."""
    if not isinstance(items, list):
        raise CriteriaError(f"{path}: must be a list of rules")
    if len(items) > MAX_RULES:
        raise CriteriaError(f"{path}: at most {MAX_RULES} rules")
    rules, seen = [], {}
    for i, item in enumerate(items):
        rule = parse_rule(item, f"{path}[{i}]")
        key = (rule.metric, rule.window_s)
        if key in seen:
            raise CriteriaError(f"{path}[{i}]: the same figure and window as {path}[{seen[key]}]; keep one")
        seen[key] = i
        rules.append(rule)
    return rules


def parse_rule(item: Any, path: str) -> Rule:
    if not isinstance(item, dict):
        raise CriteriaError(f'{path}: must be an object such as {{"metric": "error_rate_pct", "above": 50}}')
    metric = item.get("metric")
    if metric not in METRICS:
        raise CriteriaError(f"{path}.metric: must be one of {', '.join(METRICS)}")
    direction, words, _unit = METRICS[metric]
    other = "below" if direction == "above" else "above"
    unknown = sorted(set(item) - {"metric", direction, other, "window_s"})
    if unknown:
        raise CriteriaError(f"{path}: unknown key {unknown[0]!r} (metric, {direction}, window_s)")
    if other in item:
        raise CriteriaError(f"{path}.{other}: {words} stops a run when it falls {direction} a limit: give {direction}")
    if direction not in item:
        raise CriteriaError(f"{path}.{direction}: give the limit {words} must not go {direction}")
    limit = item[direction]
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit):
        raise CriteriaError(f"{path}.{direction}: must be a number")
    most = LIMIT_MAXIMA.get(metric, LATENCY_MAX_MS)
    if not 0 <= limit <= most or (direction == "below" and limit == 0) or (metric == "error_rate_pct" and limit == 100):
        low = "greater than 0" if direction == "below" else "at least 0"
        high = "below 100" if metric == "error_rate_pct" else f"at most {int(most):,}"
        raise CriteriaError(f"{path}.{direction}: must be {low} and {high}")
    window = item.get("window_s", DEFAULT_WINDOW_S)
    if isinstance(window, bool) or not isinstance(window, int) or not MIN_WINDOW_S <= window <= MAX_WINDOW_S:
        raise CriteriaError(f"{path}.window_s: must be a whole number of seconds within {MIN_WINDOW_S}..{MAX_WINDOW_S}")
    return Rule(metric=metric, limit=float(limit), window_s=window)


_LINE = re.compile(
    r"^\s*(?P<metric>[a-z0-9_/ ]+?)\s*(?P<op>[<>])\s*(?P<limit>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>%|ms|/s)?"
    r"\s*(?:over\s+(?:the\s+last\s+)?(?P<window>[0-9]+)\s*s)?\s*$",
    re.IGNORECASE,
)
EXAMPLE = "error rate > 50 % over 60 s"


def parse_text(text: str) -> list[Rule]:
    """Rules written one a line (the plan form): ``error rate > 50 % over 60 s``, ``pages/s < 1 over 30 s``."""
    items = []
    lines = [(n, line) for n, line in enumerate((text or "").splitlines(), start=1) if line.strip()]
    for n, line in lines:
        m = _LINE.match(line)
        if m is None:
            raise CriteriaError(f"line {n}: write a rule as “{EXAMPLE}” (or p95 > 3000 ms, pages/s < 1)")
        metric = ALIASES.get(" ".join(m["metric"].lower().split()), m["metric"].strip().lower())
        if metric not in METRICS:
            names = ", ".join(words for _d, words, _u in METRICS.values())
            raise CriteriaError(f"line {n}: unknown figure “{m['metric'].strip()}”: use one of {names}")
        direction, words, _unit = METRICS[metric]
        if (m["op"] == ">") != (direction == "above"):
            op = ">" if direction == "above" else "<"
            raise CriteriaError(f"line {n}: {words} stops a run when it goes {direction} a limit: write {words} {op} …")
        item = {"metric": metric, direction: float(m["limit"])}
        if m["window"] is not None:
            item["window_s"] = int(m["window"])
        try:
            items.append(parse_rule(item, f"line {n}"))
        except CriteriaError as exc:
            message = str(exc).replace(f"line {n}.{direction}:", f"line {n}: the limit")
            raise CriteriaError(message.replace(f"line {n}.window_s:", f"line {n}: the window")) from None
    return parse_rules([r.to_dict() for r in items], "rules")


def rules_text(rules: list[Rule]) -> str:
    return "\n".join(r.text for r in rules)


def evaluable(rule: Rule, figures: dict) -> tuple[bool, str]:
    """Whether the window's figures can judge the rule, and why not (too few pages to call a rate or a latency)."""
    if rule.metric == "pages_per_s":
        return True, ""
    pages = figures.get("pages", 0)
    if pages < MIN_PAGES:
        return False, f"{pages} pages in the window, fewer than the {MIN_PAGES} a rate or a latency needs"
    if rule.metric != "error_rate_pct" and figures.get(rule.metric) is None:
        return False, "no page in the window succeeded, so there is no duration to judge"
    return True, ""


def first_broken(rules: list[Rule], figures_by_window: dict[int, dict]) -> Rule | None:
    """The first rule (in the plan's order) its window's figures break, or None."""
    for rule in rules:
        figures = figures_by_window.get(rule.window_s)
        if figures is None or not evaluable(rule, figures)[0]:
            continue
        if rule.broken_by(figures.get(rule.metric)):
            return rule
    return None


def stop_sentence(rule: Rule, window: dict) -> str:
    """``error rate 100 % > 50 % over the last 60 s (seconds 40–100: 1,204 pages, 1,204 errors, 20.1 pages/s)``."""
    _direction, words, unit = METRICS[rule.metric]
    value = window.get(rule.metric)
    op = ">" if rule.direction == "above" else "<"
    shown = "—" if value is None else f"{_num(round(value, 3))}{f' {unit}' if unit else ''}"
    limit = f"{_num(rule.limit)}{f' {unit}' if unit else ''}"
    return (
        f"{words} {shown} {op} {limit} over the last {rule.window_s} s "
        f"(seconds {window['from_s']}–{window['to_s']}: {window['pages']:,} pages, {window['errors']:,} errors, "
        f"{_num(window['pages_per_s'])} pages/s)"
    )
