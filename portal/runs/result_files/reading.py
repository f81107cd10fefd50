"""Reading a file: its format detected from its first bytes, then read by its tool's reader."""

from __future__ import annotations

import csv
import gzip
import re
import zlib
from collections.abc import Callable
from pathlib import Path

from workers.engine import safejson

from .records import (
    EXPORT_HINT,
    FORMATS,
    JTL_REQUIRED,
    K6_CSV_HEADER,
    LIMITS,
    LOCUST_HISTORY_HEADER,
    TOOLS,
    ImportedResults,
    Limits,
    ResultFileError,
    _Input,
    _OverLimit,
)
from .tools import (
    read_gatling_log,
    read_jmeter_csv,
    read_jmeter_xml,
    read_k6_csv,
    read_k6_json,
    read_locust_history,
)


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
        doc = safejson.loads(first)
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


READERS = {
    "k6-json": read_k6_json,
    "k6-csv": read_k6_csv,
    "jmeter-csv": read_jmeter_csv,
    "jmeter-xml": read_jmeter_xml,
    "locust-csv": read_locust_history,
    "gatling-log": read_gatling_log,
}
assert set(READERS) == set(FORMATS)  # noqa: S101 (a module invariant)
