"""Result files of other load tools, read into Plimsoll's per-second figures: plain functions, no Django.

``read(path)`` detects the format from the content (``--format`` overrides it) and returns an
``ImportedResults``: per second and per label the pages, hits, errors by kind, bytes and a
latency histogram built from the raw samples (exact to the histogram's precision), per second
the active users and completed iterations. ``reports()`` yields them in the shape of the
engine's interval reports, so an imported run is stored by the same service as a native one.

**Streamed, in bounded memory.** The file is read record by record (gzipped or not; CSV through
``csv.reader`` so quoted commas and line breaks are honoured, XML through ``iterparse`` with each
finished sample cleared) and only a sliding window of open seconds is kept in memory
(``REORDER_S`` behind the newest second seen: tools write a sample when it ends, so the records
are nearly, not exactly, in time order). A second that leaves the window is pickled to a
temporary spool file, so memory does not grow with the file's size or its duration. A sample
older than the window (a request that took longer than ``REORDER_S``) is counted in the oldest
second still open and the number of such samples is recorded (``late_samples``).

A record that cannot be read raises ResultFileError naming its line, before anything is stored.

**Bounded whatever the file holds** (issue 30: 1 MB of gzip held a 1 GiB line; an XML JTL of 40 M
elements in 150 KB). ``Limits`` caps the length of a line (read as bytes, before any line is
built, so a line without end never fills memory), a CSV field, the decompressed size, gzip's
expansion ratio past a first allowance (1 MB expanding to 300 MB was 18 s of CPU), and in XML
the depth of elements and the elements of one sample; every element is cleared once read. A
file over a limit raises ResultFileError naming the limit, before anything is stored.

Formats:

- **k6** JSON lines (``k6 run --out json=FILE``) and CSV (``--out csv=FILE``), on seconds counted
  from the test's first sample and as many as the test ran (``ImportedResults.at``). Each ``http_reqs``
  sample is a hit and, k6 having no pages, a page of its ``name`` tag; ``http_req_duration``
  gives the latencies of the successful ones (``expected_response:true``, as the engine counts);
  ``vus`` the active users; ``iterations`` the completed iterations. k6 writes no per-request
  byte counts, so bytes stay 0.
- **JMeter** JTL as CSV (with its header line, any columns that include ``timeStamp``,
  ``elapsed``, ``label``, ``success``; or without a header when it has JMeter's default columns)
  and as XML (``jmeter.save.saveservice.output_format=xml``). ``timeStamp`` must be epoch
  milliseconds (JMeter's default ``timestamp_format=ms``); it is the sample's start (JMeter's
  default ``sampleresult.timestamp_start=true``), and a sample counts in the second it *ended*
  (``timeStamp + elapsed``), as Plimsoll's engine counts a page when it completes. A CSV row is
  a page and a hit of its ``label``, except a Transaction Controller's own row (``Number of
  samples in transaction``), a page but no hit since its requests have rows of their own. In
  XML a top-level sample is a page and its nested sub-results (embedded resources, redirects)
  are its hits. ``bytes``/``by`` and ``sentBytes``/``sby`` give bytes in and out; ``allThreads``/
  ``na`` the active users. Failed samples are errors: a numeric ``responseCode`` of 400 or more
  is an HTTP status error, an assertion failure on a good status a check failure, and JMeter's
  ``Non HTTP response code: …`` a refused connection, a timeout or another connection error.
- **Locust** ``--csv`` history (``PREFIX_stats_history.csv``, best with ``--csv-full-history``
  so that each request name has its rows). Locust writes no per-request samples, only cumulative
  totals and a rolling window's percentiles every second, so per second and per name: hits and
  failures are the differences of the cumulative counts (exact), the latency sum the difference
  of count × average (exact, so the mean is exact: never clamped between percentile points), the
  min and max Locust's cumulative ones (exact: the second in which either moved holds that sample),
  and the rest of the histogram is rebuilt from that second's rolling-window percentiles
  (``approximate``; the report says so). docs/imports.md tells, per tool, what is exact.
  Without ``--csv-full-history`` the only rows are the ``Aggregated`` ones, imported as one label.
- **Gatling**'s text ``simulation.log`` (Gatling 3.0 to 3.9; tab-separated ``REQUEST`` records
  with start and end in epoch milliseconds, ``OK``/``KO`` and the failure message; ``USER`` START
  and END records give the active users; the ``RUN`` record the version). Gatling 3.10 and later
  write a binary log that only Gatling reads: the message says so.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import pickle
import re
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit
from xml.etree import ElementTree

from workers.engine.errors import CHECK_FAILED, CONNECTION_ERROR, CONNECTION_REFUSED, HTTP_STATUS, TIMEOUT
from workers.engine.histogram import Histogram, bucket_index

FORMATS = ("k6-json", "k6-csv", "jmeter-csv", "jmeter-xml", "locust-csv", "gatling-log")
TOOLS = {"k6-json": "k6", "k6-csv": "k6", "jmeter-csv": "JMeter", "jmeter-xml": "JMeter"}
TOOLS |= {"locust-csv": "Locust", "gatling-log": "Gatling"}
K6_CSV_HEADER = "metric_name,timestamp,metric_value"
MAX_LABEL = 210  # PageInterval.label
REORDER_S = 60  # seconds kept open behind the newest one seen
PROGRESS_EVERY = 1 << 20  # bytes of file between two progress calls
_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?$")
# k6's error codes (k6.io/docs, "Error codes"): 1050 is a request timeout, 1210-1212 a refused or failed dial.
_K6_TIMEOUT = {1050}
_K6_REFUSED = {1210, 1211, 1212}
K6_METRICS = ("http_reqs", "http_req_duration", "vus", "iterations")
# JMeter's CSV columns in its default order, for a JTL without its header line: 3.1 and later (17 columns),
# 3.0 (15) and 2.13 (12, as Debian's jmeter package writes them).
JTL_DEFAULT_COLUMNS = {
    17: "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,failureMessage,"
    "bytes,sentBytes,grpThreads,allThreads,URL,Latency,IdleTime,Connect",
    15: "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,failureMessage,"
    "bytes,grpThreads,allThreads,Latency,IdleTime,Connect",
    12: "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,"
    "bytes,grpThreads,allThreads,Latency",
}
JTL_REQUIRED = ("timeStamp", "elapsed", "label", "success")
LOCUST_HISTORY_HEADER = "Timestamp,User Count,Type,Name,Requests/s,Failures/s"
LOCUST_PERCENTILES = (0.5, 0.66, 0.75, 0.8, 0.9, 0.95, 0.98, 0.99, 0.999, 0.9999, 1.0)
EXPORT_HINT = (
    "Plimsoll reads k6 JSON lines (k6 run --out json=results.json) or CSV (--out csv=results.csv); "
    "JMeter JTL files, CSV or XML, with timeStamp in milliseconds (jmeter -n -t plan.jmx -l results.jtl); "
    "Locust's PREFIX_stats_history.csv (locust --headless --csv PREFIX --csv-full-history); "
    "Gatling's text simulation.log (Gatling 3.0 to 3.9). Gzipped files are read too."
)


@dataclass(frozen=True)
class Limits:
    """What a result file may hold; a file over one is refused with the limit named (issue 30)."""

    max_line: int = 8 << 20  # bytes of one line; a JTL row or a k6 JSON line is under a kilobyte
    max_field: int = 128 << 10  # characters of one CSV field (a failure message, a URL)
    max_decompressed: int = 64 << 30  # bytes a gzipped file may expand to
    max_expansion: int = 100  # times its gzipped size, once past ``expansion_allowance``
    expansion_allowance: int = 16 << 20  # decompressed bytes read before the ratio is checked
    max_xml_depth: int = 32  # nested XML elements (a JTL nests 5 or 6)
    max_sample_elements: int = 100_000  # XML elements in one top-level sample (its sub-results and assertions)


LIMITS = Limits()


class ResultFileError(ValueError):
    """The file cannot be imported; the message says why and, for a bad line, which one."""


class _BadRecord(ValueError):
    """A record a reader cannot use; read() turns it into a ResultFileError with the line's number."""


