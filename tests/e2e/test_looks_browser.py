"""Looks and the Content-Security-Policy in Chromium, measured (issue 28, items 10–14).

One browser for the module and one live server; each test logs in once and measures what a
person would see: elements inside a 1366 px viewport, contrast of the brand, legend heights,
and no style or script refused by the policy. Screenshots land in the test's tmp_path.
"""

import pytest
from django.urls import reverse

from portal.projects.models import Step, TestCase
from tests.conftest import wait_for_js
from tests.portal.sharing.conftest import story  # noqa: F401 (a fixture: the TFS experiment as rows)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _context(browser, width=1366, height=900, **kw):
    context = browser.new_context(viewport={"width": width, "height": height}, **kw)
    page = context.new_page()
    page.set_default_timeout(10_000)
    return context, page


def _log_in(page, live_server, username="alice"):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()


def test_experiment_test_case_step_plan_and_api_docs_pages_break_no_policy(
    browser,
    live_server,
    alice,
    story,
    test_case,  # noqa: F811 (the fixture imported above)
):
    # given: an experiment with its trial sets, and a test case with a step
    step = Step.objects.filter(test_case=test_case).first()
    TestCase.objects.create(project=test_case.project, name="Search")  # not in the plan's mix: its form shows
    context, page = _context(browser)
    refused = []
    page.on("console", lambda m: "Content Security Policy" in m.text and refused.append(f"{page.url}: {m.text}"))
    page.on("pageerror", lambda exc: refused.append(f"{page.url}: {exc}"))
    try:
        _log_in(page, live_server)
        # when: alice opens each page
        page.goto(f"{live_server.url}{story['experiment'].get_absolute_url()}")
        page.goto(f"{live_server.url}{test_case.get_absolute_url()}")
        page.locator("#steps .step-actions a", has_text="Edit").first.click()  # the step's form, by HTMX
        page.locator("#steps form").first.wait_for()
        page.goto(f"{live_server.url}{reverse('projects:step-edit', args=[step.code])}")
        page.goto(f"{live_server.url}{story['experiment'].plan.get_absolute_url()}")  # the mix's weight field
        page.goto(f"{live_server.url}{reverse('api:docs')}")
        wait_for_js(page, "document.querySelector('.swagger-ui .info')", timeout=15)
        page.wait_for_timeout(300)
    finally:
        context.close()
    # then
    assert refused == []
