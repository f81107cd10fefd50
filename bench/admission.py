"""``python -m bench admission``: the admission scheduler (issue 25) with 100 teams x 10 waiting runs.

Two parts, both on the real code of ``portal/runs/services/admission.py``:

1. **Simulated pool** (no database): every run waits at t = 0; a pool of ``--slots`` slots; each
   run needs 1-4 shards and lasts 60-600 s (seeded). Whenever runs end, the scheduler's own
   ``fair_order`` and ``plan_admissions`` decide which runs start. Reported: Jain's fairness
   index over the user-seconds admitted per team while every team still had runs waiting (1.0:
   perfectly equal), the longest wait (no starvation: every run starts) and the CPU time of one
   decision over the whole queue.
2. **The database pass** (SQLite under a temporary directory, migrated from scratch): the same
   1,000 waiting runs as rows, a registered worker whose slots are all held; a shard ends, and
   ``admit()`` — what the shard's own process runs as it ends — starts the next run. Reported:
   the time from the slot freeing (the shard's row marked done) to the next run admitted
   (status *starting*, its shards created, its start time set), median and worst of ``--reps``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if any(values) else 1.0


def simulate(teams: int, runs: int, slots: int, seed: int) -> dict:
    from portal.runs.services.admission import Waiting, fair_order, plan_admissions

    rng = random.Random(seed)
    waiting = []
    for team in range(teams):
        for n in range(runs):
            shards = rng.randint(1, 4)
            # Teams queued in turn, each its ten at once: team 0's ten first, then team 1's, …
            waiting.append(
                Waiting(
                    team * runs + n,
                    team,
                    created_at=team * runs + n,
                    shards=shards,
                    duration=float(rng.randint(60, 600)),
                    users=shards * 10,
                )
            )
    t, free = 0.0, slots
    ending: list[tuple[float, int, int]] = []  # (end, shards, team)
    active: dict[int, int] = {}
    last: dict[int, float] = {}
    admitted_us = [0.0] * teams
    fair_window_us: list[float] | None = None
    waits, decide_s = [], []
    left = {team: runs for team in range(teams)}
    while waiting or ending:
        began = time.process_time()
        order = fair_order(waiting, active, last)
        start = plan_admissions(order, {"": free}, {"": slots})
        decide_s.append(time.process_time() - began)
        for w in start:
            waiting.remove(w)
            free -= w.shards
            active[w.team_id] = active.get(w.team_id, 0) + 1
            last[w.team_id] = t
            admitted_us[w.team_id] += w.users * w.duration
            left[w.team_id] -= 1
            waits.append(t)
            ending.append((t + w.duration, w.shards, w.team_id))
        if fair_window_us is None and any(n == 0 for n in left.values()):
            fair_window_us = list(admitted_us)  # the first team has no run left to wait: the window ends
        if not ending:
            break
        ending.sort()
        end, shards, team = ending.pop(0)
        t, free = end, free + shards
        active[team] -= 1
    return {
        "jain": jain(fair_window_us or admitted_us),
        "jain_whole": jain(admitted_us),
        "all_started": not waiting,
        "max_wait_s": max(waits),
        "decide_ms_median": statistics.median(decide_s) * 1000,
        "decide_ms_max": max(decide_s) * 1000,
        "decisions": len(decide_s),
    }


def _setup() -> None:
    """Django on a fresh SQLite database under a temporary directory (nothing else is touched)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-admission-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
    os.environ["PLIMSOLL_VAR_DIR"] = str(tmp)
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def database_pass(teams: int, runs: int, reps: int) -> dict:
    from django.utils import timezone

    from portal.accounts.models import Team
    from portal.common import task  # noqa: F401 (the services send tasks on commit: none are sent here)
    from portal.projects.models import Environment, Project
    from portal.runs.models import Run, RunShard
    from portal.runs.services import admission, lifecycle

    lifecycle.task = lambda name: type("NoBroker", (), {"apply_async": lambda *a, **k: None})()
    lifecycle._metrics_start = lambda run_id: None
    snapshot = {
        "base_url": "http://127.0.0.1:9",
        "profile": {"kind": "constant", "users": 10, "hold": 300},
        "test_cases": [{"name": "A", "steps": [{"name": "s", "path": "/"}]}],
    }
    now = timezone.now()
    rows = []
    for n in range(teams):
        team = Team.objects.create(name=f"team {n}")
        project = Project.objects.create(team=team, name=f"p{n}")
        env = Environment.objects.create(project=project, name="e", base_url="http://127.0.0.1:9")
        rows += [
            Run(
                project=project,
                number=k + 1,
                environment=env,
                plan_name="p",
                environment_name="e",
                plan_snapshot=snapshot,
                created_at=now,
            )
            for k in range(runs)
        ]
    Run.objects.bulk_create(rows)
    slots = 10
    admission.worker_heartbeat(node="bench@h", host="h", slots=slots, labels={}, queues=["engine"])
    assert len(admission.admit()) == slots  # the pool is full: 10 runs of 1 shard each
    timings = []
    for _ in range(reps):
        admission.worker_heartbeat(node="bench@h", host="h", slots=slots, labels={}, queues=["engine"])
        shard = RunShard.objects.filter(status=RunShard.Status.PENDING, run__status=Run.Status.STARTING).first()
        began = time.perf_counter()
        RunShard.objects.filter(id=shard.id).update(status=RunShard.Status.DONE)
        Run.objects.filter(id=shard.run_id).update(status=Run.Status.PASSED)
        started = admission.admit()
        timings.append(time.perf_counter() - began)
        assert len(started) == 1, started
    waiting = Run.objects.filter(status=Run.Status.QUEUED).count()
    return {
        "median_ms": statistics.median(timings) * 1000,
        "max_ms": max(timings) * 1000,
        "reps": reps,
        "waiting_after": waiting,
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench admission", description=__doc__.splitlines()[0])
    p.add_argument("--teams", type=int, default=100)
    p.add_argument("--runs", type=int, default=10, help="waiting runs per team")
    p.add_argument("--slots", type=int, default=40, help="slots of the simulated pool")
    p.add_argument("--reps", type=int, default=20, help="slot frees timed in the database pass")
    p.add_argument("--seed", type=int, default=25)
    args = p.parse_args(argv)
    _setup()
    sim = simulate(args.teams, args.runs, args.slots, args.seed)
    print(f"simulated pool: {args.teams} teams x {args.runs} runs, {args.slots} slots, seed {args.seed}")
    print(f"  Jain's index over admitted user-seconds while every team waited: {sim['jain']:.3f}")
    print(f"  Jain's index over the whole queue: {sim['jain_whole']:.3f}")
    print(f"  every run started: {sim['all_started']}; longest wait {sim['max_wait_s']:.0f} s (simulated)")
    print(
        f"  one decision over the queue: median {sim['decide_ms_median']:.2f} ms, worst {sim['decide_ms_max']:.2f} ms"
        f" ({sim['decisions']} decisions)"
    )
    db = database_pass(args.teams, args.runs, args.reps)
    print(f"database pass (SQLite): {args.teams * args.runs} waiting runs, a slot frees {db['reps']} times")
    print(
        f"  slot free -> next run admitted: median {db['median_ms']:.1f} ms, worst {db['max_ms']:.1f} ms;"
        f" {db['waiting_after']} runs still waiting"
    )
    return 0
