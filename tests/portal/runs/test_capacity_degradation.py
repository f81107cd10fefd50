"""Capacity of steps runs and degradation of long runs, from synthetic interval rows.

The rows are built second by second with known throughput and latency, so the
capacity, the knee and the onset of a degradation are known in advance.
"""

import random
import re

import pytest
from django.conf import settings
from django.urls import reverse

from portal.projects.models import Plan
from portal.runs import analysis, services
from portal.runs.models import PageInterval, Run, RunShard, ShardInterval, run_digest
from portal.runs.summary import RunSummary
from tests.conftest import wait_for_js
from tests.portal.projects.data import levels_data, plan_data
from tests.portal.runs.factories import hist_of, plan_run

pytestmark = pytest.mark.django_db


def fill(run, seconds, *, pages, apd_ms, users=10, label="A"):
    """One shard and one label per second: `pages(s)` pages, all taking `apd_ms(s)` ms."""
    shard_rows, page_rows = [], []
    for s in seconds:
        n = pages(s)
        shard_rows.append(ShardInterval(run=run, shard_no=0, second=s, active_users=users, iterations_completed=n))
        if n:
            page_rows.append(
                PageInterval(
                    run=run, shard_no=0, second=s, label=label, pages=n, hits=n, hist=hist_of(*[apd_ms(s)] * n)
                )
            )
    ShardInterval.objects.bulk_create(shard_rows)
    PageInterval.objects.bulk_create(page_rows)


# --------------------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------------------


def steps_run(run, users, *, thresholds):
    run.plan_snapshot["profile"] = {
        "kind": "steps",
        "levels": [{"users": u, "ramp_up": 1, "hold": 5, "ramp_down": 0, "quiet": 0} for u in users],
    }
    run.plan_snapshot["thresholds"] = {"apd_ms": None, "p95_ms": None, "error_rate_pct": None, **thresholds}
    run.save()
    return Run.objects.get(id=run.id)  # a fresh engine_profile


def fill_levels(run, figures):
    """figures: one (pages/s, APD ms) per level, recorded inside that level's measurement window."""
    for (start, end, _), (rate, apd) in zip(run.measurement_windows, figures, strict=True):
        fill(run, range(int(start), int(end)), pages=lambda s, r=rate: r, apd_ms=lambda s, a=apd: a)


# 10 → 20 users doubles pages/s, 20 → 40 nearly doubles it, 40 → 60 adds 5 %: the knee is 40.
KNEE_AT_40 = [(50, 100.0), (100, 120.0), (190, 400.0), (200, 1500.0)]


def test_capacity_is_the_last_level_within_thresholds_and_the_knee_where_throughput_stops(run):
    run = steps_run(run, [10, 20, 40, 60], thresholds={"apd_ms": 1000})
    fill_levels(run, KNEE_AT_40)

    cap = analysis.summarize(run)["capacity"]

    assert cap["analysed"] is True
    assert (cap["capacity_users"], cap["first_failure_users"], cap["knee_users"]) == (40, 60, 40)
    assert cap["broken"] == {"60": ["APD"]}
    assert [(lv["users"], lv["held"], lv["broken"]) for lv in cap["levels"]] == [
        (10, True, []),
        (20, True, []),
        (40, True, []),
        (60, False, ["APD"]),
    ]
    assert [lv["pages_per_s"] for lv in cap["levels"]] == [50.0, 100.0, 190.0, 200.0]
    assert cap["levels"][3]["apd_ms"] == pytest.approx(1500.0, rel=0.002)
    assert [lv["users"] for lv in cap["levels"] if lv["capacity"]] == [40]
    assert [lv["users"] for lv in cap["levels"] if lv["knee"]] == [40]
    assert cap["sentence"] == (
        "Holds 40 users within its thresholds; at 60 users APD breaks 1 s (1.5 s). "
        "After 40 users (the knee) throughput grows less than half as fast as the users: "
        "+5.26 % from 40 to 60 users (+50 % users)."
    )


def test_when_even_the_lowest_level_breaks_there_is_no_capacity(run):
    run = steps_run(run, [10, 20, 40, 60], thresholds={"apd_ms": 50})
    fill_levels(run, KNEE_AT_40)

    cap = analysis.summarize(run)["capacity"]

    assert (cap["capacity_users"], cap["first_failure_users"]) == (None, 10)
    assert not any(lv["held"] for lv in cap["levels"])
    assert cap["sentence"].startswith(
        "Even the lowest level, 10 users, breaks its thresholds: APD breaks 50 ms (100 ms)."
    )


def test_throughput_that_keeps_growing_has_no_knee(run):
    run = steps_run(run, [10, 20, 40], thresholds={"apd_ms": 1000})
    fill_levels(run, [(50, 100.0), (100, 110.0), (200, 120.0)])

    cap = analysis.summarize(run)["capacity"]

    assert (cap["capacity_users"], cap["first_failure_users"], cap["knee_users"]) == (40, None, None)
    assert cap["sentence"] == (
        "Holds every level within its thresholds, up to 40 users. "
        "Throughput grows at least half as fast as the users up to 40 users: no knee within these levels."
    )


def test_a_minimum_throughput_breaks_the_levels_below_it(run):
    # given: at least 60 pages/s, which only the second level reaches; and a capped error rate
    run = steps_run(run, [10, 20], thresholds={"min_pages_per_s": 60, "error_rate_pct": 1.0})
    fill_levels(run, [(50, 100.0), (100, 110.0)])

    summary = analysis.summarize(run)

    cap = summary["capacity"]
    assert cap["broken"] == {"10": ["Pages/s"]}
    assert cap["capacity_users"] is None
    assert "pages/s fall below 60 pages/s (50 pages/s)" in cap["sentence"]
    # and the verdicts of the windows agree with the capacity table
    assert [w["verdict"] for w in summary["windows"]] == ["failed", "passed"]


def test_without_thresholds_every_level_holds_and_the_report_says_why(run):
    run = steps_run(run, [10, 20], thresholds={})
    fill_levels(run, [(50, 100.0), (100, 110.0)])

    cap = analysis.summarize(run)["capacity"]

    assert cap["capacity_users"] == 20 and cap["thresholds_set"] is False
    assert cap["sentence"].startswith("The plan sets no thresholds, so every level counts as held, up to 20 users")


def test_two_levels_of_the_same_users_have_no_capacity(run):
    run = steps_run(run, [10, 10], thresholds={"apd_ms": 1000})
    fill_levels(run, [(50, 100.0), (55, 100.0)])

    cap = analysis.summarize(run)["capacity"]

    assert cap["analysed"] is False
    assert "same number of users" in cap["reason"]


def test_a_single_window_run_has_no_capacity_and_a_steps_run_no_degradation(run):
    run = expecting_degradation(run)
    fill(run, range(1, 7), pages=lambda s: 10, apd_ms=lambda s: 20.0)
    summary = analysis.summarize(run)
    assert "capacity" not in summary and "degradation" in summary

    ShardInterval.objects.filter(run=run).delete()
    PageInterval.objects.filter(run=run).delete()
    run = steps_run(run, [10, 20], thresholds={})
    fill_levels(run, [(50, 100.0), (100, 110.0)])
    summary = analysis.summarize(run)
    assert "capacity" in summary and "degradation" not in summary


