"""A large result file uploaded in a real browser is imported by a real Celery worker, with progress shown.

The page lists the import with a progress bar that HTMX polls while the worker reads the file;
the bar moves through intermediate values, then the import names its run, and the upload is gone.
"""

import time

import pytest

from bench.import_jtl import write
from portal.runs.models import ResultImport, Run
from portal.runs.services import result_upload_path

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    page.screenshot(path=str(tmp_path / "last.png"), full_page=True)
    context.close()


def test_a_large_jtl_imports_in_the_background_with_a_moving_progress_bar(
    page, live_server, alice, environment, celery_worker, tmp_path
):
    # given: a 40 MB JTL (about 350,000 samples)
    jtl = tmp_path / "last-quarter.jtl"
    samples = write(jtl, 40)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")

    # when: alice uploads it on the environment's import page
    page.goto(f"{live_server.url}/environments/{environment.code}/import-results/")
    page.set_input_files("#id_files", str(jtl))
    page.get_by_role("button", name="Import").click()

    # then: the imports list shows the file; its bar moves while the worker reads it
    row = page.locator("#imports tr[data-import]").first
    row.wait_for()
    seen = set()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if row.locator("a", has_text="run #").count():
            break
        bar = row.locator("[role=progressbar]")
        if bar.count():
            seen.add(int(bar.get_attribute("aria-valuenow")))
        time.sleep(0.3)
    assert any(0 < pct < 100 for pct in seen), seen  # the page showed the import part-way

    # and: the import ends in its run, with every sample; the upload is deleted
    item = ResultImport.objects.get()
    run = Run.objects.get()
    assert (item.status, item.run_id, item.bytes_read) == ("done", run.id, jtl.stat().st_size)
    assert run.summary["whole_run"]["pages"] == samples and run.source["format"] == "jmeter-csv"
    assert not result_upload_path(item).exists()
    row.locator("a", has_text=f"run #{run.number}").click()
    page.locator("#source").wait_for()
    assert "JMeter" in page.locator("#source").inner_text()
