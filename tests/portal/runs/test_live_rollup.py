"""The live roll-up (issue 27): a run's per-second label rows older than the live window are rolled up
while it runs, and its finalize still computes the same figures as from every per-second row.

The reference is the analysis before issue 9 (tests/portal/runs/reference_analysis.py), computed
on the raw rows before the roll-up takes them. Runs are longer than a chart of 720 points, so a
chart point spans several seconds and the live spans are longer than a second.
"""

import pytest

from portal.history.comparison import compute_batches
from portal.runs import analysis
from portal.runs.models import PageInterval, PageRollup, RunFigures, ShardInterval
from portal.runs.results import read, rollup
from tests.portal.runs import reference_analysis
from tests.portal.runs.test_store import _finish, _json, _record

pytestmark = pytest.mark.django_db

LONG = {
    # 1,500 s: chart points of 3 s, batches of 150 s.
    "constant": ({"kind": "constant", "users": 4, "hold": 1500}, 2),
    # Windows that begin and end inside minutes (23 s ramps), chart points of 3 s.
    "steps": (
        {
            "kind": "steps",
            "levels": [
                {"users": 2, "ramp_up": 23, "hold": 700, "ramp_down": 0, "quiet": 0},
                {"users": 4, "ramp_up": 23, "hold": 700, "ramp_down": 7, "quiet": 0},
            ],
        },
        1,
    ),
}


@pytest.mark.parametrize("kind", sorted(LONG))
def test_a_run_rolled_up_while_live_finalizes_to_the_figures_of_its_raw_rows(run, settings, kind):
    settings.PLIMSOLL_LIVE_ROLLUP_AFTER = 60
    profile, shards = LONG[kind]
    run = _record(run, profile, shards=shards)
    expected_summary = _json(reference_analysis.summarize(run))
    expected_series = _json(reference_analysis.series(run))
    expected_batches = _json(list(compute_batches(run).items()))
    expected_pages = {}
    for second, pages in PageInterval.objects.filter(run=run).values_list("second", "pages"):
        expected_pages[second] = expected_pages.get(second, 0) + pages
    last = max(ShardInterval.objects.filter(run=run).values_list("second", flat=True))

    assert rollup.live_rollup(run.id, limit_s=600) > 0  # a tick rolls up at most limit_s seconds
    assert PageInterval.objects.filter(run=run, second__lt=600).count() == 0
    while rollup.live_rollup(run.id, limit_s=600):
        pass
    assert rollup.live_rollup(run.id) == 0  # idempotent: nothing left to roll up

    horizon = (last + 1 - 60) // 60 * 60
    assert not PageInterval.objects.filter(run=run, second__lt=horizon).exists()
    assert PageInterval.objects.filter(run=run, second__gte=last - 60).exists()  # the live window stays
    spans = list(PageRollup.objects.filter(run=run).values_list("span_s", flat=True))
    assert spans and max(spans) > 1 and all(s <= 60 for s in spans)
    assert not ShardInterval.objects.filter(run=run, second__lt=horizon, hist_bin__isnull=False).exists()
    assert ShardInterval.objects.filter(run=run, second__gte=horizon, hist_bin__isnull=False).exists()

    run = _finish(run)

    assert run.summary == expected_summary
    assert {k: v for k, v in analysis.series(run).items() if k != "since"} == expected_series
    assert RunFigures.objects.get(run=run).batches == expected_batches
    # What other apps read per second (the server metrics' hints) comes from the shards' rows, whole.
    assert read.pages_per_second(run) == expected_pages


def test_the_watchdogs_live_roll_up_takes_running_runs_only(run, settings):
    settings.PLIMSOLL_LIVE_ROLLUP_AFTER = 60
    run = _record(run, {"kind": "constant", "users": 4, "hold": 300}, shards=1)
    run.status = run.Status.FINISHING
    run.save(update_fields=["status"])
    rollup.live_rollup_due()
    assert rollup.live_rollup(run.id) == 0
    assert PageInterval.objects.filter(run=run, second__lt=60).exists()

    run.status = run.Status.RUNNING
    run.save(update_fields=["status"])
    rollup.live_rollup_due()  # what the watchdog's tick calls
    assert not PageInterval.objects.filter(run=run, second__lt=240).exists()
    assert PageInterval.objects.filter(run=run, second__gte=240).count() == 60 * 4


def test_live_spans_are_cut_where_the_finalize_groups_begin(run):
    run = _record(run, LONG["steps"][0], shards=1)
    cuts = set(rollup.live_cuts(run))
    last = max(ShardInterval.objects.filter(run=run).values_list("second", flat=True))
    windows = analysis.cut_windows(run, last)
    assert {w["start"] for w in windows} | {w["end"] for w in windows} <= cuts
    assert set(range(0, last + 1, analysis.chart_bucket(last))) <= cuts


def test_a_run_that_ends_before_its_plan_still_finalizes_after_a_live_roll_up(run, settings):
    """Spans were cut for 1,500 s; the run stops at 1,000 s, so its chart points (2 s) and batches
    (100 s) begin elsewhere: the finalize completes, the summary of its one window is that of the raw
    rows, and so is what the spans keep per second (a chart point's pages and APD, its worst second)."""
    import random

    from django.utils import timezone

    from portal.runs import services
    from portal.runs.models import Run, RunShard
    from tests.portal.runs.test_store import DEGRADATION, _report

    settings.PLIMSOLL_LIVE_ROLLUP_AFTER = 60
    run.plan_snapshot["profile"] = {"kind": "constant", "users": 4, "hold": 1500}
    run.analysis_settings = {"degradation": DEGRADATION}
    run.status, run.start_at, run.shard_count = Run.Status.RUNNING, timezone.now(), 1
    run.save()
    RunShard.objects.create(run=run, shard_no=0, user_count=2, status=RunShard.Status.RUNNING)
    sink, rng = services.ShardSink(run.id, 0), random.Random(3)
    for second in range(1000):
        sink(_report(rng, second))
    expected_summary = _json(reference_analysis.summarize(run))
    expected_series = _json(reference_analysis.series(run))

    while rollup.live_rollup(run.id):
        pass
    assert max(PageRollup.objects.filter(run=run).values_list("span_s", flat=True)) == 3  # cut for 1,500 s

    run = _finish(run)

    assert run.status == Run.Status.INCOMPLETE  # finalized (not left finishing, nor in error): it ended early
    assert run.summary == expected_summary
    series = analysis.series(run)
    # Per second exact (pages, durations' count and sum): a point's pages and APD, its worst second.
    for key in ("t", "users", "pages_per_s", "apd_ms", "apd_max_ms", "pages_per_s_min"):
        assert series[key] == expected_series[key]
