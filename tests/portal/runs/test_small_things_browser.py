"""Small things users tripped over, checked in Chromium: long page names, one-click Stop and Remove."""

import pytest
from django.urls import reverse

from portal.accounts.models import Membership
from portal.runs.models import Run
from tests.conftest import wait_for_js

from .test_capacity_degradation import fill, fill_levels, finished, steps_run

# 100 characters, most of them without a space to break at, as generated or URL-like labels are.
LONG_NAME = "Checkout: /api/v2/orders/" + "x" * 75


def _logged_in(browser, live_server, *, width=1400):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()
    return context, page


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_long_page_name_keeps_the_report_within_the_viewport(browser, live_server, alice, run):
    # given: a finished run whose only page has a 100-character name
    assert len(LONG_NAME) == 100
    fill(run, range(0, 6), pages=lambda s: 10, apd_ms=lambda s: 20.0, label=LONG_NAME)
    finished(run)
    context, page = _logged_in(browser, live_server)
    # when
    page.goto(f"{live_server.url}{run.get_absolute_url()}")
    wait_for_js(page, "Number(document.getElementById('charts').dataset.points) > 0")
    width = page.evaluate("document.documentElement.scrollWidth")
    tooltip = page.locator("#pages td.page-name").get_attribute("title")
    context.close()
    # then
    assert width <= 1400
    assert tooltip == LONG_NAME


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_stop_asks_first(browser, live_server, alice, run):
    # given
    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING)
    context, page = _logged_in(browser, live_server)
    page.goto(f"{live_server.url}{run.get_absolute_url()}")
    asked = []
    # when: the question is dismissed
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.get_by_role("button", name="Stop").click()
    page.wait_for_timeout(500)
    # then: nothing happened
    assert asked and asked[0].startswith("Stop run #1?")
    assert Run.objects.get(id=run.id).status == Run.Status.RUNNING
    # when: accepted
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Stop").click()
    wait_for_js(page, "document.body.textContent.includes('Stopping') || document.body.textContent.includes('Cancel')")
    context.close()
    assert Run.objects.get(id=run.id).cancel_requested


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_remove_member_asks_first_and_add_member_has_labels(browser, live_server, alice, bob, team):
    context, page = _logged_in(browser, live_server)
    page.goto(f"{live_server.url}{reverse('accounts:teams')}")
    # the Add member form's fields are reachable by their labels
    assert page.get_by_label("Username", exact=True).count() == 1
    assert page.get_by_label("Role", exact=True).count() == 1
    remove = page.locator("tr", has_text="bob").get_by_role("button", name="Remove")
    # when: dismissed
    page.once("dialog", lambda d: d.dismiss())
    remove.click()
    page.wait_for_timeout(500)
    assert Membership.objects.filter(team=team, user=bob).exists()
    # when: accepted
    page.once("dialog", lambda d: d.accept())
    remove.click()
    page.wait_for_load_state()
    page.locator(".messages").wait_for()
    context.close()
    assert not Membership.objects.filter(team=team, user=bob).exists()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_capacity_label_stays_inside_the_chart_when_the_top_level_is_the_capacity(browser, live_server, alice, run):
    import json

    # given: every level holds, so the capacity is the last (right-most) level
    run = steps_run(run, [10, 20, 40], thresholds={"apd_ms": 1000})
    fill_levels(run, [(50, 100.0), (100, 110.0), (200, 120.0)])
    finished(run)
    assert run.summary["capacity"]["capacity_users"] == 40
    context, page = _logged_in(browser, live_server)
    # when
    page.goto(f"{live_server.url}{run.get_absolute_url()}")
    marks = json.loads(wait_for_js(page, "document.getElementById('chart-capacity').dataset.marks"))
    context.close()
    # then
    (left, right), label = marks["area"], next(m for m in marks["drawn"] if m["label"] == "capacity")
    assert left <= label["left"] < label["right"] <= right
