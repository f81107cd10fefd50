"""Real processes for end-to-end tests: the demo target and Celery workers, on loopback only."""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, *, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def stop(proc: subprocess.Popen, *, sig=signal.SIGTERM, timeout: float = 10) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# Seeded demo databases of this session, by number of work items (200,000 take 3–5 s to generate, 400,000 twice that).
_SEEDS: dict[int, Path] = {}


def _seeded_copy(db: Path, items: int) -> None:
    """A fresh copy of the demo's database with ``items`` work items and the seeded documents, generated once a
    session: the target reuses a file that already holds its rows, and applies every knob at start-up."""
    from demo.documents import Documents
    from demo.workitems import WorkItems

    seed = _SEEDS.get(items)
    if seed is None:
        folder = Path(tempfile.mkdtemp(prefix="demo-seed-"))
        atexit.register(shutil.rmtree, folder, True)
        seed = folder / "demo.sqlite3"
        workitems = WorkItems(seed, items)
        try:
            workitems.ensure_populated()
            Documents(workitems.connection, seed).ensure_seeded()
        finally:
            workitems.close()  # the last connection closed: its WAL is checkpointed into the file
        _SEEDS[items] = seed
    for suffix in ("", "-wal"):
        if (source := seed.with_name(seed.name + suffix)).exists():
            shutil.copyfile(source, db.with_name(db.name + suffix))


class DemoTarget:
    """The bundled demo system under test, in its own process, with its counters readable over HTTP."""

    def __init__(self, tmp_path: Path, items: int = 20000):
        _seeded_copy(tmp_path / "demo.sqlite3", items)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp_path / "demo.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "demo",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--db",
                str(tmp_path / "demo.sqlite3"),
                "--items",
                str(items),
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._up, timeout=60, what="the demo target")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"demo target exited with {self.proc.returncode}")
        try:
            self.counters()
            return True
        except OSError:
            return False

    def _call(self, path: str, data: dict | None = None) -> dict:
        body = None if data is None else json.dumps(data).encode()
        req = urllib.request.Request(self.base_url + path, data=body, method="GET" if data is None else "POST")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def counters(self) -> dict:
        return self._call("/_demo/counters")

    def reset(self) -> dict:
        return self._call("/_demo/counters/reset", {})

    def set_knobs(self, **knobs) -> dict:
        return self._call("/_demo/knobs", knobs)

    def close(self):
        stop(self.proc)
        self.log.close()


def database_url(settings_dict: dict) -> str:
    """A DATABASE_URL for another process that points at the same (test) database."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(settings_dict['NAME']).resolve()}"
    user = settings_dict.get("USER") or "postgres"
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{settings_dict['NAME']}"


# The worker tests/e2e/conftest.py's ``celery_worker`` keeps between modules, idle; None when there is none.
_kept: "Worker | None" = None


def take_kept() -> "Worker | None":
    """The kept worker, now the caller's (None when there is none, or it has exited)."""
    global _kept
    worker, _kept = _kept, None
    if worker is not None and worker.proc.poll() is not None:
        worker.log.close()
        return None
    return worker


def stop_kept() -> None:
    """Stops the kept worker (warm): before another worker starts, or a module that has workers of its own runs."""
    if (worker := take_kept()) is not None:
        worker.close()


class Worker:
    """A real Celery worker process consuming both queues."""

    def __init__(
        self,
        log_path: Path,
        env: dict,
        *,
        name: str = "e2e",
        concurrency: int = 2,
        queues="default,engine",
        host=None,
    ):
        """``host``: a ``tests.netns.Host`` to run it on (another machine's network and host name)."""
        stop_kept()  # it would take this worker's shards, and its slots would count in admission
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "w")  # noqa: SIM115
        command = [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "workers.celery",
            "worker",
            "-Q",
            queues,
            "-c",
            str(concurrency),
            "-n",
            f"{name}-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "INFO",
        ]
        self.proc = subprocess.Popen(
            host.command(command) if host is not None else command,
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            # Its own process group, so a test can kill the worker with its pool processes at once; not a session
            # of its own: under the kernel's autogroup a new session is a scheduling group of its own, which
            # `make test`'s nice values do not reach (scripts/run-tests.sh).
            process_group=0,
        )
        wait_until(self._ready, timeout=60, what="the Celery worker")

    def pids(self) -> set[int]:
        """The worker's main process and its pool processes."""
        out = subprocess.run(["pgrep", "-g", str(self.proc.pid)], capture_output=True, text=True).stdout
        return {int(p) for p in out.split()}

    def kill_hard(self) -> None:
        """kill -9 of the whole worker, as when its machine dies."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
        return "ready." in self.log_path.read_text()

    def output(self) -> str:
        return self.log_path.read_text()

    def keep(self) -> None:
        """Left running, idle, for the next module that asks for ``celery_worker`` (``take_kept``)."""
        global _kept
        stop_kept()
        _kept = self

    def close(self):
        """A warm stop (SIGTERM), as at a deployment: the worker unregisters its generator slots on the
        way out (workers/celery.py), which the next module's admission counts on; killed after 15 s."""
        stop(self.proc, timeout=15)
        self.log.close()


class Beat:
    """A real Celery beat process: the periodic ticks (watchdog, admission, stop criteria …) sent to the broker."""

    def __init__(self, log_path: Path, env: dict):
        self.log_path = log_path
        self.log = open(log_path, "w")  # noqa: SIM115
        schedule = log_path.with_suffix(".schedule")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "workers.celery", "beat", "-s", str(schedule), "--loglevel", "INFO"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, timeout=60, what="Celery beat")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"beat exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
        return "Sending due task" in self.log_path.read_text()

    def output(self) -> str:
        return self.log_path.read_text()

    def close(self):
        """Killed at once: beat keeps nothing worth a graceful stop (its schedule file is the test's
        own), and on SIGTERM it may sleep to its next tick first (up to 10 s a test)."""
        stop(self.proc, sig=signal.SIGKILL)
        self.log.close()
