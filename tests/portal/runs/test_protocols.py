"""Streams, WebSocket sessions and protocols in the portal (issue 26): stored by the interval writer, summed into
the summary, judged by the plan's thresholds, rolled up, compared.

The reports are the engine's own per-label interval objects (workers/engine/runner.py), filled with known values,
so the rows hold exactly what the engine sends. The end-to-end test against the demo target is
tests/e2e/test_protocols_end_to_end.py.
"""

import pytest

from portal.history import comparison
from portal.runs import analysis
from portal.runs.models import ProtocolInterval, RunFigures
from portal.runs.results import protocols
from portal.runs.results.rollup import run_rollup
from portal.runs.results.sink import interval_write
from workers.engine.histogram import Histogram
from workers.engine.plan import Plan as EnginePlan
from workers.engine.runner import _LabelInterval

from .factories import plan_run

pytestmark = pytest.mark.django_db


def _hist(*values_us: int) -> Histogram:
    h = Histogram()
    for v in values_us:
        h.record(v)
    return h


def stream_label(ttfe_ms: list[int], *, events: int = 5, gap_ms: int = 10, protocol: str = "h2") -> dict:
    """One second of an SSE step: one response per TTFE, each with ``events`` events ``gap_ms`` apart."""
    li = _LabelInterval()
    li.pages = li.hits = len(ttfe_ms)
    li.protocols = {protocol: len(ttfe_ms)}
    for t in ttfe_ms:
        li.hist.record((t + gap_ms * (events - 1)) * 1000)
        li.ttfb_hist.record(1000)
    li.ttfe_hist = _hist(*(t * 1000 for t in ttfe_ms))
    li.gap_hist = _hist(*([gap_ms * 1000] * (events - 1) * len(ttfe_ms)))
    li.events_hist = _hist(*([events] * len(ttfe_ms)))
    return li.to_report()


def ws_label(rtt_ms: list[int], *, sent: int, received: int) -> dict:
    li = _LabelInterval()
    li.pages = li.hits = 1
    li.hist.record(500_000)
    li.rtt_hist = _hist(*(t * 1000 for t in rtt_ms))
    li.ws_sent, li.ws_received = sent, received
    return li.to_report()


def http1_label(n: int) -> dict:
    li = _LabelInterval()
    li.pages = li.hits = n
    li.protocols = {"http/1.1": n}
    for _ in range(n):
        li.hist.record(20_000)
    return li.to_report()


def write(run, second: int, labels: dict, shard_no: int = 0) -> None:
    interval_write(run.id, shard_no, {"second": second, "active_users": 2, "labels": labels})


@pytest.fixture
def proto_run(plan):
    # constant 2 users for 4 s: the measurement window is seconds 0-4
    plan.profile_kind, plan.users, plan.hold, plan.ramp_up = "constant", 2, 4, 0
    plan.threshold_ttfe_p95_ms = 100
    plan.threshold_rtt_p95_ms = 20
    plan.save()
    return plan_run(plan, status="passed")


def test_the_writer_stores_protocol_rows_only_for_labels_that_have_protocol_figures(proto_run):
    write(proto_run, 0, {"Ask": stream_label([50, 60]), "Chat": ws_label([5, 7], sent=2, received=3)})
    write(proto_run, 0, {"Home": http1_label(4)}, shard_no=1)

    rows = {r.label: r for r in ProtocolInterval.objects.filter(run=proto_run)}
    assert set(rows) == {"Ask", "Chat"}  # a plain HTTP/1.1 label says nothing new: no row
    ask, chat = rows["Ask"], rows["Chat"]
    assert ask.protocols == {"h2": 2} and ask.hits == 2 and ask.span_s == 1
    assert Histogram.from_bytes(ask.events_bin).sum == 10
    assert Histogram.from_bytes(ask.ttfe_bin).min == 50_000 and ask.rtt_bin is None
    assert (chat.ws_sent, chat.ws_received, Histogram.from_bytes(chat.rtt_bin).count) == (2, 3, 2)
    assert chat.ttfe_bin is None

    # A second written twice replaces itself.
    write(proto_run, 0, {"Ask": stream_label([50]), "Chat": ws_label([5], sent=1, received=1)})
    assert ProtocolInterval.objects.filter(run=proto_run).count() == 2
    assert ProtocolInterval.objects.get(run=proto_run, label="Ask").hits == 1


