"""How an HTMX panel reports an error, in Chromium under the Content-Security-Policy (task H).

htmx 2 swaps no 4xx/5xx answer by default, so a refusal answered with an honest 400 left the user
with nothing on screen. base.html's htmx-config (responseHandling) swaps a 4xx fragment into its
target; static/js/htmx-errors.js shows one message in #htmx-messages for a 4xx whole page, a 5xx
and a network failure. Each test fails without them: nothing visible, or a whole page in a panel.
"""

import pytest
from django.urls import reverse

from portal.projects import tryit
from portal.projects.models import MixEntry, Step, TestCase
from tests.conftest import wait_for_js

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPORT_VIOLATIONS = """document.addEventListener("securitypolicyviolation", (e) => console.warn(
    "CSP violation: " + e.violatedDirective + " at " + e.sourceFile + ":" + e.lineNumber));"""


@pytest.fixture
def page(browser, live_server, alice, tmp_path):
    """alice's page, the policy enforced (no bypass_csp); page.refused: refused scripts and page errors."""
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.refused = []
    page.add_init_script(REPORT_VIOLATIONS)
    page.on("console", lambda m: m.text.startswith("CSP violation") and page.refused.append(m.text))
    page.on("pageerror", lambda exc: page.refused.append(str(exc)))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()
    yield page
    page.screenshot(path=str(tmp_path / "last.png"), full_page=True)
    context.close()


def _no_page_in_a_panel(page):
    """Still one page: no whole error page (its top bar, its <main>) swapped inside a panel."""
    assert page.locator("header.topbar").count() == 1 and page.locator("main").count() == 1


def test_a_400_in_the_try_it_panel_shows_its_reason(page, live_server, test_case):
    # given: a project with no environment yet, so Try it has nothing to try on
    page.goto(f"{live_server.url}{test_case.get_absolute_url()}")
    with page.expect_response(lambda r: "/try/" in r.url) as answer:
        # when
        page.click("#try-it button[type=submit]")
    # then: the view answered an honest 400, and its reason is in the panel
    assert answer.value.status == 400
    error = page.locator("#try-it #try-error")
    error.wait_for()
    assert error.is_visible() and "Choose one of this project's environments." in error.inner_text()
    assert page.locator("#htmx-messages").is_hidden()
    _no_page_in_a_panel(page)
    assert page.refused == []


def test_a_400_in_the_mix_shows_why_the_test_case_was_not_added(page, live_server, plan, project):
    # given: the plan's page offers "Search", which another tab then adds to the mix
    search = TestCase.objects.create(project=project, name="Search")
    page.goto(f"{live_server.url}{plan.get_absolute_url()}")
    page.select_option("#mix form.mix-add select", str(search.code))
    MixEntry.objects.create(plan=plan, test_case=search, weight=1, position=1)
    with page.expect_response(lambda r: "/mix/add/" in r.url) as answer:
        # when
        page.click("#mix form.mix-add button[type=submit]")
    # then: 400, and the mix says why
    assert answer.value.status == 400
    error = page.locator("#mix .errorlist")
    error.wait_for()
    assert "Select a valid choice" in error.inner_text()
    assert plan.mix.count() == 2
    _no_page_in_a_panel(page)
    assert page.refused == []


def test_a_weight_the_browser_refuses_is_reported_not_dropped(page, live_server, plan):
    # given: the mix's weight field (min 1), which htmx validates before it sends anything
    page.goto(f"{live_server.url}{plan.get_absolute_url()}")
    entry = plan.mix.get()
    weight = page.locator(f"#mix-{entry.pk} input[name=weight]")
    sent = []
    page.on("request", lambda r: "/mix/" in r.url and sent.append(r.url))
    # when: 0, then Tab (its change event)
    weight.fill("0")
    weight.press("Tab")
    # then: nothing sent, and the browser's own message is reported on the field (reportValidityOfForms),
    # which takes the focus back; htmx's default drops the request without a word
    wait_for_js(page, f"document.activeElement === document.querySelector('#mix-{entry.pk} input[name=weight]')")
    assert sent == [] and page.evaluate(
        f"document.querySelector('#mix-{entry.pk} input[name=weight]').validationMessage"
    )
    assert page.refused == []


