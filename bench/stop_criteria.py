"""``python -m bench stop-criteria``: one stop-criteria check (issue 24 item 7) at several run lengths.

For each length (default 10 min and 10 h of a running run with 4 shards, one ShardInterval row per shard
and second, each with a merged histogram of 40 page durations, as the sink writes them), it times
``portal.runs.services.criteria.criteria_check`` (best of 5) with three rules (error rate over 60 s, p95
over 60 s, pages/s over 300 s) and counts its queries and the rows it read: both must stay the same
whatever the run's length, because the check reads only the window.

PostgreSQL only (``DATABASE_URL``): it works in ``<DATABASE_URL's database>_stopbench`` (created if
missing, emptied of its runs at each length). Nothing else is touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARDS = 4


def _setup(pg_url: str) -> None:
    import psycopg

    base, _, name = pg_url.rpartition("/")
    bench_db = f"{name}_stopbench"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [bench_db]).fetchone():
            conn.execute(f'CREATE DATABASE "{bench_db}"')
    os.environ["DATABASE_URL"] = f"{base}/{bench_db}"
    os.environ.setdefault("CELERY_BROKER_URL", "filesystem://")
    os.environ.setdefault("PLIMSOLL_VAR_DIR", str(ROOT / "var" / "bench-stop"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _plan():
    from django.contrib.auth import get_user_model

    from portal.projects.models import Environment, MixEntry, Plan, Project, Step, TestCase

    user = get_user_model().objects.create_user(f"bench{time.time_ns()}", password="x")
    project = Project.objects.create(team=user.teams.get(), name="Stop bench")
    env = Environment.objects.create(project=project, name="Bench", base_url="http://127.0.0.1:9")
    tc = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=tc, position=0, name="Home", path="/")
    plan = Plan.objects.create(
        project=project,
        environment=env,
        name="Soak",
        profile_kind=Plan.ProfileKind.CONSTANT,
        users=SHARDS * 100,
        hold=72 * 3600,
        stop_criteria=[
            {"metric": "error_rate_pct", "above": 50, "window_s": 60},
            {"metric": "p95_ms", "above": 5000, "window_s": 60},
            {"metric": "pages_per_s", "below": 1, "window_s": 300},
        ],
    )
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
    return plan


def measure(plan, length_s: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from portal.runs.models import Run, RunShard, ShardInterval
    from portal.runs.services import criteria
    from workers.engine.histogram import Histogram

    Run.objects.all().delete()  # the bench database's own runs, earlier invocations' too
    now = timezone.now()
    run = Run.objects.create(
        project=plan.project,
        number=1,
        plan=plan,
        environment=plan.environment,
        plan_name=plan.name,
        environment_name=plan.environment.name,
        plan_snapshot=plan.to_engine_dict(),
        status=Run.Status.RUNNING,
        shard_count=SHARDS,
        start_at=now - timedelta(seconds=length_s + 1),
    )
    RunShard.objects.bulk_create(
        [RunShard(run=run, shard_no=n, user_count=100, status=RunShard.Status.RUNNING) for n in range(SHARDS)]
    )
    h = Histogram()
    for v in range(40):
        h.record(20_000 + 500 * v)
    blob = h.to_bytes()
    batch = []
    for s in range(length_s):
        for n in range(SHARDS):
            batch.append(ShardInterval(run=run, shard_no=n, second=s, pages=40, errors=0, hist_bin=blob))
        if len(batch) >= 20_000:
            ShardInterval.objects.bulk_create(batch)
            batch = []
    ShardInterval.objects.bulk_create(batch)
    with connection.cursor() as c:
        c.execute("ANALYZE runs_shardinterval")
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        with CaptureQueriesContext(connection) as queries:
            stopped = criteria.criteria_check(now=now)
        times.append(time.perf_counter() - t0)
        assert stopped == [], stopped
    return {
        "length_s": length_s,
        "rows": length_s * SHARDS,
        "ms": round(1000 * min(times), 2),
        "queries": len(queries.captured_queries),
        "window_rows": 300 * SHARDS,
    }


def _length(seconds: int) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def render(rows: list[dict], command: str) -> str:
    lines = [
        f"`{command}` — one check of a running run, {SHARDS} shards, three rules (60 s, 60 s, 300 s windows):",
        "",
        "| run so far | its ShardInterval rows | rows the check reads | queries | check (best of 5) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {_length(r['length_s'])} | {r['rows']:,} | {r['window_rows']:,} | {r['queries']} | {r['ms']} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench stop-criteria", description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="600,36000", help="seconds the run has run (default 600,36000)")
    args = p.parse_args(argv)
    pg_url = os.environ.get("DATABASE_URL", "")
    if not pg_url.startswith("postgres"):
        print("bench stop-criteria: set DATABASE_URL=postgres://…", file=sys.stderr)
        return 2
    _setup(pg_url)
    plan = _plan()
    rows = [measure(plan, int(n)) for n in args.lengths.split(",")]
    print(render(rows, ("python -m bench stop-criteria " + " ".join(argv)).strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
