"""WebSocket session and streamed-response steps through the API (issue 26): taken in the engine's own
format, validated by the step form (each problem named by action and field), carried to the engine's plan."""

import pytest

from portal.projects.models import Plan, Step
from portal.runs.models import Run
from workers.engine.plan import Plan as EnginePlan

from .conftest import session

pytestmark = pytest.mark.django_db

CHAT = {
    "actions": [
        {"send": '{"chat": "hello {{name}}"}'},
        {"expect": {"json": "$.chat", "equals": "hello {{name}}"}, "timeout": 2},
        {"send": "/handshake"},
        {"expect": {"regex": "^\\{.*\\}$"}, "extract": [{"name": "seen", "source": "regex", "expression": "(.*)"}]},
        {"wait": 0.5},
        {"send": "two\nlines {{seen}}"},
        {"expect": {"contains": "two\nlines"}},
    ],
    "hold": 1.5,
}


def _extraction(name, source, expression):
    return {"name": name, "source": source, "expression": expression}


def _steps_url(test_case):
    return f"/api/v1/test-cases/{test_case.code}/steps/"


PLAIN = {"actions": [{"send": "hi"}, {"expect": {"contains": "hi"}}]}


def _ws_step(**changes):
    return {"name": "Chat", "kind": "websocket", "path": "/ws?room=1", "websocket": PLAIN, **changes}


def test_a_websocket_step_round_trips_and_reaches_the_engine_plan(alice, plan, test_case):
    from portal.projects.models import DataSet

    DataSet.objects.create(test_case=test_case, file_name="u.csv", columns=["name"], rows=[["ann"]], row_count=1)

    response = session(alice).post(_steps_url(test_case), _ws_step(websocket=CHAT), format="json")

    assert response.status_code == 201, response.content
    document = response.json()
    assert document["kind"] == "websocket"
    assert document["websocket"] == CHAT  # the same actions back, a message with a line break included
    assert document["stream"] is None
    step = Step.objects.get(code=document["code"])
    assert step.ws_actions == CHAT["actions"]
    snapshot = plan.to_engine_dict()
    engine_step = snapshot["test_cases"][0]["steps"][-1]
    assert engine_step["websocket"] == {"actions": CHAT["actions"], "hold": 1.5}
    assert engine_step["method"] == "GET" and "resources" not in engine_step
    EnginePlan.from_dict(snapshot)  # the engine takes it as it is


def test_a_stream_step_round_trips_and_reaches_the_engine_plan(alice, plan, test_case):
    stream = {"kind": "sse", "idle_timeout": 2.5, "last_event_contains": "[DONE]"}

    response = session(alice).post(
        _steps_url(test_case), {"name": "Ask", "kind": "stream", "path": "/sse", "stream": stream}, format="json"
    )

    assert response.status_code == 201, response.content
    assert response.json()["stream"] == stream
    engine_step = plan.to_engine_dict()["test_cases"][0]["steps"][-1]
    assert engine_step["stream"] == stream
    EnginePlan.from_dict(plan.to_engine_dict())


