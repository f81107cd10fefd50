"""Real processes for end-to-end tests: the demo target and Celery workers, on loopback only."""

import json
import os
import signal
import socket
import subprocess
import sys
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


class DemoTarget:
    """The bundled demo system under test, in its own process, with its counters readable over HTTP."""

    def __init__(self, tmp_path: Path, items: int = 20000):
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
            # Its own process group, so a test can kill the worker with its pool processes at once.
            start_new_session=True,
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
