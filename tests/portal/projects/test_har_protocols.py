"""HAR import keeps each page's protocol and turns a recorded WebSocket session (Chrome's
``_webSocketMessages``) into a WebSocket session step (issue 26).

The fixture ``fixtures/chat-session.har`` is shaped as Chrome's "Save all as HAR with content" writes
one: a page over HTTP/2 (``httpVersion: "h2"``), its resources, a ``wss://`` entry of ``_resourceType``
websocket with status 101 and its frames (text and one binary), then the next page.
"""

import io
import json
from pathlib import Path

import pytest
from django.urls import reverse

from portal.projects import har
from portal.projects.models import Step, TestCase
from workers.engine.plan import Plan as EnginePlan

FIXTURE = Path(__file__).parent / "fixtures" / "chat-session.har"
SITE = "https://127.0.0.1:8443"


def _allow_loopback(url):
    return None if "127.0.0.1" in url else "outside the allowed targets"


def _preview(raw: bytes | None = None) -> har.Preview:
    return har.analyze(har.load(raw or FIXTURE.read_bytes()), allowed=_allow_loopback)


def test_a_recorded_session_becomes_a_websocket_step_with_its_frames_in_order():
    preview = _preview()

    assert preview.base_url == SITE
    assert [s.name for s in preview.steps] == ["/page", "WS /ws", "/page (2)"]
    session = preview.steps[1]
    assert session.path == "/ws?room=blue"
    assert session.ws_actions == [
        {"wait": 1.0},  # from the handshake's end to the first frame sent
        {"send": '{"chat": "hello"}'},
        {"expect": {"contains": '{"chat": "hello"}'}},
        {"wait": 2.29},  # the user's pause after the answer
        {"send": "how are you?\nfine"},
        {"expect": {"contains": "how are you?\nfine"}},
        {"send": "bye"},  # 6 ms after the last frame: no wait
        {"expect": {"contains": "bye"}},
    ]
    assert session.headers == {"X-Room": "blue"}  # Upgrade and Sec-WebSocket-* are the engine's own
    assert "1 binary frame left out (a session step sends text)" in session.notes
    assert "WebSocket session: 3 messages sent, 3 expected" in session.notes
    assert session.think_time == 2.5  # from its last frame to the next page
    assert session.recorded_protocol == "http/1.1"


def test_each_page_keeps_the_protocol_it_was_recorded_over():
    preview = _preview()

    assert [s.recorded_protocol for s in preview.steps] == ["h2", "http/1.1", "h2"]
    assert "recorded over HTTP/2" in preview.steps[0].notes
    assert any(n.startswith("2 of 3 pages were recorded over HTTP/2") for n in preview.notes)
    assert any(n.startswith("1 WebSocket session recorded") for n in preview.notes)


def test_the_imported_steps_are_a_test_case_the_engine_accepts():
    fields = _preview().step_fields()

    assert fields[1]["kind"] == "websocket" and fields[1]["recorded_protocol"] == "http/1.1"
    steps = []
    for f in fields:
        step = Step(**f)
        steps.append(step.to_engine_dict())
    plan = EnginePlan.from_dict(
        {"base_url": SITE, "test_cases": [{"name": "t", "steps": steps}], "profile": {"users": 1, "hold": 1}}
    )
    ws = plan.test_cases[0].steps[1]
    assert plan.url_for(ws) == f"{SITE}/ws?room=blue" and len(ws.websocket.actions) == 8


def test_a_session_without_frames_or_with_a_late_push():
    raw = json.loads(FIXTURE.read_bytes())
    entries = raw["log"]["entries"]
    t0 = 1_790_000_000.0
    entries[2]["_webSocketMessages"] = [
        {"type": "send", "time": t0 + 0.205, "opcode": 1, "data": "subscribe"},
        {"type": "receive", "time": t0 + 20.205, "opcode": 1, "data": "x" * 600},
    ]
    session = _preview(json.dumps(raw).encode()).steps[1]
    assert session.ws_actions == [{"send": "subscribe"}, {"expect": {"contains": "x" * 500}, "timeout": 40.0}]
    assert "1 long message expected by the first 500 characters" in session.notes

    del entries[2]["_webSocketMessages"]
    session = _preview(json.dumps(raw).encode()).steps[1]
    assert session.ws_actions == []
    assert any("no frames were recorded" in n for n in session.notes)


def test_malformed_frames_are_refused_naming_the_entry():
    raw = json.loads(FIXTURE.read_bytes())
    raw["log"]["entries"][2]["_webSocketMessages"] = [{"type": "shout", "time": 1, "data": "x"}]

    with pytest.raises(har.HarError, match="entry 3"):
        har.load(json.dumps(raw).encode())


@pytest.mark.django_db
def test_importing_the_recording_in_the_portal_makes_a_session_step(alice_client, project, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    f = io.BytesIO(FIXTURE.read_bytes())
    f.name = "chat-session.har"
    response = alice_client.post(reverse("projects:har-import", args=[project.code]), {"file": f})
    assert response.status_code == 302, response.content.decode()[:1000]
    page = alice_client.get(response["Location"]).content.decode()
    assert "WebSocket</span>" in page and "8 actions" in page

    created = alice_client.post(response["Location"], {"action": "create", "name": "Chat"})
    assert created.status_code == 302, created.content.decode()[:3000]

    test_case = TestCase.objects.get(project=project, name="Chat")
    steps = list(test_case.steps.all())
    assert [s.kind for s in steps] == ["request", "websocket", "request"]
    assert steps[1].ws_actions[1] == {"send": '{"chat": "hello"}'}
    assert [s.recorded_protocol for s in steps] == ["h2", "http/1.1", "h2"]
    listing = alice_client.get(test_case.get_absolute_url()).content.decode()
    assert "recorded over h2" in listing
    assert not test_case.placeholder_problems()


def test_a_session_on_another_allowed_origin_keeps_its_own_wss_url():
    raw = json.loads(FIXTURE.read_bytes())
    entries = raw["log"]["entries"]
    entries[2]["request"]["url"] = "wss://127.0.0.2:9443/live?room=blue"  # a realtime server beside the site
    entries.insert(3, {**entries[3], "request": {**entries[3]["request"], "url": "https://127.0.0.2:9443/x.js"}})

    def allowed(url):
        return None if "127.0.0." in url else "outside the allowed targets"

    preview = har.analyze(har.load(json.dumps(raw).encode()), allowed=allowed)

    assert [s.path for s in preview.steps] == ["/page", "wss://127.0.0.2:9443/live?room=blue", "/page?next=1"]
    (other,) = [h for h in preview.hosts if h.host == "127.0.0.2:9443"]
    assert other.kept and other.reason.startswith("its WebSocket sessions are steps with their own")
    fields = preview.step_fields()
    EnginePlan.from_dict(
        {
            "base_url": SITE,
            "test_cases": [{"name": "t", "steps": [Step(**f).to_engine_dict() for f in fields]}],
            "profile": {"users": 1, "hold": 1},
        }
    )

    # Not allowed: the session is dropped with its host, as any other site's requests.
    refused = har.analyze(har.load(json.dumps(raw).encode()), allowed=_allow_loopback)
    assert [s.name for s in refused.steps] == ["/page", "/page (2)"]