@pytest.mark.parametrize(
    ("websocket", "field", "message"),
    [
        ({"actions": [{"send": "a"}, {"expect": {"regex": "(unclosed"}}]}, "websocket.actions", "action 2 (expect)"),
        ({"actions": [{"expect": {"regex": "(unclosed"}}]}, "websocket.actions", "regex does not compile"),
        ({"actions": [{"expect": {"json": "items"}}]}, "websocket.actions", "action 1 (expect), json"),
        ({"actions": [{"send": "a", "wait": 1}]}, "websocket.actions", "action 1: must be an object with one of"),
        ({"actions": [{"shout": "a"}]}, "websocket.actions", "action 1: must be an object with one of"),
        ({"actions": [{"wait": "soon"}]}, "websocket.actions", "action 1 (wait): give the seconds as a number"),
        ({"actions": [{"wait": -1}]}, "websocket.actions", "action 1 (wait): the seconds must be 0 or more"),
        ({"actions": [{"send": "a"}, {"expect": {"contains": "a"}, "timeout": 0}]}, "websocket.actions", "timeout"),
        (
            {"actions": [{"expect": {"contains": "a"}, "extract": [_extraction("1x", "json", "$")]}]},
            "websocket.actions",
            "“1x” is not a valid variable name",
        ),
        (
            {"actions": [{"expect": {"contains": "a"}, "extract": [_extraction("x", "header", "A")]}]},
            "websocket.actions",
            "regex or json",
        ),
        ({"actions": [{"send": "hi {{nobody}}"}]}, "websocket.actions", "action 1 (send): {{nobody}} is not extracted"),
        ({"actions": []}, "websocket.actions", "at least one action"),
        ({"actions": "send hi"}, "websocket.actions", "give a list of actions"),
    ],
)
def test_malformed_actions_are_refused_naming_the_action_and_field(alice, test_case, websocket, field, message):
    before = test_case.steps.count()

    response = session(alice).post(_steps_url(test_case), _ws_step(websocket=websocket), format="json")

    assert response.status_code == 400, response.content
    errors = response.json()["fields"]
    assert field in errors, errors
    assert any(message in text for text in errors[field]), errors[field]
    assert test_case.steps.count() == before


def test_a_websocket_step_has_no_body_method_or_resources(alice, test_case):
    response = session(alice).post(
        _steps_url(test_case),
        _ws_step(method="POST", body="x", resources=["/a.css"], websocket={"actions": [{"send": "a"}]}),
        format="json",
    )

    assert response.status_code == 400
    errors = response.json()["fields"]
    assert {"method", "body", "resources"} <= set(errors)


def test_kind_and_options_must_agree(alice, test_case):
    no_session = session(alice).post(_steps_url(test_case), {"name": "W", "kind": "websocket", "path": "/ws"})
    stray = session(alice).post(
        _steps_url(test_case), {"name": "W", "path": "/ws", "websocket": {"actions": [{"send": "a"}]}}, format="json"
    )

    assert no_session.status_code == 400 and "websocket" in no_session.json()["fields"]
    assert stray.status_code == 400 and "websocket" in stray.json()["fields"]


def test_a_bad_stream_idle_timeout_is_refused(alice, test_case):
    response = session(alice).post(
        _steps_url(test_case),
        {"name": "Ask", "kind": "stream", "path": "/sse", "stream": {"kind": "sse", "idle_timeout": 0}},
        format="json",
    )

    assert response.status_code == 400
    assert "stream.idle_timeout" in response.json()["fields"]


def test_a_ws_url_off_the_allowlist_is_refused_at_save(alice, test_case):
    response = session(alice).post(_steps_url(test_case), _ws_step(path="wss://203.0.113.5/chat"), format="json")

    assert response.status_code == 400
    (message,) = response.json()["fields"]["path"]
    assert "wss://203.0.113.5:443 resolves to 203.0.113.5, which is not in the allowed targets" in message
    assert "a run would be refused" in message


def test_a_ws_url_on_the_allowlist_is_kept_as_its_own_origin(alice, plan, test_case):
    response = session(alice).post(_steps_url(test_case), _ws_step(path="ws://127.0.0.1:9/ws?x={{x}}"), format="json")

    assert response.status_code == 400  # {{x}} comes from nowhere
    assert "{{x}} is not extracted" in response.json()["fields"]["path"][0]
    response = session(alice).post(_steps_url(test_case), _ws_step(path="ws://127.0.0.1:9/ws"), format="json")
    assert response.status_code == 201, response.content
    engine = EnginePlan.from_dict(plan.to_engine_dict())
    assert engine.target_urls() == ["http://127.0.0.1:8001", "ws://127.0.0.1:9/ws"]


