"""Change points in Chromium: the run where a plan's level moved lists the shift, and its change opens."""

from datetime import timedelta

import pytest

from tests.portal.schedules.test_change_points import DAY0, applied_change, history

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_run_page_lists_the_shift_and_opens_its_change(browser, live_server, alice, plan, environment):
    runs = history(plan, slow_from=20, labels={n: {"build": "3f2a1c" if n >= 20 else "a0a0a0"} for n in range(1, 41)})
    applied_change(environment, alice, "connection pool 50 → 20", DAY0 + timedelta(days=19, hours=12))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}{runs[19].get_absolute_url()}")

    row = page.locator("#change-points tr[data-page='Search'][data-figure='apd_ms']")
    assert row.is_visible()
    assert "run #" + str(runs[19].number) in row.inner_text() and "build 3f2a1c" in row.inner_text()
    row.get_by_role("link", name="‘connection pool 50 → 20’").click()
    page.wait_for_url("**/changes/**")
    assert "connection pool 50 → 20" in page.inner_text("h1")
    assert errors == []
    context.close()
