"""JMeter, Locust and Gatling files as the tools write them (portal/runs/result_files/): no database.

The real tools' own files are tested in tests/e2e/test_import_jmeter_locust_end_to_end.py (JMeter
2.13 and Locust run here). Gatling cannot be installed here (no PyPI, Debian or npm package), so its
simulation.log is written exactly as Gatling 3.x's LogFileDataWriter writes it: tab-separated
records, epoch milliseconds, a space for an empty message.
"""

import gzip
import tracemalloc

import pytest

from portal.runs import result_files as rf
from workers.engine.histogram import Histogram

T0 = 1795543128000  # ms
JTL_HEADER = (
    "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,failureMessage,"
    "bytes,sentBytes,grpThreads,allThreads,URL,Latency,IdleTime,Connect"
)


def jtl_row(ts, elapsed, label="Home", code="200", ok="true", failure="", message="OK", users=2, dtype="text"):
    return (
        f'{ts},{elapsed},{label},{code},"{message}",Users 1-1,{dtype},{ok},"{failure}",1000,120,{users},{users},'
        f"http://127.0.0.1:8001/{label.lower()},{elapsed - 1},0,1"
    )


def write(tmp_path, name, lines, *, gz=False):
    path = tmp_path / name
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def reports(results):
    return {r["second"]: r for r in results.reports()}


TRANSACTION = "Number of samples in transaction : 2, number of failing samples : 0"


def test_jtl_csv_with_its_header(tmp_path):
    rows = [
        JTL_HEADER,
        jtl_row(T0 + 100, 250),
        jtl_row(T0 + 900, 300, label="Search"),  # ends in the next second: counted there
        jtl_row(T0 + 1500, 40, code="500", ok="false", message="Internal Server Error", users=3),
        jtl_row(T0 + 1600, 5, ok="false", failure="Test failed: text expected to contain /Welcome/"),
        jtl_row(T0 + 2100, 1, code="Non HTTP response code: java.net.ConnectException", ok="false", message="x, y"),
        jtl_row(T0 + 2200, 400, label="Buy", message=TRANSACTION, dtype=""),
    ]  # fmt: skip
    results = rf.read(write(tmp_path, "results.jtl", rows))
    assert (results.tool, results.format, results.requests, results.max_users) == ("JMeter", "jmeter-csv", 5, 3)
    by = reports(results)
    assert by[0]["labels"]["Home"]["hist"]["sum"] == 250_000
    assert by[1]["labels"]["Search"]["pages"] == 1 and by[1]["labels"]["Search"]["bytes_in"] == 1000
    home = by[1]["labels"]["Home"]
    assert home["errors_by_kind"] == {"http_status": 1, "check_failed": 1}
    assert home["error_samples"]["check_failed"].startswith("Test failed")
    assert by[2]["labels"]["Home"]["errors_by_kind"] == {"connection_refused": 1}
    assert (by[2]["labels"]["Buy"]["pages"], by[2]["labels"]["Buy"]["hits"]) == (1, 0)  # a transaction's own row
    assert results.paths["Search"] == "/search"


def test_jtl_csv_without_a_header_has_jmeters_default_columns(tmp_path):
    rows = [f"{T0 + i * 10},{5 + i},Home,200,OK,Users 1-1,text,true,572,3,3,4" for i in range(5)]  # JMeter 2.13
    results = rf.read(write(tmp_path, "results.jtl", rows, gz=True))
    assert (results.format, results.requests, results.max_users) == ("jmeter-csv", 5, 3)
    assert reports(results)[0]["labels"]["Home"]["hist"]["n"] == 5


XML = """<?xml version="1.0" encoding="UTF-8"?>
<testResults version="1.2">
<httpSample t="120" it="0" lt="20" ct="3" ts="{t0}" s="true" lb="Home" rc="200" rm="OK" tn="Users 1-1" dt="text" by="5000" sby="300" ng="1" na="4">
  <httpSample t="10" ts="{t0}" s="true" lb="/style.css" rc="200" rm="OK" by="800" ng="1" na="4"/>
  <httpSample t="12" ts="{t0}" s="true" lb="/app.js" rc="200" rm="OK" by="900" ng="1" na="4"/>
  <java.net.URL>http://127.0.0.1:8001/</java.net.URL>
</httpSample>
<sample t="300" ts="{t1}" s="false" lb="Checkout" rc="200" rm="Number of samples in transaction : 2, number of failing samples : 1" na="4">
  <httpSample t="100" ts="{t1}" s="true" lb="Cart" rc="200" rm="OK"/>
  <httpSample t="200" ts="{t1}" s="false" lb="Pay" rc="200" rm="OK">
    <assertionResult><name>Text</name><failure>true</failure><error>false</error><failureMessage>Test failed: paid</failureMessage></assertionResult>
  </httpSample>
  <assertionResult><name>Text</name><failure>true</failure><error>false</error><failureMessage>Test failed: paid</failureMessage></assertionResult>
</sample>
</testResults>
"""  # noqa: E501