# A system with contention σ = 0.1 and κ = 0 and a single user's 10 pages/s: it levels off towards 100 pages/s.
USL_USERS = [5, 10, 20, 40, 80]
USL_LEVELS = [(round(10 * n / (1 + 0.1 * (n - 1))), 100.0) for n in USL_USERS]


def test_a_steps_run_gets_a_scalability_model_with_predicted_levels(run):
    run = steps_run(run, USL_USERS, thresholds={})
    fill_levels(run, USL_LEVELS)

    cap = analysis.summarize(run)["capacity"]

    m = cap["model"]
    assert m["fitted"] is True and m["concurrency"] == "users"
    assert m["sigma_ci"][0] <= 0.1 <= m["sigma_ci"][1] and m["sigma"] == pytest.approx(0.1, abs=0.01)
    assert m["lambda"] == pytest.approx(10, rel=0.05) and m["kappa"] == pytest.approx(0, abs=1e-4)
    assert m["r2"] > 0.99 and m["peak_users"] is None  # κ = 0: no peak, it levels off
    assert {"lambda", "sigma", "kappa", "peak_users", "peak_pages_per_s", "r2", "levels"} <= set(m)
    assert [lv["n"] for lv in m["levels"]] == USL_USERS
    assert [lv["predicted_pages_per_s"] for lv in cap["levels"]] == pytest.approx([x for x, _ in USL_LEVELS], rel=0.03)
    assert m["curve"][-1]["extrapolated"] is True and m["curve"][-1]["n"] == 100
    assert m["sentence"].startswith("Contention σ = 0.1 dominates: a serialized step limits this system to about")


def test_an_open_model_takes_its_concurrency_from_littles_law():
    # given: levels of an open system whose concurrency N = X · R follows the USL with σ = 0.1
    from portal.stats.scalability import usl

    levels = []
    for n in USL_USERS:
        x = float(usl(n, 10.0, 0.1, 0.0))
        levels.append({"users": 0, "pages_per_s": x, "apd_ms": 1000.0 * n / x})

    m = analysis.scalability_model(levels, open_model=True)

    # then: the model is fitted on N from Little's law, not on the (meaningless) users
    assert m["concurrency"] == "Little's law (pages/s × APD)"
    assert [lv["n"] for lv in m["levels"]] == pytest.approx(USL_USERS)
    assert m["fitted"] is True and m["sigma"] == pytest.approx(0.1, abs=0.005)


def test_a_steps_run_with_too_few_levels_says_there_is_no_model(alice_client, run):
    run = steps_run(run, [10, 20, 40, 60], thresholds={"apd_ms": 1000})
    fill_levels(run, [(50, 100.0), (100, 120.0), (200, 400.0), (300, 1500.0)])  # still linear: no saturation
    finished(run)

    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    assert run.summary["capacity"]["model"]["fitted"] is False
    assert "The levels do not reach saturation" in page and "Predicted (USL)" not in page


def test_the_report_shows_the_model_and_predicted_figures(alice_client, run):
    run = steps_run(run, USL_USERS, thresholds={})
    fill_levels(run, USL_LEVELS)
    finished(run)

    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    assert "<h3>Scalability model</h3>" in page and "Predicted (USL)" in page
    assert page.count('class="num predicted"') == len(USL_USERS)
    assert "Contention σ = 0.1 dominates" in page
    assert "js/charts/run-capacity.js" in page


# A resource of four slots, 47.5 pages/s each (issue 28 item 1): throughput rises to 4 users, then stays at ~190.
FOUR_SLOTS_USERS = [1, 2, 4, 8, 16]
FOUR_SLOTS = [(48, 20.8), (95, 21.0), (190, 21.0), (190, 42.0), (189, 84.6)]


def test_a_steps_run_on_four_slots_reports_the_measured_ceiling_and_no_model(alice_client, run):
    run = steps_run(run, FOUR_SLOTS_USERS, thresholds={})
    fill_levels(run, FOUR_SLOTS)
    finished(run)

    m = run.summary["capacity"]["model"]
    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()
    api = alice_client.get(f"/api/v1/runs/{run.code}/").json()["summary"]["capacity"]["model"]

    assert m["fitted"] is False and m["sigma"] is None and m["kappa"] is None and m["peak_pages_per_s"] is None
    assert (m["ceiling_pages_per_s"], m["ceiling_users"]) == (189.67, 4.0)
    assert (
        m["sentence"]
        == m["reason"]
        == (
            "No model: throughput grows with the users up to about 190 pages/s, reached at 4 users, and stays there "
            "(189 to 190 pages/s) up to 16 users: a sharp ceiling, such as a pool or a fixed number of slots, which "
            "the scalability law does not describe. The ceiling is the measured limit; the model's σ, κ and peak "
            "would mean nothing here."
        )
    )
    assert api == m  # one figure, one sentence: the API gives the summary's model as it is
    assert m["reason"].replace("'", "&#x27;") in page and "Predicted (USL)" not in page
    assert "serialized step limits" not in page and "dominates" not in page


# --------------------------------------------------------------------------------------
# Capacity searches: a steps run that ends with its answer
# --------------------------------------------------------------------------------------


def search_run(run, users, figures, *, thresholds, search=True):
    """A steps run whose shard has ended and whose levels recorded `figures`, ready to finalize."""
    run = steps_run(run, users, thresholds=thresholds)
    run.analysis_settings = {"capacity_search": search}
    run.status = Run.Status.RUNNING
    run.save()
    RunShard.objects.create(run=run, shard_no=0, user_count=max(users), status=RunShard.Status.DONE)
    fill_levels(run, figures)
    # The ramps' seconds too: the shard was there for the whole plan (a complete run).
    recorded = set(ShardInterval.objects.filter(run=run).values_list("second", flat=True))
    fill(run, [s for s in range(int(run.planned_duration)) if s not in recorded], pages=lambda s: 0, apd_ms=None)
    return run


def test_a_capacity_search_whose_upper_levels_break_ends_done_with_its_capacity(run):
    # given: a capacity search; APD at most 1 s, which 60 users break (1.5 s)
    run = search_run(run, [10, 20, 40, 60], KNEE_AT_40, thresholds={"apd_ms": 1000})

    # when
    services.run_finalize(run.id)

    # then: done, not failed, with the capacity in users and pages/s and why the next level broke
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    assert run.status in Run.FINISHED and run.counts and run.doubts == []
    cap = run.summary["capacity"]
    assert (cap["search"], cap["capacity_users"], cap["capacity_pages_per_s"]) == (True, 40, 190.0)
    assert cap["next_level_broke"] == "APD breaks 1 s (1.5 s)"
    assert cap["answer"] == "Capacity: 40 users, 190 pages/s; at 60 users APD breaks 1 s (1.5 s)."
    # the thresholds keep their meaning: the run's verdict still says a level broke them
    assert run.summary["verdict"] == "failed"
    # finalize wrote the digest (what journeys read) with the summary, levels included
    assert run.digest == run_digest(RunSummary.of(run), run.plan_snapshot)
    assert [w["totals"]["users"] for w in run.digest["windows"]] == [
        w["totals"]["users"] for w in run.summary["windows"]
    ]


