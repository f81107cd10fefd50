"""Generator health: is the load generator itself the bottleneck?

A shard that cannot keep up with its own plan measures itself, not the target:
its timers fire late, so requests leave late and responses are read late, and
the latencies it reports grow for reasons that have nothing to do with the
system under test. Each shard therefore reports, every second:

- ``loop_lag_ms`` (``{"p99", "max"}``): a watcher task sleeps ``LAG_TICK_S``
  (50 ms) again and again and records by how much each wake-up was late (the
  event-loop lag) into that second's histogram. An idle loop wakes within a
  millisecond or so; a loop busy with callbacks (too many users, a slow sink
  on the loop, a CPU-starved machine) wakes tens or hundreds of ms late.
- ``cpu_pct``: this process's CPU time in that second (``time.process_time``,
  every thread) as a percentage of the wall time. The event loop runs in one
  thread, so a process near 100 % of one core has no room left.

**The saturation rule** (what ``saturation()`` applies; the portal calls it on
the stored per-second values of a run, or of a measurement window):

- a second is *saturated* when its loop-lag p99 is above ``LAG_P99_LIMIT_MS``
  (50 ms) or its CPU is above ``CPU_LIMIT_PCT`` (90 %);
- a series is saturated when it has at least ``CONSECUTIVE_S`` (3) saturated
  seconds in a row, or when more than ``SHARE_LIMIT`` (10 %) of its seconds
  are saturated and there are at least ``MIN_SCATTERED_S`` (2) of them (so a
  single bad second never condemns a short window on its own).

One slow second (a garbage collection, a burst of new connections, another
process taking the core for a moment) is not saturation; three in a row, or
one second in ten over the window, is. Give it one shard's series at a time
(or the per-second maximum over the shards): the generator is saturated if
any of its shards is.
"""

from __future__ import annotations

from collections.abc import Sequence

LAG_TICK_S = 0.05  # how often the loop watcher wakes up
LAG_P99_LIMIT_MS = 50.0
CPU_LIMIT_PCT = 90.0
CONSECUTIVE_S = 3
SHARE_LIMIT = 0.10
MIN_SCATTERED_S = 2


def saturated_second(lag_p99_ms: float | None, cpu_pct: float | None) -> str | None:
    """Why one second counts as saturated ("loop lag" or "CPU"), or None."""
    if lag_p99_ms is not None and lag_p99_ms > LAG_P99_LIMIT_MS:
        return "loop lag"
    if cpu_pct is not None and cpu_pct > CPU_LIMIT_PCT:
        return "CPU"
    return None


def saturation(
    lag_p99_ms: Sequence[float | None],
    cpu_pct: Sequence[float | None] = (),
    *,
    first_second: int = 0,
) -> str | None:
    """Whether a per-second series shows a saturated generator: the reason in plain words, or None.

    ``lag_p99_ms[i]`` and ``cpu_pct[i]`` are the values of second
    ``first_second + i`` (plain floats, e.g. database columns; None or a
    missing value means "not measured" and never counts as saturated). Either
    list may be shorter than the other or empty.
    """
    n = max(len(lag_p99_ms), len(cpu_pct))
    if n == 0:
        return None
    reasons: dict[str, int] = {}
    saturated = 0
    run = best_run = 0
    best_run_end = -1
    worst_lag = 0.0
    worst_cpu = 0.0
    for i in range(n):
        lag = lag_p99_ms[i] if i < len(lag_p99_ms) else None
        cpu = cpu_pct[i] if i < len(cpu_pct) else None
        if lag is not None:
            worst_lag = max(worst_lag, lag)
        if cpu is not None:
            worst_cpu = max(worst_cpu, cpu)
        why = saturated_second(lag, cpu)
        if why is None:
            run = 0
            continue
        saturated += 1
        # a second with both counts for both, so that the message names everything that was wrong
        if lag is not None and lag > LAG_P99_LIMIT_MS:
            reasons["lag"] = reasons.get("lag", 0) + 1
        if cpu is not None and cpu > CPU_LIMIT_PCT:
            reasons["cpu"] = reasons.get("cpu", 0) + 1
        run += 1
        if run > best_run:
            best_run, best_run_end = run, i
    share = saturated / n
    if best_run < CONSECUTIVE_S and (share <= SHARE_LIMIT or saturated < MIN_SCATTERED_S):
        return None
    what = []
    if reasons.get("lag"):
        what.append(f"event-loop lag p99 above {LAG_P99_LIMIT_MS:g} ms (worst {worst_lag:.0f} ms)")
    if reasons.get("cpu"):
        what.append(f"CPU above {CPU_LIMIT_PCT:g} % (worst {worst_cpu:.0f} %)")
    start = first_second + best_run_end - best_run + 1
    longest = f"; longest stretch {best_run} s in a row from second {start}"
    return (
        f"the load generator was saturated in {saturated} of {n} s ({100 * share:.0f} %): "
        f"{' and '.join(what)}{longest}. Its latencies describe the generator as much as the target; "
        "use more shards or fewer users per shard."
    )


def strain(lag_p99_ms: Sequence[float | None], cpu_pct: Sequence[float | None] = ()) -> str | None:
    """Seconds above the limits that fall short of ``saturation``: the doubt a report still carries.

    One or two seconds of a 74 ms loop lag do not make the generator saturated, but the pages
    timed in them may include up to that much of the generator's own delay: say where and how much.
    None when no second was above a limit (or when ``saturation`` already condemns the series).
    """
    n = max(len(lag_p99_ms), len(cpu_pct))
    lags = [v for v in lag_p99_ms if v is not None]
    cpus = [v for v in cpu_pct if v is not None]
    over = sum(
        1
        for i in range(n)
        if saturated_second(lag_p99_ms[i] if i < len(lag_p99_ms) else None, cpu_pct[i] if i < len(cpu_pct) else None)
    )
    if not over or saturation(lag_p99_ms, cpu_pct) is not None:
        return None
    what = []
    if lags and max(lags) > LAG_P99_LIMIT_MS:
        what.append(f"event-loop lag p99 up to {max(lags):.0f} ms (limit {LAG_P99_LIMIT_MS:g} ms)")
    if cpus and max(cpus) > CPU_LIMIT_PCT:
        what.append(f"CPU up to {max(cpus):.0f} % (limit {CPU_LIMIT_PCT:g} %)")
    return (
        f"the load generator lagged in {over} of {n} s: {' and '.join(what)}. Too few seconds to call it "
        "saturated, but the pages timed in them may include that much of the generator's own delay, "
        "so the highest percentiles (p99, max) are in doubt."
    )
