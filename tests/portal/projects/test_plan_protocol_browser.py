"""A plan's protocol chosen in the plan form, in a real browser (issue 26), and shown on the plan's page."""

import pytest

from portal.projects.models import Plan

from .test_plan_form_browser import page  # noqa: F401 - the logged-in Chromium page fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_choose_http2_in_clear_and_accept_any_certificate(page, live_server, plan):  # noqa: F811
    page.goto(f"{live_server.url}/plans/{plan.code}/edit/")
    assert page.locator("#id_protocol").input_value() == ""  # the environment's (automatic)
    assert not page.locator("#id_tls_accept_any").is_checked()

    page.select_option("#id_protocol", "h2c")
    page.check("#id_tls_accept_any")
    page.locator("form button[type=submit]").last.click()

    page.wait_for_url(f"{live_server.url}/plans/{plan.code}/")
    shown = page.locator("dl").first.inner_text()
    assert "HTTP/2, also in clear text (h2c with prior knowledge); any TLS certificate accepted" in shown
    saved = Plan.objects.get(pk=plan.pk)
    assert (saved.protocol, saved.tls_accept_any) == ("h2c", True)
    assert saved.to_engine_dict()["protocol"] == "h2c"
