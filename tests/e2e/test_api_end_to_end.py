"""A pipeline's view: through the REST API on a live server and a real Celery worker against the demo target.

Create a test case and a plan, start the plan's run, long-poll to its end, download junit.xml and
check it against the run's verdict and figures; then the same with ``python -m portal.client`` and its exit code.
"""

import json
import subprocess
import urllib.request
from xml.etree import ElementTree as ET

import pytest

from portal.accounts.services import token_create
from portal.projects.models import Environment, MixEntry, Plan, Step, TestCase
from portal.runs.models import Run
from tests.processes import PYTHON, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Debian's own Python has neither Django nor Celery: the client must run on it, as on a bare CI runner.
BARE_PYTHON = "/usr/bin/python3"


def call(method: str, url: str, token: str, document: dict | None = None) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    if method == "POST":
        req.add_header("Content-Type", "application/json")
        req.data = json.dumps(document or {}).encode()
    with urllib.request.urlopen(req, timeout=90) as response:
        return response.status, response.read(), dict(response.headers)


@pytest.fixture
def demo_plan(project, demo_target):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)
    browse = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=browse, position=0, name="Home", path="/", think_time=0.2)
    Step.objects.create(test_case=browse, position=1, name="Articles", path="/articles", think_time=0.2)
    plan = Plan.objects.create(
        project=project, environment=env, name="CI", users=5, ramp_up=1, hold=4, threshold_apd_ms=2000
    )
    MixEntry.objects.create(plan=plan, test_case=browse, weight=1)
    return plan


def test_a_pipeline_creates_a_test_and_plan_starts_waits_and_reads_junit_through_the_api(
    project, demo_target, celery_worker, live_server, alice, team
):
    # given: a write token (a CI secret) and an environment for the demo target
    _, token = token_create(user=alice, team=team, name="CI", scope="write")
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)
    demo_target.set_knobs(latency_ms=5)
    api = f"{live_server.url}/api/v1"

    # when: the pipeline creates a test case and a plan, starts the plan and long-polls its run
    test_case = {
        "project": str(project.code),
        "name": "Browse",
        "steps": [
            {"name": "Home", "path": "/", "think_time": 0.2},
            {"name": "Articles", "path": "/articles", "think_time": 0.2},
        ],
    }
    status, body, _ = call("POST", f"{api}/test-cases/", token, test_case)
    assert status == 201
    plan = {
        "project": str(project.code),
        "environment": str(env.code),
        "name": "CI",
        "users": 5,
        "ramp_up": 1,
        "hold": 4,
        "ramp_down": 0,
        "threshold_apd_ms": 2000,
        "mix": [{"test_case": json.loads(body)["code"], "weight": 1}],
    }
    status, body, _ = call("POST", f"{api}/plans/", token, plan)
    assert status == 201, body
    plan_code = json.loads(body)["code"]
    status, body, headers = call("POST", f"{api}/plans/{plan_code}/runs/", token)
    assert status == 201
    run_url = headers["Location"]
    for _ in range(6):
        run = json.loads(call("GET", f"{run_url}?wait=20", token)[1])
        if not run["is_active"]:
            break
    assert run["status"] == "passed", run

    # then: junit.xml agrees with the run's verdict and figures
    junit = ET.fromstring(call("GET", f"{run_url}junit.xml", token)[1])
    stored = Run.objects.get(code=run["code"])
    apd = stored.summary["totals"]["apd_ms"]
    (case,) = junit.findall("./testsuite/testcase")
    assert case.get("name") == "APD ≤ 2000 ms" and case.find("failure") is None
    assert junit.get("failures") == "0" and junit.get("errors") == "0"
    assert run["thresholds"] == [{"window": "Hold", **stored.summary["thresholds"][0]}]
    assert run["thresholds"][0]["actual"] == apd > 0
    summary = json.loads(call("GET", f"{run_url}summary.json", token)[1])
    assert summary["verdict"] == stored.verdict == "passed" and summary["summary"]["totals"]["apd_ms"] == apd


def test_the_client_command_fails_the_build_on_a_broken_threshold(
    demo_plan, demo_target, celery_worker, live_server, alice, team, tmp_path
):
    # given: a threshold no demo can hold
    demo_plan.threshold_min_pages_per_s = 100_000
    demo_plan.save()
    _, token = token_create(user=alice, team=team, name="CI", scope="run")
    junit_path = tmp_path / "junit.xml"

    # when
    result = subprocess.run(
        [BARE_PYTHON, "-m", "portal.client", "run", "--url", live_server.url, "--plan", str(demo_plan.code), "--wait"]
        + ["--junit", str(junit_path), "--timeout", "120"],
        cwd=ROOT,
        env={"PLIMSOLL_TOKEN": token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=180,
    )

    # then: exit 1 (thresholds failed), and the JUnit file names the broken threshold with its figures
    assert result.returncode == 1, result.stdout + result.stderr
    run = Run.objects.get(plan=demo_plan)
    assert run.status == Run.Status.FAILED
    junit = ET.parse(junit_path).getroot()
    failures = junit.findall(".//failure")
    pages_per_s = run.summary["totals"]["pages_per_s"]
    assert [f.get("message") for f in failures] == [f"Pages/s {pages_per_s:g} pages/s, limit Pages/s ≥ 100000 pages/s"]
    assert "FAIL Hold: Pages/s" in result.stdout and f"Run #{run.number} failed" in result.stdout


def test_the_client_exits_5_when_the_api_refuses(live_server, alice, team, plan):
    _, token = token_create(user=alice, team=team, name="CI", scope="read")
    result = subprocess.run(
        [PYTHON, "-m", "portal.client", "run", "--url", live_server.url, "--plan", str(plan.code), "--wait"],
        cwd=ROOT,
        env={"PLIMSOLL_TOKEN": token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 5  # refused, told apart from a run ended in error (2)
    assert "HTTP 403" in result.stderr and "needs a run token" in result.stderr
    assert not Run.objects.exists()
