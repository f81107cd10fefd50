"""The pipeline client waits through an outage of the portal, then says it could not tell.

A real HTTP server on loopback plays the API: it starts a run, then answers 503 (the portal's
database restarting) for a while before the run's end, or for good. The client is the real
module, run as a pipeline runs it.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from portal import client


class FakePortal(ThreadingHTTPServer):
    """Answers the two calls the client makes: start (POST) and wait (GET), with a scripted outage."""

    def __init__(self, *, failing_gets: int, final_status: str = "passed"):
        super().__init__(("127.0.0.1", 0), Handler)
        self.failing_gets = failing_gets
        self.final_status = final_status
        self.gets = 0

    def run(self, status: str, active: bool) -> dict:
        base = f"http://127.0.0.1:{self.server_address[1]}"
        return {
            "number": 7,
            "plan_name": "Smoke",
            "web_url": f"{base}/runs/r/",
            "url": f"{base}/api/v1/runs/r/",
            "status": status,
            "is_active": active,
            "thresholds": [],
            "error_message": "",
        }


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 (http.server's naming)
        self._send(201, self.server.run("queued", True))

    def do_GET(self):  # noqa: N802
        self.server.gets += 1
        if self.server.gets <= self.server.failing_gets:
            self._send(503, {"detail": "database unavailable"})
        else:
            self._send(200, self.server.run(self.server.final_status, False))


@pytest.fixture
def portal_with(monkeypatch):
    monkeypatch.setenv("PLIMSOLL_TOKEN", "plim_test")
    monkeypatch.setattr(client, "RETRY_S", 0.05)
    servers = []

    def start(**kwargs) -> FakePortal:
        server = FakePortal(**kwargs)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _run(server) -> int:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return client.main(["run", "--url", url, "--plan", "p", "--wait", "--timeout", "30"])


def test_a_short_outage_is_waited_through_and_the_run_outcome_decides(portal_with, monkeypatch, capsys):
    monkeypatch.setattr(client, "OUTAGE_S", 5.0)
    server = portal_with(failing_gets=4)

    assert _run(server) == client.PASSED
    assert server.gets == 5  # four 503s, then the finished run
    assert "did not answer" in capsys.readouterr().out


def test_an_outage_longer_than_the_limit_exits_could_not_tell(portal_with, monkeypatch, capsys):
    monkeypatch.setattr(client, "OUTAGE_S", 0.5)
    server = portal_with(failing_gets=10**6)

    assert _run(server) == client.COULD_NOT_TELL == 4
    assert "Could not tell how run #7 ended" in capsys.readouterr().out


def test_a_capacity_search_that_found_its_capacity_is_a_success(portal_with):
    server = portal_with(failing_gets=0, final_status="done")

    assert _run(server) == client.PASSED


def test_an_incomplete_run_has_its_own_exit_code(portal_with):
    # issue 25: a run that achieved materially less load than planned was not judged; neither passed nor failed
    server = portal_with(failing_gets=0, final_status="incomplete")

    assert _run(server) == client.INCOMPLETE == 8


def test_a_refusal_is_not_waited_through(portal_with, monkeypatch):
    # A 4xx is an answer (a revoked token, a foreign run), not an outage: the client stops at once.
    monkeypatch.setattr(client, "OUTAGE_S", 30.0)
    server = portal_with(failing_gets=0)
    server.RequestHandlerClass = type(
        "Refusing", (Handler,), {"do_GET": lambda self: self._send(403, {"detail": "no"})}
    )

    assert _run(server) == client.REFUSED  # "refused" has its own code (issue 24), apart from a run ended in error
