"""Shard continuation with real workers and real signals: a stopped worker hands its shard on.

Each test runs a short plan (about 30 s) through real Celery workers on the test database and
broker, against the demo target, which counts what it served.
"""

import signal
import time

import pytest

from portal.projects.models import DataSet, Environment, MixEntry, Plan, Step, TestCase
from portal.runs import services
from portal.runs.models import PageInterval, Run, RunShard, ShardInterval
from tests.processes import Worker, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

GRACE = 8  # seconds a released shard waits for a worker (the production default is 120)


@pytest.fixture
def worker_factory(worker_env, tmp_path, settings):
    """Starts workers with one slot each; stops whatever is left at the end."""
    from workers.celery import app

    settings.PLIMSOLL_HANDOFF_GRACE = GRACE
    settings.PLIMSOLL_SHARD_TIMEOUT = 5
    app.control.purge()
    started = []
    env = dict(worker_env, PLIMSOLL_HANDOFF_GRACE=str(GRACE), PLIMSOLL_SHARD_TIMEOUT="5")

    def start(name):
        worker = Worker(tmp_path / f"{name}.log", env, name=name, concurrency=1)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.close()


def make_plan(project, base_url, *, unique_rows=0, **profile):
    env = Environment.objects.create(project=project, name="Demo", base_url=base_url)
    tc = TestCase.objects.create(project=project, name="Browse")
    path = "/"
    if unique_rows:  # each iteration takes a row of its own
        rows = [[f"u{n}"] for n in range(unique_rows)]
        DataSet.objects.create(test_case=tc, file_name="users.csv", columns=["user"], rows=rows, mode="unique")
        path = "/?user={{user}}"
    Step.objects.create(test_case=tc, position=0, name="Home", path=path, think_time=0.3)
    Step.objects.create(test_case=tc, position=1, name="Articles", path="/articles", think_time=0.3)
    plan = Plan.objects.create(
        project=project,
        environment=env,
        name="Handoff",
        threshold_apd_ms=2000,
        threshold_error_rate_pct=1.0,
        **profile,
    )
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
    return plan


def holder(run, workers):
    """The worker whose pool process holds the run's shard now."""
    shard = RunShard.objects.get(run=run, shard_no=0)
    pid = int(shard.worker.rsplit(":", 1)[1])
    return next(w for w in workers if pid in w.pids())


def recorded(run) -> int:
    return sum(PageInterval.objects.filter(run=run).values_list("hits", flat=True))


def watch_until_ended(run, timeout):
    """Polls as Celery beat would run the watchdog, until the run ends."""

    def ended():
        services.watchdog()
        return Run.objects.get(id=run.id).status in Run.FINISHED

    wait_until(ended, timeout=timeout, interval=1, what="the run to end")
    run.refresh_from_db()
    return run


def sigterm_and_time_the_exit(worker) -> float:
    sent = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    worker.proc.wait(20)
    return time.monotonic() - sent


