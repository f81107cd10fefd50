"""Keeps one process of `make run` running: restarts it when it exits, stops it cleanly when told to.

    python scripts/keep_running.py NAME -- COMMAND [ARGS...]

honcho stops every process as soon as one exits, so a crashed worker would take the web server
down with it; under this wrapper a process that exits on its own is restarted (after 1 s,
doubling up to 30 s while it keeps failing quickly) and the failure is printed. The command runs
in a session of its own: honcho's SIGTERM (to this wrapper's process group) is passed on to the
command's main process only, so a Celery worker makes its warm shutdown and hands its shards on
instead of losing its pool processes at once. Whatever is still running 15 s later is killed
(KEEP_RUNNING_STOP_WAIT_S sets that wait: the tests shorten it).
"""

import os
import signal
import subprocess
import sys
import time

STOP_WAIT_S = float(os.environ.get("KEEP_RUNNING_STOP_WAIT_S") or 15)
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
STABLE_S = 60  # a process that ran this long before it exited is restarted at once again


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: keep_running.py NAME -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    name, command = argv[0], argv[2:]
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True  # _wait passes one SIGTERM on: a second one would make Celery's shutdown cold

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    delay = FIRST_DELAY_S
    while True:
        started = time.monotonic()
        child = subprocess.Popen(command, start_new_session=True)
        code = _wait(child, lambda: stopping)
        if stopping:
            return code
        ran = time.monotonic() - started
        delay = FIRST_DELAY_S if ran >= STABLE_S else delay
        print(
            f"keep_running: {name} exited with code {code} after {ran:.0f} s; restarting in {delay:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.1)
        if stopping:
            return code
        delay = min(delay * 2, MAX_DELAY_S)


def _wait(child: subprocess.Popen, stopping) -> int:
    """The child's exit code; once a stop is asked, kills its whole session after STOP_WAIT_S."""
    stop_deadline = None
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if stopping():
            if stop_deadline is None:
                stop_deadline = time.monotonic() + STOP_WAIT_S
                child.send_signal(signal.SIGTERM)
            if time.monotonic() > stop_deadline:
                print(
                    f"keep_running: pid {child.pid} still running {STOP_WAIT_S:g} s after SIGTERM; killing it",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
