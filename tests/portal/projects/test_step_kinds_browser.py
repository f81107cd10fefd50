"""The step editor's kinds in a real browser (issue 26): choosing a kind shows its fields only, and a
WebSocket session written as lines is saved as the engine's actions."""

import pytest

from portal.projects.models import Step

from .test_plan_form_browser import page  # noqa: F401 - the logged-in Chromium page fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_choose_a_kind_see_its_fields_and_add_a_websocket_session(page, live_server, test_case):  # noqa: F811
    page.goto(f"{live_server.url}/testcases/{test_case.code}/")
    page.get_by_role("link", name="Add step").click()
    form = page.locator("form.step-form")
    form.wait_for()
    actions = form.locator("[name=ws_actions_text]")
    assert form.locator("[name=body]").is_visible() and not actions.is_visible()

    form.locator("[name=kind]").select_option("websocket")
    assert actions.is_visible() and not form.locator("[name=body]").is_visible()
    assert not form.locator("[name=stream_idle_timeout]").is_visible()
    form.locator("[name=kind]").select_option("stream")
    assert form.locator("[name=stream_idle_timeout]").is_visible() and not actions.is_visible()

    form.locator("[name=kind]").select_option("websocket")
    form.locator("[name=name]").fill("Chat")
    form.locator("[name=path]").fill("/ws")
    actions.fill("send hello\nexpect regex (unclosed")
    form.locator("button[type=submit]").click()
    page.get_by_text("action 2 (expect), regex: the regex does not compile").wait_for()
    assert page.locator("form.step-form [name=ws_actions_text]").is_visible()  # the kind stays chosen

    page.locator("form.step-form [name=ws_actions_text]").fill("send hello\nexpect contains hello\nwait 0.2")
    page.locator("form.step-form button[type=submit]").click()
    page.get_by_text("3 actions").wait_for()
    step = Step.objects.get(test_case=test_case, name="Chat")
    assert step.ws_actions == [{"send": "hello"}, {"expect": {"contains": "hello"}}, {"wait": 0.2}]
