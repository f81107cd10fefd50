"""*Try it* on a test case with a WebSocket session and a streamed response (issue 26), against the demo
target's protocols face over TLS: the environment's protocol and CA bundle apply, as in a run."""

import pytest
from django.urls import reverse

from portal.projects import tryit
from portal.projects.models import Environment, Step, TestCase
from tests.engine.protocol_servers import StreamsServer

# In the parallel pass: it asserts what was sent and served (exchanges, messages in order, the server's counts, the
# TLS refusal), never a duration; the try's own 15 s bound (tryit.BOUND_S) is a hard deadline against a hang.
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    server = StreamsServer(tmp_path_factory.mktemp("try-streams"))
    yield server
    server.stop()


@pytest.fixture
def assistant(project):
    tc = TestCase.objects.create(project=project, name="Assistant")
    Step.objects.create(
        test_case=tc,
        position=0,
        name="Chat",
        kind=Step.Kind.WEBSOCKET,
        path="/ws",
        ws_actions=[
            {"send": "hello"},
            {"expect": {"contains": "hello"}},
            {"send": '{"ask": "<b>tea</b>"}'},
            {"expect": {"contains": "tea"}},
        ],
    )
    Step.objects.create(
        test_case=tc, position=1, name="Ask", kind=Step.Kind.STREAM, path="/sse", stream_last_event_contains="[DONE]"
    )
    return tc


def test_a_session_and_a_stream_are_tried_over_tls_with_the_environments_ca(project, assistant, streams):
    streams.reset()
    env = Environment.objects.create(project=project, name="TLS", base_url=streams.https_url, ca_bundle=streams.ca_pem)

    result = tryit.test_case_try(test_case=assistant, environment=env)

    assert result.errors == {} and result.completed, result.errors
    assert [(e.method, e.url, e.status) for e in result.exchanges] == [
        ("WS", f"{streams.https_url}/ws", 101),
        ("GET", f"{streams.https_url}/sse", 200),
    ]
    # the session's exchange lists each message sent and received, in order
    session = result.exchanges[0]
    assert [(m["direction"], m["text"]) for m in session.messages] == [
        ("sent", "hello"),
        ("received", "hello"),
        ("sent", '{"ask": "<b>tea</b>"}'),
        ("received", '{"ask": "<b>tea</b>"}'),
    ]
    assert all(m["at_ms"] >= 0 for m in session.messages) and session.error == ""
    assert "[DONE]" in result.exchanges[1].response_body
    served = streams.app.counters.snapshot()
    assert (served["ws_sessions"], served["ws_messages_in"], served["sse_done"]) == (1, 2, 1)
    assert served["by_protocol"].get("2") == 1  # the stream over HTTP/2 (ALPN), as a run would


def test_without_the_ca_bundle_the_certificate_is_refused(project, assistant, streams):
    env = Environment.objects.create(project=project, name="TLS", base_url=streams.https_url)

    result = tryit.test_case_try(test_case=assistant, environment=env)

    assert "TLS handshake failed" in result.errors["Assistant: Chat"]
    # the session's exchange says so, with no message
    session = result.exchanges[0]
    assert (session.method, session.status, session.messages) == ("WS", None, [])
    assert "TLS handshake failed" in session.error


def test_the_page_shows_each_message_of_a_session(alice_client, project, assistant, streams):
    env = Environment.objects.create(project=project, name="TLS", base_url=streams.https_url, ca_bundle=streams.ca_pem)

    html = alice_client.post(
        reverse("projects:testcase-try", args=[assistant.code]), {"environment": str(env.code)}, HTTP_HX_REQUEST="true"
    ).content.decode()

    assert 'data-outcome="passed"' in html
    assert "handshake · 4 messages" in html
    assert html.count('<li data-direction="sent">') == 2 and html.count('<li data-direction="received">') == 2
    assert "<code>{&quot;ask&quot;: &quot;&lt;b&gt;tea&lt;/b&gt;&quot;}</code>" in html  # escaped, as sent