@dataclass
class LabelSecond:
    pages: int = 0
    hits: int = 0
    errors: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    error_samples: dict[str, str] = field(default_factory=dict)
    hist: Histogram = field(default_factory=Histogram)
    hist_dict: dict | None = None  # a histogram rebuilt from percentiles (Locust), instead of hist

    def error(self, kind: str, sample: str) -> None:
        self.errors += 1
        self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
        self.error_samples.setdefault(kind, sample[:200])

    def merge(self, other: LabelSecond) -> LabelSecond:
        """This second's figures with ``other``'s added (both from samples: hist, not hist_dict)."""
        self.pages += other.pages
        self.hits += other.hits
        self.errors += other.errors
        self.bytes_in += other.bytes_in
        self.bytes_out += other.bytes_out
        for kind, n in other.errors_by_kind.items():
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + n
        for kind, sample in other.error_samples.items():
            self.error_samples.setdefault(kind, sample)
        self.hist.merge(other.hist)
        return self

    def report(self) -> dict:
        return {
            "pages": self.pages,
            "hits": self.hits,
            "errors": self.errors,
            "errors_by_kind": self.errors_by_kind,
            "error_samples": self.error_samples,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "hist": self.hist_dict or (self.hist.to_dict() if self.hist.count else None),
        }


