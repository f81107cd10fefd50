"""The machine, the tools' versions, and how busy the cores were with work that is not ours.

The machine is shared and noisy. Around each measured run the bench reads
``/proc/stat`` (busy time of every core) and the CPU time of its own processes
(the load generator, nginx); the difference is *other* CPU: what something else
on the machine used while we measured. It is reported next to each figure.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .procs import capture

TICK = os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, str | int]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        m = re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
        mem_kb = int(m.group(1)) if m else 0
    except OSError:
        pass
    return {
        "nproc": os.cpu_count() or 0,
        "cpu_model": model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "hostname": platform.node(),
    }


def versions(locust: str | None) -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    m = re.search(r"nginx/(\S+)", capture(["nginx", "-v"]))
    out["nginx"] = m.group(1) if m else "?"
    m = re.search(r"wrk (\S+)", capture(["wrk", "-v"]))
    out["wrk"] = m.group(1) if m else "?"
    if locust:
        m = re.search(r"locust (\S+)", capture([locust, "--version"], timeout_s=60))
        out["locust"] = m.group(1) if m else "?"
    try:
        import uvloop

        out["uvloop"] = uvloop.__version__
    except ImportError:
        pass
    try:
        import aiohttp

        out["aiohttp"] = aiohttp.__version__
    except ImportError:
        pass
    return out


def _cores_busy() -> tuple[float, float, float]:
    """Seconds since boot, all cores: (task time: user + nice + system, irq + softirq, steal).

    Interrupt time is apart because the kernel does not charge it to any
    process: on loopback much of it is our own traffic's networking.
    """
    task = irq = steal = 0
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            f = [int(x) for x in line.split()[1:]] + [0] * 10
            # user nice system idle iowait irq softirq steal (guest time is inside user already)
            task += f[0] + f[1] + f[2]
            irq += f[5] + f[6]
            steal += f[7]
    return task / TICK, irq / TICK, steal / TICK


def _per_core_task() -> dict[int, float]:
    """Task time (user + nice + system) of each core, seconds since boot."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *f = line.split()
            out[int(name[3:])] = (int(f[0]) + int(f[1]) + int(f[2])) / TICK
    return out


# The cores the bench pins to (set by __main__); used to tell contention on each.
PINNED: dict[str, int | None] = {"gen": None, "server": None}


def proc_cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


@dataclass
class Window:
    """CPU accounting around one measured run."""

    t0: float
    task0: float
    irq0: float
    steal0: float
    server0: float
    server_pids: list[int]
    cores0: dict[int, float]

    @classmethod
    def open(cls, server_pids: list[int]) -> Window:
        task, irq, steal = _cores_busy()
        return cls(time.monotonic(), task, irq, steal, proc_cpu_s(server_pids), server_pids, _per_core_task())

    def close(self, generator_cpu_s: float) -> dict[str, float]:
        """% of one core over the window: nginx's, other processes', interrupts' (both cores), steal."""
        wall = time.monotonic() - self.t0
        task, irq, steal = _cores_busy()
        server = proc_cpu_s(self.server_pids) - self.server0
        other = (task - self.task0) - server - generator_cpu_s
        out = {
            "server_cpu_pct": round(100 * server / wall, 1),
            "other_cpu_pct": round(max(0.0, 100 * other / wall), 1),
            "irq_cpu_pct": round(100 * (irq - self.irq0) / wall, 1),
            "steal_pct": round(100 * (steal - self.steal0) / wall, 1),
        }
        cores = _per_core_task()
        # Other processes on the generator's core and on nginx's: what they took from the tools measured.
        for key, core, ours in (("gen", PINNED["gen"], generator_cpu_s), ("server", PINNED["server"], server)):
            if core is not None and core in cores and core in self.cores0:
                out[f"other_on_{key}_core_pct"] = round(
                    max(0.0, 100 * (cores[core] - self.cores0[core] - ours) / wall), 1
                )
        return out


def other_load_pct(seconds: float, our_pids: list[int]) -> float:
    """CPU used by processes other than ``our_pids`` (and this one) over ``seconds``, in % of one core."""
    task0 = _cores_busy()[0]
    ours0 = proc_cpu_s([*our_pids, os.getpid()])
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    other = (_cores_busy()[0] - task0) - (proc_cpu_s([*our_pids, os.getpid()]) - ours0)
    return max(0.0, 100 * other / wall)


def wait_quiet(max_wait_s: float, our_pids: list[int], threshold_pct: float = 15.0) -> float:
    """Wait up to ``max_wait_s`` for other processes to use less than ``threshold_pct`` of a core; the last reading."""
    deadline = time.monotonic() + max_wait_s
    said = False
    while True:
        load = other_load_pct(1.0, our_pids)
        if load < threshold_pct or time.monotonic() >= deadline:
            if said and load >= threshold_pct:
                print(f"    (still busy: {load:.0f} % of a core; measuring anyway)", flush=True)
            return round(load, 1)
        if not said:
            print(
                f"    (other processes use {load:.0f} % of a core: waiting up to {max_wait_s:g} s for quiet)",
                flush=True,
            )
            said = True