def fill_protocol_levels(run, ttfe_ms_by_level, rtt_ms_by_level, *, ws_sent=3, ws_received=3):
    """Per second of each level's window, as the interval writer stores them: 4 streams over h2 whose first events
    took that level's TTFE (6 events each), and 3 WebSocket round trips of its RTT, ``ws_sent`` messages sent and
    ``ws_received`` received."""
    from portal.runs.models import ProtocolInterval
    from workers.engine.histogram import Histogram

    rows = []
    for (start, end, _), ttfe_ms, rtt_ms in zip(
        run.measurement_windows, ttfe_ms_by_level, rtt_ms_by_level, strict=True
    ):
        for second in range(int(start), int(end)):
            ttfe, events, rtt = Histogram(), Histogram(), Histogram()
            ttfe.record_many([ttfe_ms * 1000] * 4)
            events.record_many([6] * 4)
            rtt.record_many([rtt_ms * 1000] * 3)
            rows.append(
                ProtocolInterval(
                    run=run, shard_no=0, second=second, label="A", hits=4, protocols={"h2": 4},
                    ttfe_bin=ttfe.to_bytes(), events_bin=events.to_bytes(), rtt_bin=rtt.to_bytes(), ws_sent=ws_sent,
                    ws_received=ws_received,
                )
            )  # fmt: skip
    ProtocolInterval.objects.bulk_create(rows)


def test_a_capacity_search_breaks_on_the_time_to_first_event_where_the_plan_sets_it(run):
    # given: pages that hold their APD limit at every level, and streams whose first events slow with the load
    thresholds = {"apd_ms": 10_000, "ttfe_p95_ms": 200, "rtt_p95_ms": 50}
    run = search_run(run, [10, 20, 40, 60], KNEE_AT_40, thresholds=thresholds)
    fill_protocol_levels(run, (60, 150, 250, 900), (5, 8, 9, 70))

    services.run_finalize(run.id)

    # then: the capacity is the last level whose first events held, and the answer says why the next broke
    run.refresh_from_db()
    cap = run.summary["capacity"]
    assert (run.status, cap["capacity_users"], cap["first_failure_users"]) == (Run.Status.DONE, 20, 40)
    assert cap["next_level_broke"] == "Time to first event p95 breaks 200 ms (250 ms)"
    assert cap["broken"] == {
        "40": ["Time to first event p95"],
        "60": ["Time to first event p95", "WebSocket round trip p95"],
    }
    assert [lv["ttfe_p95_ms"] for lv in cap["levels"]] == [60.0, 150.0, 250.0, 900.0]
    # each level's own verdict agrees with the search
    assert [w["verdict"] for w in run.summary["windows"]] == ["passed", "passed", "failed", "failed"]


def test_the_journey_gives_a_stream_capacity_searchs_own_capacity(run):
    from portal.history.journey import environment_journey

    # given: a capacity search that breaks on the time to first event at 40 users (its capacity: 20)
    thresholds = {"apd_ms": 10_000, "ttfe_p95_ms": 200}
    run = search_run(run, [10, 20, 40, 60], KNEE_AT_40, thresholds=thresholds)
    fill_protocol_levels(run, (60, 150, 250, 900), (5, 8, 9, 70))
    services.run_finalize(run.id)
    run.refresh_from_db()
    assert run.summary["capacity"]["capacity_users"] == 20

    # then: the journey's point (read from the run's digest, not its summary) says the same capacity
    point = environment_journey(run.environment, run.plan)["points"][0]
    assert (point["capacity_users"], point["capacity_held"]) == (20, True)
    assert run.digest["windows"][0]["totals"]["ttfe_p95_ms"] == 60.0


def _levels_table(page: str) -> str:
    return page.split('<table id="levels"', 1)[1].split("</table>", 1)[0]


def _csv(response) -> list[dict]:
    import csv
    import io

    assert response.status_code == 200, response.status_code
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_the_levels_table_of_a_plan_with_streams_and_websocket_gives_each_levels_figures(
    alice_client, bob, charlie, run
):
    from django.test import Client

    # given: a capacity search of a plan with an SSE step and a WebSocket step; first events slow with the load
    run = search_run(run, [10, 20, 40, 60], KNEE_AT_40, thresholds={"apd_ms": 10_000, "ttfe_p95_ms": 200})
    fill_protocol_levels(run, (60, 150, 250, 900), (5, 8, 9, 70), ws_sent=2, ws_received=4)
    services.run_finalize(run.id)
    run.refresh_from_db()

    # then: each level carries the figures a threshold may judge it on, and its WebSocket messages per second
    # (2 + 4 a second over each level's own window, not over the run)
    levels = run.summary["capacity"]["levels"]
    assert [lv["ttfe_p95_ms"] for lv in levels] == [60.0, 150.0, 250.0, 900.0]
    assert [lv["rtt_p95_ms"] for lv in levels] == [5.0, 8.0, 9.0, 70.0]
    assert [lv["ws_messages_per_s"] for lv in levels] == [6.0] * 4
    # 4 hits a second over h2 among the level's 50, 100, 190 and 200 page hits (the rest HTTP/1.1)
    assert [lv["h2_share_pct"] for lv in levels] == [8.0, 4.0, 2.11, 2.0]
    assert all("gap_p95_ms" not in lv for lv in levels)  # the rows hold no gap histogram

    # the report's levels table has a column for each figure the levels have (no gap: none was recorded)
    table = _levels_table(alice_client.get(run.get_absolute_url()).content.decode())
    assert re.findall(r'data-column="(\w+)"', table) == [
        "ttfe_p95_ms",
        "rtt_p95_ms",
        "ws_messages_per_s",
        "h2_share_pct",
    ]
    assert re.findall(r'data-figure="ttfe_p95_ms">([^<]*)<', table) == ["60 ms", "150 ms", "250 ms", "900 ms"]
    assert re.findall(r'data-figure="rtt_p95_ms">([^<]*)<', table) == ["5 ms", "8 ms", "9 ms", "70 ms"]
    assert re.findall(r'data-figure="ws_messages_per_s">([^<]*)<', table) == ["6"] * 4
    assert table.count("broken: Time to first event p95") == 2

    # the API's summary and the levels export say the same
    api = alice_client.get(reverse("api:run-detail", args=[run.code])).json()
    assert api["summary"]["capacity"]["levels"] == levels
    rows = _csv(alice_client.get(f"/api/v1/runs/{run.code}/levels.csv"))
    assert [r["users"] for r in rows] == ["10", "20", "40", "60"]
    assert [r["ttfe_p95_ms"] for r in rows] == ["60.0", "150.0", "250.0", "900.0"]
    assert [r["rtt_p95_ms"] for r in rows] == ["5.0", "8.0", "9.0", "70.0"]
    assert [r["ws_messages_per_s"] for r in rows] == ["6.0"] * 4
    assert [r["verdict"] for r in rows] == ["held", "held", "broken", "broken"]
    assert rows[2]["broken"] == "Time to first event p95" and rows[1]["capacity"] == "yes"
    assert "gap_p95_ms" not in rows[0]
    # the run page offers it; a viewer reads it, an outsider gets a 404
    assert (
        f'href="/api/v1/runs/{run.code}/levels.csv">Levels table (CSV)</a>'
        in alice_client.get(run.get_absolute_url()).content.decode()
    )
    viewer, outsider = Client(), Client()
    viewer.force_login(bob)
    outsider.force_login(charlie)
    assert _csv(viewer.get(f"/api/v1/runs/{run.code}/levels.csv")) == rows
    assert outsider.get(f"/api/v1/runs/{run.code}/levels.csv").status_code == 404


