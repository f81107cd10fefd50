#!/usr/bin/env bash
# `make test`: the whole suite in three lanes that run at the same time, each a pytest session of its own
# (pytest-xdist processes with brokers, var folders and test databases of their own: tests/conftest.py).
#
#   alone     nice 0   the end-to-end tests whose verdicts weigh latencies against noise (marker `alone`), on
#                      one process: another test's CPU burst in one of their runs makes a false regression.
#   timed     nice 5   the rest of the `serial` tests (durations, rates, latency bounds), on two processes:
#                      they mostly wait on holds and timers (the pass kept the CPU 4 % busy alone).
#   parallel  nice 19  everything else (marker `not serial`), on three processes, CPU-bound; less the end-to-end
#                      tests that mostly wait (marker `waits`), which the timed lane's slot runs after its own.
#
# The kernel gives a waking process of a lower nice value the CPU before a niced one that is running, so the
# timed lanes see the machine much as if they ran alone, and the parallel lane takes the CPU they leave idle
# (docs/development/tests.md, "Three lanes"). PYTEST_ARGS (word-split as a shell would) goes to every lane;
# a lane it leaves without tests (pytest's exit 5) is no failure. Exits non-zero if any lane failed.
set -u
cd "$(dirname "$0")/.."
PY=$PWD/.venv/bin/python
VAR=$PWD/var/test
mkdir -p "$VAR"
eval "set -- ${PYTEST_ARGS:-}"
# Bytecode is cached even where the environment says PYTHONDONTWRITEBYTECODE (Makefile, `test`).
unset PYTHONDONTWRITEBYTECODE

# Under the kernel's autogroup (on by default on most distributions) every session is a scheduling group of its
# own, shared fairly with the others whatever their processes' nice values: a Celery worker, a browser or
# PostgreSQL in a session of its own would take the CPU from the timed lanes as an equal. Turned off for the run
# where we may (root), and back on after; otherwise said, and the lanes interfere more.
AUTOGROUP=/proc/sys/kernel/sched_autogroup_enabled
if [ -r "$AUTOGROUP" ] && [ "$(cat "$AUTOGROUP")" = 1 ]; then
  if (echo 0 >"$AUTOGROUP") 2>/dev/null; then
    trap 'echo 1 >"$AUTOGROUP"' EXIT
    echo "make test: the kernel's autogroup is off while the tests run (nice values then reach every process)"
  else
    echo "make test: the kernel's autogroup is on and cannot be turned off here (not root): the niced parallel lane" \
      "may slow the timed lanes' tests (sysctl kernel.sched_autogroup_enabled=0)"
  fi
fi

lane_ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }

# Chromium, run as root, raises its own browser process's priority (nice -8): in the parallel lane it may not (the
# capability to lower a nice value is dropped for that lane and all it starts).
DROP_NICE=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  DROP_NICE=(setpriv --inh-caps=-sys_nice --bounding-set=-sys_nice)
fi

# Locust's virtualenv (bench/.venv-locust: on a clean clone a pip install of one to two minutes) is made while the
# lanes run, at the parallel lane's priority; the alone lane's Locust import test comes last in it and waits for
# the install to end (bench/prereq.py holds a lock), trying again if it failed.
nice -n 19 "$PY" -c "from bench.prereq import ensure_locust; ensure_locust()" >"$VAR/locust-install.log" 2>&1 &
PLIMSOLL_TEST_LANE=alone PLIMSOLL_VAR_DIR=$VAR/alone "$PY" -m pytest -n 1 -m alone "$@" >"$VAR/lane-alone.log" 2>&1 &
alone=$!
# The timed lane's slot, once its timed tests are done, runs the end-to-end tests that mostly wait (marker `waits`),
# niced like the parallel lane: they no longer fill the parallel lane's last minutes.
(
  PLIMSOLL_TEST_LANE=timed PLIMSOLL_VAR_DIR=$VAR/timed nice -n 5 "$PY" -m pytest -n 2 --dist worksteal \
    -m "serial and not alone" "$@"
  first=$?
  PLIMSOLL_TEST_LANE=timed PLIMSOLL_VAR_DIR=$VAR/timed "${DROP_NICE[@]}" nice -n 19 "$PY" -m pytest -n 2 \
    --dist worksteal -m "waits and not serial" "$@"
  waits=$?
  lane_ok $first && lane_ok $waits
) >"$VAR/lane-timed.log" 2>&1 &
timed=$!
PLIMSOLL_VAR_DIR=$VAR "${DROP_NICE[@]}" nice -n 19 "$PY" -m pytest -n 3 --dist worksteal -m "not serial and not waits" "$@"
parallel=$?
wait "$timed"
timed=$?
wait "$alone"
alone=$?

status=0
for lane in timed alone; do
  echo
  echo "==================== lane $lane (var/test/lane-$lane.log) ===================="
  cat "$VAR/lane-$lane.log"
done
echo
for pair in "parallel $parallel" "timed $timed" "alone $alone"; do
  set -- $pair
  if lane_ok "$2"; then echo "lane $1: passed (exit $2)"; else echo "lane $1: FAILED (exit $2)"; status=1; fi
done
exit $status
