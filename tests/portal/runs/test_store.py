"""The results store (issue 9): rows written by the real ShardSink, figures computed once at finalize.

The reference is the analysis as it was before issue 9 (tests/portal/runs/reference_analysis.py:
every raw per-second row loaded and merged); the stored figures must equal it, for runs of each
profile, and for rows of the old JSON format.
"""

import json
import math
import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.history.comparison import compute_batches, run_batches
from portal.runs import analysis, selectors, services
from portal.runs.models import PageInterval, PageRollup, Run, RunFigures, RunShard, ShardInterval
from portal.runs.results import shards as shard_store
from portal.runs.results import sink
from portal.runs.services import lifecycle
from portal.stats import analysis as history_analysis
from tests.portal.runs import reference_analysis
from tests.portal.runs.factories import add_second
from workers.engine.histogram import Histogram

pytestmark = pytest.mark.django_db

LABELS = ["Browse: Home", "Browse: Search", "Browse: Article", "Log in"]
PROFILES = {
    "constant": {"kind": "constant", "users": 4, "hold": 90},
    "steps": {
        "kind": "steps",
        "levels": [
            {"users": 2, "ramp_up": 5, "hold": 30, "ramp_down": 0, "quiet": 0},
            {"users": 4, "ramp_up": 5, "hold": 30, "ramp_down": 5, "quiet": 0},
        ],
    },
    "arrival_rate": {"kind": "arrival_rate", "rate": 5, "rate_start": 1, "ramp_up": 10, "hold": 80, "max_users": 10},
}
# Short enough for a 90 s window to be analysed for degradation.
DEGRADATION = {"drop_pct": 40, "rise_pct": 50, "sustain_s": 10, "steady_s": 20}


def _hist(rng, n, median_us):
    h = Histogram()
    for _ in range(n):
        h.record(rng.lognormvariate(0, 0.5) * median_us)
    return h


