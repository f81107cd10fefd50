"""A journey recorded by a real browser becomes a test case that runs (issue 18, HAR → test case).

Playwright drives Debian's Chromium through the demo target (home page, log in with the form's
CSRF token, a search) and records the HAR; alice uploads it on the project's page, reads the
preview and creates the test case; the engine then runs it against the demo. The demo makes a
new session and CSRF token for every visitor, so the run passes only if the token is extracted
and posted back, and the password comes from the data set.
"""

import concurrent.futures
import os
import re

import pytest
from django.urls import reverse

from portal.projects import services
from portal.projects.models import TestCase
from tests.conftest import CHROMIUM, CHROMIUM_ARGS
from workers.engine.runner import run_sync

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db]


def record_journey(base_url: str, har_path) -> None:
    """Debian's Chromium (as the ``browser`` fixture launches it) records the journey, in a thread of its own.

    In a thread: Playwright's sync API keeps an event loop running in its thread, and the ORM
    there would then open connections outside the test's transaction.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            _drive(browser, base_url, har_path)
        finally:
            browser.close()


def _drive(browser, base_url: str, har_path) -> None:
    context = browser.new_context(record_har_path=str(har_path))
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{base_url}/")
    page.click("text=Log in")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", "demo")
    page.click("button")
    page.wait_for_url("**/account")
    page.goto(f"{base_url}/search")
    page.fill("input[name=q]", "Area 042")
    page.press("input[name=q]", "Enter")
    page.wait_for_url("**/search?q=*")
    context.close()  # writes the HAR


def test_a_recorded_login_and_search_import_and_run_against_the_demo(
    demo_target, alice_client, project, tmp_path, settings
):
    # given: a real recording of the journey
    settings.VAR_DIR = tmp_path / "var"
    har_path = tmp_path / "journey.har"
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does it)")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(record_journey, demo_target.base_url, har_path).result(timeout=120)
    assert b"password=demo" in har_path.read_bytes()  # the recording holds the password ...

    # when: alice uploads it and reads the preview
    with har_path.open("rb") as f:
        response = alice_client.post(reverse("projects:har-import", args=[project.code]), {"file": f})
    assert response.status_code == 302, response.content.decode()[:2000]
    preview_url = response["Location"]
    page = alice_client.get(preview_url)
    text = page.content.decode()

    # then: the preview shows the pages, the CSRF correlation and the password as a variable; nothing is saved yet
    assert page.status_code == 200
    assert "csrfmiddlewaretoken" in text and "hidden form field" in text
    assert "form_field: csrfmiddlewaretoken" in text
    assert 'name="variable:password" value="password"' in text
    assert re.search(r"follows the redirect to /account", text)
    assert not TestCase.objects.filter(project=project).exclude(name="Browse").exists()
    uploads = list((tmp_path / "var" / "har-uploads").iterdir())
    assert len(uploads) == 1

    # when: she creates the test case with the defaults
    token = preview_url.split("/")[-2]
    response = alice_client.post(
        reverse("projects:har-import-preview", args=[project.code, token]),
        {
            "action": "create",
            "name": "Recorded login",
            "correlation:csrfmiddlewaretoken": "accept",
            "variable:password": "password",
        },
    )

    # then: the test case has the recorded pages, the extraction and {{password}}; the upload is gone
    test_case = TestCase.objects.get(project=project, name="Recorded login")
    assert response.status_code == 302 and response["Location"] == test_case.get_absolute_url()
    assert list((tmp_path / "var" / "har-uploads").iterdir()) == []
    steps = list(test_case.steps.all())
    assert [(s.method, s.path) for s in steps] == [
        ("GET", "/"),
        ("GET", "/login"),
        ("POST", "/login"),
        ("GET", "/search"),
        ("GET", "/search?q=Area+042"),
    ]
    assert steps[1].extract == [
        {"name": "csrfmiddlewaretoken", "source": "form_field", "expression": "csrfmiddlewaretoken"}
    ]
    assert steps[2].body == "csrfmiddlewaretoken={{csrfmiddlewaretoken}}&username=demo&password={{password}}"
    assert not any("password=demo" in s.body for s in steps)  # ... the test case does not
    assert all("Cookie" not in s.headers and "demo_sessionid" not in str(s.headers) for s in steps)
    assert test_case.placeholder_problems(steps)  # {{password}} needs a data set ...

    # when: a data set gives the password, and the engine runs the test case against the demo
    services.data_set_save(
        test_case=test_case, file_name="users.csv", columns=["password"], rows=[["demo"]], mode="sequential"
    )
    assert test_case.placeholder_problems() == []
    demo_target.reset()
    plan = {
        "base_url": demo_target.base_url,
        "test_cases": [TestCase.objects.get(pk=test_case.pk).to_engine_dict(1)],
        # long enough for each user to finish the journey: its think times are the recording's own pauses, which
        # grow with the machine's load while the browser records (0 of 2 users finished in 3 s on a busy CI run)
        "profile": {"kind": "constant", "users": 2, "hold": 3 + 1.5 * sum(s.think_time or 0 for s in steps)},
    }
    totals = run_sync(plan, sink=None)

    # then: no errors, and the demo served every recorded page: the login succeeded each time
    assert totals.errors == 0, totals.error_samples
    assert totals.iterations_completed >= 2
    served = demo_target.counters()
    assert served["requests"] == totals.requests
    pages = {label.split(": ", 1)[1]: t.pages for label, t in totals.labels.items()}
    assert served["by_path"]["/"] == pages["/"]
    assert served["by_path"]["/login"] == pages["/login"] + pages["POST /login"]
    assert served["by_path"]["/account"] == pages["POST /login"]  # the redirect after each successful login
    assert served["by_path"]["/search"] == pages["/search"] + pages["/search (2)"]
    assert served["by_status"].get("403", 0) == 0  # no CSRF or password refusal
