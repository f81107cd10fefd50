"""The run page's streams and WebSocket figures in Chromium, under the enforced Content-Security-Policy (issue 26):
the live chart draws them, a page's drill-down shows them, and they equal the report's."""

import pytest
from django.utils import timezone

from portal.runs import analysis
from portal.runs.models import Run
from tests.conftest import wait_for_js

from .test_drilldown_browser import _figures
from .test_protocols import stream_label, write, ws_label


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_run_page_charts_and_drills_into_stream_and_websocket_figures(browser, live_server, alice, run):
    for second in range(12):
        write(
            run, second, {"Ask": stream_label([40 + second, 60 + second]), "Chat": ws_label([5, 9], sent=2, received=2)}
        )
    Run.objects.filter(id=run.id).update(
        status=Run.Status.PASSED,
        start_at=timezone.now() - timezone.timedelta(minutes=1),
        finished_at=timezone.now(),
        summary=analysis.summarize(run),
    )
    run = Run.objects.get(id=run.id)
    ask = next(p for p in run.summary["protocols"]["pages"] if p["label"] == "Ask")
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
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

    # the chart shows once its data came: a point per second
    wait_for_js(page, "Number(document.getElementById('protocol-chart-box').dataset.points) === 12")
    assert page.locator("#protocol-chart-box").is_visible()
    assert page.locator("#protocols tbody tr").count() == 2

    # a page's drill-down adds its stream figures, those of the report's table
    page.click("button.page-drill[data-page='Ask']")
    wait_for_js(page, "document.getElementById('page-detail').dataset.page === 'Ask'")
    wait_for_js(page, "!document.getElementById('page-detail-protocols').hidden")
    shown = _figures(page, "#page-detail-protocols")
    assert float(shown["ttfe_p95"]) == ask["stream"]["ttfe_ms"]["p95"]
    assert int(shown["streams"]) == ask["stream"]["responses"] == 10  # the window: the plan's 5 s hold, 2 a second
    page.click("#page-detail-close")
    page.click("button.page-drill[data-page='Chat']")
    wait_for_js(page, "document.getElementById('page-detail').dataset.page === 'Chat'")
    wait_for_js(page, "document.querySelector('#page-detail-protocols [data-figure=ws_sent]') !== null")
    assert _figures(page, "#page-detail-protocols")["ws_sent"] == "10"
    assert not problems, problems
