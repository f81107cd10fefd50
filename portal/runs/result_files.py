"""Result files of other load tools, read into Plimsoll's per-second figures: plain functions, no Django.

``read(path)`` detects the format from the content (``--format`` overrides it) and returns an
``ImportedResults``: per second and per label the pages, hits, errors by kind and a latency
histogram built from the raw samples (exact to the histogram's precision), per second the
active users and completed iterations. ``reports()`` yields them in the shape of the engine's
interval reports, so an imported run is stored by the same service as a native one.

The file is read line by line and only the per-second aggregates are kept (memory grows with
seconds × labels, not with samples). A line that cannot be read raises ResultFileError naming
it, before anything is stored.

Formats: **k6** JSON lines (``k6 run --out json=FILE``) and CSV (``--out csv=FILE``),
gzipped too. Each ``http_reqs`` sample is a hit and, k6 having no pages, a page of its
``name`` tag; ``http_req_duration`` samples give the latencies of the successful ones (k6's
``expected_response:true``, as the engine counts); ``vus`` the active users; ``iterations``
the completed iterations. k6 writes no per-request byte counts (``data_received`` is per
iteration, untagged by request), so bytes stay 0.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

from workers.engine.errors import CONNECTION_ERROR, CONNECTION_REFUSED, HTTP_STATUS, TIMEOUT
from workers.engine.histogram import Histogram

FORMATS = ("k6-json", "k6-csv")
K6_CSV_HEADER = "metric_name,timestamp,metric_value"
MAX_LABEL = 210  # PageInterval.label
_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?$")
# k6's error codes (k6.io/docs, "Error codes"): 1050 is a request timeout, 1210-1212 a refused or failed dial.
_K6_TIMEOUT = {1050}
_K6_REFUSED = {1210, 1211, 1212}
K6_METRICS = ("http_reqs", "http_req_duration", "vus", "iterations")


class ResultFileError(ValueError):
    """The file cannot be imported; the message says why and, for a bad line, which one."""


@dataclass
class LabelSecond:
    pages: int = 0
    hits: int = 0
    errors: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    error_samples: dict[str, str] = field(default_factory=dict)
    hist: Histogram = field(default_factory=Histogram)

    def error(self, kind: str, sample: str) -> None:
        self.errors += 1
        self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
        self.error_samples.setdefault(kind, sample)


@dataclass
class ImportedResults:
    tool: str
    format: str
    version: str | None = None
    start: float = 0.0  # epoch of second 0
    # epoch second -> label -> figures; shifted to run seconds by reports()
    by_second: dict[int, dict[str, LabelSecond]] = field(default_factory=dict)
    users: dict[int, int] = field(default_factory=dict)
    iterations: dict[int, int] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # label -> the path it requested (first seen)
    lines: int = 0

    def _all_seconds(self) -> list[int]:
        return sorted(set(self.by_second) | set(self.users) | set(self.iterations))

    @property
    def requests(self) -> int:
        return sum(s.hits for labels in self.by_second.values() for s in labels.values())

    @property
    def first_second(self) -> int:
        return self._all_seconds()[0]

    @property
    def duration_s(self) -> int:
        seconds = self._all_seconds()
        return seconds[-1] - seconds[0] + 1

    @property
    def max_users(self) -> int:
        return max(self.users.values(), default=0)

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(label for labels in self.by_second.values() for label in labels))

    def reports(self) -> Iterator[dict]:
        """One engine-shaped interval report per second, from second 0 (the file's first)."""
        first = self.first_second
        for epoch_second in self._all_seconds():
            labels = self.by_second.get(epoch_second, {})
            yield {
                "second": epoch_second - first,
                "active_users": self.users.get(epoch_second, 0),
                "iterations_completed": self.iterations.get(epoch_second, 0),
                "labels": {
                    label: {
                        "pages": s.pages,
                        "hits": s.hits,
                        "errors": s.errors,
                        "errors_by_kind": s.errors_by_kind,
                        "error_samples": s.error_samples,
                        "hist": s.hist.to_dict() if s.hist.count else None,
                    }
                    for label, s in labels.items()
                },
            }


def parse_time(text: str) -> float:
    """An RFC 3339 time with any number of fractional digits (k6 writes nanoseconds) as an epoch float."""
    m = _TIME.match(text)
    if not m:
        raise ValueError(f"not a time: {text!r}")
    base, fraction, zone = m.groups()
    moment = datetime.fromisoformat(base).replace(tzinfo=UTC)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        moment -= sign * timedelta(hours=hours, minutes=minutes)
    return moment.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)