def test_the_levels_table_of_a_plain_http_plan_has_no_stream_or_websocket_columns(alice_client, run):
    run = steps_report(run)

    table = _levels_table(alice_client.get(run.get_absolute_url()).content.decode())
    assert "data-column=" not in table and "data-figure=" not in table
    rows = _csv(alice_client.get(f"/api/v1/runs/{run.code}/levels.csv"))
    assert list(rows[0]) == [
        "window", "users", "start_s", "end_s", "apd_ms", "p95_ms", "pages_per_s", "error_rate_pct",
        "predicted_pages_per_s", "verdict", "broken", "capacity", "knee", "note",
    ]  # fmt: skip
    assert [r["pages_per_s"] for r in rows] == ["50.0", "100.0", "190.0", "200.0"]
    assert [r["verdict"] for r in rows] == ["held", "held", "held", "broken"]


def test_the_levels_of_a_run_without_capacity_show_their_stream_figures_too(alice_client, run):
    # given: two levels of the same users (no capacity is defined), a stream and a WebSocket step
    run = steps_run(run, [10, 10], thresholds={"ttfe_p95_ms": 100})
    fill_levels(run, [(50, 100.0), (60, 110.0)])
    fill_protocol_levels(run, (60, 150), (5, 8))
    finished(run)

    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert "<h2>Levels</h2>" in page
    table = _levels_table(page)
    assert re.findall(r'data-figure="ttfe_p95_ms">([^<]*)<', table) == ["60 ms", "150 ms"]
    assert re.findall(r'data-figure="ws_messages_per_s">([^<]*)<', table) == ["6", "6"]
    rows = _csv(alice_client.get(f"/api/v1/runs/{run.code}/levels.csv"))
    assert [(r["users"], r["ttfe_p95_ms"], r["verdict"]) for r in rows] == [
        ("10", "60.0", "passed"),
        ("10", "150.0", "failed"),
    ]
    assert rows[1]["broken"] == "Time to first event p95"


def test_a_capacity_search_whose_first_level_breaks_fails(run):
    run = search_run(run, [10, 20, 40, 60], KNEE_AT_40, thresholds={"apd_ms": 50})

    services.run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    cap = run.summary["capacity"]
    assert cap["capacity_users"] is None and cap["capacity_pages_per_s"] is None
    assert cap["answer"] == "No capacity found: even the first level, 10 users, broke its thresholds."


def test_a_capacity_search_where_every_level_holds_is_done_and_says_the_capacity_is_higher(run):
    run = search_run(run, [10, 20], [(50, 100.0), (100, 110.0)], thresholds={"apd_ms": 1000})

    services.run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    assert run.summary["capacity"]["answer"].startswith("Capacity: 20 users, 100 pages/s; every level held")


def test_the_same_steps_run_without_capacity_search_still_fails(run):
    run = search_run(run, [10, 20, 40, 60], KNEE_AT_40, thresholds={"apd_ms": 1000}, search=False)

    services.run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "answer" not in run.summary["capacity"]


def test_the_report_of_a_capacity_search_gives_its_answer(alice_client, run):
    run = search_run(run, [10, 20, 40, 60], KNEE_AT_40, thresholds={"apd_ms": 1000})
    services.run_finalize(run.id)
    url = reverse("runs:detail", args=[run.code])

    page = alice_client.get(url).content.decode()

    assert 'data-status="done"' in page and ">Done<" in page
    assert "capacity 40 users" in page
    assert "Capacity: 40 users, 190 pages/s; at 60 users APD breaks 1 s (1.5 s)." in page


def test_a_steps_plan_can_be_marked_as_a_capacity_search(alice_client, project, environment):
    levels = [{"users": u, "ramp_up": 1, "hold": 5, "ramp_down": 0, "quiet": 0} for u in (10, 20)]
    data = plan_data(environment, profile_kind="steps", capacity_search="on", **levels_data(levels))
    for name in ("users", "ramp_up", "hold", "ramp_down"):
        data[name] = ""

    response = alice_client.post(reverse("projects:plan-new", args=[project.code]), data)

    assert response.status_code == 302
    plan = Plan.objects.get(name="Capacity")
    assert plan.capacity_search is True and plan.analysis_settings()["capacity_search"] is True
    assert 'id="capacity-search"' in alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()


def test_a_viewer_cannot_mark_a_plan_as_a_capacity_search(bob_client, plan):
    data = plan_data(plan.environment, name=plan.name, capacity_search="on")
    assert bob_client.post(reverse("projects:plan-edit", args=[plan.code]), data).status_code == 403
    plan.refresh_from_db()
    assert plan.capacity_search is False


def test_only_a_steps_plan_searches_for_capacity(plan):
    plan.capacity_search = True
    plan.save()
    assert plan.analysis_settings()["capacity_search"] is False  # a ramp has one level: nothing to search


# --------------------------------------------------------------------------------------
# Degradation
# --------------------------------------------------------------------------------------

RAMP_UP, HOLD, RAMP_DOWN = 10, 300, 20
SETTINGS = {"drop_pct": 30, "rise_pct": 50, "sustain_s": 30, "steady_s": 60}


def long_run(run, settings=SETTINGS):
    """A ramp run: 10 s up, 300 s held (seconds 10–310 measured), 20 s down."""
    run.plan_snapshot["profile"] = {"kind": "ramp", "users": 10, "ramp_up": RAMP_UP, "hold": HOLD, "ramp_down": 20}
    run.analysis_settings = {"degradation": settings} if settings else {}
    run.save()
    return Run.objects.get(id=run.id)


def shape(hold, *, ramp=lambda s: 10 * s, down=lambda s: max(0, 100 - 5 * (s - 310))):
    """Pages per second: rising during ramp-up, `hold(s)` when held, falling during ramp-down."""

    def pages(s):
        if s < RAMP_UP:
            return ramp(s)
        if s >= RAMP_UP + HOLD:
            return down(s)
        return hold(s)

    return pages


def wobble(level):
    """A level with a little second-to-second noise, as real throughput has."""
    return lambda s: level + (2 if s % 2 else -2)


def test_a_sustained_throughput_drop_is_found_with_its_onset(run):
    # given: 100 pages/s from ramp-up, falling to 50 pages/s at second 200
    run = long_run(run)
    drop_at = 200
    fill(
        run,
        range(RAMP_UP + HOLD + RAMP_DOWN),
        pages=shape(lambda s: wobble(100)(s) if s < drop_at else wobble(50)(s)),
        apd_ms=lambda s: 20.0,
    )

    d = analysis.summarize(run)["degradation"]

    assert d["analysed"] is True and d["degraded"] is True
    assert d["kind"] == "throughput drop"
    assert drop_at - 2 <= d["onset_s"] <= drop_at + 2
    assert d["time_to_degradation_s"] == d["onset_s"] - RAMP_UP
    assert d["throughput_onset_s"] == d["onset_s"] and d["apd_onset_s"] is None
    assert d["steady_window"] == [10, 70]
    assert d["steady_pages_per_s"] == 100
    assert d["degraded_pages_per_s"] == 50
    assert d["window"] == [10, 310]
    assert d["oscillation"] is False
    assert d["sentence"] == (
        f"Throughput fell 50 % below its steady 100 pages/s (to 50) at 3 min {d['onset_s'] - 180} s, "
        f"3 min {d['onset_s'] - 190} s after ramp-up. APD shows no drift."
    )


