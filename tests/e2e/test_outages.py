"""Outages survived: the test database made unreachable during a run, and a broker restarted under queued runs.

Only this session's own test database is made unreachable (ALLOW_CONNECTIONS false, its
connections ended), and only a redis-server this test starts is restarted: the shared
PostgreSQL and Redis are never touched.
"""

import shutil
import subprocess
import time

import psycopg
import pytest
from django.db import DatabaseError, connection

from portal.projects.models import Environment, MixEntry, Plan, Step, TestCase
from portal.runs import services
from portal.runs.models import PageInterval, Run, RunShard
from tests.processes import PYTHON, ROOT, Worker, free_port, stop, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OUTAGE_S = 20


def admin_connection():
    """A connection to the server's 'postgres' database, from which the test database is switched off and on."""
    s = connection.settings_dict
    return psycopg.connect(
        host=s.get("HOST") or "127.0.0.1",
        port=s.get("PORT") or 5432,
        user=s.get("USER") or "postgres",
        password=s.get("PASSWORD") or None,
        dbname="postgres",
        autocommit=True,
    )


def set_reachable(admin, name: str, reachable: bool) -> None:
    admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(reachable).lower()}')
    if not reachable:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )


def watchdog_pass() -> None:
    """One pass as Celery beat would run it; during the outage it fails like the real task would."""
    try:
        services.watchdog()
    except DatabaseError:
        connection.close()


def make_plan(project, base_url, hold):
    env = Environment.objects.create(project=project, name="Demo", base_url=base_url)
    tc = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=tc, position=0, name="Home", path="/", think_time=0.3)
    plan = Plan.objects.create(
        project=project, environment=env, name="Outage", users=20, ramp_up=1, hold=hold, threshold_error_rate_pct=1.0
    )
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
    return plan


@pytest.fixture
def one_worker(worker_env, tmp_path, settings):
    from workers.celery import app

    settings.PLIMSOLL_SHARD_TIMEOUT = 5
    app.control.purge()
    worker = Worker(tmp_path / "worker.log", dict(worker_env, PLIMSOLL_SHARD_TIMEOUT="5"), name="outage")
    yield worker
    worker.close()


def test_a_database_outage_during_a_run_loses_nothing_and_run_plan_waits_it_out(
    one_worker, worker_env, project, alice, demo_target, tmp_path
):
    # given: a 40 s run started with `run_plan --wait`, and the watchdog passing every second
    demo_target.reset()
    plan = make_plan(project, demo_target.base_url, hold=40)
    name = connection.settings_dict["NAME"]
    command = subprocess.Popen(
        [PYTHON, "manage.py", "run_plan", project.name, plan.name, "--user", "alice", "--wait", "--timeout", "150"],
        cwd=ROOT,
        env=worker_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run = wait_until(lambda: Run.objects.filter(plan=plan).first(), timeout=30, what="the run")

    def flushed():
        watchdog_pass()
        return PageInterval.objects.filter(run=run).count() >= 8

    wait_until(flushed, timeout=30, interval=1, what="8 s of flushes")

    # when: the test database is unreachable for 20 s in the middle of the run
    with admin_connection() as admin:
        set_reachable(admin, name, False)
        try:
            connection.close()
            outage_end = time.monotonic() + OUTAGE_S
            while time.monotonic() < outage_end:
                watchdog_pass()
                time.sleep(1)
        finally:
            set_reachable(admin, name, True)
    connection.close()

    # then: the watchdog, passing on, declares nothing lost; the run ends passed with every request recorded
    def ended():
        watchdog_pass()
        return Run.objects.get(id=run.id).status in Run.FINISHED

    wait_until(ended, timeout=60, interval=1, what="the run to end")
    run.refresh_from_db()
    assert run.status == Run.Status.PASSED, (run.status, run.error_message, one_worker.output()[-3000:])
    assert run.summary["handoffs"] == []
    served = demo_target.counters()
    recorded = sum(PageInterval.objects.filter(run=run).values_list("hits", flat=True))
    assert served["in_flight"] == 0
    print(f"\noutage of {OUTAGE_S} s: {served['requests']} requests served, {recorded} recorded; run {run.status}")
    assert recorded == served["requests"] > 200
    # and run_plan waited through the outage and exited 0 (passed)
    out, err = command.communicate(timeout=30)
    assert command.returncode == 0, (command.returncode, err[-2000:])
    assert "The database is unreachable" in err and "The database is back." in err
    assert '"status": "passed"' in out


def test_run_plan_exits_could_not_tell_when_the_database_stays_away(project, alice, monkeypatch):
    # given: `run_plan --wait` (in a thread: its own database connection) waiting for a queued run,
    # with a 3 s limit for the outage instead of 60 s
    import threading

    from django.core.management import call_command

    from portal.runs.management.commands import run_plan

    monkeypatch.setattr(run_plan, "OUTAGE_LIMIT_S", 3)
    monkeypatch.setattr(services.lifecycle, "_enqueue_start", lambda run_id: None)  # no worker: the run stays queued
    plan = make_plan(project, "http://127.0.0.1:9", hold=5)
    outcome = {}

    def wait():
        try:
            call_command("run_plan", project.name, plan.name, "--user", "alice", "--wait", "--timeout", "60")
        except SystemExit as exc:
            outcome["code"] = exc.code
        finally:
            connection.close()

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: Run.objects.filter(plan=plan).exists(), timeout=30, what="the run")
    # when: the test database stays unreachable for longer than the limit
    name = connection.settings_dict["NAME"]
    started = time.monotonic()
    with admin_connection() as admin:
        set_reachable(admin, name, False)
        try:
            thread.join(timeout=30)
        finally:
            set_reachable(admin, name, True)
    connection.close()
    # then: it exits 4 (could not tell), after waiting out the limit, not 1 (thresholds failed)
    assert not thread.is_alive()
    assert outcome.get("code") == run_plan.COULD_NOT_TELL == 4
    assert time.monotonic() - started >= 3


