import pytest

from portal.runs import analysis
from portal.runs.models import Run, run_digest
from portal.runs.summary import RunSummary
from tests.portal.runs.factories import add_second

pytestmark = pytest.mark.django_db


def test_summary_uses_only_the_measurement_window(run):
    # given: ramp_up 1 s, hold 5 s → window = seconds 1..5; second 0 and 6 are outside
    add_second(run, 0, labels={"Browse: Home": ([1000.0] * 5, {})})  # slow, during ramp-up
    for s in range(1, 6):
        add_second(run, s, iterations=2, labels={"Browse: Home": ([10.0, 20.0], {})})
    add_second(run, 6, labels={"Browse: Home": ([5000.0], {"timeout": 1})})

    # when
    summary = analysis.summarize(run)

    # then
    assert summary["window"] == {"start": 1, "end": 6, "seconds": 5, "note": ""}
    totals = summary["totals"]
    assert totals["pages"] == 10
    assert totals["pages_per_s"] == 2.0
    assert totals["apd_ms"] == pytest.approx(15.0, rel=0.002)
    assert totals["max_ms"] == pytest.approx(20.0, rel=0.002)
    assert totals["errors"] == 0
    assert totals["transactions_per_s"] == 2.0
    assert summary["whole_run"]["pages"] == 17  # charts and totals of the whole run still see everything


def test_percentiles_come_from_merged_histograms_not_averaged_percentiles(run):
    # given: shard 0 is fast, shard 1 is slow in the same seconds
    for s in range(1, 6):
        add_second(run, s, shard_no=0, labels={"Browse: Home": ([10.0] * 9, {})})
        add_second(run, s, shard_no=1, labels={"Browse: Home": ([1000.0], {})})

    # when
    totals = analysis.summarize(run)["totals"]

    # then: 10 % of pages took 1 s → p95 is 1 s, p50 is 10 ms
    assert totals["p50_ms"] == pytest.approx(10.0, rel=0.002)
    assert totals["p95_ms"] == pytest.approx(1000.0, rel=0.002)
    assert totals["apd_ms"] == pytest.approx((9 * 10 + 1000) / 10, rel=0.002)


def test_errors_are_grouped_by_kind_with_a_sample_and_their_pages(run):
    for s in range(1, 6):
        add_second(
            run,
            s,
            labels={
                "Browse: Home": ([10.0], {"http_status": 1}),
                "Browse: Search": ([10.0], {"http_status": 1, "timeout": 1}),
            },
        )

    summary = analysis.summarize(run)

    assert summary["errors"][0] == {
        "kind": "http_status",
        "count": 10,
        "sample": "sample http_status",
        "pages": ["Browse: Home", "Browse: Search"],
    }
    assert summary["errors"][1]["kind"] == "timeout"
    assert summary["totals"]["error_rate_pct"] == pytest.approx(100 * 15 / 25)


def test_thresholds_judge_the_window(run):
    run.plan_snapshot["thresholds"] = {"apd_ms": 100, "p95_ms": 15, "error_rate_pct": 1.0}
    for s in range(1, 6):
        add_second(run, s, labels={"Browse: Home": ([10.0, 20.0], {})})

    summary = analysis.summarize(run)

    results = {t["name"]: t["passed"] for t in summary["thresholds"]}
    assert results == {"APD": True, "p95": False, "Error rate": True}
    assert summary["verdict"] == "failed"


def test_a_minimum_throughput_is_judged_as_a_floor(run):
    # given: 2 pages/s in the window, against "pages/s at least 3" (and an APD ceiling that holds)
    run.plan_snapshot["thresholds"] = {"apd_ms": 100, "min_pages_per_s": 3}
    for s in range(1, 6):
        add_second(run, s, labels={"Browse: Home": ([10.0, 20.0], {})})

    summary = analysis.summarize(run)

    assert [(t["name"], t["op"], t["actual"], t["passed"]) for t in summary["thresholds"]] == [
        ("APD", "≤", pytest.approx(15.0, rel=0.002), True),
        ("Pages/s", "≥", 2.0, False),
    ]
    assert summary["verdict"] == "failed"