def test_a_404_whole_page_is_not_swapped_and_a_message_says_so(page, live_server, test_case):
    # given: the page, then its first step deleted meanwhile (another tab, another editor)
    page.goto(f"{live_server.url}{test_case.get_absolute_url()}")
    first = Step.objects.get(test_case=test_case, position=0)
    steps_before = page.locator("#steps").inner_text()
    Step.objects.filter(pk=first.pk).delete()
    with page.expect_response(lambda r: "/move/" in r.url or "/down/" in r.url) as answer:
        # when: it is moved down
        page.click(f"button[aria-label='Move {first.name} down']")
    # then: Django's 404 page stays out of the list, and the message area says what happened
    assert answer.value.status == 404
    message = page.locator("#htmx-messages li.error")
    message.wait_for()
    assert "HTTP 404" in message.inner_text() and "no longer exists" in message.inner_text()
    assert page.locator("#steps").inner_text() == steps_before
    _no_page_in_a_panel(page)
    assert page.refused == []


def test_a_500_and_a_network_failure_show_the_generic_message(page, live_server, test_case, environment, monkeypatch):
    # given: a try that fails on the server (an unexpected exception: Django's 500 page)
    def broken(**kwargs):
        raise RuntimeError("the try broke")

    monkeypatch.setattr(tryit, "test_case_try", broken)
    page.goto(f"{live_server.url}{test_case.get_absolute_url()}")
    with page.expect_response(lambda r: "/try/" in r.url) as answer:
        page.click("#try-it button[type=submit]")
    # then: 500, nothing swapped, the calm message in the page's message area
    assert answer.value.status == 500
    message = page.locator("#htmx-messages li.error")
    message.wait_for()
    assert "The server could not answer (HTTP 500): this part of the page was not updated." in message.inner_text()
    assert page.locator("#try-it form").is_visible() and page.locator("#try-it .alert").count() == 0
    _no_page_in_a_panel(page)

    # when: the server cannot be reached at all
    url = reverse("projects:testcase-try", args=[test_case.code])
    page.route(f"**{url}", lambda route: route.abort("connectionrefused"))
    page.click("#try-it button[type=submit]")
    # then: the message says so
    wait_for_js(page, "document.querySelector('#htmx-messages').textContent.includes('could not be reached')")
    assert page.locator("#htmx-messages").is_visible()

    # when: the try works again
    page.unroute(f"**{url}")
    monkeypatch.undo()
    with page.expect_response(lambda r: "/try/" in r.url) as answer:
        page.click("#try-it button[type=submit]")
    # then: its answer is in the panel and the message is gone
    assert answer.value.status == 200
    page.locator("#try-it .alert").first.wait_for()
    wait_for_js(page, "document.querySelector('#htmx-messages').hidden")
    assert page.refused == []


def test_a_panel_whose_session_ended_takes_the_user_to_the_login_page_and_back(page, live_server, test_case):
    # given: alice's test case page open, then her session ends (expired, or logged out in another tab)
    page.goto(f"{live_server.url}{test_case.get_absolute_url()}")
    page.context.clear_cookies(name="sessionid")
    # when: a panel asks the server for something
    with page.expect_navigation():
        page.click("#try-it button[type=submit]")
    # then: the browser is on the login page as a whole page (not the login form inside the panel),
    # and logging in brings her back to the test case's page
    page.locator("#id_username").wait_for()
    assert page.url.startswith(f"{live_server.url}/login/")
    _no_page_in_a_panel(page)
    assert page.locator("#try-it").count() == 0
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.locator("#try-it").wait_for()
    assert page.url == f"{live_server.url}{test_case.get_absolute_url()}"
    assert page.refused == []
