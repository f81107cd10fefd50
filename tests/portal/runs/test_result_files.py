"""Reading other tools' result files (portal/runs/result_files/): plain functions, no database."""

import gzip
import json
from datetime import UTC, datetime

import pytest

from portal.runs import result_files as rf


def point(metric, value, t, **tags):
    return json.dumps({"metric": metric, "type": "Point", "data": {"time": t, "value": value, "tags": tags}})


def k6_file(tmp_path, lines, name="out.json"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


T = "2026-11-24T17:44:{:02d}.{}Z"
METRIC = json.dumps({"type": "Metric", "data": {"name": "http_reqs", "type": "counter"}, "metric": "http_reqs"})


def request(second, ms, *, name="Home", status="200", expected="true", fraction="126910051", **extra):
    t = T.format(second, fraction)
    tags = {
        "name": name,
        "url": f"http://127.0.0.1:8001/{name.lower()}",
        "status": status,
        "expected_response": expected,
        **extra,
    }
    return [point("http_reqs", 1, t, **tags), point("http_req_duration", ms, t, **tags)]


def test_k6_points_become_per_second_label_figures(tmp_path):
    lines = [
        METRIC,
        point("vus", 1, T.format(9, "0")),  # k6's first point: the test's start, where its seconds count from
        point("vus", 2, T.format(10, "0")),
        point("vus", 3, T.format(10, "5")),
        *request(10, 1.5),
        *request(10, 2.5),
        *request(11, 4.0, name="Search"),
        *request(11, 9.0, status="404", expected="false"),
        *request(12, 30000.0, status="0", expected="false", error_code="1050", error="request timeout"),
        *request(12, 1.0, status="0", expected="false", error_code="1212", error="connection refused"),
        point("iterations", 1, T.format(12, "9")),
        *request(9, 3.0),
    ]  # written late: k6 flushes metrics out of order
    results = rf.read(k6_file(tmp_path, lines))

    assert (results.tool, results.format, results.requests, results.duration_s, results.max_users) == (
        "k6",
        "k6-json",
        7,
        4,
        3,
    )
    reports = {r["second"]: r for r in results.reports()}
    assert sorted(reports) == [0, 1, 2, 3]
    home = reports[1]["labels"]["Home"]
    assert (home["pages"], home["hits"], home["errors"], home["hist"]["n"]) == (2, 2, 0, 2)
    assert home["hist"]["sum"] == 4000  # µs
    assert reports[1]["active_users"] == 3
    failed = reports[2]["labels"]["Home"]
    assert failed["errors_by_kind"] == {"http_status": 1} and failed["error_samples"] == {"http_status": "HTTP 404"}
    assert failed["hist"] is None  # latencies of successful pages only, as the engine counts
    assert reports[3]["labels"]["Home"]["errors_by_kind"] == {"timeout": 1, "connection_refused": 1}
    assert reports[3]["iterations_completed"] == 1
    assert results.paths == {"Home": "/home", "Search": "/search"}


def test_a_k6_test_of_15_s_is_15_s_long_not_the_16_wall_clock_seconds_it_touched(tmp_path):
    # given: a 15 s k6 test that started at .4 s (issue 28): a request every 100 ms, the last iterations
    # in flight ending 50 ms after its duration, so its samples touch 16 whole seconds of the clock
    start = datetime(2026, 11, 24, 17, 44, 0, 400_000, tzinfo=UTC).timestamp()
    lines = [METRIC, point("vus", 3, datetime.fromtimestamp(start, UTC).isoformat())]
    for i in range(151):  # 0.0 … 15.0 s after the start, and one more at 15.05 s
        at = datetime.fromtimestamp(start + min(i * 0.1, 15.05), UTC).isoformat()
        lines += [point("http_reqs", 1, at, name="Home", status="200", expected_response="true")]
        lines += [point("http_req_duration", 2.0, at, name="Home", status="200", expected_response="true")]

    results = rf.read(k6_file(tmp_path, lines))

    # then: 15 s, as k6 ran, every request counted in them: the rate is 151 / 15 (not / 16, 6 % low)
    assert results.duration_s == 15 and results.seconds == 15
    assert sum(r["labels"]["Home"]["pages"] for r in results.reports()) == results.requests == 151
    assert max(r["second"] for r in results.reports()) == 14


def test_times_with_offsets_and_nanoseconds():
    assert rf.parse_time("2026-11-24T18:44:18.126910051+01:00") == pytest.approx(
        rf.parse_time("2026-11-24T17:44:18.126910Z"), abs=1e-6
    )
    with pytest.raises(ValueError):
        rf.parse_time("yesterday")


def test_gzipped_files_are_read(tmp_path):
    path = tmp_path / "out.json.gz"
    path.write_bytes(gzip.compress(("\n".join([METRIC, *request(1, 2.0)]) + "\n").encode()))
    assert rf.read(path).requests == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "The file is empty"),
        (b"timeStamp,elapsed,label\n1,2,3\n", "This is not a result file Plimsoll reads"),
        (json.dumps({"type": "Metric", "metric": "vus", "data": {}}).encode() + b"\n", "no HTTP requests"),
        (
            ("\n".join([METRIC, *request(1, 2.0), '{"metric":"http_reqs","type":"Poi']) + "\n").encode(),
            "Line 4 is not a k6 JSON line",
        ),
        (("\n".join([METRIC, point("http_reqs", 1, "not a time")]) + "\n").encode(), "Line 2 is not a k6 JSON line"),
    ],
)
def test_bad_files_are_refused_with_the_reason(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(rf.ResultFileError, match=message):
        rf.read(path)


def test_a_truncated_gzip_file_names_where_it_breaks_off(tmp_path):
    path = tmp_path / "out.json.gz"
    data = gzip.compress(("\n".join([METRIC] + [x for s in range(50) for x in request(s % 60, 1.0)]) + "\n").encode())
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(rf.ResultFileError, match="breaks off after line"):
        rf.read(path)


def test_an_unknown_format_is_named(tmp_path):
    with pytest.raises(rf.ResultFileError, match="Unknown format 'jtl'"):
        rf.read(k6_file(tmp_path, [METRIC]), format="jtl")


CSV_HEADER = (
    "metric_name,timestamp,metric_value,check,error,error_code,expected_response,group,method,name,proto,"
    "scenario,service,status,subproto,tls_version,url,extra_tags,metadata"
)


def csv_row(metric, stamp, value, *, name="Home", status="200", expected="true", error_code=""):
    return (
        f"{metric},{stamp},{value:.6f},,,{error_code},{expected},,GET,{name},HTTP/1.1,default,,{status},,,"
        f"http://127.0.0.1:8001/{name.lower()},,"
    )


def test_k6_csv_is_read_like_its_json(tmp_path):
    rows = [
        CSV_HEADER,
        csv_row("vus", 1795543128, 2),
        csv_row("http_reqs", 1795543128, 1),
        csv_row("http_req_duration", 1795543128, 2.5),
        csv_row(
            "http_reqs",
            datetime.fromtimestamp(1795543129, UTC).isoformat().replace("+00:00", "Z"),
            1,
            status="404",
            expected="false",
            error_code="1404",
        ),
        csv_row("http_req_duration", 1795543129, 9.0, status="404", expected="false"),
        csv_row("iterations", 1795543129, 1),
        csv_row("vus", 1795543130, 0),  # the test's end: it ran 2 s (k6's CSV stamps are whole seconds)
    ]
    results = rf.read(k6_file(tmp_path, rows, "out.csv"))
    assert (results.format, results.requests, results.max_users) == ("k6-csv", 2, 2)
    labels = [r["labels"]["Home"] for r in results.reports() if "Home" in r["labels"]]
    assert [(x["pages"], x["errors"], (x["hist"] or {}).get("n", 0)) for x in labels] == [(1, 0, 1), (1, 1, 0)]


def test_a_bad_k6_csv_line_is_named(tmp_path):
    rows = [CSV_HEADER, csv_row("http_reqs", 1795543128, 1), "http_reqs,1795543128,1.0,,,"]
    with pytest.raises(rf.ResultFileError, match="Line 3 is not a k6 CSV line"):
        rf.read(k6_file(tmp_path, rows, "out.csv"))


def test_reading_keeps_per_second_figures_only_so_memory_stays_flat(tmp_path):
    import tracemalloc

    def peak_bytes(requests: int) -> int:
        path = tmp_path / f"{requests}.json"
        with path.open("w") as f:
            for i in range(requests):  # the same 60 seconds and labels, ten times the samples
                second = i * 60 // requests
                for line in request(second % 60, 2.0 + i % 50, name=f"L{i % 4}"):
                    f.write(line + "\n")
        tracemalloc.start()
        results = rf.read(path)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert results.requests == requests
        return peak

    small, large = peak_bytes(3_000), peak_bytes(30_000)
    assert large < small * 1.5 + 256 * 1024, (small, large)