def _report(rng, second, *, slow_from=None):
    """One shard's report of one second: realistic histograms, now and then an error."""
    labels = {}
    for i, label in enumerate(LABELS):
        n = rng.randint(0, 12)
        errors = 1 if rng.random() < 0.1 else 0
        median = 20_000 * (i + 1) * (4 if slow_from is not None and second >= slow_from else 1)
        hist = _hist(rng, n, median)
        connect = _hist(rng, rng.randint(0, 2), 300)
        labels[label] = {
            "pages": n + errors,
            "hits": 3 * n + errors,
            "errors": errors,
            "errors_by_kind": {"http_status": errors} if errors else {},
            "error_samples": {"http_status": "HTTP 500 on /search"} if errors else {},
            "bytes_in": 5000 * n,
            "bytes_out": 300 * n,
            "hist": hist.to_dict(),
            "connect_hist": connect.to_dict(),
            "ttfb_hist": _hist(rng, n, median // 2).to_dict(),
        }
    return {
        "second": second,
        "active_users": 4,
        "iterations_started": 2,
        "iterations_completed": 2,
        "iterations_dropped": rng.randint(0, 1),
        "loop_lag_ms": {"p99": 1.5, "max": 3.0},
        "cpu_pct": 20.0,
        "labels": labels,
    }


def _record(run, profile, *, shards=2, slow_from=None, seed=1):
    """Writes the run's whole profile through the real sink, shard by shard, with one repeated flush."""
    run.plan_snapshot["profile"] = profile
    run.analysis_settings = {"degradation": DEGRADATION}
    run.status = Run.Status.RUNNING
    run.start_at = timezone.now()
    run.shard_count = shards
    run.save()
    run = Run.objects.get(id=run.id)
    rng = random.Random(seed)
    for n in range(shards):
        RunShard.objects.create(run=run, shard_no=n, user_count=2, status=RunShard.Status.RUNNING)
        sink = services.ShardSink(run.id, n)
        for second in range(int(run.planned_duration)):
            report = _report(rng, second, slow_from=slow_from)
            sink(report)
            if second == 7:
                sink(report)  # a retried flush replaces its rows
    return run


def _finish(run):
    RunShard.objects.filter(run=run).update(status=RunShard.Status.DONE)
    services.run_finalize(run.id)
    return Run.objects.get(id=run.id)


def _json(value):
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("kind", sorted(PROFILES))
def test_stored_figures_equal_the_figures_of_the_raw_rows(run, kind):
    run = _record(run, PROFILES[kind])
    expected_summary = _json(reference_analysis.summarize(run))
    expected_series = _json(reference_analysis.series(run))
    expected_batches = _json(list(compute_batches(run).items()))

    run = _finish(run)

    assert run.status in (Run.Status.PASSED, Run.Status.FAILED, Run.Status.FINISHED)
    assert run.summary == expected_summary
    assert run.summary["pages"] and run.summary["totals"]["p95_ms"] is not None
    assert {k: v for k, v in analysis.series(run).items() if k != "since"} == expected_series
    assert RunFigures.objects.get(run=run).batches == expected_batches
    if kind == "steps":
        assert len(run.summary["windows"]) == 2 and run.summary["capacity"]["levels"]
    else:
        assert run.summary["degradation"]["analysed"] is True


def test_percentiles_equal_those_of_the_engines_own_histograms(run):
    """Independent of any reader: merge what the engine recorded, compare with the report's page table."""
    run = _record(run, PROFILES["constant"], shards=1)
    window = range(0, 90)
    merged = {label: Histogram() for label in LABELS}
    for row in PageInterval.objects.filter(run=run, second__in=list(window)):
        merged[row.label].merge(Histogram.from_bytes(row.hist_bin))

    run = _finish(run)

    for page in run.summary["pages"]:
        h = merged[page["label"]]
        assert page["p95_ms"] == round(h.percentile(95) / 1000, 2)
        assert page["p99_ms"] == round(h.percentile(99) / 1000, 2)
        assert page["apd_ms"] == round(h.mean / 1000, 2)


def test_a_degradation_and_the_batch_verdict_are_the_same_as_from_the_raw_rows(run):
    run = _record(run, PROFILES["constant"], slow_from=50)
    expected = _json(reference_analysis.summarize(run))["degradation"]
    batches = compute_batches(run)

    run = _finish(run)

    assert run.summary["degradation"] == expected
    assert expected["degraded"] and 45 <= expected["apd_onset_s"] <= 55
    assert run_batches(run) == {key: _json(figures) for key, figures in batches.items()}


def test_rows_of_the_old_json_format_are_still_read(run):
    # given: a run recorded before issue 9 (JSON histograms, no shard totals)
    for s in range(0, 7):
        add_second(run, s, iterations=2, labels={"Browse: Home": ([10.0, 30.0], {}), "Log in": ([50.0], {"x": 1})})
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.RUNNING)
    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING, start_at=timezone.now())
    run = Run.objects.get(id=run.id)
    expected = _json(reference_analysis.summarize(run))
    live = selectors.run_live_figures(run)

    run = _finish(run)

    assert live["pages"] == 7 * 4 and live["errors"] == 7
    assert run.summary == expected
    assert run.summary["totals"]["apd_ms"] == pytest.approx(30.0, rel=0.002)
    assert analysis.series(run)["pages_per_s"][:7] == [4.0] * 7


def test_the_live_figures_come_from_the_shards_running_totals(run):
    run = _record(run, PROFILES["constant"], seed=3)
    sums = {
        "pages": sum(PageInterval.objects.values_list("pages", flat=True)),
        "errors": sum(PageInterval.objects.values_list("errors", flat=True)),
    }
    # A restarted sink (a new process) continues the totals, and rewriting a second does not add it twice.
    last = ShardInterval.objects.filter(shard_no=0).order_by("-second").first()
    services.ShardSink(run.id, 0)(_report(random.Random(3), last.second))
    rewritten = ShardInterval.objects.get(id=last.id)
    sums_after = sum(PageInterval.objects.values_list("pages", flat=True))

    live = selectors.run_live_figures(run)

    assert sums["pages"] > 0
    assert live["pages"] == sums_after and live["errors"] >= 0
    assert (
        rewritten.pages_total - rewritten.pages
        == ShardInterval.objects.get(shard_no=0, second=last.second - 1).pages_total
    )


