"""The step editor's WebSocket sessions and streamed responses, and an environment's protocol and CA bundle
(issue 26), as a user fills the forms in the browser."""

import pytest
import trustme
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils.html import escape

from portal.projects import wsactions
from portal.projects.models import Environment, Plan, Step
from workers.engine.plan import Plan as EnginePlan

from .data import HTMX, environment_data, step_data

pytestmark = pytest.mark.django_db

SESSION = """\
# a chat, then an id round trip
send {"chat": "hello"}
expect json $.chat == hello
  timeout 2
send /handshake
expect regex ^\\{.*\\}$
  extract seen = regex: ^(.*)$
wait 0.25
send "two\\nlines {{seen}}"
expect contains "two\\nlines"
"""


def _add(client, test_case, **fields):
    return client.post(reverse("projects:step-new", args=[test_case.code]), step_data(**fields))


def test_a_websocket_session_is_written_as_lines_and_stored_as_the_engines_actions(alice_client, test_case, plan):
    response = _add(alice_client, test_case, name="Chat", kind="websocket", path="/ws", ws_actions_text=SESSION)

    assert response.status_code == 302, response.context["form"].errors
    step = test_case.steps.get(name="Chat")
    assert step.ws_actions == [
        {"send": '{"chat": "hello"}'},
        {"expect": {"json": "$.chat", "equals": "hello"}, "timeout": 2.0},
        {"send": "/handshake"},
        {"expect": {"regex": "^\\{.*\\}$"}, "extract": [{"name": "seen", "source": "regex", "expression": "^(.*)$"}]},
        {"wait": 0.25},
        {"send": "two\nlines {{seen}}"},
        {"expect": {"contains": "two\nlines"}},
    ]
    # The edit form shows the same lines back (comments aside), and saving them changes nothing.
    text = wsactions.format_actions(step.ws_actions)
    assert wsactions.parse_actions(text) == step.ws_actions
    page = alice_client.get(reverse("projects:step-edit", args=[step.code])).content.decode()
    assert escape("expect json $.chat == hello") in page
    # Later steps may use what the session extracts.
    later = _add(alice_client, test_case, name="After", path="/search?q={{seen}}")
    assert later.status_code == 302
    EnginePlan.from_dict(Plan.objects.get(pk=plan.pk).to_engine_dict())


def test_the_steps_list_says_what_kind_each_step_is(alice_client, test_case):
    actions = "send hi\nexpect contains hi"
    _add(alice_client, test_case, name="Chat", kind="websocket", path="/ws", ws_actions_text=actions)
    _add(alice_client, test_case, name="Ask", kind="stream", path="/sse", stream_kind="sse", stream_idle_timeout="3")

    page = alice_client.get(reverse("projects:testcase", args=[test_case.code])).content.decode()

    assert "WebSocket</span>" in page and "2 actions" in page
    assert "SSE stream</span>" in page and "idle timeout 3.0 s" in page


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("send hi\nexpect regex (unclosed", "action 2 (expect), regex: the regex does not compile"),
        ("expect json items", "action 1 (expect), json: a JSON path starts with $"),
        ("expect nearly hi", "action 1 (expect): say what to check"),
        ("shout hi", "line 1: “shout” is not an action"),
        ("timeout 2\nsend hi", "line 1 (timeout): a timeout line belongs under an expect action"),
        ("send hi\nexpect contains hi\n  timeout soon", "action 2 (expect), timeout: give the seconds as a number"),
        ("expect contains a\n  extract 1x = json: $.a", "action 1 (expect), extract: “1x” is not a valid variable"),
        ("expect contains a\n  extract x = header: A", "action 1 (expect), extract: a message's values come from"),
        ("wait -1", "action 1 (wait): the seconds must be 0 or more"),
        ("send", "action 1 (send): give the message after send"),
        ("send {{who}}", "action 1 (send): {{who}} is not extracted"),
        ("", "Give the session at least one action"),
    ],
)
def test_malformed_actions_are_refused_next_to_the_field(alice_client, test_case, text, message):
    response = _add(alice_client, test_case, kind="websocket", path="/ws", ws_actions_text=text, **HTMX)

    form = response.context["form"]
    assert any(message in error for error in form.errors["ws_actions_text"]), form.errors
    assert escape(message) in response.content.decode()
    assert test_case.steps.count() == 2


def test_a_websocket_session_refuses_what_only_a_request_has(alice_client, test_case):
    response = _add(
        alice_client,
        test_case,
        kind="websocket",
        path="/ws",
        method="POST",
        body="x",
        resources_text="/a.css",
        text_present="Demo",
        ws_actions_text="send hi",
        **HTMX,
    )

    assert set(response.context["form"].errors) == {"method", "body", "resources_text", "text_present"}


