"""Server series in the results history: a comparison shows them beside the load figures."""

from datetime import timedelta

import pytest
from django.urls import reverse

from portal.history import journey
from portal.history.comparison import compare_sides, side_for_trialset
from portal.metrics.models import MetricCollection, ServerSample
from portal.telemetry.countersets import DEMO
from tests.portal.history.test_comparison import make_trialset
from tests.portal.history.test_journey import T0, make_change, make_run  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def scrape_demo(run, cpu_share: float, pages_per_s: float):
    """Scrapes every second of the run's window: CPU ``cpu_share`` of a core, requests at ``pages_per_s``."""
    MetricCollection.objects.create(
        run=run,
        interval_s=1,
        servers=[{"id": 1, "name": "web", "url": "http://127.0.0.1:1/metrics", "counter_set": "demo"}],
    )
    keys = [s.key for s in DEMO.series]
    for tick in range(0, 8):
        values = [None] * len(keys)
        values[keys.index("cpu")] = tick * cpu_share  # CPU seconds: a counter
        values[keys.index("requests")] = tick * pages_per_s
        ServerSample.objects.create(run=run, server_id=1, tick=tick, offset_s=float(tick), values=values)


def test_cpu_per_100_pages_per_s_and_the_main_series_before_and_after(plan):
    before = make_trialset(plan, [100, 100, 100], label="Baseline", pages=10)
    after = make_trialset(plan, [100, 100, 100], label="After", pages=10)
    for run in before.runs.all():
        scrape_demo(run, 0.38, 10)
    for run in after.runs.all():
        scrape_demo(run, 0.21, 10)

    report = compare_sides(side_for_trialset(before), side_for_trialset(after))
    rows = {r.figure: r for r in report.servers}

    cpu100 = rows["web: CPU per 100 pages/s"]
    assert cpu100.before_text == "380 %" and cpu100.after_text == "210 %"  # 38 % of a core at 10 pages/s
    assert cpu100.change_text == "44.7 % less"
    assert rows["web: Process CPU (of one core)"].before_text == "38 %"
    assert rows["web: Requests"].verdict == "within noise"  # the same work on both sides


def test_no_server_rows_when_a_side_was_not_scraped(plan):
    before = make_trialset(plan, [100], label="Baseline")
    after = make_trialset(plan, [100], label="After")
    for run in after.runs.all():
        scrape_demo(run, 0.2, 10)
    assert compare_sides(side_for_trialset(before), side_for_trialset(after)).servers == []


def test_the_journey_shows_a_changes_effect_on_the_servers(plan, make_run, make_change, alice_client):  # noqa: F811
    env = plan.environment
    for i in range(3):
        scrape_demo(make_run(plan, T0 + timedelta(minutes=i), 400, pages_per_s=10.0), 0.38, 10)
    garden = make_change(env, 1, "Web garden: 3 processes", T0 + timedelta(hours=1))
    for i in range(3):
        run = make_run(plan, T0 + timedelta(hours=2, minutes=i), 200, change=garden, pages_per_s=10.0)
        scrape_demo(run, 0.21, 10)

    (effect,) = journey.environment_journey(env, plan)["effects"]
    rows = {r["figure"]: r for r in effect["servers"]}
    assert (rows["web: CPU per 100 pages/s"]["before_text"], rows["web: CPU per 100 pages/s"]["after_text"]) == (
        "380 %",
        "210 %",
    )
    assert rows["web: CPU per 100 pages/s"]["verdict"] == "better"

    html = alice_client.get(reverse("history:environment-journey", args=[env.code])).content.decode()
    assert "web: CPU per 100 pages/s: 380 % → 210 %" in html
