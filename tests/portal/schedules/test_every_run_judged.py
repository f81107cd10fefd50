"""Issue 24.1: every finished run of a plan is judged against its baseline, whoever started it; pending until known."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.runs.exports.summary_json import summary_json
from portal.runs.models import Run
from portal.runs.signals import run_finished
from portal.schedules.baselines import PENDING_RETRY_S, verdicts_catch_up
from portal.schedules.models import RunVerdict, Schedule
from tests.portal.api.conftest import session
from tests.portal.schedules.test_baselines import SEARCH, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def eager():
    from workers.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@pytest.fixture
def soak_plan(plan):
    plan.hold = 20
    plan.save()
    return plan


def test_a_run_of_a_plan_without_schedule_is_pending_then_judged(
    soak_plan, alice, eager, django_capture_on_commit_callbacks
):
    # given: a plan nobody scheduled (a CI pipeline runs it), three earlier runs and a slow one
    assert not Schedule.objects.exists()
    for seed in (1, 2, 3):
        make_run(soak_plan, seed)
    slow = make_run(soak_plan, 4, slow={SEARCH: 5.0})

    # when: the run ends; the receiver runs, the task waits for the commit
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run_finished.send(sender=Run, run_id=slow.id)

    # then: pending at once, in the API and in summary.json, before any worker judged it
    assert RunVerdict.objects.get(run=slow).verdict == "pending"
    api = session(alice).get(f"/api/v1/runs/{slow.code}/").json()
    assert api["baseline_verdict"]["verdict"] == "pending"
    assert json.loads(summary_json(Run.objects.get(id=slow.id)))["baseline_verdict"]["verdict"] == "pending"
    assert len(callbacks) == 1

    # when: committed, the (eager) bookkeeping task judges it
    callbacks[0]()

    # then
    verdict = RunVerdict.objects.get(run=slow)
    assert verdict.verdict == "regressed", verdict.headline
    api = session(alice).get(f"/api/v1/runs/{slow.code}/").json()
    assert api["baseline_verdict"]["verdict"] == "regressed"
    assert api["baseline_verdict"]["method"] == verdict.method != ""
    summary = json.loads(summary_json(Run.objects.get(id=slow.id)))
    assert summary["baseline_verdict"]["verdict"] == "regressed"


def test_a_finished_run_without_its_row_yet_reads_pending_never_null(plan, alice):
    # given: the run's final status committed, the receiver not run yet (no verdict row)
    run = make_run(plan, 1)
    assert not RunVerdict.objects.filter(run=run).exists()

    body = session(alice).get(f"/api/v1/runs/{run.code}/").json()
    listed = session(alice).get("/api/v1/runs/").json()["results"][0]

    assert body["baseline_verdict"]["verdict"] == "pending"
    assert listed["baseline_verdict"]["verdict"] == "pending"
    assert json.loads(summary_json(run))["baseline_verdict"]["verdict"] == "pending"


def test_an_active_run_or_one_without_a_plan_has_no_verdict(plan, alice):
    running = make_run(plan, 1, status=Run.Status.RUNNING)
    assert session(alice).get(f"/api/v1/runs/{running.code}/").json()["baseline_verdict"] is None
    orphan = make_run(plan, 2)
    Run.objects.filter(id=orphan.id).update(plan=None)
    assert session(alice).get(f"/api/v1/runs/{orphan.code}/").json()["baseline_verdict"] is None


def test_a_pending_verdict_lost_on_its_way_is_judged_by_the_watchdog(plan, eager, django_capture_on_commit_callbacks):
    # given: a verdict left pending (its task was lost) for longer than the retry delay
    for seed in (1, 2, 3):
        make_run(plan, seed)
    run = make_run(plan, 4)
    RunVerdict.objects.create(run=run, verdict="pending", headline="…")
    RunVerdict.objects.filter(run=run).update(computed_at=timezone.now() - timedelta(seconds=PENDING_RETRY_S + 1))
    fresh = make_run(plan, 5)
    RunVerdict.objects.create(run=fresh, verdict="pending", headline="…")

    with django_capture_on_commit_callbacks(execute=True):
        assert verdicts_catch_up() == 1

    assert RunVerdict.objects.get(run=run).verdict == "within_noise"
    assert RunVerdict.objects.get(run=fresh).verdict == "pending"  # its task may still be in the queue
