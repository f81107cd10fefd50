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

from .reading import READERS, detect, read
from .records import (
    EXPORT_HINT,
    FORMATS,
    LIMITS,
    MAX_LABEL,
    PROGRESS_EVERY,
    REORDER_S,
    TOOLS,
    ImportedResults,
    LabelSecond,
    Limits,
    ResultFileError,
    parse_time,
)

__all__ = [
    "EXPORT_HINT",
    "FORMATS",
    "LIMITS",
    "MAX_LABEL",
    "PROGRESS_EVERY",
    "READERS",
    "REORDER_S",
    "TOOLS",
    "ImportedResults",
    "LabelSecond",
    "Limits",
    "ResultFileError",
    "detect",
    "parse_time",
    "read",
]
