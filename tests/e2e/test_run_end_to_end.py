"""A real run: the portal enqueues it, a real Celery worker runs it against the real demo target.

What Plimsoll reports is compared with what the target says it served.
"""

import pytest

from portal.projects.models import Environment, MixEntry, Plan, Step, TestCase
from portal.runs.models import PageInterval, Run, RunShard
from portal.runs.services import run_create
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# The demo target answers after at least this long, so page durations are large next to loopback noise.
SERVER_DELAY_MS = 20


def wait_for_end(run: Run, timeout: float = 90) -> Run:
    def ended():
        run.refresh_from_db()
        return run.status in Run.FINISHED

    wait_until(ended, timeout=timeout, interval=0.3, what=f"run #{run.number} to end (status {run.status})")
    return run


@pytest.fixture
def demo_plan(project, demo_target):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)
    browse = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=browse, position=0, name="Home", path="/", think_time=0.2, text_present="Plimsoll")
    Step.objects.create(test_case=browse, position=1, name="Articles", path="/articles", think_time=0.2)
    search = TestCase.objects.create(project=project, name="Search")
    Step.objects.create(test_case=search, position=0, name="Search", path="/search?q=Area+042", think_time=0.2)
    plan = Plan.objects.create(
        project=project,
        environment=env,
        name="E2E",
        users=20,
        ramp_up=2,
        hold=8,
        ramp_down=0,
        threshold_apd_ms=2000,
        threshold_error_rate_pct=1.0,
    )
    MixEntry.objects.create(plan=plan, test_case=browse, weight=3, position=0)
    MixEntry.objects.create(plan=plan, test_case=search, weight=1, position=1)
    return plan


def test_a_run_records_exactly_what_the_target_served(demo_plan, demo_target, celery_worker, alice):
    # given: a quiet target with a fixed server-side delay
    demo_target.set_knobs(latency_ms=SERVER_DELAY_MS)
    demo_target.reset()

    # when: 20 users run for 10 s through the portal and a real worker
    run = wait_for_end(run_create(plan=demo_plan, user=alice))

    # then: the run passed, and every request the target served was recorded, once
    assert run.status == Run.Status.PASSED, (run.status, run.error_message, celery_worker.output()[-3000:])
    served = demo_target.counters()
    recorded = sum(PageInterval.objects.filter(run=run).values_list("hits", flat=True))
    # Users finish the page in flight at the end of their window instead of abandoning it,
    # so nothing is in flight when the run ends: the two counts must match exactly.
    assert served["in_flight"] == 0
    assert recorded == served["requests"], (recorded, served)
    assert recorded > 100
    assert run.summary["whole_run"]["errors"] == 0
    shard = RunShard.objects.get(run=run)
    assert shard.status == RunShard.Status.DONE and shard.totals["aborted"] == 0

    # and the report's APD agrees with the target's own timing: the client sees the server's time
    # plus loopback and parsing, a few milliseconds at most at this load.
    apd = run.summary["totals"]["apd_ms"]
    server_mean = served["service_time_ms_mean"]
    print(
        f"e2e figures: recorded {recorded} requests, target served {served['requests']}; "
        f"APD {apd} ms, target's own mean {server_mean:.2f} ms"
    )
    assert server_mean >= SERVER_DELAY_MS
    assert server_mean - 1 <= apd <= server_mean + 10, (apd, server_mean)
    assert run.summary["totals"]["pages_per_s"] > 0
    assert {p["label"] for p in run.summary["pages"]} == {"Browse: Home", "Browse: Articles", "Search: Search"}


def test_a_refused_target_ends_in_error_without_sending_a_request(project, alice, celery_worker, settings):
    # given: a plan whose environment points outside the allowed targets (never contacted)
    env = Environment.objects.create(project=project, name="Elsewhere", base_url="http://10.255.255.1:8080")
    tc = TestCase.objects.create(project=project, name="Home only")
    Step.objects.create(test_case=tc, name="Home", path="/")
    plan = Plan.objects.create(project=project, environment=env, name="Refused", users=1, ramp_up=0, hold=1)
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)

    # when
    run = wait_for_end(run_create(plan=plan, user=alice), timeout=30)

    # then: status error with the reason, and no shard was ever created (so no request was sent)
    assert run.status == Run.Status.ERROR
    assert "not in the allowed targets" in run.error_message
    assert not run.shards.exists()
    assert not PageInterval.objects.filter(run=run).exists()


def test_stop_ends_a_run_within_two_seconds(demo_plan, demo_target, celery_worker, alice):
    import time

    from portal.runs.services import run_cancel

    # given: a long run that is running
    demo_plan.hold = 120
    demo_plan.save()
    run = run_create(plan=demo_plan, user=alice)
    wait_until(lambda: PageInterval.objects.filter(run=run).exists(), timeout=30, what="first interval rows")

    # when
    stopped_at = time.monotonic()
    run_cancel(run=run)
    run = wait_for_end(run, timeout=10)

    # then
    assert time.monotonic() - stopped_at < 2.0
    assert run.status == Run.Status.CANCELLED
    assert run.summary["whole_run"]["pages"] > 0  # what was measured before the stop is kept
