"""Child processes: every one is registered, time-bounded, and killed when the bench exits.

Each child runs in its own session (process group), so that Ctrl-C in the
terminal reaches only the bench, which then ends its children in order (SIGINT,
then SIGTERM, then SIGKILL) instead of leaving an nginx behind.

``run()`` reaps the child with ``os.wait4`` to get its resource usage: peak RSS
(``ru_maxrss``, the same figure as ``VmHWM`` in ``/proc/<pid>/status``) and CPU
time. ``taskset`` execs the command it is given, so the pid we reap is the
measured program's own.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

POLL_S = 0.1


@dataclass
class Result:
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float  # user + system time of the child (its own children excluded)
    maxrss_kb: int  # peak resident set size in KiB
    timed_out: bool

    @property
    def cpu_pct(self) -> float:
        """Average CPU use over the run, in % of one core."""
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def tail(self, n: int = 3) -> str:
        """The last lines it printed, on one line (stderr, else stdout): usually the error itself."""
        lines = [x.strip() for x in (self.stderr.strip() or self.stdout.strip()).splitlines() if x.strip()]
        return " | ".join(lines[-n:])


class Registry:
    """The processes this bench started and has not reaped yet."""

    def __init__(self) -> None:
        self._live: dict[int, subprocess.Popen[bytes]] = {}

    def start(
        self, argv: Sequence[str], *, stdout=None, stderr=None, cwd: str | None = None, env=None
    ) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        self._live[p.pid] = p
        return p

    def forget(self, p: subprocess.Popen[bytes]) -> None:
        self._live.pop(p.pid, None)

    def stop(self, p: subprocess.Popen[bytes], *, first: int = signal.SIGTERM, grace_s: float = 5.0) -> None:
        """Signal ``p``'s process group, escalating to SIGKILL; reap it."""
        for sig, wait_s in ((first, grace_s), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            if p.poll() is not None:
                break
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
        # Whatever the group still holds (a worker whose master died first) goes too.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.forget(p)

    def stop_all(self) -> None:
        for p in reversed(list(self._live.values())):  # the last started first: generators before nginx
            self.stop(p, first=signal.SIGINT, grace_s=2.0)


REGISTRY = Registry()


def run(
    argv: Sequence[str],
    *,
    timeout_s: float,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    interrupt_first: bool = True,
) -> Result:
    """Run ``argv`` to completion or until ``timeout_s``; then SIGINT (the engine still prints its summary)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = REGISTRY.start(argv, stdout=out, stderr=err, cwd=cwd, env=env)
        deadline = t0 + timeout_s
        timed_out = False
        status = rusage = None
        try:
            while True:
                pid, status, rusage = os.wait4(p.pid, os.WNOHANG)
                if pid == p.pid:
                    break
                now = time.monotonic()
                if now > deadline and not timed_out:
                    timed_out = True
                    print(f"    ! {argv[0]} … exceeded {timeout_s:.0f} s: interrupting it", file=sys.stderr)
                    _signal_group(p.pid, signal.SIGINT if interrupt_first else signal.SIGTERM)
                    deadline = now + 10.0
                elif now > deadline:
                    _signal_group(p.pid, signal.SIGKILL)
                    deadline = now + 5.0
                time.sleep(POLL_S)
        finally:
            wall = time.monotonic() - t0
            if status is None:  # interrupted while waiting (Ctrl-C): end the generator before anything else
                REGISTRY.stop(p, first=signal.SIGINT, grace_s=2.0)
            else:
                p.returncode = os.waitstatus_to_exitcode(status)
                REGISTRY.forget(p)
                _signal_group(p.pid, signal.SIGKILL)  # leftovers of its group, if any
        out.seek(0)
        err.seek(0)
        return Result(
            argv=list(argv),
            rc=p.returncode,
            stdout=out.read().decode("utf-8", "replace"),
            stderr=err.read().decode("utf-8", "replace"),
            wall_s=wall,
            cpu_s=rusage.ru_utime + rusage.ru_stime,
            maxrss_kb=int(rusage.ru_maxrss),
            timed_out=timed_out,
        )


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def capture(argv: Sequence[str], timeout_s: float = 30.0) -> str:
    """stdout + stderr of a short informational command ('' if it cannot run)."""
    try:
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (r.stdout + r.stderr).strip()


def free_port() -> int:
    """A loopback port nothing listens on now (the bench's servers bind it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 15) -> None:
    """Waits until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")