def leak(run, began_at=150):
    """APD steady at 20 ms, then rising 0.3 ms a second from `began_at` (a leak), with noise."""
    rng = random.Random(7)
    noise = {s: rng.gauss(0, 0.8) for s in range(RAMP_UP + HOLD)}
    fill(
        run,
        range(RAMP_UP + HOLD),
        pages=shape(wobble(100)),
        apd_ms=lambda s: 20.0 + noise[s] + (0.3 * (s - began_at) if s >= began_at else 0.0),
    )


def test_a_slow_leak_is_found_where_it_began_not_only_where_it_crossed(run):
    # given: a leak from second 150; it crosses the 50 % limit (30 ms) some 33 s later
    run = long_run(run)
    began_at = 150
    leak(run, began_at)

    d = analysis.summarize(run)["degradation"]

    assert d["kind"] == "APD rise" and d["crossed_s"] == d["onset_s"] == d["apd_onset_s"]
    low, high = d["began_interval_s"]
    assert low <= began_at <= high and low <= d["began_s"] <= high, d
    assert d["began_s"] < d["crossed_s"] - 15  # the drift began well before it crossed
    assert d["began_metric"] == "apd" and d["change_points"]["apd"]["shape"] == "slope"
    assert d["began_sentence"].startswith("APD has been rising since 2 min ")
    assert d["began_sentence"].endswith(
        f"a slope, as a leak makes; it crossed the 50 % limit at {d['crossed_s'] // 60} min {d['crossed_s'] % 60} s."
    )


def test_a_step_drop_began_in_the_second_it_crossed(run):
    run = long_run(run)
    fill(
        run,
        range(RAMP_UP + HOLD),
        pages=shape(lambda s: wobble(100)(s) if s < 200 else wobble(50)(s)),
        apd_ms=lambda s: 20.0,
    )

    d = analysis.summarize(run)["degradation"]

    assert d["began_metric"] == "throughput" and d["change_points"]["throughput"]["shape"] == "step"
    assert d["began_interval_s"][0] <= 200 <= d["began_interval_s"][1] and d["began_s"] == 200
    assert d["began_sentence"].startswith("Throughput fell at once at 3 min 20 s (")


def test_a_flat_run_has_not_degraded_and_its_ramp_down_is_not_a_drop(run):
    # given: a steady 100 pages/s during the hold, falling to 0 over the ramp-down (outside the window)
    run = long_run(run)
    fill(run, range(RAMP_UP + HOLD + RAMP_DOWN), pages=shape(wobble(100)), apd_ms=lambda s: 20.0)

    d = analysis.summarize(run)["degradation"]

    assert d["analysed"] is True
    assert (d["degraded"], d["kind"], d["onset_s"], d["time_to_degradation_s"]) == (False, None, None, None)
    assert (d["began_s"], d["began_interval_s"], d["crossed_s"]) == (None, None, None)
    assert d["excursions"] == 0 and d["oscillation"] is False
    assert d["sentence"] == (
        "No degradation: throughput stayed within 30 % of its steady 100 pages/s and APD within 50 % of its "
        "steady 20 ms (a change had to last 30 s to count). APD shows no drift."
    )


def test_an_apd_rise_is_found_and_a_slow_trend_is_reported_as_drift(run):
    # given: constant throughput; APD creeps up 0.01 ms a second (36 ms per hour), then triples at second 150
    run = long_run(run)
    fill(
        run,
        range(RAMP_UP + HOLD),
        pages=shape(wobble(100)),
        apd_ms=lambda s: 20.0 + 0.01 * (s - RAMP_UP) if s < 150 else 60.0,
    )

    d = analysis.summarize(run)["degradation"]

    assert (d["degraded"], d["kind"]) == (True, "APD rise")
    assert 148 <= d["apd_onset_s"] <= 152 and d["throughput_onset_s"] is None
    assert d["degraded_apd_ms"] == pytest.approx(60.0, rel=0.01)
    assert d["sentence"].startswith("APD rose 19")  # 60 ms against a steady ~20.3 ms
    assert d["drift_ms_per_hour"] > 0 and "APD drifts +" in d["sentence"]


def test_drift_is_the_apd_trend_per_hour(run):
    run = long_run(run)
    fill(run, range(RAMP_UP + HOLD), pages=shape(wobble(100)), apd_ms=lambda s: 20.0 + 0.01 * (s - RAMP_UP))

    d = analysis.summarize(run)["degradation"]

    assert d["degraded"] is False
    assert d["drift_ms_per_hour"] == pytest.approx(36.0, abs=0.2)
    assert d["sentence"].endswith("APD drifts +36 ms per hour (the trend over 5 min).")


def test_a_drop_and_a_rise_at_the_same_second_are_told_together(run):
    # given: at second 200 throughput halves and APD triples, as when a server starts to stall
    run = long_run(run)
    fill(
        run,
        range(RAMP_UP + HOLD),
        pages=shape(lambda s: 100 if s < 200 else 50),
        apd_ms=lambda s: 20.0 if s < 200 else 60.0,
    )

    d = analysis.summarize(run)["degradation"]

    assert (d["onset_s"], d["throughput_onset_s"], d["apd_onset_s"]) == (200, 200, 200)
    assert d["kind"] == "throughput drop and APD rise"
    assert d["sentence"].startswith(
        "Throughput fell 50 % below its steady 100 pages/s (to 50) and APD rose 200 % above its steady 20 ms "
        "(to 60 ms) at 3 min 20 s, 3 min 10 s after ramp-up."
    )


