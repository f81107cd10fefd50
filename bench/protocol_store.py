"""``python -m bench.protocol_store``: what the protocol rows (issue 26) cost the results store.

A run of ``--seconds`` seconds is written second by second through the real interval writer, 20
labels over HTTP/2 (a protocol row each: hits by protocol only) and ``--streams`` of them streamed
responses (their rows carry the stream histograms: 20 responses a second, 8 events each); the same
reports written as HTTP/1.1 are the comparison (no protocol row at all). Printed:

- the writer's time per shard-second (mean, p99), with and without protocol rows;
- finalize's summary (``analysis.summarize``) of each run, and the protocol part alone
  (``protocols.summary_of``, which reads the rows a chunk at a time: ``protocols.merge_rows``), beside
  the same rows merged one by one as it did before (each row's histograms decoded into ``Histogram``
  objects and merged: ``Cell.add_row``), with the same figures checked;
- protocol bytes per label-second (table and index), and the roll-up's time.

Runs in the database of DATABASE_URL (migrated first); its bench runs are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time


def _reports(seconds: int, streams: int, protocol: str, seed: int = 5) -> list[dict]:
    from workers.engine.histogram import Histogram
    from workers.engine.runner import _LabelInterval

    rng = random.Random(seed)
    pool = []
    for _ in range(min(seconds, 60)):
        labels = {}
        for i in range(20):
            li = _LabelInterval()
            n = rng.randint(40, 60)
            li.pages = li.hits = n
            li.protocols = {protocol: n}
            for _ in range(n):
                li.hist.record(rng.lognormvariate(0, 0.4) * 50_000)
                li.ttfb_hist.record(rng.uniform(1_000, 20_000))
            if i < streams:
                li.ttfe_hist, li.gap_hist, li.events_hist = Histogram(), Histogram(), Histogram()
                for _ in range(20):
                    li.ttfe_hist.record(rng.lognormvariate(0, 0.3) * 80_000)
                    li.gap_hist.record_many(rng.uniform(5_000, 30_000) for _ in range(7))
                    li.events_hist.record(8)
            labels[f"Page {i:02d}"] = li.to_report()
        pool.append(labels)
    return pool


def _run(plan, seconds: int, streams: int, protocol: str):
    from django.db import transaction
    from django.utils import timezone

    from portal.runs.models import Run
    from portal.runs.results.sink import interval_write

    run = Run.objects.create(
        project=plan.project,
        number=Run.objects.filter(project=plan.project).count() + 1,
        plan=plan,
        environment=plan.environment,
        plan_name=plan.name,
        environment_name=plan.environment.name,
        plan_snapshot={
            **plan.to_engine_dict(),
            "test_cases": [{"name": "Bench", "steps": [{"name": "Home", "path": "/"}]}],
            "profile": {"kind": "constant", "users": 20, "hold": seconds},
        },
        start_at=timezone.now(),
        status=Run.Status.PASSED,
    )
    pool = _reports(seconds, streams, protocol)
    times = []
    for second in range(seconds):
        t = time.perf_counter()
        with transaction.atomic():
            interval_write(run.id, 0, {"second": second, "active_users": 20, "labels": pool[second % len(pool)]})
        times.append(time.perf_counter() - t)
    return run, times


def _one_by_one(run, windows) -> dict:
    """The protocol rows of the windows merged row by row, as ``summary_of`` read them before it batched."""
    from portal.runs.results import protocols

    cells = {}
    for _second, label, *values in protocols.read(run, protocols.in_windows(windows)):
        cells.setdefault(label, protocols.Cell()).add_row(*values)
    return cells


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=int, default=600)
    p.add_argument("--streams", type=int, default=2)
    args = p.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from portal.accounts.models import Team
    from portal.projects.models import Environment, Plan, Project
    from portal.runs import analysis
    from portal.runs.models import ProtocolInterval, RunFigures
    from portal.runs.results import protocols
    from portal.runs.results.rollup import run_rollup

    team = Team.objects.create(name=f"protocol bench {time.time()}")
    project = Project.objects.create(team=team, name="bench")
    env = Environment.objects.create(project=project, name="bench", base_url="http://127.0.0.1:9")
    plan = Plan.objects.create(project=project, environment=env, name="bench", users=20, hold=args.seconds)
    try:
        print(f"{args.seconds} s, 20 labels, {args.streams} of them streams; PostgreSQL: {connection.vendor}")
        for protocol in ("http/1.1", "h2"):
            run, times = _run(plan, args.seconds, args.streams if protocol == "h2" else 0, protocol)
            times.sort()
            print(
                f"  {protocol:8} writer per shard-second: mean {statistics.mean(times) * 1000:.2f} ms, "
                f"p99 {times[int(len(times) * 0.99)] * 1000:.2f} ms"
            )
            t = time.perf_counter()
            summary = analysis.summarize(run)
            whole = time.perf_counter() - t
            windows = summary["windows"]
            t = time.perf_counter()
            batched = protocols.summary_of(run, windows, {}, [0] * len(windows))
            part = time.perf_counter() - t
            rows = ProtocolInterval.objects.filter(run=run).count()
            print(f"           summary {whole:.2f} s, of which protocols {part:.2f} s ({rows} protocol rows)")
            if rows:
                t = time.perf_counter()
                cells = _one_by_one(run, windows)
                before = time.perf_counter() - t
                same = {p["label"]: p for p in batched["pages"]} == {
                    label: protocols.label_figures(label, c, hits=None, seconds=windows[0]["seconds"])
                    for label, c in cells.items()
                }
                per_hour = 3600 / args.seconds
                print(
                    f"           protocol rows merged one by one (before) {before:.2f} s, batched (now) {part:.2f} s: "
                    f"{before / part:.1f}x; per hour of run {before * per_hour:.2f} s → {part * per_hour:.2f} s; "
                    f"same figures: {same}"
                )
            if rows:
                with connection.cursor() as c:
                    c.execute("SELECT pg_total_relation_size('runs_protocolinterval')")
                    size = c.fetchone()[0]
                print(f"           protocol table {size / rows:.0f} bytes per label-second (all runs in it)")
                RunFigures.objects.create(run=run, series={}, batches=[])
                t = time.perf_counter()
                run_rollup(run.id)
                print(
                    f"           roll-up {time.perf_counter() - t:.2f} s; "
                    f"{ProtocolInterval.objects.filter(run=run).count()} rows after"
                )
    finally:
        from portal.runs.models import Run

        Run.objects.filter(project=project).delete()
        plan.delete()
        env.delete()
        project.delete()
        team.delete()


if __name__ == "__main__":
    main()