class RedisServer:
    """A redis-server of this test's own, without persistence: a restart loses every message, as the worst case."""

    def __init__(self, tmp_path):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.tmp_path = tmp_path
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.tmp_path,
            stdout=subprocess.DEVNULL,
        )
        wait_until(self._up, timeout=10, what="redis-server")

    def _up(self):
        out = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
        return out.stdout.strip() == "PONG"

    def queued(self) -> int:
        out = subprocess.run(["redis-cli", "-p", str(self.port), "llen", "default"], capture_output=True, text=True)
        return int(out.stdout.strip() or 0)

    def stop(self):
        stop(self.proc)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_a_broker_restart_loses_no_queued_run(worker_env, project, alice, demo_target, tmp_path):
    # given: 50 runs queued on 50 environments, their start messages in a broker without persistence
    redis = RedisServer(tmp_path)
    # Admission (issue 25): runs start onto registered slots. Shards run elsewhere (tested elsewhere):
    # the load workers' registry row says 50 slots, and lives through the test (its TTL raised).
    env = dict(worker_env, CELERY_BROKER_URL=redis.url, PLIMSOLL_START_DELAY="1", PLIMSOLL_WORKER_TTL="600")
    from portal.runs.services.admission import worker_heartbeat

    worker_heartbeat(node="elsewhere@test", host="test", slots=50, labels={}, queues=["engine"])
    port = demo_target.base_url.rsplit(":", 1)[1]
    for n in range(50):
        # One system under test each (one run per target): loopback addresses of their own. Only
        # the default queue is served here, so no shard runs and nothing is sent to them.
        base_url = f"http://127.0.1.{n + 1}:{port}"
        environment = Environment.objects.create(project=project, name=f"Env {n}", base_url=base_url)
        tc = TestCase.objects.create(project=project, name=f"Browse {n}")
        Step.objects.create(test_case=tc, position=0, name="Home", path="/", think_time=0.3)
        plan = Plan.objects.create(project=project, environment=environment, name=f"Plan {n}", users=1, hold=1)
        MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
    queue = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", QUEUE_ALL % {"project": project.name}],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert queue.returncode == 0, queue.stderr[-2000:]
    assert Run.objects.filter(status=Run.Status.QUEUED).count() == 50
    assert redis.queued() == 50
    processes = []
    try:
        # when: the broker restarts (its messages gone), then a worker and beat come up on it
        redis.stop()
        redis.start()
        back = time.monotonic()
        assert redis.queued() == 0
        # (the default queue's worker: starting runs is its work; shards run elsewhere, tested elsewhere)
        processes.append(Worker(tmp_path / "worker.log", env, name="redis", concurrency=2, queues="default"))
        beat_log = open(tmp_path / "beat.log", "w")  # noqa: SIM115
        processes.append(
            subprocess.Popen(
                [PYTHON, "-m", "celery", "-A", "workers.celery", "beat", "-s", str(tmp_path / "beat-schedule")],
                cwd=ROOT,
                env=env,
                stdout=beat_log,
                stderr=subprocess.STDOUT,
            )
        )

        # then: every run starts within a minute of the broker coming back, and none ends in error
        wait_until(
            lambda: not Run.objects.filter(status=Run.Status.QUEUED).exists(),
            timeout=60,
            interval=1,
            what="every queued run to start",
        )
        print(f"\nbroker restarted under 50 queued runs: all started {time.monotonic() - back:.1f} s after it was back")
        assert time.monotonic() - back < 60
        assert not Run.objects.filter(status=Run.Status.ERROR).exists()
        assert RunShard.objects.filter(run__project=project).count() == 50  # each split into its shard
    finally:
        for proc in reversed(processes):
            proc.close() if isinstance(proc, Worker) else stop(proc)
        redis.stop()


QUEUE_ALL = """
from portal.projects.models import Plan
from portal.runs.services import run_create
from django.contrib.auth import get_user_model
alice = get_user_model().objects.get(username="alice")
for plan in Plan.objects.filter(project__name="%(project)s").order_by("id"):
    run_create(plan=plan, user=alice)
"""
