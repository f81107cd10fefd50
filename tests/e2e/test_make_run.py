"""`make run`'s process group (honcho with the Procfile, each process under scripts/keep_running.py).

The real Procfile runs on the test database and broker, with ports of its own: a demo target
that crashes is restarted while the web server keeps serving, and Ctrl-C (SIGINT to honcho)
stops every process within 10 s, the worker handing its running shard on (issue 17, item 5).
"""

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from portal.runs import services
from portal.runs.models import RunShard, ShardInterval
from tests.e2e.test_handoff import make_plan, recorded
from tests.processes import ROOT, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc), whatever session or group it moved to."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def demo_process(honcho) -> int:
    """The demo target's own process (python -m demo), not its wrapper."""
    (pid,) = [p for p in descendants(honcho.pid) if cmdline(p).split(" ")[1:3] == ["-m", "demo"]]
    return pid


def answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:
        return False


@pytest.fixture
def make_run(worker_env, tmp_path):
    """honcho with the real Procfile, as `make run` starts it (after its migrate and seed)."""
    from workers.celery import app

    app.control.purge()
    web, demo = free_port(), free_port()
    env = dict(
        worker_env,
        PLIMSOLL_PORT=str(web),
        PLIMSOLL_DEMO_PORT=str(demo),
        PLIMSOLL_WORKER_CONCURRENCY="1",
        PLIMSOLL_VAR_DIR=str(tmp_path),
    )
    log = open(tmp_path / "honcho.log", "w")  # noqa: SIM115
    honcho = subprocess.Popen(
        [str(ROOT / ".venv/bin/honcho"), "start", "-f", "Procfile"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        process_group=0,  # killed as a group; not a session of its own (tests/processes.py)
    )
    honcho.web = f"http://127.0.0.1:{web}"
    honcho.demo = f"http://127.0.0.1:{demo}"
    honcho.output = lambda: (tmp_path / "honcho.log").read_text()
    try:
        wait_until(lambda: answers(f"{honcho.web}/login/"), timeout=60, what="the web server")
        wait_until(lambda: answers(f"{honcho.demo}/"), timeout=60, what="the demo target")
        wait_until(lambda: "ready." in honcho.output(), timeout=60, what="the worker")
        yield honcho
    finally:
        left = descendants(honcho.pid)
        if honcho.poll() is None:
            honcho.send_signal(signal.SIGINT)
            try:
                honcho.wait(20)
            except subprocess.TimeoutExpired:
                honcho.kill()
        for pid in left:  # nothing may outlive the test, whatever it asserted
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()


def test_a_crashed_demo_target_is_restarted_while_the_web_server_keeps_serving(make_run):
    # given: everything up; the demo target's own process (below its keep_running wrapper)
    demo = demo_process(make_run)

    # when: it crashes (kill -9)
    os.kill(demo, signal.SIGKILL)

    # then: the failure is printed, the portal kept serving, and the demo target comes back
    wait_until(lambda: "demo exited with code -9" in make_run.output(), timeout=10, what="the exit to be printed")
    assert answers(f"{make_run.web}/login/")
    wait_until(lambda: answers(f"{make_run.demo}/"), timeout=30, what="the demo target to be restarted")
    assert make_run.poll() is None
    assert demo_process(make_run) != demo


def test_ctrl_c_stops_everything_within_10_s_and_hands_the_running_shard_on(make_run, project, alice):
    # given: a run of 60 s against make run's demo target, its shard running on make run's worker
    run = services.run_create(
        plan=make_plan(project, make_run.demo, profile_kind="ramp", users=4, ramp_up=0, hold=60), user=alice
    )
    wait_until(lambda: ShardInterval.objects.filter(run=run).count() >= 3, timeout=40, what="3 s of the run")
    processes = descendants(make_run.pid)
    assert any("celery" in cmdline(p) and " worker " in cmdline(p) for p in processes)

    # when: Ctrl-C (the terminal sends SIGINT to honcho)
    sent = time.monotonic()
    make_run.send_signal(signal.SIGINT)
    make_run.wait(15)
    wait_until(lambda: not any(alive(p) for p in processes), timeout=15, interval=0.1, what="every process to exit")
    took = time.monotonic() - sent

    # then: every process (web, worker and its pool, beat, demo, the wrappers) exited within 10 s
    print(f"make run: every process exited {took:.1f} s after Ctrl-C")
    assert took < 10, make_run.output()[-3000:]
    # and the worker handed its shard on: released as a continuation, for the next worker (or the
    # next `make run`) to resume within the grace, with everything measured before kept
    shard = RunShard.objects.get(run=run)
    assert shard.status == RunShard.Status.PENDING and shard.released_at is not None, (shard.status, shard.handoffs)
    assert [h["kind"] for h in shard.handoffs] == ["stopped"]
    assert shard.resume_second == max(ShardInterval.objects.filter(run=run).values_list("second", flat=True)) + 1
    assert recorded(run) > 0
