"""The pages work under their Content-Security-Policy, in Chromium (no bypass).

A browser silently refuses what the policy forbids (an inline script, a style attribute,
an eval) and reports it on the console: this test visits pages with charts, forms and
HTMX and requires no such report, no script error, and the charts drawn.
"""

import time

import pytest
from django.urls import reverse

from .test_capacity_degradation import HOLD, RAMP_UP, fill, finished, long_run, shape


def _wait(page, expression: str, timeout: float = 10.0):
    # page.evaluate goes through the DevTools protocol, which the policy does not govern
    # (unlike wait_for_function, which evals inside the page).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if page.evaluate(expression):
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {expression}")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_pages_run_under_the_policy_without_violations(browser, live_server, alice, run, plan):
    # given: a finished long run (time charts with the degradation marker)
    run = long_run(run)
    fill(run, range(RAMP_UP + HOLD), pages=shape(lambda s: 100 if s < 200 else 50), apd_ms=lambda s: 20.0)
    finished(run)
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    problems = []
    page.on("console", lambda m: "Content Security Policy" in m.text and problems.append(m.text))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()
    # when
    response = page.goto(f"{live_server.url}{run.get_absolute_url()}")
    _wait(page, "Number(document.getElementById('charts').dataset.points) > 0")
    degradation_marker = page.locator("#charts").get_attribute("data-degradation-marker")
    page.goto(f"{live_server.url}{reverse('projects:plan-edit', args=[plan.code])}")
    _wait(page, "Number(document.getElementById('profile-preview').dataset.points) > 0")
    page.goto(f"{live_server.url}{reverse('accounts:teams')}")
    page.goto(f"{live_server.url}{plan.environment.get_absolute_url()}")
    context.close()
    # then
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert degradation_marker == "1"
    assert problems == []
