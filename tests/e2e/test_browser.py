"""A person's path in a real browser: log in, write a test case, run it, read the report.

Chromium is Debian's (/usr/bin/chromium); Playwright never downloads a browser.
"""

import re

import pytest

from portal.projects.models import Environment, Plan
from portal.runs.models import PageInterval, Run

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser, tmp_path):
    # bypass_csp: Playwright's wait_for_function evaluates its predicate with eval, which the
    # page's Content-Security-Policy refuses (tests/portal/runs/test_csp_browser.py runs pages under it).
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    page.screenshot(path=str(tmp_path / "last.png"), full_page=True)
    context.close()


def test_log_in_write_a_test_case_run_it_and_read_the_report(
    page, live_server, alice, project, demo_target, celery_worker
):
    # given: an environment on the demo target and an empty plan (made by an earlier visit)
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)
    plan = Plan.objects.create(
        project=project, environment=env, name="Two pages", users=3, ramp_up=0, hold=4, threshold_apd_ms=5000
    )
    demo_target.reset()

    # when: alice logs in
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.get_by_role("link", name="Intranet").click()

    # and writes a test case with two steps, without a page reload between them
    page.get_by_role("link", name="Add test case").click()
    page.fill("#id_name", "Browse two pages")
    page.get_by_role("button", name="Create test case").click()
    for name, path in (("Home", "/"), ("Articles", "/articles")):
        page.get_by_role("link", name="Add step").click()
        page.fill("#id_step_new_name", name)
        page.fill("#id_step_new_path", path)
        page.fill("#id_step_new_think_time", "0.2")
        page.locator("form.step-form").get_by_role("button", name="Add step").click()
        page.locator("#steps li", has_text=path).wait_for()
    assert page.locator("#steps > ol > li, #steps li[id^=step-]").count() == 2

    # and adds it to the plan's mix and presses Run
    page.goto(f"{live_server.url}{plan.get_absolute_url()}")
    page.locator("form.mix-add select").select_option(label="Browse two pages")
    page.get_by_role("button", name="Add to mix").click()
    page.locator("#mix td", has_text="Browse two pages").wait_for()
    page.locator("button.run-button").click()  # not the "Run N trials" form

    # then: the live page shows progress, and turns into the report when the run ends
    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]+/$"))
    page.locator("#summary").wait_for(timeout=60_000)
    run = Run.objects.get()
    assert run.status == Run.Status.PASSED, run.error_message
    assert page.locator("[data-status]").first.inner_text() == "Passed"
    pages_table = page.locator("#pages").inner_text()
    assert "Browse two pages: Home" in pages_table and "Browse two pages: Articles" in pages_table
    # the report's page count is what the database holds for the window, and the target served them all
    shown = int(page.locator('[data-figure="pages"]').inner_text().replace(",", ""))
    assert shown == run.summary["totals"]["pages"] > 0
    recorded = sum(PageInterval.objects.filter(run=run).values_list("hits", flat=True))
    assert recorded == demo_target.counters()["requests"]
    # the charts were drawn from the series endpoint
    page.wait_for_function("document.getElementById('charts').dataset.points > 0")
