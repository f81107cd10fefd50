"""A steps run and arrival-rate runs through the portal and a real worker, against the demo target."""

import pytest

from portal.projects.models import Environment, MixEntry, Plan, PlanLevel, Step, TestCase
from portal.runs.models import PageInterval, Run
from portal.runs.services import run_create
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def finished(run: Run, timeout: float = 90) -> Run:
    wait_until(lambda: Run.objects.get(id=run.id).status in Run.FINISHED, timeout=timeout, what="the run to end")
    run.refresh_from_db()
    return run


@pytest.fixture
def home_case(project):
    tc = TestCase.objects.create(project=project, name="Home")
    Step.objects.create(test_case=tc, name="Home", path="/", think_time=0.2)
    return tc


def plan_of(project, demo_target, home_case, **fields) -> Plan:
    env = Environment.objects.create(project=project, name=f"Demo {fields['name']}", base_url=demo_target.base_url)
    plan = Plan.objects.create(project=project, environment=env, **fields)
    MixEntry.objects.create(plan=plan, test_case=home_case, weight=1)
    return plan


def test_a_steps_run_is_measured_level_by_level(project, alice, demo_target, celery_worker, home_case):
    # given: two levels, 3 then 6 users, each held 3 s, on a target answering in about 20 ms
    demo_target.set_knobs(latency_ms=20)
    demo_target.reset()
    plan = plan_of(project, demo_target, home_case, name="Steps", profile_kind="steps", threshold_apd_ms=1000)
    PlanLevel.objects.create(plan=plan, position=0, users=3, ramp_up=1, hold=3, ramp_down=0, quiet=1)
    PlanLevel.objects.create(plan=plan, position=1, users=6, ramp_up=1, hold=3, ramp_down=0, quiet=0)

    # when
    run = finished(run_create(plan=plan, user=alice))

    # then: one window per level, with the users each level really had and twice the throughput at twice the users
    assert run.status == Run.Status.PASSED, run.error_message
    first, second = run.summary["windows"]
    assert (first["label"], second["label"]) == ("Level 1: 3 users", "Level 2: 6 users")
    assert (first["totals"]["users"], second["totals"]["users"]) == (3, 6)
    ratio = second["totals"]["pages_per_s"] / first["totals"]["pages_per_s"]
    assert 1.6 < ratio < 2.4, ratio
    assert first["verdict"] == second["verdict"] == "passed"
    # and every request the target served was recorded
    recorded = sum(PageInterval.objects.filter(run=run).values_list("hits", flat=True))
    assert recorded == demo_target.counters()["requests"]


def test_an_arrival_rate_run_starts_iterations_at_the_rate(project, alice, demo_target, celery_worker, home_case):
    # given: 20 iterations/s for 5 s, with enough users to never run out
    demo_target.set_knobs(latency_ms=0)
    demo_target.reset()
    plan = plan_of(
        project,
        demo_target,
        home_case,
        name="Open",
        profile_kind="arrival_rate",
        rate=20,
        ramp_up=0,
        hold=5,
        max_users=10,
    )

    run = finished(run_create(plan=plan, user=alice))

    assert run.status == Run.Status.FINISHED, run.error_message
    totals = run.summary["totals"]
    assert 98 <= totals["iterations_started"] <= 102, totals
    assert totals["iterations_dropped"] == 0
    assert totals["pages"] == totals["iterations_started"]  # one page per iteration, all completed
    recorded = sum(PageInterval.objects.filter(run=run).values_list("hits", flat=True))
    assert recorded == demo_target.counters()["requests"]


def test_an_arrival_rate_beyond_the_users_drops_iterations(project, alice, demo_target, celery_worker, home_case):
    # given: each iteration takes about 0.5 s, but 20 arrive per second for 3 users
    demo_target.set_knobs(latency_ms=300)
    plan = plan_of(
        project,
        demo_target,
        home_case,
        name="Too few",
        profile_kind="arrival_rate",
        rate=20,
        ramp_up=0,
        hold=4,
        max_users=3,
    )

    run = finished(run_create(plan=plan, user=alice))

    # then: the run still ends normally, and reports what it could not start
    demo_target.set_knobs(latency_ms=0)
    totals = run.summary["totals"]
    assert totals["iterations_dropped"] > 40, totals
    assert 75 <= totals["iterations_started"] + totals["iterations_dropped"] <= 82, totals
    # open model: the page duration counts from when each iteration was due, so it is at least the server's delay
    assert totals["apd_ms"] >= 300