@dataclass
class ImportedResults:
    """What a file held, per second; the seconds that left the reorder window wait in a spool file."""

    tool: str
    format: str
    version: str | None = None
    approximate: bool = False  # figures rebuilt from percentiles (Locust), not from samples
    paths: dict[str, str] = field(default_factory=dict)  # label -> the path it requested (first seen)
    lines: int = 0
    late_samples: int = 0
    hits_total: int = 0
    pages_total: int = 0
    max_users: int = 0
    # open seconds: epoch second -> label -> figures, and per second users and iterations
    _open: dict[int, dict[str, LabelSecond]] = field(default_factory=dict)
    _users: dict[int, int] = field(default_factory=dict)
    _iterations: dict[int, int] = field(default_factory=dict)
    _labels: dict[str, None] = field(default_factory=dict)
    _newest: int | None = None
    _closed_through: int | None = None  # every second up to this one is in the spool
    _first: int | None = None
    _last: int | None = None
    _spool: IO[bytes] | None = None
    _spooled: int = 0
    # k6: seconds counted from the test's start (its first sample), not from the wall clock's whole
    # seconds, and as long as the test ran: a 15 s test spans 16 wall-clock seconds (its first and last
    # partly), which made its rate 6 % low. ``_origin`` is the first record's time (the grid's start),
    # ``_start`` and ``_end`` the earliest and latest sample's (a record may come a little out of order).
    _origin: float | None = None
    _start: float | None = None
    _end: float | None = None

    # -- writing, by the readers --------------------------------------------------------

    def _second(self, second: int, *, sample: bool = True) -> int:
        """The second a sample is counted in: itself, or the oldest open one when it came too late."""
        if self._closed_through is not None and second <= self._closed_through:
            self.late_samples += sample
            second = self._closed_through + 1
        if self._newest is None or second > self._newest:
            self._newest = second
            if self._open and min(self._open) < second - REORDER_S:
                self._close_through(second - REORDER_S - 1)
        return second

    def at(self, t: float) -> int:
        """The second of a sample at epoch time ``t``, on a grid that starts with the file's first sample."""
        if self._origin is None:
            self._origin = self._start = self._end = t
        self._start, self._end = min(self._start, t), max(self._end, t)
        # A sample written a little before the first one (out of order) is still in the test's first second.
        return int(self._origin) + max(0, int(t - self._origin))

    def _fold_tail(self) -> None:
        """The test ran ``round(end − origin)`` seconds: samples in the sliver after that join the last one.

        k6 lets iterations in flight finish after its duration (a few ms here, up to gracefulStop), so
        a 15 s test's samples span 15.07 s; without this they would open a 16th second of their own.
        """
        if self._origin is None:
            return
        last = int(self._origin) + max(1, round(self._end - self._start)) - 1
        for second in sorted(s for s in self._open if s > last):
            into = self._open.setdefault(last, {})
            for label, figures in self._open.pop(second).items():
                into[label] = into[label].merge(figures) if label in into else figures
            self._users[last] = max(self._users.get(last, 0), self._users.pop(second, 0))
            self._iterations[last] = self._iterations.get(last, 0) + self._iterations.pop(second, 0)

    def figures(self, second: int, label: str) -> LabelSecond:
        second = self._second(second)
        label = label[:MAX_LABEL] or "request"
        self._labels.setdefault(label, None)
        labels = self._open.setdefault(second, {})
        found = labels.get(label)
        if found is None:
            found = labels[label] = LabelSecond()
        return found

    def users(self, second: int, count: int) -> None:
        second = self._second(second, sample=False)
        self._open.setdefault(second, {})
        self._users[second] = max(self._users.get(second, 0), count)
        self.max_users = max(self.max_users, count)

    def iterations(self, second: int, count: int) -> None:
        second = self._second(second, sample=False)
        self._open.setdefault(second, {})
        self._iterations[second] = self._iterations.get(second, 0) + count

    def _close_through(self, last: int) -> None:
        """Moves every open second up to ``last`` to the spool, in time order."""
        if self._spool is None:
            self._spool = tempfile.TemporaryFile(prefix="plimsoll-import-")  # noqa: SIM115 (closed by discard)
        for second in sorted(s for s in self._open if s <= last):
            labels = self._open.pop(second)
            report = {
                "second": second,
                "active_users": self._users.pop(second, 0),
                "iterations_completed": self._iterations.pop(second, 0),
                "labels": {label: s.report() for label, s in labels.items()},
            }
            for s in labels.values():
                self.hits_total += s.hits
                self.pages_total += s.pages
            pickle.dump(report, self._spool, protocol=pickle.HIGHEST_PROTOCOL)
            self._spooled += 1
            self._first = second if self._first is None else self._first
            self._last = second
        self._closed_through = last if self._closed_through is None else max(self._closed_through, last)

    def finish(self) -> None:
        """Closes every second: the figures below are final."""
        self._fold_tail()
        if self._open:
            self._close_through(max(self._open))

    def discard(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    # -- reading, by the service ----------------------------------------------------------

    @property
    def requests(self) -> int:
        return self.hits_total

    @property
    def first_second(self) -> int:
        return self._first

    @property
    def duration_s(self) -> int:
        return self._last - self._first + 1

    @property
    def seconds(self) -> int:
        return self._spooled

    @property
    def labels(self) -> list[str]:
        return list(self._labels)

    def reports(self) -> Iterator[dict]:
        """One engine-shaped interval report per second, from second 0 (the file's first)."""
        if self._spool is None:
            return
        self._spool.seek(0)
        for _ in range(self._spooled):
            report = pickle.load(self._spool)
            report["second"] -= self._first
            yield report


# -- input --------------------------------------------------------------------------------


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


class _OverLimit(Exception):
    """A limit was passed; not a ValueError, so no reader mistakes it for a bad record. ``read`` reports it."""


def _size(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MB"


class _Bounded(io.RawIOBase):
    """The file's (decompressed) bytes, refused past a limit: a line too long, too many bytes, gzip expanding too far.

    Lines are measured here, on bytes, as they pass: the readers above (TextIOWrapper, a binary
    stream's iteration) would otherwise gather a whole line, however long, before looking at it.
    """

    def __init__(self, inner: IO[bytes], raw: IO[bytes], gzipped: bool, limits: Limits) -> None:
        self._inner, self._raw, self._gzipped, self._limits = inner, raw, gzipped, limits
        self.max_line: int | None = limits.max_line
        self._run = 0  # bytes since the last line feed
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._inner.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.total += n
        limits = self._limits
        if self._gzipped:
            if self.total > limits.max_decompressed:
                raise _OverLimit(
                    f"The file expands to more than {_size(limits.max_decompressed)} once gunzipped, "
                    "the limit; nothing was imported. Split the run's results, or import them ungzipped."
                )
            if self.total > limits.expansion_allowance and self.total > limits.max_expansion * self._raw.tell():
                raise _OverLimit(
                    f"The gzipped file expands more than {limits.max_expansion} times (to over "
                    f"{self.total / (1 << 20):,.0f} MB from {self._raw.tell() / (1 << 20):,.1f} MB), the limit: "
                    "result files compress 5 to 30 times, so this is not one. Nothing was imported."
                )
        limit = self.max_line
        if limit is not None and n:
            first = data.find(b"\n")
            if first < 0:
                self._run += n
            else:
                if self._run + first > limit:  # the line that began before this chunk
                    self._too_long()
                last = data.rfind(b"\n")
                if last - first > limit:  # lines wholly inside this chunk (only a chunk that long can hold one)
                    start = first + 1
                    while (stop := data.find(b"\n", start)) >= 0:
                        if stop - start > limit:
                            self._too_long()
                        start = stop + 1
                self._run = n - last - 1
            if self._run > limit:
                self._too_long()
        return n

    def _too_long(self) -> None:
        raise _OverLimit(
            f"A line is longer than {_size(self._limits.max_line)}, the limit for one line; nothing "
            "was imported. A result file has a line per sample: this one is damaged or is not a result file."
        )


class _Input:
    """The file's bytes, gunzipped when it starts with gzip's magic bytes; knows how far it has read."""

    def __init__(self, path: Path, progress: Callable[[int, int], None] | None, limits: Limits = LIMITS):
        self.size = path.stat().st_size
        self.raw = path.open("rb")
        start = self.raw.read(1 << 16)
        self.raw.seek(0)
        self.gzipped = start[:2] == b"\x1f\x8b"
        # The first bytes, for detection; a damaged gzip file still shows its beginning.
        self._head = zlib.decompressobj(31).decompress(start, 8192)[:8192] if self.gzipped else start[:8192]
        inner: IO[bytes] = gzip.GzipFile(fileobj=self.raw, mode="rb") if self.gzipped else self.raw
        self.limits = limits
        self.bounded = _Bounded(inner, self.raw, self.gzipped, limits)
        self.stream: IO[bytes] = io.BufferedReader(self.bounded, 1 << 16)
        self.progress = progress
        self._reported = 0

    def head(self) -> bytes:
        return self._head

    def tick(self) -> None:
        """Tells ``progress`` how far the reader got, about once per PROGRESS_EVERY bytes of file."""
        if self.progress is not None:
            at = self.raw.tell()
            if at - self._reported >= PROGRESS_EVERY:
                self._reported = at
                self.progress(at, self.size)

    def text(self) -> io.TextIOWrapper:
        return io.TextIOWrapper(self.stream, encoding="utf-8", newline="")

    def close(self) -> None:
        self.raw.close()


def detect(head: bytes) -> str | None:
    """The format of a file from its first bytes, or None."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    first = text.split(b"\n", 1)[0].rstrip(b"\r")
    plain = first.replace(b'"', b"")
    if first.startswith(K6_CSV_HEADER.encode()):
        return "k6-csv"
    if text.startswith(b"<?xml") or text.startswith(b"<testResults"):
        return "jmeter-xml" if b"<testResults" in text else None
    if plain.startswith(LOCUST_HISTORY_HEADER.encode()):
        return "locust-csv"
    if first.startswith((b"RUN\t", b"ASSERTION\t", b"USER\t", b"REQUEST\t", b"GROUP\t")):
        return "gatling-log"
    columns = plain.split(b",")
    if all(c.encode() in columns for c in JTL_REQUIRED) or re.match(rb"^\d{13},\d+,", first):
        return "jmeter-csv"
    try:
        doc = json.loads(first)
    except ValueError:
        return None
    if isinstance(doc, dict) and doc.get("type") in ("Metric", "Point") and "metric" in doc:
        return "k6-json"
    return None


def _refusal(head: bytes) -> str:
    """Why an undetected file cannot be read, and what to export instead."""
    first = head.lstrip().split(b"\n", 1)[0].replace(b'"', b"")
    if first.startswith(b"Type,Name,Request Count") or first.startswith(b"Method,Name,Error,Occurrences"):
        return (
            "This is Locust's totals (_stats.csv) or failures (_failures.csv) file, which has no time series. "
            "Import PREFIX_stats_history.csv instead, written by locust --headless --csv PREFIX --csv-full-history."
        )
    if b"\x00" in head or not _is_text(head):
        return (
            "This file is binary. If it is a simulation.log of Gatling 3.10 or later, it is in Gatling's binary "
            "format, which only Gatling reads: export the run with Gatling 3.9 or earlier (text simulation.log), "
            "or record it with JMeter, k6 or Locust. " + EXPORT_HINT
        )
    if first.startswith(b"<"):
        return "This XML file is not a JMeter JTL (its root element must be <testResults>). " + EXPORT_HINT
    return "This is not a result file Plimsoll reads. " + EXPORT_HINT


def _is_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start > len(head) - 4  # a character cut by the head's end
    return True


def read(
    path: Path,
    *,
    format: str | None = None,  # noqa: A002 (the CLI's word)
    progress: Callable[[int, int], None] | None = None,
    limits: Limits = LIMITS,
) -> ImportedResults:
    """Reads a result file; ResultFileError says what is wrong and what to export instead.

    ``progress(bytes_read, bytes_total)`` is called as the file is read (bytes of the file as
    stored, gzipped or not). The returned results hold a spool file: call ``discard()`` after use.
    """
    csv.field_size_limit(limits.max_field)  # the csv module's own cap (per process; the same for every import)
    try:
        source = _Input(path, progress, limits)
        head = source.head()
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ResultFileError(f"The file cannot be read: {exc}.") from None
    try:
        if not head.strip():
            raise ResultFileError("The file is empty.")
        found = format or detect(head)
        if found not in FORMATS:
            raise ResultFileError(
                _refusal(head) if format is None else f"Unknown format {format!r}: use one of {', '.join(FORMATS)}."
            )
        results = ImportedResults(tool=TOOLS[found], format=found)
        reader = READERS[found]
        try:
            reader(results, source)
        except ResultFileError:
            results.discard()
            raise
        except _OverLimit as exc:
            results.discard()
            raise ResultFileError(str(exc)) from None
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            results.discard()
            raise ResultFileError(
                f"The file breaks off after line {results.lines} ({exc}); nothing was imported."
            ) from None
        results.finish()
        if not results.requests and not results.pages_total:
            results.discard()
            raise ResultFileError("The file has no HTTP requests: nothing to import. " + EXPORT_HINT)
        if progress is not None:
            progress(source.size, source.size)
        return results
    finally:
        source.close()


def _bad_line(number: int, tool: str, exc: Exception) -> ResultFileError:
    if isinstance(exc, csv.Error) and "field larger than field limit" in str(exc):
        return ResultFileError(
            f"Line {number} has a field longer than {csv.field_size_limit():,} characters, the limit for one "
            "field; nothing was imported. A result file's fields are short: this one is damaged or is not one."
        )
    detail = str(exc) if isinstance(exc, _BadRecord) else f"{type(exc).__name__}: {exc}"
    return ResultFileError(
        f"Line {number} is not a {tool} line ({detail}); nothing was imported. "
        f"A file cut off while {tool} was writing ends with a partial line: remove it, or export again."
    )


# -- k6 -----------------------------------------------------------------------------------


def read_k6_json(results: ImportedResults, source: _Input) -> None:
    number = 0
    try:
        for number, raw in enumerate(source.stream, start=1):  # noqa: B007 (the error message names it)
            results.lines = number
            if raw.strip():
                _k6_line(results, raw)
            if number & 0x3FF == 0:
                source.tick()
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:  # "[[[[…": too deep for json
        raise _bad_line(number, "k6 JSON", exc) from None


def _k6_line(results: ImportedResults, raw: bytes) -> None:
    doc = json.loads(raw)
    if doc["type"] != "Point":
        return
    metric, data = doc["metric"], doc["data"]
    if metric in K6_METRICS:
        _k6_sample(results, metric, results.at(parse_time(data["time"])), data["value"], data.get("tags") or {})


def read_k6_csv(results: ImportedResults, source: _Input) -> None:
    """k6's ``--out csv``: a header line, then one sample a line (timestamps in Unix seconds or RFC 3339)."""
    reader = csv.reader(source.text())
    try:
        columns = next(reader)
        if columns[:3] != K6_CSV_HEADER.split(","):
            raise _BadRecord(f"the header must start with {K6_CSV_HEADER}")
        for row in reader:
            results.lines = reader.line_num
            if not row:
                continue
            if len(row) != len(columns):
                raise _BadRecord(f"{len(row)} values for {len(columns)} columns")
            sample = dict(zip(columns, row, strict=True))
            metric = sample["metric_name"]
            if metric in K6_METRICS:
                stamp = sample["timestamp"]
                second = results.at(float(stamp) if stamp.replace(".", "", 1).isdigit() else parse_time(stamp))
                tags = {k: v for k, v in sample.items() if v and k not in ("metric_name", "timestamp", "metric_value")}
                _k6_sample(results, metric, second, float(sample["metric_value"]), tags)
            if reader.line_num & 0x3FF == 0:
                source.tick()
    except (ValueError, KeyError, UnicodeDecodeError, csv.Error) as exc:
        raise _bad_line(reader.line_num + isinstance(exc, UnicodeDecodeError), "k6 CSV", exc) from None


def _k6_sample(results: ImportedResults, metric: str, second: int, value, tags: dict) -> None:
    """One k6 sample, from either format, into the per-second figures."""
    if metric == "vus":
        results.users(second, int(value))
        return
    if metric == "iterations":
        results.iterations(second, int(value))
        return
    label = str(tags.get("name") or tags.get("url") or "request")
    figures = results.figures(second, label)
    failed = int(tags.get("status") or 0) == 0 or tags.get("expected_response") == "false"
    if metric == "http_req_duration":
        if not failed:  # as the engine does: latencies of successful pages only (k6's expected_response:true)
            figures.hist.record(float(value) * 1000)  # ms -> µs
        return
    # http_reqs: one hit (and page) per point, an error when k6 did not expect the response
    figures.pages += int(value)
    figures.hits += int(value)
    if label[:MAX_LABEL] not in results.paths:
        url = urlsplit(str(tags.get("url") or ""))  # k6 sets url to the name when a name is given
        results.paths[label[:MAX_LABEL]] = (url.path or "/") if url.scheme in ("http", "https") else "/"
    status = int(tags.get("status") or 0)
    if status == 0:
        code = int(tags.get("error_code") or 0)
        kind = TIMEOUT if code in _K6_TIMEOUT else CONNECTION_REFUSED if code in _K6_REFUSED else CONNECTION_ERROR
        figures.error(kind, f"k6 error_code {code}: {tags.get('error', 'no response')}")
    elif failed or ("expected_response" not in tags and status >= 400):
        figures.error(HTTP_STATUS, f"HTTP {status}")


# -- JMeter -------------------------------------------------------------------------------


def _jmeter_error(code: str, message: str, failure: str) -> tuple[str, str]:
    """(kind, sample) of a failed JMeter sample, from its response code and messages."""
    if code.isdigit():
        status = int(code)
        if status >= 400 or status < 100:
            return HTTP_STATUS, f"HTTP {status} {message}".strip()
        return CHECK_FAILED, failure or message or f"assertion failed on HTTP {status}"
    text = f"{code} {message} {failure}"
    lowered = text.lower()
    if "connectexception" in lowered or "connection refused" in lowered:
        return CONNECTION_REFUSED, text.strip()
    if "timeout" in lowered or "timed out" in lowered:
        return TIMEOUT, text.strip()
    return CONNECTION_ERROR, text.strip() or "no response"


def _jmeter_sample(
    results: ImportedResults,
    *,
    ts: str,
    elapsed: str,
    label: str,
    success: str,
    code: str = "",
    message: str = "",
    failure: str = "",
    bytes_in: str = "",
    bytes_out: str = "",
    users: str = "",
    url: str = "",
    hits: int = 1,
) -> None:
    if not ts.isdigit():
        raise _BadRecord(
            f"timeStamp {ts!r} is not in epoch milliseconds: export with jmeter.save.saveservice.timestamp_format=ms"
        )
    if success not in ("true", "false"):
        raise _BadRecord(f"success is {success!r}, not true or false")
    took_ms = int(elapsed)
    second = (int(ts) + took_ms) // 1000
    figures = results.figures(second, label)
    figures.pages += 1
    figures.hits += hits
    if bytes_in:
        figures.bytes_in += int(bytes_in)
    if bytes_out:
        figures.bytes_out += int(bytes_out)
    if users:
        results.users(second, int(users))
    if success == "true":
        figures.hist.record(took_ms * 1000)
    else:
        figures.error(*_jmeter_error(code, message, failure))
    key = label[:MAX_LABEL] or "request"
    if key not in results.paths:
        path = urlsplit(url).path if url.startswith(("http://", "https://")) else ""
        results.paths[key] = path or "/"


def read_jmeter_csv(results: ImportedResults, source: _Input) -> None:
    reader = csv.reader(source.text())
    try:
        first = next(reader)
        if first and first[0].lstrip("\ufeff") == "timeStamp":
            columns = [c.lstrip("\ufeff") for c in first]
            rows: Iterable[list[str]] = reader
        else:
            if len(first) not in JTL_DEFAULT_COLUMNS:
                raise _BadRecord(
                    f"no header line, and {len(first)} values are not JMeter's default columns: export with "
                    "jmeter.save.saveservice.print_field_names=true"
                )
            columns = JTL_DEFAULT_COLUMNS[len(first)].split(",")
            rows = _prepend(first, reader)
        missing = [c for c in JTL_REQUIRED if c not in columns]
        if missing:
            raise _BadRecord(
                f"the header has no {', '.join(missing)} column: a JTL needs timeStamp, elapsed, label and success "
                "(jmeter.save.saveservice.time=true, label=true, successful=true)"
            )
        at = {c: i for i, c in enumerate(columns)}
        i_ts, i_el, i_lb, i_ok = (at[c] for c in JTL_REQUIRED)
        optional = {
            name: at.get(column)
            for name, column in (
                ("code", "responseCode"),
                ("message", "responseMessage"),
                ("failure", "failureMessage"),
                ("bytes_in", "bytes"),
                ("bytes_out", "sentBytes"),
                ("users", "allThreads"),
                ("url", "URL"),
            )
        }
        optional = {k: v for k, v in optional.items() if v is not None}
        i_type = at.get("dataType")
        i_message = at.get("responseMessage")
        i_bytes, i_sent, i_users = optional.get("bytes_in"), optional.get("bytes_out"), optional.get("users")
        width = len(columns)
        # The hot loop of a 1 GB file: a sample of the second just seen, whose label is known, skips
        # the window's bookkeeping (a cache valid while the second stays the same and is not late).
        cache: dict[str, LabelSecond] = {}
        cache_second = None
        last_users = None
        for row in rows:
            if len(row) != width:
                if not row:
                    continue
                results.lines = reader.line_num
                raise _BadRecord(f"{len(row)} values for {width} columns")
            label = row[i_lb]
            # A Transaction Controller's own row: a page whose requests have rows of their own.
            transaction = (
                i_message is not None
                and row[i_message].startswith("Number of samples in transaction")
                and (i_type is None or not row[i_type])
            )
            success = row[i_ok]
            ts = row[i_ts]
            if transaction or success != "true" or not ts.isdigit() or label not in cache:
                results.lines = reader.line_num
                cache_second = None  # anything but the plain case goes the long way
                _jmeter_sample(
                    results,
                    ts=ts,
                    elapsed=row[i_el],
                    label=label,
                    success=success,
                    hits=0 if transaction else 1,
                    **{k: row[i] for k, i in optional.items()},
                )
                second = (int(ts) + int(row[i_el])) // 1000
                closed = results._closed_through
                if success == "true" and not transaction and (closed is None or second > closed):
                    if second != cache_second:
                        cache, cache_second = {}, second
                    cache[label] = results._open[second][label[:MAX_LABEL] or "request"]
                    last_users = (second, row[i_users]) if i_users is not None else None
            else:
                took = int(row[i_el])
                second = (int(ts) + took) // 1000
                if second != cache_second:
                    results.lines = reader.line_num
                    cache_second = None
                    _jmeter_sample(results, ts=ts, elapsed=row[i_el], label=label, success=success,
                                   **{k: row[i] for k, i in optional.items()})  # fmt: skip
                    closed = results._closed_through
                    if closed is None or second > closed:
                        cache, cache_second = {label: results._open[second][label[:MAX_LABEL] or "request"]}, second
                    continue
                figures = cache[label]
                figures.pages += 1
                figures.hits += 1
                if i_bytes is not None and row[i_bytes]:
                    figures.bytes_in += int(row[i_bytes])
                if i_sent is not None and row[i_sent]:
                    figures.bytes_out += int(row[i_sent])
                if i_users is not None and (second, row[i_users]) != last_users:
                    last_users = (second, row[i_users])
                    results.users(second, int(row[i_users]))
                figures.hist.record(took * 1000)
            if reader.line_num & 0x3FF == 0:
                results.lines = reader.line_num
                source.tick()
        results.lines = reader.line_num
    except (ValueError, KeyError, IndexError, UnicodeDecodeError, csv.Error, StopIteration) as exc:
        raise _bad_line(max(reader.line_num, 1) + isinstance(exc, UnicodeDecodeError), "JMeter JTL", exc) from None


def _prepend(first: list[str], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield first
    yield from rest


_JTL_SAMPLES = ("httpSample", "sample")


def read_jmeter_xml(results: ImportedResults, source: _Input) -> None:
    """A JTL in XML: each top-level ``<httpSample>``/``<sample>`` is a page; nested samples are its hits."""
    parser = ElementTree.XMLPullParser(events=("start", "end"))
    depth = 0
    root = None
    lines = 1
    limits = source.limits
    in_sample = 0  # elements of the top-level element being read: kept until it ends, then cleared
    try:
        while chunk := source.stream.read(1 << 16):
            parser.feed(chunk)
            lines += chunk.count(b"\n")
            for event, element in parser.read_events():
                if event == "start":
                    depth += 1
                    if depth == 1:
                        root = element
                        if element.tag != "testResults":
                            raise _BadRecord(f"the root element is <{element.tag}>, not <testResults>")
                        results.version = element.get("version")
                    elif depth > limits.max_xml_depth:
                        raise _OverLimit(
                            f"Line {lines}: XML elements nested more than {limits.max_xml_depth} deep, the limit "
                            "(a JTL nests 5 or 6); nothing was imported. This is not a JMeter JTL."
                        )
                    else:
                        in_sample += 1
                        if in_sample > limits.max_sample_elements:
                            raise _OverLimit(
                                f"Line {lines}: one sample holds more than {limits.max_sample_elements:,} XML "
                                "elements, the limit; nothing was imported. This is not a JMeter JTL."
                            )
                    continue
                depth -= 1
                if depth == 1:
                    if element.tag in _JTL_SAMPLES:
                        _jmeter_xml_sample(results, element)
                    root.clear()  # every top-level element, a sample or not, is let go once read
                    in_sample = 0
            results.lines = lines
            source.tick()
        parser.close()
    except ElementTree.ParseError as exc:
        raise ResultFileError(
            f"Line {exc.position[0]} is not well-formed XML ({exc}); nothing was imported. A JTL cut off while "
            "JMeter was writing lacks its closing </testResults>: add it, or export again."
        ) from None
    except (ValueError, KeyError) as exc:
        raise _bad_line(lines, "JMeter JTL XML", exc) from None
    if root is None:
        raise ResultFileError("The XML file has no <testResults> element. " + EXPORT_HINT)


def _jmeter_xml_sample(results: ImportedResults, element) -> None:
    subs = [e for e in element.iter() if e is not element and e.tag in _JTL_SAMPLES]
    leaves = [e for e in subs if not any(c.tag in _JTL_SAMPLES for c in e)]
    # the page's own request when it is one (an httpSample), plus each leaf sub-result (resource, redirect hop)
    hits = (1 if element.tag == "httpSample" else 0) + len(leaves)
    failure = ""
    for assertion in element.findall("assertionResult"):
        if assertion.findtext("failure") == "true" or assertion.findtext("error") == "true":
            failure = assertion.findtext("failureMessage") or assertion.findtext("name") or ""
            break
    url = element.findtext("java.net.URL") or ""
    get = element.get
    if get("ts") is None or get("t") is None:
        raise _BadRecord("a sample without ts or t: export with jmeter.save.saveservice.timestamp_format=ms")
    _jmeter_sample(
        results,
        ts=get("ts"),
        elapsed=get("t"),
        label=get("lb", ""),
        success=get("s", "true"),
        code=get("rc", ""),
        message=get("rm", ""),
        failure=failure,
        bytes_in=get("by", ""),
        bytes_out=get("sby", ""),
        users=get("na", ""),
        url=url,
        hits=hits,
    )


# -- Locust -------------------------------------------------------------------------------


def read_locust_history(results: ImportedResults, source: _Input) -> None:
    """Locust's ``_stats_history.csv``: cumulative totals per name every second, differenced."""
    results.approximate = True
    reader = csv.reader(source.text())
    # name -> count, failures, sum ms, bytes, min ms, max ms (Locust's own cumulative totals, as _stats.csv has them)
    totals: dict[str, tuple[int, int, float, float, float | None, float | None]] = {}
    try:
        columns = next(reader)
        at = {c: i for i, c in enumerate(columns)}
        needed = ("Timestamp", "User Count", "Name", "Total Request Count", "Total Failure Count")
        missing = [c for c in (*needed, "Total Average Response Time") if c not in at]
        if missing:
            raise _BadRecord(f"the header has no {', '.join(missing)} column")
        percentiles = [at.get(f"{q * 100:g}%") for q in LOCUST_PERCENTILES]
        per_name = False  # --csv-full-history: each name's rows come before the Aggregated one
        for row in reader:
            results.lines = reader.line_num
            if not row:
                continue
            if len(row) != len(columns):
                raise _BadRecord(f"{len(row)} values for {len(columns)} columns")
            if row[at["Name"]] != "Aggregated":
                per_name = True
                _locust_row(results, row, at, percentiles, totals)
            elif per_name:  # the totals of the names above: only the user count is new
                results.users(int(float(row[at["Timestamp"]])), int(row[at["User Count"]]))
            else:
                _locust_row(results, row, at, percentiles, totals)
            if reader.line_num & 0x3FF == 0:
                source.tick()
    except (ValueError, KeyError, IndexError, UnicodeDecodeError, csv.Error, StopIteration) as exc:
        raise _bad_line(max(reader.line_num, 1) + isinstance(exc, UnicodeDecodeError), "Locust CSV", exc) from None


def _locust_row(results, row, at, percentiles, totals) -> None:
    second = int(float(row[at["Timestamp"]]))
    results.users(second, int(row[at["User Count"]]))
    name = row[at["Name"]]
    label = "All requests" if name == "Aggregated" else name
    method = row[at["Type"]] if "Type" in at else ""
    count, failures = int(row[at["Total Request Count"]]), int(row[at["Total Failure Count"]])
    average = _number(row[at["Total Average Response Time"]])
    size = _number(row[at["Total Average Content Size"]]) if "Total Average Content Size" in at else 0.0
    low = _number(row[at["Total Min Response Time"]]) if "Total Min Response Time" in at else None
    high = _number(row[at["Total Max Response Time"]]) if "Total Max Response Time" in at else None
    before = totals.get(name, (0, 0, 0.0, 0.0, None, None))
    now = (count, failures, count * average, count * size, low if count else None, high if count else None)
    totals[name] = now
    hits, errors = now[0] - before[0], now[1] - before[1]
    if hits < 0 or errors < 0:
        raise _BadRecord(f"the cumulative counts of {name!r} go down (from {before[0]} to {count})")
    if not hits:
        return
    figures = results.figures(second, label)
    figures.pages += hits
    figures.hits += hits
    figures.bytes_in += round(now[3] - before[3])
    for _ in range(errors):
        figures.error(HTTP_STATUS if method else CONNECTION_ERROR, f"Locust failure ({method} {name})".strip())
    good = hits - errors
    if good > 0:
        values = [_number(row[i]) if i is not None else None for i in percentiles]
        # Locust's cumulative min and max are exact: a second in which either moved held that sample.
        new_min = now[4] if now[4] is not None and (before[4] is None or now[4] < before[4]) else None
        new_max = now[5] if now[5] is not None and (before[5] is None or now[5] > before[5]) else None
        figures.hist_dict = _merge_dicts(
            figures.hist_dict,
            _from_percentiles(
                values,
                good,
                max(0.0, (now[2] - before[2]) * good / hits),
                floor=now[4],
                ceiling=now[5],
                new_min=new_min,
                new_max=new_max,
            ),
        )
    if label not in results.paths:
        results.paths[label] = name if name.startswith("/") else "/"


def _number(text: str) -> float:
    return 0.0 if text in ("", "N/A") else float(text)


def _from_percentiles(
    values: list[float | None],
    count: int,
    sum_ms: float,
    *,
    floor: float | None = None,
    ceiling: float | None = None,
    new_min: float | None = None,
    new_max: float | None = None,
) -> dict:
    """A histogram dict of ``count`` samples spread over Locust's percentiles (ms), with an exact sum.

    ``floor`` and ``ceiling`` are Locust's cumulative min and max so far (exact), ``new_min`` and
    ``new_max`` the ones this second set (a sample of it had that value): the histogram holds a
    sample there, so the merged histograms' min, max and mean are Locust's own. Only the
    percentiles between them are rebuilt (from the rolling window's percentiles).
    """
    points = [(q, v) for q, v in zip(LOCUST_PERCENTILES, values, strict=True) if v is not None and v > 0]
    if not points:  # the rolling window has nothing yet (Locust's first rows): every sample at the mean
        points = [(1.0, max(sum_ms / count, 0.001))]
    buckets: dict[int, int] = {}
    placed = 0
    for q, value in points:
        share = round(count * q) - placed if q < 1.0 else count - placed
        if share > 0:
            index = bucket_index(max(1, round(value * 1000)))
            buckets[index] = buckets.get(index, 0) + share
            placed += share
    if placed < count:  # rounding left a few: they go with the highest percentile
        index = bucket_index(max(1, round(points[-1][1] * 1000)))
        buckets[index] = buckets.get(index, 0) + count - placed
    low = max(1, round(points[0][1] * 1000))
    high = max(low, round(points[-1][1] * 1000))
    if floor is not None:  # no sample of this second below Locust's min so far; the p50 is no minimum
        low = max(1, round(floor * 1000))
    if ceiling is not None:  # the rolling window's 100 % never exceeds the max so far
        high = max(low, min(high, round(ceiling * 1000)))
    moved = 0
    for extreme, take_from in ((new_max, max), (new_min, min)):
        if extreme is not None and moved < count:
            moved += 1
            us = max(1, round(extreme * 1000))
            source = take_from(buckets)
            buckets[source] -= 1
            if not buckets[source]:
                del buckets[source]
            buckets[bucket_index(us)] = buckets.get(bucket_index(us), 0) + 1
            low, high = min(low, us), max(high, us)
    # The sum is Locust's (count × average, differenced), kept whole: clamping it between rounded
    # percentile points made a 2.20 ms mean read 2.50 ms. Only the exact extremes bound it.
    total = min(max(round(sum_ms * 1000), low * count), high * count)
    return {"v": 1, "n": count, "sum": total, "min": low, "max": high, "b": {str(i): n for i, n in buckets.items()}}


def _merge_dicts(a: dict | None, b: dict) -> dict:
    if a is None:
        return b
    merged = Histogram.from_dict(a).merge(Histogram.from_dict(b))
    return merged.to_dict()


# -- Gatling ------------------------------------------------------------------------------


def read_gatling_log(results: ImportedResults, source: _Input) -> None:
    """Gatling's text simulation.log: REQUEST records (3.4+ without the user id, 3.0-3.3 with it), USER, RUN."""
    active = 0
    number = 0
    try:
        for number, raw in enumerate(source.stream, start=1):  # noqa: B007 (the error message names it)
            results.lines = number
            line = raw.rstrip(b"\r\n")
            if not line:
                continue
            fields = line.decode("utf-8").split("\t")
            kind = fields[0]
            if kind == "REQUEST":
                if len(fields) == 8:  # 3.0-3.3: REQUEST, user id, groups, name, start, end, status, message
                    fields = [kind, *fields[2:]]
                if len(fields) != 7:
                    raise _BadRecord(f"a REQUEST record has {len(fields)} fields, not 7 (or 8 before Gatling 3.4)")
                _, groups, name, start, end, status, message = fields
                _gatling_request(results, groups, name, int(start), int(end), status, message.strip())
            elif kind == "USER":
                if "START" in fields[2:4] or "END" in fields[2:4]:
                    i = 2 if fields[2] in ("START", "END") else 3
                    stamp = int(fields[i + 1] if fields[i] == "START" else fields[-1])
                    active += 1 if fields[i] == "START" else -1
                    results.users(stamp // 1000, max(active, 0))
                else:
                    raise _BadRecord("a USER record without START or END")
            elif kind == "RUN":
                if len(fields) < 6:
                    raise _BadRecord("a RUN record has fewer than 6 fields")
                results.version = fields[5].strip() or None
            elif kind in ("GROUP", "ERROR", "ASSERTION"):
                continue
            elif len(fields) > 2 and fields[2] in ("REQUEST", "USER", "RUN", "GROUP"):
                raise _BadRecord("this is a Gatling 2 log; Plimsoll reads Gatling 3.0 to 3.9 logs")
            else:
                raise _BadRecord(f"{kind[:40]!r} is not a Gatling record (RUN, USER, REQUEST, GROUP, ERROR)")
            if number & 0x3FF == 0:
                source.tick()
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise _bad_line(number, "Gatling simulation.log", exc) from None


def _gatling_request(results, groups: str, name: str, start: int, end: int, status: str, message: str) -> None:
    if status not in ("OK", "KO"):
        raise _BadRecord(f"status {status!r} is neither OK nor KO")
    label = f"{groups.replace(',', ' / ')} / {name}" if groups else name
    figures = results.figures(end // 1000, label)
    figures.pages += 1
    figures.hits += 1
    if status == "OK":
        figures.hist.record(max(0, end - start) * 1000)
    else:
        m = re.search(r"but actually (?:found|.*?) (\d{3})\b", message)
        lowered = message.lower()
        if m or "status" in lowered:
            kind = HTTP_STATUS
        elif "connection refused" in lowered or "connectexception" in lowered:
            kind = CONNECTION_REFUSED
        elif "timeout" in lowered or "timed out" in lowered:
            kind = TIMEOUT
        elif "check" in lowered or "find" in lowered:
            kind = CHECK_FAILED
        else:
            kind = CONNECTION_ERROR
        figures.error(kind, message or "KO")
    results.paths.setdefault(label[:MAX_LABEL] or "request", "/")


READERS = {
    "k6-json": read_k6_json,
    "k6-csv": read_k6_csv,
    "jmeter-csv": read_jmeter_csv,
    "jmeter-xml": read_jmeter_xml,
    "locust-csv": read_locust_history,
    "gatling-log": read_gatling_log,
}
assert set(READERS) == set(FORMATS)  # noqa: S101 (a module invariant)
