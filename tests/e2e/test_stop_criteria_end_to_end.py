"""Issue 24 item 7 end to end: a run stops itself when its target breaks mid-run.

A live server, a real Celery worker, real Celery beat (its stop-criteria tick every 2 s on the bookkeeping
queue) and the demo target. The CI client starts a plan with the rule "error rate > 50 % over 10 s"; once the
healthy hold has been judged a while, the target's ``errors_pct`` knob makes every page a 503. The run stops
itself within the window plus the evaluation period, ends *stopped by its criteria*, and the figures it
reports are what the target served: every error a 503 the target counted, every page a request it received,
and the window's figures the same from the per-page rows as from the per-shard rows they were judged on.
"""

import json
import subprocess
import time
import urllib.request
from datetime import datetime
from xml.etree import ElementTree as ET

import pytest
from django.db.models import Sum

from portal.accounts.services import token_create
from portal.projects.models import Environment, MixEntry, Plan, Step, TestCase
from portal.runs.models import PageInterval, Run
from tests.processes import ROOT, Beat, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
BARE_PYTHON = "/usr/bin/python3"
WINDOW_S, CHECK_S = 10, 2
RAMP_UP_S, HOLD_S = 2, 120


@pytest.fixture
def beat(worker_env, tmp_path):
    beat = Beat(tmp_path / "beat.log", {**worker_env, "PLIMSOLL_STOP_CHECK_S": str(CHECK_S)})
    yield beat
    beat.close()


@pytest.fixture
def guarded_plan(project, demo_target):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)
    browse = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=browse, position=0, name="Home", path="/", think_time=0.05)
    plan = Plan.objects.create(
        project=project,
        environment=env,
        name="Nightly soak",
        users=4,
        ramp_up=RAMP_UP_S,
        hold=HOLD_S,
        threshold_apd_ms=1000,
        stop_criteria=[
            {"metric": "error_rate_pct", "above": 50, "window_s": WINDOW_S},
            {"metric": "p99_ms", "above": 5000, "window_s": 30},
        ],
    )
    MixEntry.objects.create(plan=plan, test_case=browse, weight=1, position=0)
    return plan


def test_a_run_stops_itself_when_its_target_breaks_and_says_so_everywhere(
    guarded_plan, demo_target, celery_worker, beat, live_server, alice, team, tmp_path
):
    _, token = token_create(user=alice, team=team, name="CI", scope="run")
    demo_target.set_knobs(errors_pct=0, latency_ms=0)
    demo_target.reset()
    md, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    client = subprocess.Popen(
        [BARE_PYTHON, "-m", "portal.client", "run", "--url", live_server.url, "--plan", str(guarded_plan.code),
         "--wait", "--timeout", "170", "--summary-md", str(md), "--junit", str(junit)],
        cwd=ROOT, env={"PLIMSOLL_TOKEN": token, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        run = wait_until(lambda: Run.objects.filter(plan=guarded_plan).first(), timeout=30, what="the run")
        # given: a healthy hold, judged for a while (3 windows' worth of checks) without a stop
        healthy_until = RAMP_UP_S + 3 * WINDOW_S
        wait_until(
            lambda: _second_reached(run, healthy_until), timeout=90, interval=0.5, what=f"second {healthy_until}"
        )
        assert Run.objects.get(id=run.id).status == Run.Status.RUNNING
        assert "stop_criteria_task" in beat.output()

        # when: the target breaks: every page is answered 503
        demo_target.set_knobs(errors_pct=100)
        broke_at = time.time()
        output, _ = client.communicate(timeout=120)
    finally:
        demo_target.set_knobs(errors_pct=0)
        if client.poll() is None:
            client.kill()

    # then: the run stopped itself within the window plus the evaluation period (and the sink's flush)
    run.refresh_from_db()
    assert run.status == Run.Status.STOPPED, (run.status, output)
    stopped = run.stopped_by
    stopped_at = datetime.fromisoformat(stopped["at"]).timestamp()
    print(
        f"e2e figures: stopped {stopped_at - broke_at:.1f} s after the target broke "
        f"(window {WINDOW_S} s, check every {CHECK_S} s), ended {run.finished_at.timestamp() - stopped_at:.1f} s "
        f"later; {stopped['sentence']}"
    )
    assert stopped_at - broke_at <= WINDOW_S + CHECK_S + 2, (stopped_at - broke_at, stopped)
    assert run.finished_at.timestamp() - stopped_at < 5  # the shards saw it at their next flush
    assert (run.finished_at - run.start_at).total_seconds() < RAMP_UP_S + HOLD_S - 60  # far from the plan's end
    assert stopped["text"] == "error rate > 50 % over 10 s"
    window = stopped["window"]
    assert window["to_s"] - window["from_s"] == WINDOW_S and window["from_s"] >= RAMP_UP_S
    assert window["error_rate_pct"] > 50 and window["error_rate_pct"] == stopped["value"]
    # every window figure, read again from the other table (per page, per shard and second) the sink wrote
    rows = PageInterval.objects.filter(run=run, second__gte=window["from_s"], second__lt=window["to_s"])
    again = rows.aggregate(pages=Sum("pages"), errors=Sum("errors"))
    assert (again["pages"], again["errors"]) == (window["pages"], window["errors"])
    assert {k for r in rows for k in r.errors_by_kind} == {"http_status"}

    # and: what Plimsoll recorded is what the target served: each page a request, each error one of its 503s
    # (less the few pages in flight when the run stopped, which the engine abandons and counts as aborted:
    # the target answered them, after the break, with 503s)
    served = demo_target.counters()
    totals = run.summary["whole_run"]
    aborted = sum(shard.totals["aborted"] for shard in run.shards.all())
    assert aborted <= guarded_plan.users
    assert totals["pages"] + aborted == served["requests"] == served["by_path"]["/"], (totals, aborted, served)
    assert totals["errors"] + aborted == served["by_status"]["503"] and totals["errors"] >= window["errors"]
    assert totals["pages"] - totals["errors"] == served["by_status"]["200"]

    # and: the run is never passed, stays out of baselines, and every reader says why
    assert run.verdict is None and not run.counts
    assert client.returncode == 9, output
    assert f"STOPPED by its criteria: error rate > 50 % over 10 s broke: {stopped['sentence']}" in output
    assert f"🛑 **Stopped by its criteria:** {stopped['sentence']}" in md.read_text()
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["stop criteria: error rate > 50 % over 10 s"].find("failure") is not None
    assert cases["stop criteria: p99 > 5000 ms over 30 s"].find("failure") is None
    request = urllib.request.Request(f"{live_server.url}/api/v1/runs/{run.code}/")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        data = json.loads(response.read())
    assert data["status"] == "stopped" and data["stopped_by"] == json.loads(json.dumps(stopped))
    assert data["summary"]["stopped_by"]["sentence"] == stopped["sentence"]


def _second_reached(run: Run, second: int) -> bool:
    from portal.runs.models import ShardInterval

    return ShardInterval.objects.filter(run_id=run.id, second__gte=second).exists()
