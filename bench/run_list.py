"""``python -m bench runs-list``: the runs list (issue 15) at several sizes, new query beside the old one.

For each size (default 1,000 and 10,000 runs over two projects, each run with a summary of 20
pages and 2 windows, about 12 kB, as a real run's), it prints:

- the list page (``/runs/``): first page, a filtered page (plan + verdict + who + dates, page 3)
  and the last page, as server time (best of 3 through Django's test client) and the number of
  queries, which must not grow with the size;
- fetching one page of 100 rows the old way (every column, the whole summary and plan snapshot
  decoded, ordered by run number) and the new way (``portal.runs.views.ordered_runs`` for the page's ids, then
  ``list_rows``: summary and snapshots deferred, the four figures and the profile read out of the JSON in SQL).

PostgreSQL only (``DATABASE_URL``): it works in ``<DATABASE_URL's database>_runlistbench``
(created if missing, emptied of its runs at each size). Nothing else is touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup(pg_url: str) -> None:
    import psycopg

    base, _, name = pg_url.rpartition("/")
    bench_db = f"{name}_runlistbench"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [bench_db]).fetchone():
            conn.execute(f'CREATE DATABASE "{bench_db}"')
    os.environ["DATABASE_URL"] = f"{base}/{bench_db}"
    os.environ.setdefault("CELERY_BROKER_URL", "filesystem://")
    os.environ.setdefault("PLIMSOLL_VAR_DIR", str(ROOT / "var" / "bench-runlist"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _summary(i: int) -> dict:
    pages = [
        {
            "label": f"Browse: page {k}",
            "pages": 1000 + k,
            "errors": k % 3,
            "error_rate_pct": 0.1,
            "pages_per_s": 12.5,
            "bytes_in": 5_000_000,
            "ttfb_ms": 20.0,
            "connect_ms": 0.4,
            **{f: 40.0 + k + i % 9 for f in ("apd_ms", "min_ms", "max_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms")},
        }
        for k in range(20)
    ]
    totals = {**pages[0], "label": None, "pages_per_s": 250.0, "hits_per_s": 700.0, "users": 50}
    windows = [{"label": f"Level {w}", "start": 10, "end": 310, "seconds": 300, "totals": totals} for w in (1, 2)]
    return {"verdict": "failed" if i % 7 == 0 else "passed", "totals": totals, "pages": pages, "windows": windows}


def _fixtures():
    from django.contrib.auth import get_user_model

    from portal.projects.models import Environment, MixEntry, Plan, Project, Step, TestCase

    user = get_user_model().objects.create_user(f"bench{time.time_ns()}", password="x")
    plans = []
    for name in ("Intranet", "Extranet"):
        project = Project.objects.create(team=user.teams.get(), name=name)
        env = Environment.objects.create(project=project, name="Bench", base_url="http://127.0.0.1:9")
        tc = TestCase.objects.create(project=project, name="Browse")
        Step.objects.create(test_case=tc, position=0, name="Home", path="/")
        plan = Plan.objects.create(project=project, environment=env, name="Soak", users=50, ramp_up=0, hold=60)
        MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
        plans.append(plan)
    return user, plans


def _fill(user, plans, n: int) -> None:
    from django.utils import timezone

    from portal.runs.models import Run

    Run.objects.filter(project__in=[p.project for p in plans]).delete()
    now = timezone.now()
    snapshot = plans[0].to_engine_dict()
    batch = []
    for i in range(n):
        plan = plans[i % 2]
        batch.append(
            Run(
                project=plan.project,
                number=i // 2 + 1,
                plan=plan,
                environment=plan.environment,
                plan_name=plan.name,
                environment_name=plan.environment.name,
                plan_snapshot=snapshot,
                status=Run.Status.FAILED if i % 7 == 0 else Run.Status.PASSED,
                start_at=now - timedelta(minutes=n - i),
                created_by=user,
                summary=_summary(i),
            )
        )
        if len(batch) == 1000:
            Run.objects.bulk_create(batch)
            batch = []
    Run.objects.bulk_create(batch)


def _best_ms(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return round(best * 1000, 1)


def measure(user, plans, n: int) -> dict:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from portal.accounts.access import scoped
    from portal.runs.models import Run
    from portal.runs.views import list_rows, ordered_runs

    _fill(user, plans, n)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run")
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    pages = {
        "first": {},
        "filtered": {"plan": plans[1].code, "verdict": "passed", "started_by": user.username, "since": "2000-01-01"},
        "last": {"page": "last"},
    }
    row: dict = {"runs": n}
    for name, params in pages.items():

        def get(params=params):
            response = client.get("/runs/", params)
            assert response.status_code == 200, response.status_code

        row[f"{name}_ms"] = _best_ms(get)
        with CaptureQueriesContext(connection) as queries:
            get()
        row[f"{name}_queries"] = len(queries)

    def old_rows():
        runs = scoped(Run.objects.select_related("project", "project__team"), user).order_by("-number")
        return [(r.summary or {}).get("totals", {}).get("apd_ms") for r in runs[:100]]

    def new_rows():
        ids = list(ordered_runs(scoped(Run.objects.all(), user)).values_list("id", flat=True)[:100])
        return [r.apd_ms for r in list_rows(ids)]

    row["rows_old_ms"] = _best_ms(old_rows)
    row["rows_new_ms"] = _best_ms(new_rows)
    return row


def render(rows: list[dict], command: str) -> str:
    lines = [
        f"Command: `{command}`. Server time, best of 3, through Django's test client; PostgreSQL.",
        "",
        "| runs | first page | filtered, page 3 | last page | 100 rows, old query | 100 rows, new query |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['runs']:,} | {r['first_ms']} ms ({r['first_queries']} queries) | "
            f"{r['filtered_ms']} ms ({r['filtered_queries']} queries) | "
            f"{r['last_ms']} ms ({r['last_queries']} queries) | "
            f"{r['rows_old_ms']} ms | {r['rows_new_ms']} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench runs-list", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000", help="numbers of runs (default 1000,10000)")
    args = p.parse_args(argv)
    pg_url = os.environ.get("DATABASE_URL", "")
    if not pg_url.startswith("postgres"):
        print("bench runs-list: set DATABASE_URL=postgres://…", file=sys.stderr)
        return 2
    _setup(pg_url)
    user, plans = _fixtures()
    rows = [measure(user, plans, int(n)) for n in args.sizes.split(",")]
    print(render(rows, ("python -m bench runs-list " + " ".join(argv)).strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
