"""One reader per tool's file format: k6 (JSON, CSV), JMeter (CSV, XML), Locust (CSV history), Gatling (log)."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit
from xml.etree import ElementTree

from workers.engine import safejson
from workers.engine.errors import CHECK_FAILED, CONNECTION_ERROR, CONNECTION_REFUSED, HTTP_STATUS, TIMEOUT
from workers.engine.histogram import Histogram, bucket_index

from .records import (
    _K6_REFUSED,
    _K6_TIMEOUT,
    EXPORT_HINT,
    JTL_DEFAULT_COLUMNS,
    JTL_REQUIRED,
    K6_CSV_HEADER,
    K6_METRICS,
    LOCUST_PERCENTILES,
    MAX_LABEL,
    ImportedResults,
    LabelSecond,
    ResultFileError,
    _BadRecord,
    _Input,
    _OverLimit,
    parse_time,
)


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
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # "[[[[…" too deep is a ValueError (safejson)
        raise _bad_line(number, "k6 JSON", exc) from None


def _k6_line(results: ImportedResults, raw: bytes) -> None:
    doc = safejson.loads(raw)
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