def test_jtl_xml_with_sub_results(tmp_path):
    path = tmp_path / "results.xml"
    path.write_text(XML.format(t0=T0, t1=T0 + 2000))
    results = rf.read(path)
    assert (results.format, results.version, results.max_users) == ("jmeter-xml", "1.2", 4)
    by = reports(results)
    home = by[0]["labels"]["Home"]
    assert (home["pages"], home["hits"], home["bytes_in"], home["bytes_out"]) == (1, 3, 5000, 300)
    assert home["hist"]["sum"] == 120_000
    checkout = by[2]["labels"]["Checkout"]
    assert (checkout["pages"], checkout["hits"], checkout["errors_by_kind"]) == (1, 2, {"check_failed": 1})
    assert checkout["error_samples"]["check_failed"] == "Test failed: paid"


GATLING = [
    "RUN\tcomputerdatabase.BasicSimulation\tbasicsimulation\t{t0}\t \t3.9.5",
    "USER\tUsers\tSTART\t{t0}",
    "USER\tUsers\tSTART\t{t0}",
    "REQUEST\t\thome\t{t0}\t{t0p}\tOK\t ",
    "REQUEST\tShop,Checkout\tpay\t{t0}\t{t1}\tKO\tstatus.find.in(200,304), but actually found 500",
    "GROUP\tShop,Checkout\t{t0}\t{t1}\t1000\tKO",
    "USER\tUsers\tEND\t{t1}",
    "REQUEST\t\thome\t{t1}\t{t1p}\tKO\ti.n.c.AnnotatedConnectException: Connection refused: /127.0.0.1:9",
]


def test_gatling_simulation_log(tmp_path):
    lines = [x.format(t0=T0, t0p=T0 + 35, t1=T0 + 1000, t1p=T0 + 1003) for x in GATLING]
    results = rf.read(write(tmp_path, "simulation.log", lines))
    assert (results.tool, results.format, results.version, results.requests) == ("Gatling", "gatling-log", "3.9.5", 3)
    by = reports(results)
    assert by[0]["labels"]["home"]["hist"]["sum"] == 35_000 and by[0]["active_users"] == 2
    assert by[1]["labels"]["Shop / Checkout / pay"]["errors_by_kind"] == {"http_status": 1}
    assert by[1]["labels"]["home"]["errors_by_kind"] == {"connection_refused": 1}
    assert by[1]["active_users"] == 1


def test_gatling_3_0_records_with_the_user_id(tmp_path):
    lines = [
        f"RUN\tsim.Basic\tbasic\t{T0}\t \t3.0.3",
        f"USER\tUsers\t1\tSTART\t{T0}\t{T0}",
        f"REQUEST\t1\t\thome\t{T0}\t{T0 + 20}\tOK\t ",
        f"USER\tUsers\t1\tEND\t{T0}\t{T0 + 30}",
    ]
    results = rf.read(write(tmp_path, "simulation.log", lines))
    assert results.requests == 1 and results.max_users == 1


HISTORY = "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%,Total Request Count,Total Failure Count,Total Median Response Time,Total Average Response Time,Total Min Response Time,Total Max Response Time,Total Average Content Size"  # noqa: E501
NA = ",".join(["N/A"] * 11)


def test_locust_history_differences_its_cumulative_counts(tmp_path):
    s = T0 // 1000
    rows = [
        HISTORY,
        f"{s},0,,Aggregated,0,0,{NA},0,0,0,0.0,0,0,0",
        f"{s + 1},2,GET,Home,10,0,{','.join(['10'] * 10)},40,10,0,10,10.0,5,40,100",
        f"{s + 1},2,,Aggregated,10,0,{','.join(['10'] * 10)},40,10,0,10,10.0,5,40,100",
        f"{s + 2},3,GET,Home,12,1,10,10,12,12,14,16,18,20,30,30,30,22,1,10,11.0,5,40,100",
        f"{s + 2},3,,Aggregated,12,1,10,10,12,12,14,16,18,20,30,30,30,22,1,10,11.0,5,40,100",
    ]
    results = rf.read(write(tmp_path, "x_stats_history.csv", rows))
    assert (results.tool, results.format, results.approximate, results.requests) == ("Locust", "locust-csv", True, 22)
    by = reports(results)
    assert list(by[1]["labels"]) == ["Home"]  # the Aggregated rows are not counted twice
    assert by[1]["labels"]["Home"]["hist"]["sum"] == 100_000  # 10 × 10 ms
    second = by[2]["labels"]["Home"]
    assert (second["hits"], second["errors"], second["hist"]["n"]) == (12, 1, 11)
    # the latency sum is exact: 22 × 11.0 − 10 × 10.0 = 142 ms over 12 requests, 11 of them good
    assert second["hist"]["sum"] == round(142_000 * 11 / 12)
    assert by[2]["active_users"] == 3


