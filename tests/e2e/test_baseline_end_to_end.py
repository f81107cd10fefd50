"""Real runs on the demo target: 3 baseline runs with the search index, then one without it.

The worker finishes each run, the run_finished signal enqueues the verdict on the default
queue, and the same worker computes it: regressed on the search page, within noise on the home page.
"""

import hmac
import json
from datetime import time

import pytest

from portal.notifications.services import channel_create
from portal.projects.models import Environment, MixEntry, Plan, Step, TestCase
from portal.runs.models import Run
from portal.runs.services import run_create
from portal.schedules.models import RunVerdict
from portal.schedules.services import schedule_save
from tests.portal.notifications.test_notifications import Receiver
from tests.processes import DemoTarget, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def demo_target(tmp_path_factory):
    """200,000 work items, so a search without the index costs the target ~18 ms more than with it."""
    target = DemoTarget(tmp_path_factory.mktemp("demo-200k-baseline"), items=200_000)
    yield target
    target.close()


@pytest.fixture
def nightly_plan(project, demo_target):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)
    browse = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=browse, position=0, name="Home", path="/", think_time=0.1)
    search = TestCase.objects.create(project=project, name="Search")
    Step.objects.create(test_case=search, position=0, name="Search", path="/search?q=Area+042", think_time=0.1)
    plan = Plan.objects.create(project=project, environment=env, name="Nightly", users=2, ramp_up=0, hold=6)
    MixEntry.objects.create(plan=plan, test_case=browse, weight=1, position=0)
    MixEntry.objects.create(plan=plan, test_case=search, weight=1, position=1)
    # A schedule (paused) makes it a scheduled plan: its finished runs are judged against the baseline.
    schedule_save(
        project=project, plan=plan, kind="daily", at_time=time(2, 0), every_hours=None, cron="", time_zone="UTC",
        enabled=False, ends_on=None, busy_wait_minutes=30, catch_up_hours=2,
    )  # fmt: skip
    return plan


def run_to_end(plan, user) -> Run:
    run = run_create(plan=plan, user=user)
    wait_until(lambda: Run.objects.get(id=run.id).status in Run.FINISHED, timeout=90, what=f"run #{run.number} to end")
    run.refresh_from_db()
    assert run.status == "finished", run.error_message
    return run


def verdict_of(run) -> RunVerdict:
    return wait_until(
        lambda: RunVerdict.objects.filter(run=run).exclude(verdict="pending").first(),
        timeout=30,
        what=f"the verdict of run #{run.number}",
    )


def test_dropped_index_regresses_search_only(nightly_plan, demo_target, celery_worker, alice, project):
    # A webhook on loopback hears about the regression, from the worker, signed.
    hook = Receiver([])
    channel = channel_create(project=project, name="CI", kind="webhook", events=["regression"], url=hook.url)
    # A fixed server delay on every page keeps loopback jitter small next to the figures.
    demo_target.set_knobs(**{"search.index": "on", "latency_ms": 20, "tempdb.files": 16})
    baseline = [run_to_end(nightly_plan, alice) for _ in range(3)]
    # Each finished run of the scheduled plan gets a verdict, computed by the worker from the signal.
    assert verdict_of(baseline[-1]).run_id == baseline[-1].id

    demo_target.set_knobs(**{"search.index": "off"})
    slow = run_to_end(nightly_plan, alice)
    verdict = verdict_of(slow)

    pages = {}
    for row in verdict.rows:
        pages.setdefault(row["page"], {})[row["figure"]] = row["verdict"]
    assert verdict.verdict == "regressed", (verdict.headline, verdict.basis)
    assert pages["Search: Search"]["APD"] == "regressed", verdict.rows
    assert pages["Browse: Home"]["APD"] == "within_noise", verdict.rows
    assert "Search: Search APD" in verdict.headline

    def about_the_slow_run():
        return next((r for r in hook.requests if json.loads(r[1])["run"]["number"] == slow.number), None)

    headers, body = wait_until(about_the_slow_run, timeout=30, what="the regression webhook")
    hook.close()
    assert headers["X-Plimsoll-Signature"] == "sha256=" + hmac.new(channel.secret.encode(), body, "sha256").hexdigest()
    payload = json.loads(body)
    assert payload["event"] == "regression"
    assert payload["headline"] == verdict.headline
