"""A WebSocket session and a streamed response, made through the API and run on the real stack (issue 26).

The live server, a real Celery worker, and the demo target's protocols face (``python -m demo.streams``,
under Hypercorn, with a certificate of its own CA made at start by trustme). The environment is its
HTTPS address, the CA uploaded as the environment's bundle (certificates stay verified); the test case,
made through the API, opens a WebSocket session (``wss://``, its messages echoed) and asks for a
server-sent-events stream (over HTTP/2, by ALPN). The target's own counters then say what it received.
"""

import json
import subprocess
import threading
import urllib.request

import pytest

from portal.accounts.services import token_create
from portal.runs.models import PageInterval, Run
from tests.processes import PYTHON, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def call(method: str, url: str, token: str, document: dict | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    if method in ("POST", "PATCH"):
        req.add_header("Content-Type", "application/json")
        req.data = json.dumps(document or {}).encode()
    try:
        with urllib.request.urlopen(req, timeout=90) as response:
            return response.status, json.loads(response.read() or b"{}"), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}"), dict(exc.headers)


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    """``python -m demo.streams`` as a user starts it: its two addresses, its CA, its counters."""
    ca_file = tmp_path_factory.mktemp("streams") / "ca.pem"
    cmd = [PYTHON, "-m", "demo.streams", "--port", "0", "--tls-port", "0", "--ca-file", str(ca_file)]
    cmd += ["--knob", "sse.tokens=5", "--knob", "sse.first_ms=20", "--knob", "sse.gap_ms=10"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read():
        lines.extend([proc.stdout.readline(), proc.stdout.readline()])
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(30), "demo.streams printed nothing"
        http_url, https_url = lines[0].split()[5], lines[1].split()[5]

        def counters() -> dict:
            with urllib.request.urlopen(f"{http_url}/_demo/counters", timeout=10) as response:
                return json.loads(response.read())

        yield https_url, ca_file.read_text(), counters
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_plan_with_a_websocket_session_and_a_stream_runs_and_the_target_counts_what_it_got(
    project, streams, celery_worker, live_server, alice, team
):
    https_url, ca_pem, counters = streams
    _, token = token_create(user=alice, team=team, name="CI", scope="write")
    api = f"{live_server.url}/api/v1"

    # given: the target's HTTPS address, its private CA uploaded as the environment's bundle
    status, env, _ = call(
        "POST",
        f"{api}/environments/",
        token,
        {"project": str(project.code), "name": "Streams", "base_url": https_url, "ca_bundle": ca_pem},
    )
    assert status == 201, env
    assert env["protocol"] == "auto" and env["ca_bundle"].startswith("-----BEGIN CERTIFICATE-----")
    # and a test case made through the API: a chat session, then a streamed answer
    chat = {
        "actions": [
            {"send": '{"chat": "hello"}'},
            {"expect": {"json": "$.chat", "equals": "hello"}, "timeout": 5},
            {"send": "/handshake"},  # the demo answers with the upgrade's x- headers
            {"expect": {"contains": '"x-team": "blue"'}},
            {"wait": 0.05},
        ],
        "hold": 0.05,
    }
    test_case = {
        "project": str(project.code),
        "name": "Assistant",
        "steps": [
            {"name": "Chat", "kind": "websocket", "path": "/ws", "headers": {"X-Team": "blue"}, "websocket": chat},
            {
                "name": "Ask",
                "kind": "stream",
                "path": "/sse",
                "think_time": 0.1,
                "stream": {"kind": "sse", "idle_timeout": 5, "last_event_contains": "[DONE]"},
            },
        ],
    }
    status, body, _ = call("POST", f"{api}/test-cases/", token, test_case)
    assert status == 201, body
    assert body["steps"][0]["websocket"] == chat
    plan = {
        "project": str(project.code),
        "environment": env["code"],
        "name": "Streams smoke",
        "users": 2,
        "ramp_up": 0,
        "hold": 3,
        "ramp_down": 0,
        "request_timeout": 10,
        "mix": [{"test_case": body["code"], "weight": 1}],
    }
    status, body, _ = call("POST", f"{api}/plans/", token, plan)
    assert status == 201, body
    assert body["protocol"] == "" and body["problems"] == []
    before = counters()

    # when: the plan runs
    status, body, headers = call("POST", f"{api}/plans/{body['code']}/runs/", token)
    assert status == 201, body
    run_url = headers["Location"]
    for _ in range(8):
        run = call("GET", f"{run_url}?wait=20", token)[1]
        if not run["is_active"]:
            break
    assert run["status"] in ("passed", "finished"), run

    # then: every session and stream went well, and the target received what the run says it sent
    stored = Run.objects.get(code=run["code"])
    snapshot_step = stored.plan_snapshot["test_cases"][0]["steps"][0]
    assert snapshot_step["websocket"]["actions"] == chat["actions"] and "ca_bundle" in stored.plan_snapshot
    pages: dict[str, int] = {}
    errors = 0
    for row in PageInterval.objects.filter(run=stored):
        pages[row.label] = pages.get(row.label, 0) + row.pages
        errors += row.errors
    sessions, streams_done = pages["Assistant: Chat"], pages["Assistant: Ask"]
    assert errors == 0, stored.summary.get("errors")
    assert sessions >= 2 and streams_done >= 2
    served = counters()
    ws_sessions = served["ws_sessions"] - before["ws_sessions"]
    ws_in = served["ws_messages_in"] - before["ws_messages_in"]
    sse_done = served["sse_done"] - before["sse_done"]
    # A session or a stream cut by the end of the hold reached the server without being a page: at most one a user.
    assert sessions <= ws_sessions <= sessions + plan["users"]
    assert 2 * sessions <= ws_in <= 2 * (sessions + plan["users"])  # two messages sent in each session
    assert streams_done <= sse_done <= streams_done + plan["users"]
    assert served["sse_events"] - before["sse_events"] >= 5 * streams_done  # five tokens in each stream
    assert served["by_path"]["/sse"] - before["by_path"].get("/sse", 0) >= streams_done
    assert served["by_protocol"].get("2", 0) - before["by_protocol"].get("2", 0) >= streams_done  # h2 by ALPN
