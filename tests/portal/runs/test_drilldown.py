"""The drill-down data of a run (portal/runs/results/drilldown.py): the series, figures and distribution.

Every figure is checked against the interval rows themselves (summed and merged here, apart
from the code under test), and the downsampling of a 12-hour series against a stall of one second.
"""

import pytest
from django.urls import reverse

from portal.runs import analysis, services
from portal.runs.models import PageInterval, PageRollup, Run, RunFigures, ShardInterval
from portal.runs.results import drilldown
from workers.engine.histogram import Histogram

from .factories import add_second

pytestmark = pytest.mark.django_db


def _record(run, seconds=40):
    """Two pages a second over ``seconds``: Home gets slower with time, Search stays at 30 ms with a few errors."""
    for s in range(seconds):
        add_second(
            run,
            s,
            labels={
                "Home": ([10.0 + s, 20.0 + 2 * s, 40.0 + s], {}),
                "Search": ([30.0, 30.0], {"http_500": 1} if s % 10 == 3 else {}),
            },
        )
    return run


def _from_rows(run, label, lo, hi):
    """A range's figures computed straight from its rows: pages, errors, merged histogram."""
    rows = PageInterval.objects.filter(run=run, label=label, second__gte=lo, second__lt=hi)
    h = Histogram()
    for r in rows:
        h.merge(Histogram.from_dict(r.hist))
    return sum(r.pages for r in rows), sum(r.errors for r in rows), h


def test_a_ranges_figures_are_those_of_its_rows(alice_client, run):
    _record(run)
    url = reverse("runs:detail-data", args=[run.code])

    data = alice_client.get(url, {"page": "Home", "from": 10, "to": 20}).json()

    pages, errors, h = _from_rows(run, "Home", 10, 20)
    f = data["figures"]
    assert data["range"] == {"from": 10, "to": 20, "of": "range"}
    assert (f["pages"], f["errors"], f["seconds"]) == (pages, errors, 10)
    assert f["pages_per_s"] == pytest.approx(pages / 10)
    assert f["apd_ms"] == pytest.approx(h.mean / 1000, abs=0.01)
    assert f["p95_ms"] == pytest.approx(h.percentile(95) / 1000, abs=0.01)
    assert f["max_ms"] == pytest.approx(h.max / 1000, abs=0.01)
    assert data["series"]["t"] == list(range(10, 20))
    assert data["distribution"][0][0] == 50 and data["distribution"][-1][0] == 99.99
    assert [ms for _, ms in data["distribution"]] == sorted(ms for _, ms in data["distribution"])


def test_without_a_range_the_figures_are_the_reports(alice_client, run):
    _record(run)
    summary = analysis.summarize(run)

    data = alice_client.get(reverse("runs:detail-data", args=[run.code]), {"page": "Search"}).json()

    page = next(p for p in summary["pages"] if p["label"] == "Search")
    for key in ("pages", "errors", "apd_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms", "pages_per_s", "error_rate_pct"):
        assert data["figures"][key] == page[key], key
    assert data["range"]["of"] == "measurement window"
    assert data["errors"] == [{"kind": "http_500", "count": page["errors"], "sample": "sample http_500"}]
    # all pages: the report's totals
    only = alice_client.get(reverse("runs:detail-data", args=[run.code]), {"only": "distribution"}).json()
    assert only["distribution"] == summary["distribution"] and len(summary["distribution"]) == 21
    whole = alice_client.get(reverse("runs:detail-data", args=[run.code])).json()
    assert whole["distribution"] == summary["distribution"]  # from the rows, equal to what the summary keeps
    whole = whole["figures"]
    assert (whole["pages"], whole["apd_ms"], whole["p95_ms"]) == (
        summary["totals"]["pages"],
        summary["totals"]["apd_ms"],
        summary["totals"]["p95_ms"],
    )


def test_rolled_up_rows_give_the_same_figures_over_whole_minutes(alice_client, run):
    _record(run, seconds=130)
    url, query = reverse("runs:detail-data", args=[run.code]), {"page": "Home", "from": 0, "to": 120}
    before = alice_client.get(url, query).json()
    Run.objects.filter(id=run.id).update(status=Run.Status.PASSED)
    RunFigures.objects.create(run=run, series={}, batches=[])

    assert services.run_rollup(run.id) > 0
    assert not PageInterval.objects.filter(run=run).exists() and PageRollup.objects.filter(run=run).exists()

    after = alice_client.get(url, query).json()
    assert after["resolution_s"] == 60
    assert after["distribution"] == before["distribution"]
    assert after["figures"] == before["figures"]
    assert sum(after["series"]["pages_per_s"][i] * 60 for i in range(len(after["series"]["t"]))) == pytest.approx(
        sum(before["series"]["pages_per_s"])
    )


def test_a_one_second_stall_survives_the_downsampling_of_a_12_hour_series(alice_client, run):
    # given: 12 hours of one page at 20 ms, except one second at 5 s and one second without any page
    seconds, slow, silent = 12 * 3600, 30_000, 20_000
    normal, stalled = Histogram(), Histogram()
    for _ in range(4):
        normal.record(20_000)
        stalled.record(5_000_000)
    PageInterval.objects.bulk_create(
        [
            PageInterval(
                run=run,
                shard_no=0,
                second=s,
                label="Home",
                pages=4,
                hits=4,
                hist_bin=(stalled if s == slow else normal).to_bytes(),
            )
            for s in range(seconds)
            if s != silent
        ],
        batch_size=5000,
    )
    ShardInterval.objects.create(run=run, shard_no=0, second=seconds - 1, active_users=4)

    # when
    series = alice_client.get(reverse("runs:detail-data", args=[run.code]), {"page": "Home"}).json()["series"]

    # then: few points, and the stall is still the highest point and the silence a zero
    assert len(series["t"]) <= drilldown.MAX_POINTS
    bucket = series["bucket_s"]
    assert bucket == -(-seconds // drilldown.MAX_POINTS)
    at_slow, at_silent = slow // bucket, silent // bucket
    assert series["apd_max_ms"][at_slow] == 5000
    assert max(series["apd_max_ms"]) == 5000 and series["max_ms"][at_slow] == 5000
    assert series["apd_ms"][at_slow] < 1000  # the bucket's mean alone would have smoothed it away
    assert series["pages_per_s_min"][at_silent] == 0
    assert min(series["pages_per_s_min"][:at_silent] + series["pages_per_s_min"][at_silent + 1 :]) == 4


def test_the_detail_is_scoped_and_refuses_malformed_ranges(client, alice, charlie, run):
    _record(run, seconds=5)
    url = reverse("runs:detail-data", args=[run.code])

    client.force_login(charlie)
    assert client.get(url).status_code == 404
    client.force_login(alice)
    for bad in ({"from": "x"}, {"from": 10, "to": 5}, {"to": "-1"}, {"page": "x" * 300}):
        response = client.get(url, bad)
        assert response.status_code == 400, bad
        assert response.json()["error"]