def test_a_live_poll_reads_only_the_new_seconds(alice_client, run, django_assert_max_num_queries):
    run = _record(run, PROFILES["constant"])
    url = reverse("runs:series", args=[run.code])
    full = alice_client.get(url).json()

    with django_assert_max_num_queries(12):
        part = alice_client.get(url, {"since": 80}).json()

    assert full["active"] and full["since"] is None and full["bucket_s"] == 1
    assert part["since"] == 80 and part["t"] == list(range(80, 90))
    for key in ("pages_per_s", "apd_ms", "p95_ms", "users", "errors_per_s"):
        assert part[key] == full[key][80:], key


CHART_KEYS = (
    "t",
    "users",
    "pages_per_s",
    "hits_per_s",
    "errors_per_s",
    "bytes_per_s",
    "dropped_per_s",
    "apd_ms",
    "p95_ms",
    "apd_max_ms",
    "pages_per_s_min",
)


@pytest.mark.parametrize("points", [720, 30])  # one second per point; several seconds per point
@pytest.mark.parametrize("merged", ["all", "some", "none"])
def test_a_live_chart_reads_the_shards_merged_rows_and_equals_the_label_rows(
    alice_client, run, monkeypatch, points, merged
):
    # given: a live run on two shards whose shard rows carry all labels' page durations merged, or
    # whose later (or all) rows were written before they did (those are read from the label rows)
    run = _record(run, PROFILES["constant"])
    if merged != "all":
        ShardInterval.objects.filter(run=run, second__gte=0 if merged == "none" else 60).update(hist_bin=None)
    monkeypatch.setattr(analysis, "MAX_POINTS", points)
    url = reverse("runs:series", args=[run.code])

    with CaptureQueriesContext(connection) as queries:
        data = alice_client.get(url).json()
        since = data["t"][-3]
        part = alice_client.get(url, {"since": since}).json()

    # then: the same chart as the reference's from every label row, p95 included
    monkeypatch.setattr(reference_analysis, "MAX_POINTS", math.ceil(90 / data["bucket_s"]))
    expected = _json(reference_analysis.series(run))
    assert data["bucket_s"] == expected["bucket_s"] and (data["bucket_s"] > 1) == (points == 30)
    for key in CHART_KEYS:
        assert data[key] == expected[key], key
        assert part[key] == data[key][-3:], key
    label_reads = [q for q in queries.captured_queries if '"runs_pageinterval"."hist_bin"' in q["sql"]]
    assert bool(label_reads) == (merged != "all")


@pytest.mark.parametrize("since", ["soon", "-5", "²", "1" * 40, ""])
def test_a_bad_since_is_refused_with_the_reason(alice_client, run, since):
    bad = alice_client.get(reverse("runs:series", args=[run.code]), {"since": since})

    assert bad.status_code == 400 and "since" in bad.json()["error"]


def test_an_outsider_cannot_poll_a_run(charlie_client, run):
    assert charlie_client.get(reverse("runs:series", args=[run.code]), {"since": 0}).status_code == 404


def _stuck(run, **fields):
    Run.objects.filter(id=run.id).update(finishing_at=timezone.now() - timedelta(hours=1), **fields)


def _sent_retries() -> list[int]:
    """Run ids of the finalize retries waiting on the real broker (taken off it; no worker runs here)."""
    from workers.celery import app

    ids = []
    with app.connection_for_read() as conn, conn.SimpleQueue(app.conf.task_default_queue) as queue:
        while True:
            try:
                message = queue.get(block=False)
            except queue.Empty:
                return ids
            message.ack()
            if message.headers.get("task") == "workers.tasks.finalize_retry_task":
                ids.append(message.decode()[0][0])