@pytest.mark.parametrize(
    "profile",
    [
        {"profile_kind": "ramp", "users": 8, "ramp_up": 2, "hold": 26},
        {"profile_kind": "arrival_rate", "rate": 8, "rate_start": 8, "max_users": 10, "ramp_up": 0, "hold": 28},
    ],
    ids=["closed", "arrival_rate"],
)
def test_a_worker_told_to_stop_hands_its_shard_to_another(worker_factory, project, alice, demo_target, profile):
    # given: two workers, and a run whose one shard runs on one of them
    workers = [worker_factory("a"), worker_factory("b")]
    demo_target.reset()
    plan = make_plan(project, demo_target.base_url, unique_rows=5000, **profile)
    run = services.run_create(plan=plan, user=alice)
    wait_until(lambda: ShardInterval.objects.filter(run=run).count() >= 8, timeout=30, what="8 s of the run")
    victim = holder(run, workers)
    survivor = next(w for w in workers if w is not victim)

    # when: it is told to stop (SIGTERM, as docker stop and systemd send)
    took = sigterm_and_time_the_exit(victim)

    # then: it exits within 15 s, and the other worker resumes the shard within 10 s more
    assert took < 15, victim.output()[-3000:]
    resumed = wait_until(
        lambda: (
            (s := RunShard.objects.get(run=run)).status == "running" and s.handoffs and s.handoffs[-1].get("resumed_on")
        ),
        timeout=10,
        interval=0.2,
        what="the other worker to resume the shard",
    )
    assert resumed
    run = watch_until_ended(run, timeout=60)
    # the run passed with everything the target served recorded once, and the handoff on its timeline
    assert run.status == Run.Status.PASSED, (run.status, run.error_message, survivor.output()[-3000:])
    served = demo_target.counters()
    assert served["in_flight"] == 0
    assert recorded(run) == served["requests"] > 100
    (handoff,) = run.summary["handoffs"]
    print(
        f"handoff ({profile['profile_kind']}): worker exited {took:.1f} s after SIGTERM; {handoff['text']}; "
        f"reduced load {run.summary['windows'][0]['reduced_seconds']} s; recorded {recorded(run)} = served"
    )
    assert handoff["kind"] == "stopped" and handoff["resumed_on"] and handoff["gap_s"] < 10
    assert handoff["window"] == "Hold"
    assert "resumed on" in handoff["text"]
    assert run.summary["windows"][0]["handoffs"] == 1 and run.summary["windows"][0]["reduced_seconds"] >= 1
    # the load went on after the handoff: the last seconds of the hold have pages
    last = max(ShardInterval.objects.filter(run=run).values_list("second", flat=True))
    assert last >= 26
    assert PageInterval.objects.filter(run=run, second__gte=last - 3, pages__gt=0).exists()
    # the unique data set went on after the rows used before the handoff: every iteration took a row
    # of its own (had the continuation started over, it would have taken fewer rows than iterations)
    started = sum(ShardInterval.objects.filter(run=run).values_list("iterations_started", flat=True))
    assert RunShard.objects.get(run=run).totals["data_taken"] == {"Browse": started}


def test_a_cold_shutdown_still_hands_the_shard_on(worker_factory, project, alice, demo_target):
    # given: two workers, and a 30 s run on one of them
    workers = [worker_factory("q1"), worker_factory("q2")]
    demo_target.reset()
    run = services.run_create(
        plan=make_plan(project, demo_target.base_url, profile_kind="ramp", users=6, ramp_up=0, hold=30), user=alice
    )
    wait_until(lambda: ShardInterval.objects.filter(run=run).count() >= 5, timeout=30, what="5 s of the run")
    victim = holder(run, workers)

    # when: it gets a cold shutdown (SIGQUIT; a second Ctrl-C is one too), which used to lose the shard
    sent = time.monotonic()
    victim.proc.send_signal(signal.SIGQUIT)
    victim.proc.wait(20)
    took = time.monotonic() - sent

    # then: Celery's soft shutdown (worker_soft_shutdown_timeout) let the shard hand over before the exit
    assert took < 15, victim.output()[-3000:]
    run = watch_until_ended(run, timeout=60)
    print(f"SIGQUIT: worker exited {took:.1f} s after it; {run.summary['handoffs'][0]['text']}")
    assert [h["kind"] for h in run.summary["handoffs"]] == ["stopped"]
    assert run.summary["handoffs"][0]["resumed_on"]
    assert run.status == Run.Status.PASSED, (run.status, run.error_message)
    assert recorded(run) == demo_target.counters()["requests"] > 100


def test_a_worker_stopped_with_no_other_worker_interrupts_its_shard(worker_factory, project, alice, demo_target):
    # given: one worker running a 40 s run
    worker = worker_factory("alone")
    demo_target.reset()
    run = services.run_create(
        plan=make_plan(project, demo_target.base_url, profile_kind="ramp", users=6, ramp_up=0, hold=40), user=alice
    )
    wait_until(lambda: ShardInterval.objects.filter(run=run).count() >= 4, timeout=30, what="4 s of the run")

    # when: it is told to stop, and no worker comes
    took = sigterm_and_time_the_exit(worker)
    stopped = time.monotonic()
    kept = recorded(run)

    # then: it exits within 15 s; within the grace the shard is interrupted and the run partial, with the reason
    assert took < 15, worker.output()[-3000:]
    run = watch_until_ended(run, timeout=GRACE + 15)
    assert time.monotonic() - stopped < GRACE + 12
    shard = RunShard.objects.get(run=run)
    assert shard.status == RunShard.Status.INTERRUPTED
    assert run.status == Run.Status.PARTIAL
    assert "stopped at" in shard.error_message and "no worker took over" in shard.error_message
    assert "no worker took over" in run.error_message
    # nothing recorded before the signal is lost, and everything served was recorded
    assert recorded(run) >= kept
    assert recorded(run) == demo_target.counters()["requests"] > 0


