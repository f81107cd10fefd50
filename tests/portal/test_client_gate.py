"""Issue 24.4: the CI gate of ``python -m portal.client``, against a scripted API on loopback.

The real portal's answers are tested in tests/portal/api/ and end to end in tests/e2e/test_ci_gate_end_to_end.py;
here an HTTP server on 127.0.0.1 plays the API so that every exit code, a throttle, a busy environment and a
signal can be provoked on purpose. The client is the real module (a subprocess for the signal).
"""

import json
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from portal import client
from tests.processes import ROOT

PLAN = "a1b2c3d4-0000-4000-8000-000000000002"


class Portal(ThreadingHTTPServer):
    """Scripted answers: ``starts`` for POST /plans/…/runs/, ``runs`` for GET of the run (the last one repeats)."""

    def __init__(self, *, runs, starts=None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.runs, self.starts = list(runs), list(starts or [(201, {})])
        self.stops, self.posts, self.gets = 0, [], 0
        self.throttled_lookups = 0  # how many look-ups (projects, plans) answer 429 first

    @property
    def base(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def run(self, **fields) -> dict:
        return {
            "number": 7,
            "plan_name": "Smoke",
            "web_url": f"{self.base}/runs/r/",
            "url": f"{self.base}/api/v1/runs/r/",
            "status": "queued",
            "is_active": True,
            "thresholds": [],
            "error_message": "",
            "labels": {},
            "baseline_verdict": None,
            **fields,
        }


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, code: int, body, headers=None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802
        portal = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path.endswith("/stop/"):
            portal.stops += 1
            return self._send(200, portal.run(status="cancelled", is_active=False))
        portal.posts.append((self.path, body))
        code, extra = portal.starts.pop(0) if len(portal.starts) > 1 else portal.starts[0]
        headers = extra.pop("headers", None) if isinstance(extra, dict) else None
        self._send(code, portal.run(**extra) if code == 201 else extra, headers)

    def do_GET(self):  # noqa: N802
        portal = self.server
        if self.path.startswith(("/api/v1/projects/", "/api/v1/plans/")) and portal.throttled_lookups:
            portal.throttled_lookups -= 1
            return self._send(429, {"detail": "Request was throttled."}, {"Retry-After": "1"})
        if self.path.startswith("/api/v1/projects/"):
            return self._send(200, {"results": [{"name": "Shop", "code": "p-1"}], "next": None})
        if self.path.startswith("/api/v1/plans/"):
            assert "project=p-1" in self.path
            return self._send(200, {"results": [{"name": "Nightly", "code": PLAN}], "next": None})
        if self.path.endswith("junit.xml"):
            return self._send(200, b"<testsuites/>")
        portal.gets += 1
        answer = portal.runs.pop(0) if len(portal.runs) > 1 else portal.runs[0]
        if isinstance(answer, tuple):  # (code, body, headers); a 200's body: the run's fields
            code, body, headers = answer
            return self._send(code, portal.run(**body) if code == 200 else body, headers)
        self._send(200, portal.run(**answer))


@pytest.fixture
def portal(monkeypatch):
    monkeypatch.setenv("PLIMSOLL_TOKEN", "plim_test")
    monkeypatch.setattr(client, "RETRY_S", 0.05)
    monkeypatch.setattr(client, "VERDICT_POLL_S", 0.05)
    monkeypatch.setattr(client, "BUSY_RETRY_S", 0.1)
    servers = []

    def start(**kwargs) -> Portal:
        server = Portal(**kwargs)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def gate(server, *extra) -> int:
    return client.main(["run", "--url", server.base, "--plan", PLAN, "--wait", "--timeout", "20", *extra])


ENDED = {"status": "passed", "is_active": False, "verdict": "passed"}
ROWS = [
    {"page": "Search", "figure": "APD", "verdict": "regressed", "before": "41 ms", "after": "212 ms",
     "change": "417 % more", "noise": "±4 %", "basis": ""},
    {"page": "Home", "figure": "APD", "verdict": "within_noise", "before": "20 ms", "after": "20 ms",
     "change": "no change", "noise": "±4 %", "basis": ""},
]  # fmt: skip
REGRESSED = {"verdict": "regressed", "headline": "Run #7 regressed: Search APD 41 ms → 212 ms.", "rows": ROWS,
             "provisional": False, "method": "Holm over 2 figures."}  # fmt: skip
PENDING = {"verdict": "pending", "headline": "Being judged against the plan's baseline.", "rows": []}


def test_a_regression_fails_the_build_after_waiting_for_the_verdict_and_writes_the_summary(portal, tmp_path):
    # given: the run ends with its verdict pending, judged two answers later
    server = portal(runs=[{**ENDED, "baseline_verdict": PENDING}] * 2 + [{**ENDED, "baseline_verdict": REGRESSED}])
    md = tmp_path / "summary.md"

    code = gate(server, "--fail-on", "regression,degradation", "--summary-md", str(md), "--label", "build=3f2a1c")

    assert code == client.REGRESSION == 6
    assert server.posts == [(f"/api/v1/plans/{PLAN}/runs/", {"labels": {"build": "3f2a1c"}})]
    text = md.read_text()
    assert "**Run #7 regressed: Search APD 41 ms → 212 ms.**" in text
    assert "| Search | APD | 41 ms | 212 ms | 417 % more | regressed |" in text
    assert "| Home |" not in text  # only the figures that moved
    assert f"[Run #7 in Plimsoll]({server.base}/runs/r/)" in text


def test_without_fail_on_a_regression_is_reported_but_passes(portal, capsys):
    server = portal(runs=[{**ENDED, "baseline_verdict": REGRESSED}])
    assert gate(server) == client.PASSED
    assert "Against the baseline: regressed." in capsys.readouterr().out


@pytest.mark.parametrize(
    ("run", "fail_on", "expected"),
    [
        ({**ENDED, "summary": {"degradation": {"degraded": True}}}, "degradation", client.DEGRADATION),
        ({**ENDED, "summary": {"degradation": {"degraded": True}}}, "regression", client.PASSED),
        ({**ENDED, "status": "incomplete"}, "incomplete", client.INCOMPLETE),
        ({**ENDED, "status": "incomplete"}, "", client.INCOMPLETE),  # never judged: its own code always
        ({**ENDED, "status": "failed", "baseline_verdict": REGRESSED}, "regression", client.FAILED),
        ({**ENDED, "status": "error", "baseline_verdict": None}, "regression", client.ERROR),
        ({**ENDED, "status": "finished"}, "regression", client.PASSED),
    ],
)
def test_each_cause_has_its_exit_code(portal, run, fail_on, expected):
    server = portal(runs=[run])
    assert gate(server, "--fail-on", fail_on) == expected


def test_an_unknown_cause_is_refused_by_the_command_line():
    with pytest.raises(SystemExit) as exc:
        client.main(["run", "--url", "http://127.0.0.1:9", "--plan", PLAN, "--fail-on", "regresion"])
    assert exc.value.code == 2  # argparse's usage error, before anything is started


def test_a_verdict_that_never_comes_is_could_not_tell(portal, monkeypatch):
    server = portal(runs=[{**ENDED, "baseline_verdict": PENDING}])
    code = client.main(["run", "--url", server.base, "--plan", PLAN, "--wait", "--timeout", "1",
                        "--fail-on", "regression"])  # fmt: skip
    assert code == client.COULD_NOT_TELL


def test_refused_and_unreachable_are_told_apart_from_a_run_in_error(portal):
    refused = portal(runs=[ENDED], starts=[(403, {"detail": "This token may only read."})])
    assert gate(refused) == client.REFUSED == 5
    unreachable = client.main(["run", "--url", "http://127.0.0.1:9", "--plan", PLAN, "--wait"])
    assert unreachable == client.REFUSED


def test_a_busy_environment_is_waited_for_only_when_asked(portal):
    busy = (409, {"detail": "Run #6 is on this environment."})
    server = portal(runs=[ENDED], starts=[busy, busy, (201, {})])
    assert gate(server, "--wait-for-environment", "10") == client.PASSED
    assert len(server.posts) == 3

    server = portal(runs=[ENDED], starts=[busy])
    assert gate(server) == client.REFUSED


def test_a_throttle_is_honoured_with_its_retry_after(portal):
    throttled = (429, {"detail": "Request was throttled."}, {"Retry-After": "1"})
    server = portal(runs=[throttled, ENDED])
    started = time.monotonic()
    assert gate(server) == client.PASSED
    assert time.monotonic() - started >= 1.0
    assert server.gets == 2


def test_a_throttled_start_and_look_up_are_asked_again_after_retry_after(portal, capsys):
    """Issue 28 item 17: every call waits out a 429, not only the polls (the start exited at once)."""
    throttled = (429, {"detail": "Request was throttled.", "headers": {"Retry-After": "1"}})
    server = portal(runs=[ENDED], starts=[throttled, (201, {})])
    server.throttled_lookups = 2
    started = time.monotonic()

    code = client.main(["run", "--url", server.base, "--project", "Shop", "--plan", "Nightly", "--wait"])

    assert code == client.PASSED
    assert len(server.posts) == 2 and server.throttled_lookups == 0
    assert time.monotonic() - started >= 3.0  # three throttles, a second each
    assert "Plimsoll asks to slow down (429 on POST /api/v1/plans/" in capsys.readouterr().out


def test_a_throttle_longer_than_the_budget_is_refused_with_its_reason(portal, monkeypatch, capsys):
    monkeypatch.setattr(client, "THROTTLE_BUDGET_S", 0.5)
    throttled = (429, {"detail": "Request was throttled.", "headers": {"Retry-After": "1"}})
    server = portal(runs=[ENDED], starts=[throttled])

    assert gate(server) == client.REFUSED
    assert len(server.posts) == 1
    assert "HTTP 429" in capsys.readouterr().err


def test_a_throttle_past_the_timeout_while_waiting_is_could_not_tell(portal):
    throttled = (429, {"detail": "Request was throttled."}, {"Retry-After": "30"})
    server = portal(runs=[throttled])
    started = time.monotonic()
    code = client.main(["run", "--url", server.base, "--plan", PLAN, "--wait", "--timeout", "1"])
    assert code == client.COULD_NOT_TELL
    assert time.monotonic() - started < 10


def test_timeout_stops_the_run_it_started_and_says_so(portal, capsys):
    server = portal(runs=[{"status": "running", "is_active": True}])
    code = client.main(["run", "--url", server.base, "--plan", PLAN, "--wait", "--timeout", "1"])
    assert code == client.TIMED_OUT
    assert server.stops == 1
    assert "Stopped run #7 (--timeout 1 s)" in capsys.readouterr().out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_cancelled_job_stops_the_run_it_started(portal, signum):
    server = portal(runs=[{"status": "running", "is_active": True}])
    env = {"PLIMSOLL_TOKEN": "plim_test", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "portal.client", "run", "--url", server.base, "--plan", PLAN, "--wait"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert "started" in proc.stdout.readline()
    deadline = time.monotonic() + 10
    while server.gets == 0 and time.monotonic() < deadline:  # waiting on the run now
        time.sleep(0.05)
    proc.send_signal(signum)
    out = proc.communicate(timeout=30)[0]

    assert proc.returncode == 128 + signum
    assert server.stops == 1
    assert f"Stopped run #7 (the job was interrupted ({signal.Signals(signum).name}))" in out


def test_a_plan_is_named_by_its_project_and_name(portal):
    server = portal(runs=[ENDED])
    code = client.main(["run", "--url", server.base, "--project", "Shop", "--plan", "Nightly", "--wait"])
    assert code == client.PASSED
    assert server.posts[0][0] == f"/api/v1/plans/{PLAN}/runs/"
    missing = client.main(["run", "--url", server.base, "--project", "Shop", "--plan", "Nope", "--wait"])
    assert missing == client.REFUSED


def test_a_capped_long_poll_waits_its_retry_after_before_asking_again(portal):
    # given a server whose long-polls are all taken: it answers at once with the current state
    capped = (200, {"status": "running"}, {"X-Plimsoll-Wait": "capped", "Retry-After": "1"})
    server = portal(runs=[capped, capped, ENDED])
    # when the gate waits for the run
    started = time.monotonic()
    assert gate(server) == client.PASSED
    # then it asked three times, a second apart, not in a busy loop
    assert server.gets == 3
    assert time.monotonic() - started >= 2.0