def test_only_a_websocket_step_can_name_a_ws_url(alice, test_case):
    response = session(alice).post(_steps_url(test_case), {"name": "W", "path": "ws://127.0.0.1:9/ws"}, format="json")

    assert response.status_code == 400
    assert "Only a WebSocket session" in response.json()["fields"]["path"][0]


def test_a_run_is_refused_at_start_when_a_websocket_step_leaves_the_allowlist(alice, plan, test_case, settings):
    session(alice).post(_steps_url(test_case), _ws_step(path="ws://127.0.0.2:9/ws"), format="json")
    settings.PLIMSOLL_ALLOWED_TARGETS = "127.0.0.1/32"  # the allowlist narrowed after the step was saved

    response = session(alice).post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    assert response.status_code == 422, response.content
    detail = response.json()["detail"]
    assert "ws://127.0.0.2:9 resolves to 127.0.0.2, which is not in the allowed targets" in detail
    assert "WebSocket step “Chat” of “Browse”" in detail
    assert not Run.objects.filter(plan=plan).exists()


def test_an_environments_protocol_and_ca_bundle_through_the_api(alice, plan, environment):
    import trustme

    pem = trustme.CA().cert_pem.bytes().decode()

    response = session(alice).patch(
        f"/api/v1/environments/{environment.code}/",
        {"protocol": "h2c", "ca_bundle": pem, "ca_bundle_name": "private-ca.pem"},
        format="json",
    )

    assert response.status_code == 200, response.content
    assert (response.json()["protocol"], response.json()["ca_bundle_name"]) == ("h2c", "private-ca.pem")
    plan = Plan.objects.get(pk=plan.pk)
    snapshot = plan.to_engine_dict()  # the plan follows its environment
    assert snapshot["protocol"] == "h2c" and snapshot["ca_bundle"] == pem
    engine = EnginePlan.from_dict(snapshot)
    assert engine.ca_bundle.strip() == pem.strip()

    session(alice).patch(f"/api/v1/plans/{plan.code}/", {"protocol": "http1"}, format="json")
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.to_engine_dict()["protocol"] == "http1"  # the plan's own choice overrides it


@pytest.mark.parametrize(
    ("bundle", "message"),
    [
        ("not a certificate", "This is not a PEM certificate bundle"),
        (
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
            "Certificate 1 of the bundle does not parse",
        ),
        ("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "give certificates only"),
    ],
)
def test_a_bundle_that_is_not_pem_certificates_is_refused(alice, environment, bundle, message):
    response = session(alice).patch(f"/api/v1/environments/{environment.code}/", {"ca_bundle": bundle}, format="json")

    assert response.status_code == 400
    assert any(message in text for text in response.json()["fields"]["ca_bundle"])
    environment.refresh_from_db()
    assert environment.ca_bundle == ""


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        ([{"expect": {"contains": "a", "foo": 1}}], "action 1 (expect): unknown field expect.foo"),
        ([{"expect": {"contains": 5}}], "action 1 (expect): expect.contains must be a string"),
        ([{"expect": {"json": "$.a", "equals": 7}}], "expect.equals must be a string"),
        ([{"expect": {"regex": " a "}}], "action 1: cannot be kept exactly as given"),
        ([{"send": "a", "max_message_bytes": 1}], "action 1 (send): unknown field max_message_bytes"),
    ],
)
def test_actions_are_stored_exactly_as_given_or_refused(alice, test_case, actions, message):
    response = session(alice).post(_steps_url(test_case), _ws_step(websocket={"actions": actions}), format="json")

    assert response.status_code == 400
    assert message in response.json()["fields"]["websocket.actions"][0]


def test_messages_with_any_line_break_or_outer_spaces_round_trip(alice, test_case):
    actions = [{"send": "a\u2028b\x85c\r\nd"}, {"expect": {"contains": "  spaced  "}}, {"send": '"quoted"'}]

    response = session(alice).post(_steps_url(test_case), _ws_step(websocket={"actions": actions}), format="json")

    assert response.status_code == 201, response.content
    assert response.json()["websocket"]["actions"] == actions
