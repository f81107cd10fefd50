"""scripts/keep_running.py, the wrapper of `make run`'s processes, with real child processes and signals."""

import os
import signal
import subprocess
import sys
import time

from tests.processes import ROOT, wait_until

SCRIPT = str(ROOT / "scripts" / "keep_running.py")

# A child that counts its starts, crashes on its first start, and on SIGTERM notes it and exits.
CHILD = """
import pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
starts = d / "starts"
n = len(starts.read_text()) if starts.exists() else 0
starts.write_text("x" * (n + 1))
if n == 0:
    sys.exit(3)
def term(*_):
    (d / "got_sigterm").write_text("1")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
(d / "up").write_text("1")
while True:
    time.sleep(0.1)
"""


def test_a_crashed_process_is_restarted_and_a_sigterm_stops_it_cleanly(tmp_path):
    # given: a process that crashes once, under the wrapper
    wrapper = subprocess.Popen(
        [sys.executable, SCRIPT, "child", "--", sys.executable, "-c", CHILD, str(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # when: it crashed; then it came up again
        wait_until(lambda: (tmp_path / "up").exists(), timeout=10, what="the restarted child")
        assert (tmp_path / "starts").read_text() == "xx"

        # when: the wrapper is told to stop (as honcho does on Ctrl-C)
        sent = time.monotonic()
        wrapper.send_signal(signal.SIGTERM)
        code = wrapper.wait(10)

        # then: the child got the SIGTERM and both exited within seconds, without another restart
        assert time.monotonic() - sent < 5
        assert (tmp_path / "got_sigterm").exists()
        assert code == 0
        assert (tmp_path / "starts").read_text() == "xx"
        assert "child exited with code 3" in wrapper.stderr.read()
    finally:
        if wrapper.poll() is None:
            wrapper.kill()


def test_the_wait_before_a_kill_is_15_s_unless_set():
    code = f"import runpy; print(runpy.run_path({SCRIPT!r})['STOP_WAIT_S'])"  # its constants, main() not run
    env = {k: v for k, v in os.environ.items() if k != "KEEP_RUNNING_STOP_WAIT_S"}
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert default.stdout.strip() == "15.0"
    env["KEEP_RUNNING_STOP_WAIT_S"] = "2.5"
    shorter = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert shorter.stdout.strip() == "2.5"


def test_a_child_that_ignores_sigterm_is_killed_after_the_wait(tmp_path):
    # given: a child that ignores SIGTERM, under a wrapper that waits 3 s (15 s unless set: the test above)
    ignore = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nopen(__import__('sys').argv[1], 'w')\n"
    )
    ignore += "while True: time.sleep(0.1)"
    up = tmp_path / "up"
    wrapper = subprocess.Popen(
        [sys.executable, SCRIPT, "stubborn", "--", sys.executable, "-c", ignore, str(up)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KEEP_RUNNING_STOP_WAIT_S": "3"},
    )
    try:
        wait_until(up.exists, timeout=10, what="the child")

        # when
        sent = time.monotonic()
        wrapper.send_signal(signal.SIGINT)
        wrapper.wait(13)

        # then: killed once the 3 s wait ran out, not before
        assert 2.5 < time.monotonic() - sent < 8
        assert "still running 3 s after SIGTERM; killing it" in wrapper.stderr.read()
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
