"""The drill-down's slowest requests in Chromium, under the enforced Content-Security-Policy: trace ids as links."""

import pytest
from django.utils import timezone

from portal.projects.models import Environment
from portal.runs import analysis
from portal.runs.models import Run, SlowTrace
from tests.conftest import wait_for_js

from .factories import add_second


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_drilldown_links_the_slowest_requests_to_their_traces(browser, live_server, alice, run):
    for s in range(30):
        add_second(run, s, labels={"Home": ([10.0, 20.0 + s], {}), "Search": ([30.0], {})})
        trace_id = f"{0xABC0 + s:032x}"
        SlowTrace.objects.create(run=run, shard_no=0, second=s, label="Home", ms=20.0 + s, trace_id=trace_id)
    Run.objects.filter(id=run.id).update(
        status=Run.Status.PASSED,
        start_at=timezone.now() - timezone.timedelta(minutes=1),
        finished_at=timezone.now(),
        summary=analysis.summarize(run),
    )
    Environment.objects.filter(pk=run.environment_id).update(
        trace_url_template="https://tempo.example/trace/{trace_id}"
    )
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

    page.click("button.page-drill[data-page='Home']")
    wait_for_js(page, "document.getElementById('page-detail').dataset.page === 'Home'")

    rows = page.locator("#page-detail-slowest tbody tr")
    assert rows.count() > 0
    first = rows.nth(0).locator("a")
    expected = SlowTrace.objects.filter(run=run).order_by("-ms").first()  # within the window: checked below
    shown_id = first.inner_text()
    assert first.get_attribute("href") == f"https://tempo.example/trace/{shown_id}"
    assert SlowTrace.objects.filter(run=run, trace_id=shown_id).exists()
    ms = [float(rows.nth(i).locator("td").nth(2).get_attribute("data-value")) for i in range(rows.count())]
    assert ms == sorted(ms, reverse=True) and ms[0] <= expected.ms
    assert page.locator("#page-detail-no-slowest").is_hidden()

    # Search has no trace ids: the table says so
    page.click("button.page-drill[data-page='Search']")
    wait_for_js(page, "document.getElementById('page-detail').dataset.page === 'Search'")
    wait_for_js(page, "document.querySelectorAll('#page-detail-slowest tbody tr').length === 0")
    assert page.locator("#page-detail-no-slowest").is_visible()
    assert problems == []
    context.close()