def test_a_killed_worker_s_shard_resumes_on_another_with_the_gap_missing(worker_factory, project, alice, demo_target):
    # given: two workers, and a 30 s run on one of them
    workers = [worker_factory("k1"), worker_factory("k2")]
    demo_target.reset()
    run = services.run_create(
        plan=make_plan(project, demo_target.base_url, profile_kind="ramp", users=6, ramp_up=0, hold=30), user=alice
    )
    wait_until(lambda: ShardInterval.objects.filter(run=run).count() >= 5, timeout=30, what="5 s of the run")
    victim = holder(run, workers)

    # when: its worker dies at once (kill -9 of the worker and its pool)
    victim.kill_hard()
    last_flushed = max(ShardInterval.objects.filter(run=run).values_list("second", flat=True))

    # then: after the watchdog's verdict the other worker resumes the rest of the schedule
    def resumed():
        services.watchdog()
        s = RunShard.objects.get(run=run)
        return s.status == "running" and s.handoffs and s.handoffs[-1].get("resumed_on")

    wait_until(resumed, timeout=30, interval=1, what="the shard to resume after the verdict")
    run = watch_until_ended(run, timeout=60)
    (handoff,) = run.summary["handoffs"]
    assert handoff["kind"] == "lost" and handoff["stopped_at_s"] == last_flushed + 1
    # the seconds between the last flush and the resumption are missing, not zero
    seconds = set(ShardInterval.objects.filter(run=run).values_list("second", flat=True))
    gap = set(range(last_flushed + 1, handoff["resumed_at_s"]))
    assert len(gap) >= 5 and not gap & seconds
    # and the report counts them as missing: on the handoff, and on the measured window it fell in
    assert handoff["missing_s"] == len(gap) == run.summary["windows"][0]["missing_seconds"]
    assert f"({len(gap)} s missing)" in handoff["text"]
    assert handoff["gap_s"] >= 5  # from its last heartbeat: at least the watchdog's timeout (5 s here)
    print(f"SIGKILL: {handoff['text']}; window: {run.summary['windows'][0]['note']}")
    assert max(seconds) >= 29  # the load went on to the plan's end
    # the seconds lost with the worker are load that did not run (issue 25): the run is not judged
    assert run.status == Run.Status.INCOMPLETE, (run.status, run.error_message)
    assert f"missed {last_flushed + 1}–" in run.error_message and "late" not in run.error_message


def test_a_rolling_restart_of_three_workers_keeps_the_run_whole(worker_factory, project, alice, demo_target):
    # given: three workers, and a 40 s run on one of them (the three restarts take about 15 s)
    workers = [worker_factory("r0"), worker_factory("r1"), worker_factory("r2")]
    demo_target.reset()
    run = services.run_create(
        plan=make_plan(project, demo_target.base_url, profile_kind="ramp", users=6, ramp_up=0, hold=40), user=alice
    )
    wait_until(lambda: ShardInterval.objects.filter(run=run).count() >= 5, timeout=30, what="5 s of the run")

    # when: each worker holding the shard is restarted in turn (stopped, and started again)
    for n in range(3):
        victim = holder(run, workers)
        assert sigterm_and_time_the_exit(victim) < 15, victim.output()[-3000:]
        wait_until(
            lambda n=n: len(h := RunShard.objects.get(run=run).handoffs) == n + 1 and h[-1].get("resumed_on"),
            timeout=10,
            interval=0.2,
            what=f"handoff {n + 1} to resume",
        )
        workers.remove(victim)
        workers.append(worker_factory(f"r{n + 3}"))

    # then: the run completes with its full data and one marker per restart
    run = watch_until_ended(run, timeout=70)
    assert run.status == Run.Status.PASSED, (run.status, run.error_message)
    assert [h["kind"] for h in run.summary["handoffs"]] == ["stopped"] * 3
    assert recorded(run) == demo_target.counters()["requests"] > 100
    assert max(ShardInterval.objects.filter(run=run).values_list("second", flat=True)) >= 39
