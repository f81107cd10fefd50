"""The HAR import pages in a real browser: upload, read the preview, reject a correlation, create.

Chromium is Debian's (/usr/bin/chromium); Playwright never downloads a browser.
"""

import pytest

from portal.projects.models import TestCase
from tests.portal.projects.test_har import har_bytes, login_journey

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser, live_server, alice, tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
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


def test_alice_imports_a_recording_from_the_project_page(page, live_server, project, tmp_path):
    har = tmp_path / "Log in.har"
    har.write_bytes(har_bytes(*login_journey()))
    bad = tmp_path / "notes.har"
    bad.write_text("these are my notes")

    # when: she opens the import from the project page and uploads a file that is not a HAR
    page.goto(f"{live_server.url}{project.get_absolute_url()}")
    page.click("text=Import a HAR recording")
    page.set_input_files("#id_file", str(bad))
    page.click("text=Upload and preview")
    # then: the reason, on the same page
    assert "The file is not JSON" in page.locator(".errorlist").inner_text()

    # when: she uploads the recording
    page.set_input_files("#id_file", str(har))
    page.click("text=Upload and preview")

    # then: the preview lists the correlation, the secret field and the headers with their rules
    page.get_by_role("heading", name="Preview of the recording").wait_for()
    assert page.locator("#har-name").input_value() == "Log in"
    assert "hidden form field" in page.locator("table").nth(1).inner_text()
    assert "then 0.0 s think time; 1 resource" in page.locator(".har-steps").inner_text()
    assert page.locator("input[name='variable:password']").input_value() == "password"
    page.locator("summary", has_text="Headers: 1 kept of 3").click()
    assert "secret: removed unless you keep it" in page.content()

    # when: she rejects the correlation, updates the preview, then creates the test case
    page.check("input[name='correlation:csrfmiddlewaretoken'][value='reject']")
    page.click("text=Update the preview")
    assert page.locator("input[name='correlation:csrfmiddlewaretoken'][value='reject']").is_checked()
    page.check("input[name='correlation:csrfmiddlewaretoken'][value='accept']")
    page.click("text=Create test case")

    # then: the test case page, with the message about the data set it needs
    page.get_by_role("heading", name="Log in").wait_for()
    assert "upload a data set with that column" in page.content()
    test_case = TestCase.objects.get(project=project, name="Log in")
    assert test_case.steps.get(position=0).extract[0]["name"] == "csrfmiddlewaretoken"
    assert not any((tmp_path / "var" / "har-uploads").iterdir())