def test_oscillating_throughput_is_reported(run):
    # given: 20 s at 100 pages/s, 20 s at 50, again and again: each dip too short to count as degradation
    run = long_run(run)
    fill(
        run,
        range(RAMP_UP + HOLD),
        pages=shape(lambda s: 100 if ((s - RAMP_UP) // 20) % 2 == 0 else 50),
        apd_ms=lambda s: 20.0,
    )

    d = analysis.summarize(run)["degradation"]

    assert d["oscillation"] is True and d["degraded"] is False
    assert d["excursions"] == 7  # down at 30, 70, 110, 150, 190, 230 and 270
    assert d["excursions_per_10_min"] == 14.0
    assert (
        "Throughput oscillates: it left the ±20 % band around its steady state 7 times (14.0 per 10 min)."
        in (d["sentence"])
    )


def expecting_degradation(run):
    """The fixture's plan (1 s up, 5 s held) with a steady state of 5 s: held long enough that a look
    for degradation was expected, too short for a sustained change (1 min) to show."""
    run.analysis_settings = {"degradation": {"drop_pct": 30, "rise_pct": 50, "sustain_s": 60, "steady_s": 5}}
    run.save()
    return run


def test_a_window_too_short_to_say_anything_is_not_analysed(run):
    # given
    run = expecting_degradation(run)
    fill(run, range(0, 6), pages=lambda s: 10, apd_ms=lambda s: 20.0)

    d = analysis.summarize(run)["degradation"]

    assert d["analysed"] is False
    assert d["settings"] == {"drop_pct": 30, "rise_pct": 50, "sustain_s": 60, "steady_s": 5}
    assert d["reason"].startswith("The measurement window (5 s) is too short to look for degradation")
    assert "steady state (5 s) plus a sustained change (1 min)" in d["reason"]


def test_a_run_shorter_than_the_steady_state_or_a_one_level_steps_run_says_nothing_about_degradation(alice_client, run):
    # given: the plan defaults (a 5 min steady state) and a 5 s window: a smoke test
    fill(run, range(0, 6), pages=lambda s: 10, apd_ms=lambda s: 20.0)
    assert "degradation" not in analysis.summarize(run)
    finished(run)
    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()
    assert "<h2>Degradation</h2>" not in page and "too short to look for degradation" not in page

    # and a steps run of one level, even with a steady state it could reach
    run = expecting_degradation(steps_run(run, [10], thresholds={}))
    assert "degradation" not in analysis.summarize(run)


def test_a_run_stopped_during_ramp_up_is_not_analysed(run):
    run = long_run(run)
    fill(run, range(0, 5), pages=lambda s: 10, apd_ms=lambda s: 20.0)

    d = analysis.summarize(run)["degradation"]

    assert d == {
        "settings": SETTINGS,
        "window": [0, 5],
        "analysed": False,
        "reason": "The run ended before its measurement window began.",
    }


def test_a_stall_with_no_pages_counts_as_zero_throughput(run):
    # given: from second 200 the shard still reports, but no page completes
    run = long_run(run)
    fill(run, range(RAMP_UP + HOLD), pages=shape(lambda s: 100 if s < 200 else 0), apd_ms=lambda s: 20.0)

    d = analysis.summarize(run)["degradation"]

    assert d["degraded"] is True and 198 <= d["onset_s"] <= 202
    assert d["degraded_pages_per_s"] == 0


def test_a_handoff_gap_is_neither_a_degradation_nor_a_recovery(run):
    # given: a steady 100 pages/s, except 40 s of reduced load (20 pages/s) from second 150, when the
    # shard's worker stopped and another resumed it (issue 17): a drop that lasts longer than sustain_s
    run = long_run(run)
    fill(
        run,
        range(RAMP_UP + HOLD),
        pages=shape(lambda s: 20 if 150 <= s < 190 else wobble(100)(s)),
        apd_ms=lambda s: 20.0,
    )
    assert analysis.summarize(run)["degradation"]["degraded"] is True  # without the handoff, it is one

    # when: the same seconds are a handoff's gap (the worker stopped at 151, the shard resumed at 189)
    handoff = {
        "kind": "stopped",
        "worker": "h:1",
        "stopped_at_s": 151,
        "resumed_on": "h:2",
        "resumed_at_s": 189,
        "gap_s": 38.5,
    }
    RunShard.objects.create(run=run, shard_no=0, user_count=10, status="done", handoffs=[handoff])
    summary = analysis.summarize(run)

    # then: no degradation (nor a recovery after it), and the window counts the seconds of reduced load
    d = summary["degradation"]
    assert d["analysed"] is True and d["degraded"] is False and d["excursions"] == 0, d
    (window,) = summary["windows"]
    assert window["handoffs"] == 1 and window["reduced_seconds"] == 40
    # the seconds from the stop to the resumption are the shard's missing ones (these synthetic rows aside)
    assert summary["handoffs"][0]["missing_s"] == window["missing_seconds"] == 38
    assert summary["handoffs"][0]["text"].endswith("resumed on h:2 after 38.5 s (38 s missing)")
    assert "reduced the load for 40 s of this window" in window["note"]
    assert summary["handoffs"][0]["window"] == window["label"]


# --------------------------------------------------------------------------------------
# Thresholds: pages/s at least
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "passed"), [(3.0, False), (2.0, True)])
def test_judge_checks_a_minimum_throughput(limit, passed):
    results = analysis.judge({"min_pages_per_s": limit, "apd_ms": None}, {"pages_per_s": 2.0})
    assert results == [
        {"name": "Pages/s", "limit": limit, "actual": 2.0, "unit": "pages/s", "op": "≥", "passed": passed}
    ]


# --------------------------------------------------------------------------------------
# The run page
# --------------------------------------------------------------------------------------


def finished(run):
    from django.utils import timezone

    run.summary = analysis.summarize(run)
    run.status = Run.Status.PASSED
    run.start_at = run.finished_at = timezone.now()
    run.save()
    return run


def test_the_report_of_a_steps_run_shows_its_capacity(alice_client, run):
    run = steps_run(run, [10, 20, 40, 60], thresholds={"apd_ms": 1000})
    fill_levels(run, KNEE_AT_40)
    finished(run)

    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    assert "<h2>Capacity</h2>" in page
    assert "Holds 40 users within its thresholds; at 60 users APD breaks 1 s (1.5 s)." in page
    assert "After 40 users (the knee) throughput grows less than half as fast as the users: +5.26 % from" in page
    assert page.count("held ✓") == 3 and "broken: APD" in page
    assert 'id="chart-capacity"' in page and 'id="capacity-data"' in page
    assert "<h2>Degradation</h2>" not in page


def test_the_report_of_a_long_run_shows_its_degradation_and_marks_the_charts(alice_client, run):
    run = long_run(run)
    fill(run, range(RAMP_UP + HOLD), pages=shape(lambda s: 100 if s < 200 else 50), apd_ms=lambda s: 20.0)
    finished(run)

    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    assert "<h2>Degradation</h2>" in page
    assert "Throughput fell 50 % below its steady 100 pages/s (to 50) at 3 min 20 s, 3 min 10 s after ramp-up." in page
    # the marker plugin lives in a static file (no inline script, for the CSP), loaded by the page
    assert 'id="degradation-data"' in page and "js/charts/run-degradation.js" in page
    assert "degradationMarker" in (settings.BASE_DIR / "static/js/charts/run-degradation.js").read_text()
    assert 'id="degradation-began"' in page and "js/charts/run-began.js" in page
    assert "When it began:</strong> Throughput fell at once at 3 min 20 s" in page
    assert "<h2>Capacity</h2>" not in page


def test_the_report_says_why_a_short_run_was_not_checked_for_degradation(alice_client, run):
    run = expecting_degradation(run)
    fill(run, range(0, 6), pages=lambda s: 10, apd_ms=lambda s: 20.0)
    finished(run)

    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    assert "is too short to look for degradation" in page
    assert "js/charts/run-degradation.js" not in page


def test_a_report_from_before_capacity_and_degradation_still_renders(alice_client, run):
    # given: a summary as runs finished before this analysis existed have it (no capacity, no degradation)
    run = steps_run(run, [10, 20], thresholds={"apd_ms": 1000})
    fill_levels(run, [(50, 100.0), (100, 110.0)])
    finished(run)
    summary = dict(run.summary)
    del summary["capacity"]
    for t in summary["thresholds"]:
        t.pop("op", None)
    Run.objects.filter(id=run.id).update(summary=summary)

    response = alice_client.get(reverse("runs:detail", args=[run.code]))

    page = response.content.decode()
    assert response.status_code == 200
    assert "<h2>Levels</h2>" in page and "<h2>Capacity</h2>" not in page


