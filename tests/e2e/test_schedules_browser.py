"""The Schedules page in Chromium, under the site's CSP: the reading as you type, and the sparkline drawn."""

import pytest

from portal.runs.models import Run
from portal.schedules.models import ScheduleFire
from portal.schedules.services import schedules_tick
from tests.portal.schedules.conftest import nightly, utc  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_preview_as_you_type_and_the_sparkline(browser, live_server, alice, project, nightly):  # noqa: F811
    for day in range(3):
        schedules_tick(now=utc(2026, 5, 1 + day, 2, 0, 5))
        fire = ScheduleFire.objects.get(due_at=utc(2026, 5, 1 + day, 2))
        Run.objects.filter(id=fire.run_id).update(
            status="passed", summary={"totals": {"apd_ms": 100.0 + day, "pages_per_s": 20.0 - day}}
        )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors = []
    # Only script errors count (a missing favicon is a console error too).
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/projects/{project.code}/schedules/")

    # The sparkline is drawn by the page's static script (no inline code: CSP allows it).
    page.wait_for_selector("canvas.schedule-sparkline")
    drawn = page.locator("canvas.schedule-sparkline").evaluate("c => !!Chart.getChart(c)")
    assert drawn

    # Typing a time reads the schedule back with its next fires, through HTMX.
    page.select_option("#id_kind", "weekdays")
    page.fill("#id_at_time", "03:15")
    page.fill("#id_time_zone", "Europe/Berlin")
    page.locator("#schedule-reading", has_text="Europe/Berlin").wait_for()
    assert page.inner_text("#schedule-reading") == "At 03:15, Monday through Friday (Europe/Berlin)"
    assert page.locator("#schedule-next-fires li").count() == 5
    assert errors == []
    context.close()
