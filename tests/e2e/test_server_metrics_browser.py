"""The Servers section in Chromium: drawn live while the run runs, and in the report after it."""

import pytest

from portal.projects.models import Environment, MixEntry, Plan, Server, Step, TestCase
from portal.runs.models import Run
from portal.runs.services import run_create
from tests.conftest import wait_for_js

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_server_charts_live_and_in_the_report(
    browser, live_server, alice, project, demo_target, celery_worker, tmp_path
):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url, metrics_interval_s=1)
    Server.objects.create(
        environment=env, name="demo", metrics_url=f"{demo_target.base_url}/metrics", counter_set="demo"
    )
    tc = TestCase.objects.create(project=project, name="Home")
    Step.objects.create(test_case=tc, name="Home", path="/", think_time=0.1)
    plan = Plan.objects.create(project=project, environment=env, name="Short", users=3, ramp_up=0, hold=8)
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-password")
        page.click("button[type=submit]")
        run = run_create(plan=plan, user=alice)
        # live: opened while the run is queued, the section appears with the first scrapes
        page.goto(f"{live_server.url}{run.get_absolute_url()}")
        wait_for_js(
            page,
            "(() => { const c = document.querySelector('#server-charts canvas'); return c && c.dataset.points > 1 })()",
            timeout=30,
        )
        assert page.locator("#servers").is_visible()
        # the report: after the run the page reloads itself, with the window's table and the chart
        page.wait_for_selector("#summary", timeout=60_000)
        assert Run.objects.get(id=run.id).status == Run.Status.FINISHED
        wait_for_js(page, "document.querySelector('#server-charts').dataset.loaded === '1'", timeout=30)
        assert int(page.locator("#server-charts canvas").first.get_attribute("data-points")) >= 8
        table = page.locator("table.server-window").first
        assert "Process CPU" in table.inner_text() and "Requests" in table.inner_text()
        assert errors == []
    finally:
        page.screenshot(path=str(tmp_path / "servers.png"), full_page=True)
        context.close()