def steps_report(run):
    run = steps_run(run, [10, 20, 40, 60], thresholds={"apd_ms": 1000})
    fill_levels(run, KNEE_AT_40)
    return finished(run)


def test_a_viewer_reads_the_capacity(bob_client, run):
    run = steps_report(run)
    page = bob_client.get(reverse("runs:detail", args=[run.code])).content.decode()
    assert "Holds 40 users within its thresholds" in page


def test_an_outsider_gets_404_for_the_report(charlie_client, run):
    run = steps_report(run)
    assert charlie_client.get(reverse("runs:detail", args=[run.code])).status_code == 404


def test_the_thresholds_table_shows_a_minimum_throughput(alice_client, run):
    run.plan_snapshot["thresholds"] = {"min_pages_per_s": 15}
    run.save()
    fill(run, range(1, 6), pages=lambda s: 10, apd_ms=lambda s: 20.0)
    finished(run)

    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    assert '<td>Pages/s</td><td class="num" data-label="limit">≥ 15 pages/s</td>' in page
    assert run.summary["verdict"] == "failed"


# --------------------------------------------------------------------------------------
# The plan's settings
# --------------------------------------------------------------------------------------


def test_a_plan_takes_a_minimum_throughput_and_degradation_settings(alice_client, project, environment):
    data = plan_data(
        environment,
        threshold_min_pages_per_s="15",
        degradation_drop_pct="25",
        degradation_rise_pct="80",
        degradation_sustain_s="120",
        degradation_steady_s="600",
    )

    response = alice_client.post(reverse("projects:plan-new", args=[project.code]), data)

    assert response.status_code == 302
    plan = Plan.objects.get(name="Capacity")
    assert plan.threshold_min_pages_per_s == 15
    assert plan.analysis_settings() == {
        "capacity_search": False,
        "degradation": {"drop_pct": 25, "rise_pct": 80, "sustain_s": 120, "steady_s": 600},
    }


def test_empty_degradation_settings_keep_the_defaults(alice_client, project, environment):
    data = plan_data(environment, degradation_drop_pct="", degradation_sustain_s="")

    alice_client.post(reverse("projects:plan-new", args=[project.code]), data)

    plan = Plan.objects.get(name="Capacity")
    assert (plan.degradation_drop_pct, plan.degradation_sustain_s, plan.degradation_steady_s) == (30, 60, 300)


def test_degradation_settings_are_validated(alice_client, project, environment):
    data = plan_data(environment, degradation_drop_pct="100")

    response = alice_client.post(reverse("projects:plan-new", args=[project.code]), data)

    assert response.status_code == 200
    assert "Ensure this value is less than or equal to 99" in response.content.decode()
    assert not Plan.objects.filter(name="Capacity").exists()


def test_the_plan_form_and_page_show_the_degradation_settings(alice_client, plan):
    plan.degradation_sustain_s, plan.threshold_min_pages_per_s = 90, 12.5
    plan.save()

    form = alice_client.get(reverse("projects:plan-edit", args=[plan.code])).content.decode()
    page = alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()

    assert "Degradation (long runs)" in form and 'name="degradation_steady_s"' in form
    assert 'name="threshold_min_pages_per_s"' in form
    assert "<dt>Sustained for</dt><dd>1 min 30 s</dd>" in page
    assert "≥ 12.5 pages/s" in page
    assert "at least 6 min 30 s is checked for degradation" in page


def test_a_viewer_sees_the_plans_degradation_settings_but_cannot_edit_them(bob_client, plan):
    assert (
        "<dt>Throughput drop</dt><dd>30 %</dd>"
        in bob_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    )
    assert bob_client.get(reverse("projects:plan-edit", args=[plan.code])).status_code == 403


def test_an_outsider_gets_404_for_the_plan_form(charlie_client, plan):
    assert charlie_client.get(reverse("projects:plan-edit", args=[plan.code])).status_code == 404


# --------------------------------------------------------------------------------------
# The charts in a real browser (Debian's Chromium; Playwright never downloads one)
# --------------------------------------------------------------------------------------


@pytest.fixture
def tab(browser, live_server, alice):
    """A logged-in page of alice's, and the script exceptions it meets (a chart that throws shows as one)."""
    # bypass_csp: Playwright's wait_for_function evaluates its predicate with eval, which the
    # page's Content-Security-Policy refuses (tests/portal/runs/test_csp_browser.py runs pages under it).
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, bypass_csp=True)
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    tab.errors = []
    tab.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    tab.goto(f"{live_server.url}/login/")
    tab.fill("#id_username", "alice")
    tab.fill("#id_password", "alice-password")
    tab.click("button[type=submit]")
    tab.locator(".mainnav").wait_for()
    yield tab
    context.close()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_capacity_chart_draws_in_a_browser(tab, live_server, run, tmp_path):
    run = steps_report(run)
    page = tab

    page.goto(f"{live_server.url}{run.get_absolute_url()}")

    wait_for_js(page, "document.getElementById('chart-capacity').dataset.levels === '4'")
    wait_for_js(page, "Number(document.getElementById('charts').dataset.points) > 0")
    assert page.locator("#capacity-sentence").inner_text().startswith("Holds 40 users within its thresholds")
    page.locator("#chart-capacity").screenshot(path=str(tmp_path / "capacity.png"))
    assert page.errors == []


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_capacity_chart_draws_a_measured_ceiling_in_place_of_a_model(tab, live_server, run):
    run = steps_run(run, FOUR_SLOTS_USERS, thresholds={})
    fill_levels(run, FOUR_SLOTS)
    finished(run)
    page = tab

    page.goto(f"{live_server.url}{run.get_absolute_url()}")

    wait_for_js(page, "document.getElementById('chart-capacity').dataset.ceiling === '189.67'")
    line = page.evaluate("() => Chart.getChart('chart-capacity').data.datasets.at(-1)")
    assert line["label"] == "measured ceiling" and line["data"] == [{"x": 4, "y": 189.67}, {"x": 16, "y": 189.67}]
    assert page.evaluate("() => document.getElementById('chart-capacity').dataset.model") == "0"
    assert page.errors == []


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_capacity_chart_draws_the_fitted_curve_in_a_browser(tab, live_server, run, tmp_path):
    run = steps_run(run, USL_USERS, thresholds={})
    fill_levels(run, USL_LEVELS)
    finished(run)
    page = tab

    page.goto(f"{live_server.url}{run.get_absolute_url()}")

    wait_for_js(page, "Number(document.getElementById('chart-capacity').dataset.model) > 0")
    labels = page.evaluate("() => Chart.getChart('chart-capacity').data.datasets.map((d) => d.label)")
    assert labels[-2:] == ["USL model", "USL model (extrapolated)"]
    last = page.evaluate("() => Chart.getChart('chart-capacity').data.datasets.at(-1).data.at(-1).x")
    assert last == 100  # 1.25 × the last level of 80 users
    page.locator("#chart-capacity").screenshot(path=str(tmp_path / "usl.png"))
    assert page.errors == []


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_time_charts_mark_the_onset_in_a_browser(tab, live_server, run, tmp_path):
    run = long_run(run)
    fill(run, range(RAMP_UP + HOLD), pages=shape(lambda s: 100 if s < 200 else 50), apd_ms=lambda s: 20.0)
    finished(run)
    page = tab

    page.goto(f"{live_server.url}{run.get_absolute_url()}")

    wait_for_js(page, "Number(document.getElementById('charts').dataset.points) > 0")
    assert page.locator("#charts").get_attribute("data-degradation-marker") == "1"
    # the marker is drawn: the throughput chart has red pixels in the column of second 200
    red = page.evaluate(
        """() => {
          const chart = Chart.getChart('chart-throughput');
          const x = Math.round(chart.scales.x.getPixelForValue(200) * devicePixelRatio);
          const y = Math.round((chart.chartArea.top + chart.chartArea.bottom) / 2 * devicePixelRatio);
          const ctx = chart.canvas.getContext('2d');
          for (let dx = -2; dx <= 2; dx++) {
            for (let dy = -6; dy <= 6; dy++) {
              const [r, g, b] = ctx.getImageData(x + dx, y + dy, 1, 1).data;
              if (r > 150 && g < 80 && b < 80) return true;
            }
          }
          return false;
        }"""
    )
    page.locator("#charts").screenshot(path=str(tmp_path / "charts.png"))
    assert red is True
    assert page.errors == []


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_time_charts_shade_from_began_to_crossed_in_a_browser(tab, live_server, run, tmp_path):
    run = long_run(run)
    leak(run)
    finished(run)
    d = run.summary["degradation"]
    page = tab

    page.goto(f"{live_server.url}{run.get_absolute_url()}")

    wait_for_js(page, "Number(document.getElementById('charts').dataset.points) > 0")
    assert page.locator("#charts").get_attribute("data-began") == str(d["began_s"])
    # halfway between began and crossed, near the top of the latency chart, the band is orange
    orange = page.evaluate(
        """([began, crossed]) => {
          const chart = Chart.getChart('chart-latency');
          const x = Math.round(chart.scales.x.getPixelForValue((began + crossed) / 2) * devicePixelRatio);
          const y = Math.round((chart.chartArea.top + 4) * devicePixelRatio);
          const [r, g, b] = chart.canvas.getContext('2d').getImageData(x, y, 1, 1).data;
          return [r, g, b];
        }""",
        [d["began_s"], d["crossed_s"]],
    )
    page.locator("#charts").screenshot(path=str(tmp_path / "began.png"))
    r, g, b = orange
    assert r > g > b and r - b > 30, orange
    assert page.errors == []