def test_no_thresholds_means_no_verdict(run):
    run.plan_snapshot["thresholds"] = {"apd_ms": None, "p95_ms": None, "error_rate_pct": None}
    add_second(run, 2, labels={"Browse: Home": ([10.0], {})})
    assert analysis.summarize(run)["verdict"] is None


def test_a_latency_threshold_cannot_hold_when_no_page_succeeded(run):
    run.plan_snapshot["thresholds"] = {"apd_ms": 100, "p95_ms": None, "error_rate_pct": None}
    add_second(run, 2, labels={"Browse: Home": ([], {"connection_refused": 3})})
    summary = analysis.summarize(run)
    assert summary["thresholds"][0]["actual"] is None
    assert summary["verdict"] == "failed"


def test_a_run_cut_short_reports_on_what_ran(run):
    # given: the run was stopped during its ramp-up (window 1..6 never reached beyond second 0)
    add_second(run, 0, labels={"Browse: Home": ([10.0, 30.0], {})})

    summary = analysis.summarize(run)

    assert summary["window"]["note"].startswith("The run ended before its measurement window")
    assert summary["totals"]["pages"] == 2


def test_series_sums_shards_per_second_and_merges_latency(run):
    add_second(run, 0, shard_no=0, users=3, labels={"A": ([10.0], {})})
    add_second(run, 0, shard_no=1, users=4, labels={"A": ([30.0], {"timeout": 1})})
    add_second(run, 1, shard_no=0, users=3)

    data = analysis.series(run)

    assert data["t"] == [0, 1]
    assert data["users"] == [7, 3]
    assert data["pages_per_s"] == [3, 0]
    assert data["errors_per_s"] == [1, 0]
    assert data["apd_ms"][0] == pytest.approx(20.0, rel=0.002)
    assert data["apd_ms"][1] is None


def test_series_of_a_long_run_is_downsampled(run):
    from portal.runs.models import ShardInterval

    ShardInterval.objects.bulk_create(
        [ShardInterval(run=run, shard_no=0, second=s, active_users=s % 7) for s in range(3000)]
    )
    data = analysis.series(run)
    assert len(data["t"]) <= analysis.MAX_POINTS
    assert data["bucket_s"] == 5
    assert data["users"][0] == 4  # the most users in seconds 0..4


def steps_run(run, levels):
    run.plan_snapshot["profile"] = {"kind": "steps", "levels": levels}
    run.plan_snapshot["thresholds"] = {"apd_ms": 100, "p95_ms": None, "error_rate_pct": None}
    run.save()
    return run


def test_a_steps_run_is_summarized_per_level(run):
    # given: two levels; level 1 holds 1–6, ramps down 6–8, is quiet 8–9; level 2 starts at 9 and holds 10–15
    level = {"users": 2, "ramp_up": 1, "hold": 5, "ramp_down": 2, "quiet": 1}
    steps_run(run, [level, dict(level, users=4)])
    for s in range(1, 6):
        add_second(run, s, users=2, labels={"A": ([20.0, 20.0], {})})
    for s in range(6, 10):
        add_second(run, s, users=1, labels={"A": ([999.0], {})})  # ramp-down, quiet, ramp-up: not measured
    for s in range(10, 15):
        add_second(run, s, users=4, labels={"A": ([300.0] * 4, {})})

    summary = analysis.summarize(run)

    # then: one window per level, each judged on its own; the run fails because level 2 did
    assert [(w["label"], w["start"], w["end"]) for w in summary["windows"]] == [
        ("Level 1: 2 users", 1, 6),
        ("Level 2: 4 users", 10, 15),
    ]
    first, second = summary["windows"]
    assert (first["totals"]["users"], first["totals"]["pages_per_s"]) == (2, 2.0)
    assert first["totals"]["apd_ms"] == pytest.approx(20.0, rel=0.002)
    assert second["totals"]["apd_ms"] == pytest.approx(300.0, rel=0.002)
    assert (first["verdict"], second["verdict"], summary["verdict"]) == ("passed", "failed", "failed")
    assert summary["totals"]["pages"] == 30  # both windows, none of the seconds between them