def test_locust_mean_min_and_max_are_locusts_own_totals(tmp_path):
    # given: issue 28's "/" page: Locust's own totals say mean 2.20 ms, min 0.9 ms, max 43.5 ms; the rolling
    # 10 s window's percentiles start at 2.5 ms (p50) and top out at 8.6 ms (its 100 %)
    s = T0 // 1000
    window = "2.5,2.6,2.7,2.8,3.0,3.5,4.0,5.0,8.6,8.6,8.6"
    rows = [
        HISTORY,
        f"{s + 1},3,GET,/,100,0,{window},100,0,2.5,2.2,0.9,8.6,100",
        f"{s + 2},3,GET,/,100,0,{window},200,0,2.5,2.2,0.9,43.5,100",
        f"{s + 3},3,GET,/,100,0,{window},300,0,2.5,2.2,0.9,43.5,100",
    ]

    results = rf.read(write(tmp_path, "x_stats_history.csv", rows))

    # then: the merged histogram's count, mean, min and max are Locust's, exactly (to the µs)
    merged = Histogram()
    for report in reports(results).values():
        merged.merge(Histogram.from_dict(report["labels"]["/"]["hist"]))
    assert merged.count == 300
    assert merged.mean == pytest.approx(2200.0, abs=0.01)  # was 2,500 µs: the sum clamped at p50 × count
    assert (merged.min, merged.max) == (900, 43_500)  # were 2,500 (the p50) and 8,600 (the window's 100 %)
    assert merged.percentile(100) == 43_500 and merged.percentile(0) == 900


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (JTL_HEADER + "\n" + jtl_row(T0, 5) + "\n" + jtl_row(T0, 5)[:30] + "\n", "Line 3 is not a JMeter JTL line"),
        ("timeStamp,elapsed,label,success\n2026/11/24 10:00:00,5,Home,true\n", "epoch milliseconds"),
        ("timeStamp,elapsed,label,success\n1795543128000,5,Home,maybe\n", "Line 2 .*success is 'maybe'"),
        (XML.format(t0=T0, t1=T0)[:400], "Line 5 is not well-formed XML"),
        ("RUN\tsim\tid\t1\t \t3.9.5\nREQUEST\t\thome\t1\t2\tMAYBE\t \n", "Line 2 .*neither OK nor KO"),
        ("RUN\tsim\tid\t1\t \t3.9.5\nREQUEST\t\thome\t1\n", "Line 2 .*has 4 fields"),
        ("Type,Name,Request Count,Failure Count\nGET,/,1,0\n", "_stats_history.csv instead"),
        ("\x00\x01\x02GATLING binary\x00", "Gatling 3.10 or later"),
        (HISTORY + "\n1,1,GET,Home,1,0," + ",".join(["1"] * 11) + ",5,0,1,1.0,1,1,1\n"
         "2,1,GET,Home,1,0," + ",".join(["1"] * 11) + ",3,0,1,1.0,1,1,1\n", "Line 3 .*go down"),
    ],
)  # fmt: skip
def test_bad_files_name_the_line_and_the_remedy(tmp_path, content, message):
    path = tmp_path / "bad"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(rf.ResultFileError, match=message):
        rf.read(path)


def test_samples_later_than_the_window_are_counted_not_lost(tmp_path):
    rows = [JTL_HEADER] + [jtl_row(T0 + i * 1000, 5) for i in range(rf.REORDER_S + 10)]
    rows.append(jtl_row(T0, 5))  # a sample from the first second, written 70 s later
    results = rf.read(write(tmp_path, "late.jtl", rows))
    assert results.requests == rf.REORDER_S + 11 and results.late_samples == 1


def test_a_long_jtl_is_read_in_memory_that_does_not_grow_with_it(tmp_path):
    def peak(seconds: int) -> int:
        path = tmp_path / f"{seconds}.jtl"
        with path.open("w") as f:
            f.write(JTL_HEADER + "\n")
            for i in range(seconds * 20):  # 20 samples a second over 4 labels: longer files, more seconds
                f.write(jtl_row(T0 + i * 50, 5 + i % 90, label=f"L{i % 4}") + "\n")
        tracemalloc.start()
        results = rf.read(path)
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert results.requests == seconds * 20 and results.seconds >= seconds
        results.discard()
        return top

    short, long = peak(300), peak(3000)
    assert long < short * 1.5 + 256 * 1024, (short, long)
