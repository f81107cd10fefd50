"""Issue 24 end to end: nightly runs of a plan nobody scheduled, started by the CI client on the real stack.

A live server, a real Celery worker and the demo target: three runs with the search index make the baseline,
then the search index is dropped (the knob that slows one page). Each run is judged on the worker after it
ends; the client waits for the verdict, fails the build on the regression with its own exit code, writes the
Markdown summary and JUnit with the failing baseline test case.
"""

import subprocess
from xml.etree import ElementTree as ET

import pytest

from portal.accounts.services import token_create
from portal.projects.models import Environment, MixEntry, Plan, Step, TestCase
from portal.runs.models import Run
from portal.schedules.models import RunVerdict, Schedule
from tests.processes import ROOT, DemoTarget

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
BARE_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def demo_target(tmp_path_factory):
    """400,000 work items, so a search without the index costs the target ~36 ms more than with it (a page
    ~2.5× slower even on an idle machine: a regression no loaded CI machine can hide in its noise)."""
    target = DemoTarget(tmp_path_factory.mktemp("demo-400k-ci-gate"), items=400_000)
    yield target
    target.close()


@pytest.fixture
def ci_plan(project, demo_target):
    """Four pages, as a merge gate's plan has several: three that do not use the index give the night's common
    drift (a loaded CI machine slows every page alike), against which the search page stands out."""
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)
    plan = Plan.objects.create(project=project, environment=env, name="Merge gate", users=4, ramp_up=0, hold=15)
    pages = [
        ("Browse", "Home", "/", 1),
        ("Read", "Articles", "/articles", 1),
        ("Read one", "Article", "/articles/7", 1),
    ]
    pages.append(("Search", "Search", "/search?q=Area+042", 2))
    for position, (case_name, step, path, weight) in enumerate(pages):
        case = TestCase.objects.create(project=project, name=case_name)
        Step.objects.create(test_case=case, position=0, name=step, path=path, think_time=0.1)
        MixEntry.objects.create(plan=plan, test_case=case, weight=weight, position=position)
    return plan


def client_run(url, token, *args, timeout=180):
    return subprocess.run(
        [BARE_PYTHON, "-m", "portal.client", "run", "--url", url, *args],
        cwd=ROOT,
        env={"PLIMSOLL_TOKEN": token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_ci_runs_are_judged_and_a_dropped_index_fails_the_build(
    ci_plan, demo_target, celery_worker, live_server, alice, team, project, tmp_path
):
    _, token = token_create(user=alice, team=team, name="CI", scope="run")
    demo_target.set_knobs(**{"search.index": "on", "latency_ms": 20, "tempdb.files": 16})
    assert not Schedule.objects.exists()  # nobody scheduled this plan: CI runs are judged all the same
    by_name = ["--project", project.name, "--plan", ci_plan.name, "--wait", "--timeout", "150"]

    for build in ("a1", "a2", "a3"):
        result = client_run(live_server.url, token, *by_name, "--label", f"build={build}", "--fail-on", "regression")
        assert result.returncode == 0, result.stdout + result.stderr
    runs = list(Run.objects.filter(plan=ci_plan).order_by("number"))
    assert [r.labels for r in runs] == [{"build": "a1"}, {"build": "a2"}, {"build": "a3"}]
    # each judged by the worker, none left pending (the client waited for it)
    assert all(RunVerdict.objects.get(run=r).verdict != "pending" for r in runs)

    demo_target.set_knobs(**{"search.index": "off"})
    md, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    result = client_run(
        live_server.url, token, *by_name, "--label", "build=b4", "--fail-on", "regression,degradation",
        "--summary-md", str(md), "--junit", str(junit),
    )  # fmt: skip

    assert result.returncode == 6, result.stdout + result.stderr
    slow = Run.objects.filter(plan=ci_plan).latest("number")
    verdict = RunVerdict.objects.get(run=slow)
    assert verdict.verdict == "regressed", verdict.headline
    search_apd = next(r for r in verdict.rows if r["page"] == "Search: Search" and r["figure"] == "APD")
    assert search_apd["verdict"] == "regressed", search_apd  # 15 s of 4 users: enough search pages to judge
    text = md.read_text()
    assert verdict.headline in text
    assert f"| Search: Search | APD | {search_apd['before']} | {search_apd['after']} |" in text
    assert f"/runs/{slow.code}/" in text and "`build: b4`" in text
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["baseline: Search: Search APD"].find("failure") is not None
    assert "Against the baseline: regressed." in result.stdout