def test_a_steps_run_stopped_during_level_2_keeps_level_1_and_cuts_level_2(run):
    level = {"users": 2, "ramp_up": 1, "hold": 5, "ramp_down": 2, "quiet": 1}
    steps_run(run, [level, dict(level, users=4)])
    for s in range(1, 12):
        add_second(run, s, labels={"A": ([20.0], {})})

    windows = analysis.summarize(run)["windows"]

    assert [(w["start"], w["end"]) for w in windows] == [(1, 6), (10, 12)]
    assert "cut to 2 s" in windows[1]["note"]


def test_a_saturated_generator_is_reported(run):
    # given: the generator's loop lagged 120 ms for 4 seconds in a row inside the window
    for s in range(1, 6):
        add_second(run, s, labels={"A": ([10.0], {})}, lag_ms=120.0 if s > 1 else 1.0, cpu=95.0 if s > 1 else 20.0)

    generator = analysis.summarize(run)["generator"]

    assert generator["loop_lag_p99_ms"] == 120.0 and generator["cpu_pct_max"] == 95.0
    assert generator["saturated"] and "saturated" in generator["saturated"]


def test_a_generator_that_lagged_short_of_saturation_carries_the_doubt(run, alice_client):
    # given: one second of 74 ms loop lag p99 in the window: too little to call the generator saturated
    for s in range(1, 6):
        add_second(run, s, labels={"A": ([10.0], {})}, lag_ms=74.0 if s == 3 else 2.0, cpu=40.0)

    run.summary = analysis.summarize(run)
    run.status = Run.Status.FINISHED
    run.save()
    generator = run.summary["generator"]

    # then: the summary (the API's and the exports'), and the report, say so: saturated is not None beside
    # a loop-lag p99 of 74 ms, it carries the doubt, and lagged says it fell short of saturation
    assert generator["loop_lag_p99_ms"] == 74.0
    assert generator["lagged"].startswith("the load generator lagged in 1 of 5 s: event-loop lag p99 up to 74 ms")
    assert generator["saturated"] == generator["lagged"]
    assert RunSummary.of(run).saturated == generator["lagged"] and not RunSummary.of(run).saturation_sustained
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'id="generator-lagged"' in page and "The load generator lagged in 1 of 5 s" in page
    assert 'id="saturated"' not in page
    api = alice_client.get(f"/api/v1/runs/{run.code}/summary.json").json()
    assert api["summary"]["generator"]["saturated"] == api["summary"]["generator"]["lagged"] == generator["lagged"]
    # and: the doubt is on its figures' highest percentiles; the run still counts in trends and baselines
    assert run.doubts == [] and run.counts
    assert run_digest(RunSummary.of(run), run.plan_snapshot)["generator"]["lagged"] == generator["lagged"]


def test_a_summary_written_before_saturated_carried_the_lag_reads_it_from_lagged(run):
    run.summary = {"generator": {"loop_lag_p99_ms": 74.0, "saturated": None, "lagged": "the load generator lagged"}}

    assert RunSummary.of(run).saturated == "the load generator lagged"
    assert not RunSummary.of(run).saturation_sustained


def test_a_saturated_generator_keeps_its_run_out_of_comparisons(run):
    for s in range(1, 6):
        add_second(run, s, labels={"A": ([10.0], {})}, lag_ms=120.0 if s > 1 else 1.0, cpu=40.0)
    run.summary = analysis.summarize(run)
    run.status = Run.Status.FINISHED

    assert run.summary["generator"]["lagged"] is None and RunSummary.of(run).saturation_sustained
    assert run.doubts == [f"the load generator was saturated ({run.summary['generator']['saturated']})"]
    assert not run.counts


def test_a_healthy_generator_is_not_flagged(run):
    for s in range(1, 6):
        add_second(run, s, labels={"A": ([10.0], {})}, lag_ms=2.0, cpu=40.0)
    assert analysis.summarize(run)["generator"]["saturated"] is None
