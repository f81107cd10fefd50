"""The plan form's scripts in a real browser: the kind's fields, the levels, and the live preview chart.

Chromium is Debian's (/usr/bin/chromium); Playwright never downloads a browser.
"""

import pytest

from portal.projects.models import Plan

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser, live_server, alice, tmp_path):
    # bypass_csp: Playwright's wait_for_function evaluates its predicate with eval, which the
    # page's Content-Security-Policy refuses (tests/portal/runs/test_csp_browser.py runs pages under it).
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()
    yield page
    page.screenshot(path=str(tmp_path / "last.png"), full_page=True)
    context.close()


def _points(page) -> int:
    return int(page.locator("#profile-preview").get_attribute("data-points") or 0)


def test_choose_a_kind_add_levels_and_watch_the_chart(page, live_server, project, environment):
    # given: the new plan form, drawn with the default ramp
    page.goto(f"{live_server.url}/projects/{project.code}/plans/new/")
    page.wait_for_function("Number(document.getElementById('profile-preview').dataset.points) > 0")
    assert page.locator("#id_users").is_visible()
    assert not page.locator("#id_rate").is_visible()
    assert not page.locator("#level-rows").is_visible()

    # when: the kind becomes arrival rate
    page.select_option("#id_profile_kind", "arrival_rate")
    # then: only its fields show, and the chart follows
    assert page.locator("#id_rate").is_visible() and page.locator("#id_max_users").is_visible()
    assert not page.locator("#id_users").is_visible() and not page.locator("#id_ramp_down").is_visible()
    page.fill("#id_rate", "20")
    page.fill("#id_max_users", "100")
    page.wait_for_function("document.getElementById('profile-summary').textContent.includes('20 iterations/s')")

    # when: a bad value is typed
    page.fill("#id_hold", "0")
    # then: no chart, the error instead
    page.locator("#profile-errors li").first.wait_for()
    assert "Hold (s): Ensure this value is greater than or equal to 1." in page.locator("#profile-errors").inner_text()
    assert _points(page) == 0

    # when: the kind becomes steps and a level is added
    page.select_option("#id_profile_kind", "steps")
    rows = page.locator("#level-rows tr.level-row")
    assert rows.count() == 1  # the first level, from the ramp's values
    page.fill("#id_levels-0-users", "20")
    page.get_by_role("button", name="Add level").click()
    # then: the new level starts as a copy of the last one, and two windows are drawn
    assert rows.count() == 2
    assert page.input_value("#id_levels-1-users") == "20"
    page.fill("#id_levels-1-users", "50")
    page.wait_for_function(
        "document.getElementById('profile-summary').textContent.startsWith('2 levels: 20 → 50 users')"
    )
    assert _points(page) > 0

    # when: the form is saved
    page.fill("#id_name", "Suite")
    page.get_by_role("button", name="Create plan").click()
    page.wait_for_url(f"{live_server.url}/plans/*/")
    # then
    plan = Plan.objects.get(name="Suite")
    assert plan.profile_kind == "steps"
    assert list(plan.levels.values_list("users", flat=True)) == [20, 50]
    page.wait_for_function("Number(document.getElementById('profile-preview').dataset.points) > 0")


def test_remove_a_level(page, live_server, project, environment):
    # given: a steps plan of two levels
    plan = Plan.objects.create(project=project, environment=environment, name="Suite", profile_kind="steps")
    plan.levels.create(users=10, hold=60, position=0)
    plan.levels.create(users=20, hold=60, position=1)
    page.goto(f"{live_server.url}{plan.get_absolute_url()}edit/")
    # the empty row offered without JavaScript is gone
    assert page.locator("#level-rows tr.level-row").count() == 2
    # when
    page.locator("#level-rows tr.level-row").nth(0).get_by_label("remove").check()
    page.wait_for_function("document.getElementById('profile-summary').textContent.startsWith('1 level: 20 users')")
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(f"{live_server.url}{plan.get_absolute_url()}")
    # then
    assert list(plan.levels.values_list("users", flat=True)) == [20]