def _watchdog():
    """The watchdog's tick, then the finalize retries it sent, run as a worker would run them."""
    from workers.tasks import finalize_retry_task

    _sent_retries()  # earlier tests' messages
    services.watchdog()
    sent = _sent_retries()
    for run_id in sent:
        finalize_retry_task(run_id)
    return sent


def test_a_finalize_that_failed_is_retried_and_completes(run, settings):
    run = _record(run, PROFILES["constant"], shards=1)
    good = PageInterval.objects.filter(second=30).first()
    PageInterval.objects.filter(id=good.id).update(hist_bin=b"\x02\xff")  # a row no reader can decode

    run = _finish(run)

    assert run.status == Run.Status.FINISHING and "ValueError" in run.error_message
    # The row comes back (a transient fault); a killed finalize leaves the same state: finishing, attempt 1.
    PageInterval.objects.filter(id=good.id).update(hist_bin=good.hist_bin)
    _stuck(run)
    from workers.tasks import finalize_retry_task

    _sent_retries()
    services.watchdog()
    run.refresh_from_db()
    # The watchdog only claims the retry and sends it as a task of its own; a worker computes it.
    assert (run.status, run.finalize_attempts) == (Run.Status.FINISHING, 2)
    assert _sent_retries() == [run.id]
    finalize_retry_task(run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.FINISHED and run.finalize_attempts == 2
    assert run.error_message == "" and run.summary["totals"]["pages"] > 0
    assert RunFigures.objects.filter(run=run).exists()


def test_a_finalize_that_keeps_failing_ends_the_run_in_error_with_the_reason(run, settings):
    settings.PLIMSOLL_FINALIZE_ATTEMPTS = 3
    run = _record(run, PROFILES["constant"], shards=1)
    PageInterval.objects.filter(second=30, label=LABELS[0]).update(hist_bin=b"\x02\xff")
    run = _finish(run)

    for attempt in (2, 3):
        _stuck(run)
        _watchdog()
        run.refresh_from_db()
        assert (run.status, run.finalize_attempts) == (Run.Status.FINISHING, attempt)
    _watchdog()  # not yet: the last attempt has not timed out
    assert Run.objects.get(id=run.id).status == Run.Status.FINISHING
    _stuck(run)
    _watchdog()

    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert "after 3 attempts" in run.error_message and "binary histogram" in run.error_message
    assert run.finished_at is not None and PageInterval.objects.filter(run=run).exists()


def test_a_finalize_retry_delivered_twice_computes_once(run):
    run = _record(run, PROFILES["constant"], shards=1)
    RunShard.objects.filter(run=run).update(status=RunShard.Status.DONE)
    Run.objects.filter(id=run.id).update(status=Run.Status.FINISHING, finalize_attempts=1)
    _stuck(run)

    assert _watchdog() == [run.id]
    first = Run.objects.get(id=run.id)
    figures = RunFigures.objects.get(run=run).created_at
    services.finalize_retry(run.id)  # a second delivery of the same task

    again = Run.objects.get(id=run.id)
    assert first.status == again.status == Run.Status.FINISHED and again.finalize_attempts == 2
    assert again.finished_at == first.finished_at and RunFigures.objects.get(run=run).created_at == figures


def test_a_run_finishing_for_a_short_while_is_left_alone(run):
    run = _record(run, PROFILES["constant"], shards=1)
    Run.objects.filter(id=run.id).update(status=Run.Status.FINISHING, finishing_at=timezone.now(), finalize_attempts=1)

    _watchdog()

    assert Run.objects.get(id=run.id).status == Run.Status.FINISHING


def test_after_finalize_the_label_rows_are_rolled_up_per_minute_and_nothing_is_lost(run, settings):
    run = _record(run, PROFILES["constant"])
    raw = list(PageInterval.objects.filter(run=run))
    whole = {label: Histogram() for label in LABELS}
    for row in raw:
        whole[row.label].merge(Histogram.from_bytes(row.hist_bin))
    run = _finish(run)
    settings.PLIMSOLL_ROLLUP_AFTER = 3600
    services.watchdog()
    assert PageInterval.objects.filter(run=run).count() == len(raw)  # kept per second for an hour
    assert not ShardInterval.objects.filter(run=run, hist_bin=None).exists()
    Run.objects.filter(id=run.id).update(finished_at=timezone.now() - timedelta(hours=2))

    services.watchdog()

    assert not PageInterval.objects.filter(run=run).exists()
    # the shards' merged durations (only a live chart reads them) go too; their per-second totals stay
    shard_rows = ShardInterval.objects.filter(run=run)
    assert shard_rows.count() == 180 and not shard_rows.exclude(hist_bin=None).exists()
    rollups = list(PageRollup.objects.filter(run=run))
    assert {(r.second, r.span_s) for r in rollups} == {(0, 60), (60, 60)}
    assert sum(r.pages for r in rollups) == sum(r.pages for r in raw) == run.summary["whole_run"]["pages"]
    assert sum(r.errors for r in rollups) == sum(r.errors for r in raw)
    assert sum(r.connect_count for r in rollups) == sum(r.connect_count for r in raw)
    for label in LABELS:
        merged = Histogram()
        for r in rollups:
            if r.label == label:
                merged.merge(Histogram.from_bytes(r.hist_bin))
        assert merged == whole[label]
    # Each minute of each page holds exactly what its per-second rows of every shard held.
    expected = {}
    for row in sorted(raw, key=lambda r: (r.second, r.shard_no, r.label)):
        cell = expected.setdefault(
            (row.second // 60 * 60, row.label), [Histogram(), Histogram(), 0, 0, 0, 0, 0, 0, {}, {}]
        )
        for i, binary in ((0, row.hist_bin), (1, row.ttfb_bin)):
            if binary is not None:
                cell[i].merge(Histogram.from_bytes(binary))
        for i, value in enumerate((row.pages, row.hits, row.errors, row.bytes_in, row.bytes_out, row.connect_sum_us)):
            cell[2 + i] += value
        for kind, n in row.errors_by_kind.items():
            cell[8][kind] = cell[8].get(kind, 0) + n
        for kind, sample in row.error_samples.items():
            cell[9].setdefault(kind, sample)
    assert {
        (r.second, r.label): [
            Histogram.from_bytes(r.hist_bin),
            Histogram.from_bytes(r.ttfb_bin),
            r.pages,
            r.hits,
            r.errors,
            r.bytes_in,
            r.bytes_out,
            r.connect_sum_us,
            r.errors_by_kind,
            r.error_samples,
        ]
        for r in rollups
    } == expected
    figures = RunFigures.objects.get(run=run).series
    lifecycle._finalize(run.id)  # a repeated finalize (a duplicate retry) changes nothing
    assert services.run_rollup(run.id) == 0  # nor does a repeated roll-up
    again = PageRollup.objects.filter(run=run).order_by("second", "label")
    assert [(r.second, r.label, r.pages, bytes(r.hist_bin)) for r in again] == sorted(
        (r.second, r.label, r.pages, bytes(r.hist_bin)) for r in rollups
    )
    assert RunFigures.objects.get(run=run).series == figures
    assert Run.objects.get(id=run.id).summary == run.summary


def test_the_kept_per_second_totals_find_the_same_degradation_after_roll_up(run):
    run = _record(run, PROFILES["constant"], slow_from=50)
    run = _finish(run)
    assert services.run_rollup(run.id) > 0
    stored = run.summary["degradation"]

    # Recomputed from what the roll-up keeps: the shards' per-second totals.
    end = stored["window"][1]
    pages, total_us, count = [0] * end, [0] * end, [0] * end
    for s in ShardInterval.objects.filter(run=run, second__lt=end):
        pages[s.second] += s.pages
        total_us[s.second] += s.latency_sum_us
        count[s.second] += s.latency_count
    apd = [round(total_us[s] / count[s] / 1000, 3) if count[s] else None for s in range(end)]
    d = history_analysis.degradation(
        [float(p) for p in pages], apd, start=stored["window"][0], **{k: DEGRADATION[k] for k in DEGRADATION}
    )

    assert not PageInterval.objects.filter(run=run).exists()
    assert run_batches(Run.objects.get(id=run.id)) == {
        key: figures for key, figures in RunFigures.objects.get(run=run).batches
    }
    assert stored["degraded"] and (d.onset_s, d.kind, d.apd_onset_s) == (
        stored["onset_s"],
        stored["kind"],
        stored["apd_onset_s"],
    )


def test_a_live_first_load_reads_rows_of_each_second_only_for_the_recent_seconds(alice_client, run, monkeypatch):
    run = _record(run, PROFILES["constant"])
    expected = _json(reference_analysis.series(run))
    monkeypatch.setattr(analysis, "LIVE_DETAIL_S", 30)

    with CaptureQueriesContext(connection) as queries:
        data = alice_client.get(reverse("runs:series", args=[run.code])).json()

    # the shards' rows before the detail are never read one by one: their buckets are the differences
    # of the running totals at the buckets' edges (two seconds per bucket: here, buckets of one second)
    row_reads = [q["sql"] for q in queries.captured_queries if '"runs_shardinterval"."active_users"' in q["sql"]]
    detail = [sql for sql in row_reads if '"runs_shardinterval"."second" >= 59' in sql]
    edges = [sql for sql in row_reads if '"runs_shardinterval"."second" IN (' in sql]
    assert len(detail) == 1 and len(edges) == 1 and len(row_reads) == 2, row_reads
    assert edges[0].count(",", edges[0].index("IN (")) == 59 - 1  # seconds 0 … 58, nothing later
    assert not [q for q in queries.captured_queries if "SUM(" in q["sql"]]
    assert data["t"] == expected["t"] == list(range(90))
    early, recent = slice(0, 59), slice(59, 90)  # detail from (89 - 30) on
    for key in ("pages_per_s", "errors_per_s", "users", "dropped_per_s"):
        assert data[key] == expected[key], key
    assert data["apd_ms"][early] == expected["apd_ms"][early]  # from the shards' latency sums
    assert data["p95_ms"][early] == [None] * 59 and data["hits_per_s"][early] == [None] * 59
    for key in ("p95_ms", "hits_per_s", "bytes_per_s", "apd_ms"):
        assert data[key][recent] == expected[key][recent], key


def _early_equal(alice_client, run, monkeypatch):
    """The first load's buckets before the detail (30 s) equal the reference's, with buckets of several seconds."""
    monkeypatch.setattr(analysis, "MAX_POINTS", 30)
    monkeypatch.setattr(analysis, "LIVE_DETAIL_S", 30)
    data = alice_client.get(reverse("runs:series", args=[run.code])).json()
    bucket = data["bucket_s"]
    monkeypatch.setattr(reference_analysis, "MAX_POINTS", math.ceil(90 / bucket))
    expected = _json(reference_analysis.series(run))
    early = (89 - 30) // bucket
    assert bucket > 1 and expected["bucket_s"] == bucket and data["t"] == expected["t"]
    for key in ("pages_per_s", "errors_per_s", "users", "dropped_per_s", "apd_ms"):
        assert data[key][:early] == expected[key][:early], key
    return data, expected, early


def test_a_live_first_load_of_wide_buckets_gets_the_early_ones_from_running_totals(alice_client, run, monkeypatch):
    # given: 90 s on two shards, charted in buckets of several seconds, label rows read for the last 30 s only
    run = _record(run, PROFILES["constant"])

    data, expected, early = _early_equal(alice_client, run, monkeypatch)

    # then: the early buckets (before the detail) are the shards' totals, bucket by bucket, as the reference's
    assert data["t"] == list(range(0, 90, data["bucket_s"]))
    for key in ("pages_per_s", "errors_per_s", "users", "dropped_per_s"):
        assert data[key] == expected[key], key
    assert data["p95_ms"][:early] == [None] * early and data["p95_ms"][early:] == expected["p95_ms"][early:]


def test_the_sinks_running_totals_count_a_rewritten_second_once(run):
    run = _record(run, PROFILES["constant"])  # second 7 is flushed twice
    for n in (0, 1):
        rows = ShardInterval.objects.filter(run=run, shard_no=n).order_by("second")
        last = rows.last()
        assert last.latency_sum_total == sum(r.latency_sum_us for r in rows) > 0
        assert last.latency_count_total == sum(r.latency_count for r in rows) > 0
        assert last.dropped_total == sum(r.iterations_dropped for r in rows) > 0


@pytest.mark.parametrize("case", ["gap", "rows_without_running_totals", "too_many_lookups"])
def test_a_live_first_load_gets_the_same_early_buckets_when_the_edges_are_not_all_there(
    alice_client, run, monkeypatch, case
):
    # given: a run whose shard 1 lost seconds 20-40 (a handoff gap: bucket edges missing), or whose
    # rows were written before the running totals existed, or with more missing edges than are looked up
    real = services.interval_write

    def gap(run_id, shard_no, report):
        if shard_no != 1 or not 20 <= report["second"] <= 40:
            real(run_id, shard_no, report)

    monkeypatch.setattr(sink, "interval_write", gap)
    run = _record(run, PROFILES["constant"])
    assert not ShardInterval.objects.filter(run=run, shard_no=1, second=30).exists()
    if case == "rows_without_running_totals":
        ShardInterval.objects.filter(run=run, second__lte=10).update(latency_sum_total=None)
    if case == "too_many_lookups":
        monkeypatch.setattr(shard_store, "EARLY_LOOKUPS_MAX", 2)

    with CaptureQueriesContext(connection) as queries:
        _early_equal(alice_client, run, monkeypatch)

    # then: the same buckets; the edges are looked up, or the rows summed when the totals can't serve
    summed = [q for q in queries.captured_queries if "SUM(" in q["sql"]]
    assert bool(summed) == (case != "gap")


def test_a_live_first_load_shows_a_ramps_peak_users_in_each_early_bucket(alice_client, run, monkeypatch):
    # given: users that fall by one a second on each shard, then rise again (ramps down and up)
    real = services.interval_write

    def ramp(run_id, shard_no, report):
        real(run_id, shard_no, {**report, "active_users": 1 + abs(30 - report["second"])})

    monkeypatch.setattr(sink, "interval_write", ramp)
    run = _record(run, PROFILES["constant"])
    # then: each early bucket shows its peak second's users (the larger of its two edges), as the reference
    data, _, early = _early_equal(alice_client, run, monkeypatch)
    assert len(set(data["users"][:early])) > 5


def test_a_run_recorded_before_the_store_gets_its_figures_stored_by_a_command(run):
    from django.core.management import call_command

    for s in range(0, 7):
        add_second(run, s, iterations=2, labels={"Browse: Home": ([10.0, 30.0], {})})
    Run.objects.filter(id=run.id).update(status=Run.Status.PASSED, summary={"totals": {}}, finished_at=timezone.now())
    run = Run.objects.get(id=run.id)
    expected_series = _json(reference_analysis.series(run))
    expected_batches = compute_batches(run)

    call_command("store_run_figures")
    call_command("store_run_figures")  # twice: nothing left to do

    figures = RunFigures.objects.get(run=run)
    assert figures.series == expected_series
    assert run_batches(run) == {key: _json(value) for key, value in expected_batches.items()}
    assert Run.objects.get(id=run.id).summary == {"totals": {}}  # the summary is left as it was
    assert services.run_rollup(run.id) == 7  # and now its rows can be rolled up, into the binary form
    rolled = PageRollup.objects.get(run=run)
    assert (rolled.pages, Histogram.from_bytes(rolled.hist_bin).count) == (14, 14)