def test_a_ws_url_off_the_allowlist_is_refused_when_the_step_is_saved(alice_client, test_case):
    response = _add(
        alice_client, test_case, kind="websocket", path="wss://203.0.113.5/chat", ws_actions_text="send hi", **HTMX
    )

    (message,) = response.context["form"].errors["path"]
    assert "wss://203.0.113.5:443 resolves to 203.0.113.5, which is not in the allowed targets" in message


def test_a_stream_step_reaches_the_engine_with_its_options(alice_client, test_case, plan):
    response = _add(
        alice_client,
        test_case,
        name="Ask",
        kind="stream",
        path="/sse",
        stream_kind="chunked",
        stream_idle_timeout="2.5",
        stream_last_event_contains="[DONE]",
    )

    assert response.status_code == 302
    step = Plan.objects.get(pk=plan.pk).to_engine_dict()["test_cases"][0]["steps"][-1]
    assert step["stream"] == {"kind": "chunked", "idle_timeout": 2.5, "last_event_contains": "[DONE]"}


def test_a_plain_step_still_sends_only_the_keys_older_engines_know(test_case):
    step = Step.objects.create(test_case=test_case, position=5, name="Plain", path="/")

    assert "stream" not in step.to_engine_dict() and "websocket" not in step.to_engine_dict()


def _edit_environment(client, environment, **fields):
    data = environment_data(name=environment.name, base_url=environment.base_url, **fields)
    data.pop("configuration_text")
    return client.post(reverse("projects:environment-edit", args=[environment.code]), data)


def test_an_environment_chooses_the_protocol_and_trusts_an_uploaded_ca_bundle(alice_client, environment, plan):
    pem = trustme.CA().cert_pem.bytes()

    response = _edit_environment(
        alice_client,
        environment,
        protocol="h2c",
        ca_bundle_file=SimpleUploadedFile("private-ca.pem", b"# our CA\n" + pem),
    )

    assert response.status_code == 302, response.context["form"].errors
    environment = Environment.objects.get(pk=environment.pk)
    assert (environment.protocol, environment.ca_bundle_name) == ("h2c", "private-ca.pem")
    assert environment.ca_bundle == pem.decode()  # the certificates only, the comment left out
    snapshot = Plan.objects.get(pk=plan.pk).to_engine_dict()
    assert (snapshot["protocol"], snapshot["ca_bundle"]) == ("h2c", pem.decode())
    page = alice_client.get(environment.get_absolute_url()).content.decode()
    assert "private-ca.pem" in page and "1 certificate)" in page

    # Saved again without a file: the bundle stays; "remove" removes it.
    assert _edit_environment(alice_client, environment, protocol="h2c").status_code == 302
    assert Environment.objects.get(pk=environment.pk).ca_bundle == pem.decode()
    assert _edit_environment(alice_client, environment, protocol="auto", ca_bundle_clear="on").status_code == 302
    assert Environment.objects.get(pk=environment.pk).ca_bundle == ""


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello, I am not a certificate", "This is not a PEM certificate bundle"),
        (b"\x30\x82\x01\x0a\x02\x82\x01\x01\x00\xff", "This file is not PEM text"),
        (b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n", "does not parse as an X.509"),
        (b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n", "never a private key"),
    ],
)
def test_a_non_pem_bundle_is_refused_with_a_clear_message(alice_client, environment, content, message):
    response = _edit_environment(alice_client, environment, ca_bundle_file=SimpleUploadedFile("ca.pem", content))

    assert response.status_code == 200
    assert any(message in error for error in response.context["form"].errors["ca_bundle_file"])
    assert Environment.objects.get(pk=environment.pk).ca_bundle == ""


def test_a_plan_follows_its_environments_protocol_unless_it_chooses(plan, environment):
    environment.protocol = "http1"
    environment.save()
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.protocol == Plan.Protocol.ENVIRONMENT and plan.to_engine_dict()["protocol"] == "http1"

    plan.protocol = Plan.Protocol.AUTO
    assert "protocol" not in plan.to_engine_dict()


def test_the_plan_page_says_when_a_websocket_steps_origin_left_the_allowlist(alice_client, plan, test_case, settings):
    Step.objects.create(
        test_case=test_case,
        position=5,
        name="Chat",
        kind=Step.Kind.WEBSOCKET,
        path="ws://127.0.0.2:9/ws",
        ws_actions=[{"send": "hi"}],
    )
    page = alice_client.get(plan.get_absolute_url()).content.decode()
    assert "WebSocket step" not in page

    settings.PLIMSOLL_ALLOWED_TARGETS = "127.0.0.1/32"  # narrowed after the step was saved
    page = alice_client.get(plan.get_absolute_url()).content.decode()

    assert escape("The WebSocket step “Chat” of “Browse” connects to ws://127.0.0.2:9/ws") in page
    assert "runs of this plan will be refused" in page
