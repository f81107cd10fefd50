"""The run page's drill-down and zoom in Chromium, under the enforced Content-Security-Policy.

Click a page, drag over a chart: the figures the page shows are checked against the rows
in the database (merged here, apart from the code under test).
"""

import pytest
from django.utils import timezone

from portal.runs import analysis
from portal.runs.models import PageInterval, Run
from tests.conftest import wait_for_js
from workers.engine.histogram import Histogram

from .factories import add_second


def _finished_run(run):
    for s in range(60):
        add_second(
            run,
            s,
            labels={
                "Home": ([10.0 + s, 20.0 + 2 * s, 40.0 + s], {"timeout": 1} if s % 7 == 2 else {}),
                "Search": ([30.0, 31.0], {}),
            },
        )
    Run.objects.filter(id=run.id).update(
        status=Run.Status.PASSED,
        start_at=timezone.now() - timezone.timedelta(minutes=2),
        finished_at=timezone.now(),
        summary=analysis.summarize(run),
    )
    return Run.objects.get(id=run.id)


def _figures(page, box: str) -> dict:
    stats = f"[...document.querySelectorAll('{box} .stat')]"
    return page.evaluate(f"Object.fromEntries({stats}.map(s => [s.dataset.figure, s.dataset.value]))")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_drill_into_a_page_and_zoom_on_a_range(browser, live_server, alice, run):
    run = _finished_run(run)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    problems = []
    page.on("console", lambda m: m.type == "error" and problems.append(m.text))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()
    page.goto(f"{live_server.url}{run.get_absolute_url()}")
    wait_for_js(page, "Number(document.getElementById('charts').dataset.points) > 0")
    wait_for_js(page, "document.getElementById('chart-distribution').dataset.series === '1'")

    # when: a page is clicked in the report's table
    page.click("button.page-drill[data-page='Home']")
    wait_for_js(page, "document.getElementById('page-detail').dataset.page === 'Home'")

    # then: its figures are the table's, its charts one point per second, and its distribution joins the chart
    home = next(p for p in run.summary["pages"] if p["label"] == "Home")
    shown = _figures(page, "#page-detail-figures")
    assert float(shown["apd_ms"]) == home["apd_ms"] and int(shown["pages"]) == home["pages"]
    assert float(shown["p95_ms"]) == home["p95_ms"]
    assert page.locator("#page-detail").get_attribute("data-points") == "60"
    assert page.locator("#page-detail-errors tbody tr").count() == 1
    wait_for_js(page, "document.getElementById('chart-distribution').dataset.series === '2'")

    # when: a range is dragged over the page-duration chart
    page.locator("#chart-latency").scroll_into_view_if_needed()
    box = page.locator("#chart-latency").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.35, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
    page.mouse.move(box["x"] + box["width"] * 0.65, y, steps=5)
    page.mouse.up()
    wait_for_js(page, "document.getElementById('range-figures').dataset.from !== undefined")

    # then: every chart shows that range, and the range's figures are those of its rows in the database
    lo = int(page.locator("#range-figures").get_attribute("data-from"))
    hi = int(page.locator("#range-figures").get_attribute("data-to"))
    assert 0 < lo < hi < 60
    axes = page.evaluate(
        "Object.values(window.PlimsollRunCharts.charts).map(c => [c.options.scales.x.min, c.options.scales.x.max])"
    )
    assert axes == [[lo, hi]] * 4
    rows = PageInterval.objects.filter(run=run, label="Home", second__gte=lo, second__lt=hi)
    merged = Histogram()
    for r in rows:
        merged.merge(Histogram.from_dict(r.hist))
    ranged = _figures(page, "#range-stats")
    assert page.locator("#range-figures").get_attribute("data-page") == "Home"
    assert int(ranged["pages"]) == sum(r.pages for r in rows)
    assert float(ranged["apd_ms"]) == round(merged.mean / 1000, 2)
    assert float(ranged["p99_ms"]) == round(merged.percentile(99) / 1000, 2)
    assert float(ranged["pages_per_s"]) == round(sum(r.pages for r in rows) / (hi - lo), 3)
    assert page.locator("#range-title").inner_text().startswith(f"Seconds {lo}–{hi}")

    # when: the zoom is reset
    page.click("#zoom-reset")
    wait_for_js(page, "document.getElementById('range-figures').hidden")
    full = page.evaluate("window.PlimsollRunCharts.charts.latency.options.scales.x.min")
    context.close()
    assert full == 0
    assert problems == []