def test_the_summary_gives_each_label_its_figures_and_judges_the_thresholds(proto_run):
    for second in range(4):
        write(
            proto_run,
            second,
            {
                "Ask": stream_label([40 + second * 10, 50 + second * 10]),
                "Chat": ws_label([5, 15], sent=2, received=2),
                "Home": http1_label(3),
            },
        )
    write(proto_run, 9, {"Ask": stream_label([5000])})  # outside the window: not in the summary

    summary = analysis.summarize(proto_run)

    p = {x["label"]: x for x in summary["protocols"]["pages"]}
    assert set(p) == {"Ask", "Chat"}
    ask, chat = p["Ask"], p["Chat"]
    assert ask["stream"]["responses"] == 8 and ask["stream"]["events"]["total"] == 40
    # percentiles to the histogram's precision (0.05 %), max exact
    assert ask["stream"]["ttfe_ms"]["max"] == 80.0 and ask["stream"]["ttfe_ms"]["p50"] == pytest.approx(60.0, rel=1e-3)
    assert ask["stream"]["gap_ms"]["p95"] == 10.0
    assert ask["protocols"] == {"h2": 8} and ask["h2_share_pct"] == 100.0
    assert chat["websocket"] == {
        "round_trips": 8,
        "rtt_ms": {"p50": 5.0, "p90": 15.0, "p95": 15.0, "p99": 15.0, "max": 15.0, "mean": 10.0},
        "sent": 8,
        "received": 8,
        "sent_per_s": 2.0,
        "received_per_s": 2.0,
    }
    t = summary["totals"]
    # h2 share of the HTTP hits: 8 h2 (Ask) and 12 HTTP/1.1 (Home, which has no row); Chat's sessions (a
    # WebSocket upgrade each) have no HTTP protocol of their own
    assert summary["protocols"]["totals"]["protocols"] == {"http/1.1": 12, "h2": 8}
    assert t["h2_share_pct"] == 40.0
    assert (t["ttfe_p95_ms"], t["gap_p95_ms"], t["rtt_p95_ms"]) == pytest.approx((80.0, 10.0, 15.0), rel=1e-3)
    judged = {x["name"]: x for x in summary["thresholds"]}
    assert judged["Time to first event p95"] | {} == {
        "name": "Time to first event p95",
        "limit": 100,
        "actual": pytest.approx(80.0, rel=1e-3),
        "unit": "ms",
        "op": "≤",
        "passed": True,
    }
    assert judged["WebSocket round trip p95"]["passed"]
    assert summary["verdict"] == "passed"


def test_a_stream_threshold_fails_on_slow_first_events_and_on_a_run_without_streams(plan):
    plan.profile_kind, plan.users, plan.hold, plan.ramp_up = "constant", 2, 2, 0
    plan.threshold_ttfe_p95_ms = 100
    plan.threshold_min_h2_share_pct = 50
    plan.save()
    slow = plan_run(plan, status="passed")
    for second in range(2):
        write(slow, second, {"Ask": stream_label([150, 160], protocol="http/1.1")})
    plain = plan_run(plan, status="passed")
    for second in range(2):
        write(plain, second, {"Home": http1_label(3)})

    slow_summary, plain_summary = analysis.summarize(slow), analysis.summarize(plain)

    judged = {x["name"]: x for x in slow_summary["thresholds"]}
    assert not judged["Time to first event p95"]["passed"] and judged["Time to first event p95"][
        "actual"
    ] == pytest.approx(160.0, rel=1e-3)
    assert not judged["HTTP/2 share"]["passed"] and judged["HTTP/2 share"]["actual"] == 0.0
    assert slow_summary["verdict"] == "failed"
    # No stream at all: a time-to-first-event threshold cannot hold on nothing (as a p95 on no page).
    assert "protocols" not in plain_summary
    judged = {x["name"]: x for x in plain_summary["thresholds"]}
    assert judged["Time to first event p95"]["actual"] is None and not judged["Time to first event p95"]["passed"]