def open_lines(path: Path) -> Iterator[bytes]:
    """The file's lines, gunzipped when it starts with gzip's magic bytes."""
    with path.open("rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(path, "rb") as f:
        yield from f


def detect(first_line: bytes) -> str | None:
    if first_line.startswith(K6_CSV_HEADER.encode()):
        return "k6-csv"
    try:
        doc = json.loads(first_line)
    except ValueError:
        return None
    if isinstance(doc, dict) and doc.get("type") in ("Metric", "Point") and "metric" in doc:
        return "k6-json"
    return None


def read(path: Path, *, format: str | None = None) -> ImportedResults:  # noqa: A002 (the CLI's word)
    """Reads a result file; ResultFileError says what is wrong and what to export instead."""
    try:
        lines = open_lines(path)
        first = next((line for line in lines if line.strip()), None)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ResultFileError(f"The file cannot be read: {exc}.") from None
    if first is None:
        raise ResultFileError("The file is empty.")
    found = format or detect(first)
    if found not in FORMATS:
        raise ResultFileError(
            f"This is not a result file Plimsoll reads ({', '.join(FORMATS)}). For k6, export JSON lines: "
            "k6 run --out json=results.json script.js (gzipped files are read too)."
            if format is None
            else f"Unknown format {format!r}: use one of {', '.join(FORMATS)}."
        )
    reader = read_k6_csv if found == "k6-csv" else read_k6_json
    results = reader(_chain(first, lines))
    if not results.requests:
        raise ResultFileError("The file has no HTTP requests (no http_reqs points): nothing to import.")
    return results


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def read_k6_json(lines: Iterable[bytes]) -> ImportedResults:
    results = ImportedResults(tool="k6", format="k6-json")
    number = 0
    try:
        for number, raw in enumerate(lines, start=1):  # noqa: B007 (the error message names it)
            if raw.strip():
                _k6_line(results, raw)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ResultFileError(
            f"Line {number} is not a k6 JSON line ({type(exc).__name__}: {exc}); nothing was imported. "
            "A file cut off while k6 was writing ends with a partial line: remove it, or export again."
        ) from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ResultFileError(f"The file breaks off after line {number} ({exc}); nothing was imported.") from None
    results.lines = number
    return results


def _k6_line(results: ImportedResults, raw: bytes) -> None:
    doc = json.loads(raw)
    if doc["type"] != "Point":
        return
    metric, data = doc["metric"], doc["data"]
    if metric in K6_METRICS:
        _k6_sample(results, metric, int(parse_time(data["time"])), data["value"], data.get("tags") or {})


def read_k6_csv(lines: Iterable[bytes]) -> ImportedResults:
    """k6's ``--out csv``: a header line, then one sample a line (timestamps in Unix seconds or RFC 3339)."""
    results = ImportedResults(tool="k6", format="k6-csv")
    number, columns = 0, []
    try:
        for number, raw in enumerate(lines, start=1):  # noqa: B007 (the error message names it)
            if not raw.strip():
                continue
            row = next(csv.reader([raw.decode("utf-8")]))
            if number == 1:
                columns = row
                if columns[:3] != K6_CSV_HEADER.split(","):
                    raise ValueError(f"the header must start with {K6_CSV_HEADER}")
                continue
            if len(row) != len(columns):
                raise ValueError(f"{len(row)} values for {len(columns)} columns")
            sample = dict(zip(columns, row, strict=True))
            metric = sample["metric_name"]
            if metric in K6_METRICS:
                stamp = sample["timestamp"]
                second = int(float(stamp)) if stamp.replace(".", "", 1).isdigit() else int(parse_time(stamp))
                tags = {k: v for k, v in sample.items() if v and k not in ("metric_name", "timestamp", "metric_value")}
                _k6_sample(results, metric, second, float(sample["metric_value"]), tags)
    except (ValueError, KeyError, UnicodeDecodeError, csv.Error) as exc:
        raise ResultFileError(
            f"Line {number} is not a k6 CSV line ({type(exc).__name__}: {exc}); nothing was imported. "
            "A file cut off while k6 was writing ends with a partial line: remove it, or export again."
        ) from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ResultFileError(f"The file breaks off after line {number} ({exc}); nothing was imported.") from None
    results.lines = number
    return results


def _k6_sample(results: ImportedResults, metric: str, second: int, value, tags: dict) -> None:
    """One k6 sample, from either format, into the per-second figures."""
    if metric == "vus":
        results.users[second] = max(results.users.get(second, 0), int(value))
        return
    if metric == "iterations":
        results.iterations[second] = results.iterations.get(second, 0) + int(value)
        return
    label = str(tags.get("name") or tags.get("url") or "request")[:MAX_LABEL]
    figures = results.by_second.setdefault(second, {}).setdefault(label, LabelSecond())
    failed = int(tags.get("status") or 0) == 0 or tags.get("expected_response") == "false"
    if metric == "http_req_duration":
        if not failed:  # as the engine does: latencies of successful pages only (k6's expected_response:true)
            figures.hist.record(float(value) * 1000)  # ms -> µs
        return
    # http_reqs: one hit (and page) per point, an error when k6 did not expect the response
    figures.pages += int(value)
    figures.hits += int(value)
    if label not in results.paths:
        url = urlsplit(str(tags.get("url") or ""))  # k6 sets url to the name when a name is given
        results.paths[label] = (url.path or "/") if url.scheme in ("http", "https") else "/"
    status = int(tags.get("status") or 0)
    if status == 0:
        code = int(tags.get("error_code") or 0)
        kind = TIMEOUT if code in _K6_TIMEOUT else CONNECTION_REFUSED if code in _K6_REFUSED else CONNECTION_ERROR
        figures.error(kind, f"k6 error_code {code}: {tags.get('error', 'no response')}"[:200])
    elif failed or ("expected_response" not in tags and status >= 400):
        figures.error(HTTP_STATUS, f"HTTP {status}")
