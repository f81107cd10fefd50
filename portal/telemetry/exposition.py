"""From Prometheus text to the raw values a counter set keeps, and from raw values to figures.

Parsing is prometheus-client's (``text_string_to_metric_families``); what is kept is one
number per series per scrape (a sum over the matching samples), so a run stores a few
floats per server per scrape, never the exporter's whole output. No Django here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from .countersets import CounterSet, Series


class ExpositionError(ValueError):
    """The endpoint's answer is not Prometheus text (the message is shown as the gap's reason)."""


def _matches(series: Series, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in series.labels.items()):
        return False
    return not any(labels.get(k) in values for k, values in series.exclude.items())


def extract(text: str, counter_set: CounterSet) -> list[float | None]:
    """One raw value per series of ``counter_set`` (None: the endpoint does not expose it).

    A ``ratio`` or ``fraction`` series keeps two numbers: its numerator at its position and
    its denominator after the last series, in the order of these series.
    """
    try:
        # Parsed eagerly: the parser's errors belong to the text, not to the summing below.
        samples = [
            (sample.name, sample.labels, sample.value, family.type)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    except Exception as exc:  # the parser raises ValueError, IndexError, … on malformed text
        # The parser's message quotes the line it choked on ("Invalid line: -ERR …"): a gap is shown to
        # every viewer, so it names the fault only, never what the server answered.
        fault = str(exc).split(":", 1)[0].strip()[:80]
        raise ExpositionError(f"not Prometheus text ({type(exc).__name__}: {fault})") from None
    return extract_samples(samples, counter_set)


def metric_names(counter_set: CounterSet) -> list[str]:
    """Every metric name the counter set reads (numerators and denominators), once each, in order."""
    return list(dict.fromkeys(name for s in counter_set.series for name in s.metric + s.denominator))


def extract_samples(samples: Iterable[tuple[str, dict, float, str]], counter_set: CounterSet) -> list[float | None]:
    """``extract`` on samples already parsed: (metric name, labels, value, family type or "").

    The one place a counter set's series are matched and summed, whether the samples come
    from a scrape of ``/metrics`` or from a Prometheus query (``portal.telemetry.promql``).
    """
    wanted: dict[str, list[Series]] = defaultdict(list)
    for s in counter_set.series:
        for name in dict.fromkeys(s.metric + s.denominator):  # once each, even in both lists
            wanted[name].append(s)
    sums: dict[tuple[str, str], float] = defaultdict(float)  # (series key, "num"|"den")
    per: dict[str, set[str]] = defaultdict(set)
    for name, labels, value, family_type in samples:
        if name not in wanted and family_type == "counter" and name.endswith("_total"):
            # The parser names every counter's samples ``<family>_total``; exporters such as
            # postgres_exporter and windows_exporter's mssql collector expose them without it.
            name = name[: -len("_total")]
        for s in wanted.get(name, ()):
            if not _matches(s, labels) or not math.isfinite(value):
                continue
            if name in s.metric:
                sums[(s.key, "num")] += value
                if s.per:
                    per[s.key].add(labels.get(s.per, ""))
            if name in s.denominator:
                sums[(s.key, "den")] += value
    values: list[float | None] = []
    ratios: list[float | None] = []
    for s in counter_set.series:
        if (s.key, "num") not in sums:
            values.append(None)
            if s.denominator:
                ratios.append(None)
            continue
        value = sums[(s.key, "num")]
        if s.per:
            value /= max(1, len(per[s.key]))
        values.append(value)
        if s.denominator:
            ratios.append(sums.get((s.key, "den")))
    if all(v is None for v in values):
        raise ExpositionError("none of the counter set's series is in the answer (is it the right counter set?)")
    return values + ratios


def _at(raw: list | None, i: int) -> float | None:
    """``raw[i]``, or None for a gap or a row stored before the counter set gained that series."""
    return raw[i] if raw is not None and i < len(raw) else None


def figures(counter_set: CounterSet, scrapes: list[tuple[float, list | None]]) -> dict[str, list[float | None]]:
    """Per series, one figure per scrape: rates and ratios between a scrape and the one before.

    ``scrapes`` are (offset in seconds, raw values or None for a gap) in time order. A rate
    needs two consecutive good scrapes; after a gap, or when a counter went down (the
    exporter restarted), the first figure is None rather than a wrong number.
    """
    out: dict[str, list[float | None]] = {s.key: [] for s in counter_set.series}
    ratio_pos = {s.key: i for i, s in enumerate(s for s in counter_set.series if s.denominator)}
    n = len(counter_set.series)
    prev: tuple[float, list] | None = None
    for offset, raw in scrapes:
        for i, s in enumerate(counter_set.series):
            value = None
            cur = _at(raw, i)
            if s.kind == "gauge":
                value = None if cur is None else cur * s.scale
            elif s.kind == "fraction":
                den = _at(raw, n + ratio_pos[s.key])
                value = 100.0 * cur / den if cur is not None and den else None
            elif s.kind == "used":
                den = _at(raw, n + ratio_pos[s.key])
                value = (den - cur) * s.scale if cur is not None and den is not None else None
            elif prev is not None and cur is not None and _at(prev[1], i) is not None and offset > prev[0]:
                delta = cur - prev[1][i]
                if s.kind == "rate" and delta >= 0:
                    value = delta / (offset - prev[0]) * s.scale
                elif s.kind == "ratio":
                    j = n + ratio_pos[s.key]
                    den_now, den_before = _at(raw, j), _at(prev[1], j)
                    if den_now is not None and den_before is not None and den_now - den_before > 0 and delta >= 0:
                        value = 100.0 * delta / (den_now - den_before)
            out[s.key].append(None if value is None else round(value, 4))
        prev = (offset, raw) if raw is not None else None
    return out
