"""What an imported result file becomes: limits, errors, per-label seconds and the results of a whole file."""

from __future__ import annotations

import gzip
import io
import pickle
import re
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

from workers.engine.histogram import Histogram

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
    """What a result file may hold; a file over one is refused with the limit named (issue 30).

    The defaults are the settings' (PLIMSOLL_IMPORT_*); the portal's import passes the configured
    ones (``services.import_limits``), a script calling ``read`` directly gets these.
    """

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