def test_the_rows_are_merged_a_chunk_at_a_time_with_the_figures_of_a_merge_row_by_row(proto_run, monkeypatch):
    from portal.runs.results import columns

    for second in range(4):
        for shard in (0, 1):
            write(
                proto_run,
                second,
                {
                    "Ask": stream_label([30 + 7 * second + shard, 900 + second], events=3 + second, gap_ms=4 + shard),
                    "Tell": stream_label([5 + second], protocol="http/1.1"),
                    "Chat": ws_label([2 + second, 40 * shard + 1], sent=second, received=shard + 1),
                },
                shard,
            )
    windows = [{"start": 0, "end": 2, "seconds": 2}, {"start": 2, "end": 4, "seconds": 2}]
    reference: dict = {}  # each row decoded into Histograms and merged one by one, as finalize did before
    for second, label, *values in protocols.read(proto_run, protocols.in_windows(windows)):
        reference.setdefault((label, second // 2), protocols.Cell()).add_row(*values)

    def state(cell):
        hists = [(h._counts, h.count, h.sum, h.min, h.max) for h in (cell.ttfe, cell.gap, cell.events, cell.rtt)]
        return cell.hits, cell.protocols, cell.ws_sent, cell.ws_received, hists

    # Chunks of 5 rows and one open group at most: every chunk boundary and every closing path is crossed.
    monkeypatch.setattr(columns, "ROWS_PER_CHUNK", 5)
    monkeypatch.setattr(columns, "MAX_OPEN_GROUPS", 1)
    rows = protocols.read(proto_run, protocols.in_windows(windows), with_span=True)
    merged = protocols.merge_rows(rows, lambda row: (row[1], row[0] // 2))
    assert {k: state(c) for k, c in merged.items()} == {k: state(c) for k, c in reference.items()}
    assert len(merged) == 6 and merged["Ask", 1].events.sum == 2 * 2 * (5 + 6)  # shards × responses × events

    # No row is decoded on its own any more: the summary's histograms come from the chunks' columns.
    def one_by_one(blob):
        raise AssertionError("a protocol row's histogram decoded on its own")

    monkeypatch.setattr(protocols.Histogram, "from_bytes", staticmethod(one_by_one))
    summary = protocols.summary_of(proto_run, windows, {}, [0, 0])
    whole = protocols.Cell()
    for cell in reference.values():
        whole.add(cell)
    assert summary["totals"]["ttfe_ms"] == protocols._ms(whole.ttfe)
    assert summary["totals"]["rtt_ms"] == protocols._ms(whole.rtt) and summary["totals"]["ws_sent"] == 12


def test_the_snapshot_and_the_engine_carry_the_new_thresholds_only_when_set(plan):
    assert set(plan.to_engine_dict()["thresholds"]) == {"apd_ms", "p95_ms", "error_rate_pct", "min_pages_per_s"}
    plan.threshold_ttfe_p95_ms, plan.threshold_min_h2_share_pct = 800, 90.0
    snapshot = plan.to_engine_dict()
    assert snapshot["thresholds"]["ttfe_p95_ms"] == 800 and snapshot["thresholds"]["min_h2_share_pct"] == 90.0
    assert EnginePlan.from_dict(snapshot).thresholds.ttfe_p95_ms == 800


def test_the_rollup_keeps_the_figures_in_minute_rows(proto_run):
    for second in range(4):
        for shard in (0, 1):
            write(proto_run, second, {"Ask": stream_label([40, 70]), "Chat": ws_label([5], sent=1, received=2)}, shard)
    before = {p["label"]: p for p in protocols.range_figures(proto_run, 0, 4, {})}
    RunFigures.objects.create(run=proto_run, series={}, batches=[])

    run_rollup(proto_run.id)

    rows = list(ProtocolInterval.objects.filter(run=proto_run).order_by("label"))
    assert [(r.label, r.second, r.span_s, r.shard_no) for r in rows] == [("Ask", 0, 60, 0), ("Chat", 0, 60, 0)]
    after = {p["label"]: p for p in protocols.range_figures(proto_run, 0, 4, {})}
    assert after["Ask"]["stream"] == before["Ask"]["stream"] and after["Ask"]["stream"]["responses"] == 16
    assert after["Chat"]["websocket"]["sent"] == 8 and after["Chat"]["websocket"]["received"] == 16
    assert after["Chat"]["websocket"]["rtt_ms"] == before["Chat"]["websocket"]["rtt_ms"]


def test_a_comparison_weighs_the_stream_and_websocket_figures(plan):
    plan.profile_kind, plan.users, plan.hold, plan.ramp_up = "constant", 2, 2, 0
    plan.save()
    runs = []
    for ttfe in (50, 200):
        run = plan_run(plan, status="passed")
        for second in range(2):
            write(run, second, {"Ask": stream_label([ttfe, ttfe])})
        run.summary = analysis.summarize(run)
        run.save()
        runs.append(run)

    report = comparison.compare_sides(comparison.side_for_run(runs[0]), comparison.side_for_run(runs[1]))

    rows = {r.figure: r for r in report.protocols}
    assert set(rows) == {"Time to first event p95", "Gap between events p95", "HTTP/2 share"}
    assert rows["Time to first event p95"].verdict == "worse"
    assert rows["Gap between events p95"].verdict == "within noise"
    assert comparison.report_dict(report)["protocols"][0]["figure"] == "Time to first event p95"


def _spread_runs(plan, scales: tuple[float, ...]) -> list:
    """A run per scale: 40 streams (20 a second) whose first events take 40…135 ms × scale, and 40 WebSocket round
    trips of 4…23.5 ms × scale, spread evenly (a p95 with a real spread around it)."""
    plan.profile_kind, plan.users, plan.hold, plan.ramp_up = "constant", 2, 2, 0
    plan.save()
    runs = []
    for scale in scales:
        run = plan_run(plan, status="passed")
        for second in range(2):
            ttfe = [round((40 + 5 * i) * scale) for i in range(20)]
            rtt = [round((4 + 0.5 * (i + 20 * second)) * scale) for i in range(20)]
            write(run, second, {"Ask": stream_label(ttfe), "Chat": ws_label(rtt, sent=20, received=20)})
        run.summary = analysis.summarize(run)
        run.save()
        runs.append(run)
    return runs


def test_a_comparison_of_two_runs_weighs_a_stream_p95_against_its_own_sampling_noise(plan):
    # given: the same plan run twice; the second's first events and round trips 7 % slower
    before, after = _spread_runs(plan, (1.0, 1.07))

    report = comparison.compare_sides(comparison.side_for_run(before), comparison.side_for_run(after))

    # then: 7 % on a p95 of 40 streams is within the p95's sampling noise (a 5 % tolerance called it worse)
    rows = {r.figure: r for r in report.protocols}
    ttfe, rtt = rows["Time to first event p95"], rows["WebSocket round trip p95"]
    assert ttfe.comparison.after_mean > ttfe.comparison.before_mean * 1.05
    assert (ttfe.verdict, ttfe.comparison.method) == ("within noise", "percentile")
    assert ttfe.comparison.basis.startswith("one run on each side; the difference is ")
    assert "the sampling noise of a p95 of 40 and 40 streams" in ttfe.comparison.basis
    assert ttfe.comparison.basis.endswith("so it could be noise")
    assert ttfe.comparison.noise > abs(ttfe.comparison.difference)
    assert (rtt.verdict, rtt.comparison.method) == ("within noise", "percentile")
    assert "40 and 40 round trips" in rtt.comparison.basis
    # the HTTP/2 share is a count, not a percentile: the tolerance still decides it
    assert rows["HTTP/2 share"].comparison.method == "tolerance"
    api = {r["figure"]: r for r in comparison.report_dict(report)["protocols"]}
    assert api["Time to first event p95"]["verdict"] == "within noise"
    assert api["Time to first event p95"]["noise"] == ttfe.comparison.noise


def test_a_comparison_of_two_runs_calls_a_stream_p95_worse_beyond_its_sampling_noise(plan):
    before, after = _spread_runs(plan, (1.0, 2.0))

    report = comparison.compare_sides(comparison.side_for_run(before), comparison.side_for_run(after))

    rows = {r.figure: r for r in report.protocols}
    for figure in ("Time to first event p95", "WebSocket round trip p95"):
        row = rows[figure]
        assert (row.verdict, row.comparison.method) == ("worse", "percentile"), figure
        assert abs(row.comparison.difference) > row.comparison.noise > 0


def test_a_scrape_of_a_live_run_has_its_stream_and_websocket_gauges(client, proto_run):
    from datetime import timedelta

    from django.utils import timezone
    from prometheus_client.parser import text_string_to_metric_families

    from portal.runs.models import Run, RunShard

    proto_run.status, proto_run.start_at = Run.Status.RUNNING, timezone.now() - timedelta(seconds=20.5)
    proto_run.save()
    RunShard.objects.create(run=proto_run, shard_no=0, user_count=2, status=RunShard.Status.RUNNING)
    for second in range(20):
        write(proto_run, second, {"Ask": stream_label([40, 90]), "Chat": ws_label([6], sent=3, received=4)})

    body = client.get("/metrics").content.decode()

    samples = {
        (s.name, s.labels.get("label"), s.labels.get("direction")): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("plimsoll_page_ttfe_p95_seconds", "Ask", None)] == pytest.approx(0.090, rel=1e-3)
    assert samples[("plimsoll_page_stream_gap_p95_seconds", "Ask", None)] == pytest.approx(0.010, rel=1e-3)
    assert samples[("plimsoll_page_ws_rtt_p95_seconds", "Chat", None)] == pytest.approx(0.006, rel=1e-3)
    # over the last WINDOW_S complete seconds: 3 sent and 4 received in each
    assert samples[("plimsoll_page_ws_messages_per_second", "Chat", "sent")] == 3.0
    assert samples[("plimsoll_page_ws_messages_per_second", "Chat", "received")] == 4.0
    assert ("plimsoll_page_ttfe_p95_seconds", "Chat", None) not in samples


def test_after_the_rollup_a_range_counts_the_minutes_it_overlaps(proto_run):
    for second in range(70):
        write(proto_run, second, {"Ask": stream_label([40]), "Home": http1_label(1)})
    RunFigures.objects.create(run=proto_run, series={}, batches=[])
    run_rollup(proto_run.id)

    # seconds 30-65 overlap the minutes 0-59 and 60-119: both count, as the drill-down counts page rows
    figures = protocols.spans_figures(proto_run, [(30, 65)], protocols.page_hits(proto_run, [(30, 65)]))

    assert [(p["label"], p["stream"]["responses"]) for p in figures] == [("Ask", 70)]
    assert protocols.page_hits(proto_run, [(30, 65)]) == {"Ask": 70, "Home": 70}