# --------------------------------------------------------------------------------------
# The API carries the three answers (issue 19)
# --------------------------------------------------------------------------------------


def test_the_api_carries_when_a_leak_began_and_when_it_crossed(alice, run):
    from tests.portal.api.conftest import session

    run = long_run(run)
    leak(run, began_at=150)
    finished(run)

    for url in (f"/api/v1/runs/{run.code}/", f"/api/v1/runs/{run.code}/summary.json"):
        d = session(alice).get(url).json()["summary"]["degradation"]
        low, high = d["began_interval_s"]
        assert low <= 150 <= high and low <= d["began_s"] <= high < d["crossed_s"] == d["onset_s"], (url, d)
        assert d["began_sentence"].startswith("APD has been rising since 2 min "), (url, d)


def test_the_api_carries_the_scalability_model_and_a_capacity_searchs_answer(alice, run):
    from tests.portal.api.conftest import session

    run = search_run(run, USL_USERS, USL_LEVELS, thresholds={})
    services.run_finalize(run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE

    for url in (f"/api/v1/runs/{run.code}/", f"/api/v1/runs/{run.code}/summary.json"):
        body = session(alice).get(url).json()
        cap = body["summary"]["capacity"]
        m = cap["model"]
        assert m["fitted"] is True and m["sigma"] == pytest.approx(0.1, abs=0.01), (url, m)
        assert {"lambda", "sigma", "kappa", "peak_users", "peak_pages_per_s", "r2", "levels"} <= set(m)
        assert [lv["n"] for lv in m["levels"]] == USL_USERS
        assert all(lv["predicted_pages_per_s"] > 0 for lv in m["levels"])
        assert cap["search"] is True and cap["capacity_users"] == USL_USERS[-1], (url, cap)
        assert cap["answer"].startswith(f"Capacity: {USL_USERS[-1]} users"), cap["answer"]


def test_a_comparison_says_when_each_runs_degradation_began(alice, alice_client, run):
    from portal.history.comparison import compare_sides, side_for_run
    from tests.portal.api.conftest import session

    # given: a run that held, then a run with a leak from second 150
    steady = long_run(run)
    fill(steady, range(RAMP_UP + HOLD), pages=shape(wobble(100)), apd_ms=lambda s: 20.0)
    finished(steady)
    leaky = plan_run(run.plan, number=2, plan_snapshot=run.plan_snapshot, created_by=alice, start_at=None)
    leaky = long_run(leaky)
    leak(leaky, began_at=150)
    finished(leaky)
    d = leaky.summary["degradation"]

    # when: the two are compared
    report = compare_sides(side_for_run(steady), side_for_run(leaky))

    # then: the report, its page and the API say when the leaky run's drift began (the steady one has nothing to say)
    assert [(a["side"], a["number"], a["began_s"], a["crossed_s"]) for a in report.answers] == [
        ("after", 2, d["began_s"], d["crossed_s"])
    ]
    assert report.answers[0]["degradation"] == d["began_sentence"]
    url = reverse("history:compare", args=[run.project.code]) + f"?a={steady.code}&b={leaky.code}"
    page = alice_client.get(url).content.decode()
    assert 'id="compare-answers"' in page and d["began_sentence"] in page
    body = (
        session(alice)
        .get(f"/api/v1/projects/{run.project.code}/compare/", {"a": str(steady.code), "b": str(leaky.code)})
        .json()
    )
    assert body["answers"] == [
        {
            "side": "after",
            "run": str(leaky.code),
            "capacity": None,
            "degradation": d["began_sentence"],
            "began_s": d["began_s"],
            "crossed_s": d["crossed_s"],
        }
    ]


def test_the_stakeholder_headline_of_a_steps_run_quotes_its_top_level(alice_client, run):
    # given: 5, 10 and 20 users serving 3, 7 and 14 pages/s (the totals' mean over the windows is 8)
    import re

    from tests.portal.sharing.test_share_links import public, share

    run = steps_run(run, [5, 10, 20], thresholds={})
    fill_levels(run, [(3, 100.0), (7, 120.0), (14, 150.0)])
    finished(run)
    assert run.summary["totals"]["pages_per_s"] == pytest.approx(8.0)

    _, token = share(alice_client, run.project, kind="run", run=run.code)
    html = public(token).content.decode()

    # then: the sentence that names 20 users quotes the 20-user level's own figures
    headline = re.search(r'id="share-headline">(.*?)</p>', html, re.S).group(1)
    assert "at its top level, 20 users, served 14 pages/s at an average page duration of 150 ms" in headline
    assert "8 pages/s" not in headline
