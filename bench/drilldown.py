"""``python -m bench drilldown [--lengths 3600,43200]``: the drill-down data (issue 15) at several run lengths.

A run of ``LABELS`` pages is written as per-second rows (one shard; each second's histogram
drawn from a small pool, as bench/store.py does), then ``runs/<code>/detail.json`` is timed
through Django's test client on PostgreSQL:

- one page over the whole run (the drill-down: series, window figures, distribution, errors);
- all pages over the whole run (the report's distribution);
- one page over a 10-minute range (a zoom);
- the report's distribution on load (``?only=distribution``: kept in the summary);
- the same three after the roll-up into per-minute rows (what an older run reads).

Printed: the points sent (at most drilldown.MAX_POINTS whatever the length) and the server time
(best of 3). Runs in ``<DATABASE_URL's database>_storebench`` (bench/store.py's), in a child process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from .store import ROOT, _fixtures, _new_run, _ok, _setup, _timed

LABELS = 5
POOL = 60


def _rows(run, seconds: int) -> None:
    import random

    from portal.runs.models import PageInterval, ShardInterval
    from workers.engine.histogram import Histogram

    rng = random.Random(15)
    pool = []
    for _ in range(POOL):
        h, t = Histogram(), Histogram()
        for _ in range(40):
            d = rng.lognormvariate(0, 0.5) * 50_000
            h.record(d)
            t.record(d * 0.4)
        pool.append((h.to_bytes(), t.to_bytes(), h.count))
    batch, shards = [], []
    for s in range(seconds):
        shards.append(ShardInterval(run=run, shard_no=0, second=s, active_users=100))
        for i in range(LABELS):
            hist, ttfb, n = pool[(s * LABELS + i) % POOL]
            batch.append(
                PageInterval(
                    run=run, shard_no=0, second=s, label=f"Page {i}", pages=n, hits=n, hist_bin=hist, ttfb_bin=ttfb
                )
            )
        if len(batch) >= 20_000:
            PageInterval.objects.bulk_create(batch, batch_size=5000)
            ShardInterval.objects.bulk_create(shards, batch_size=5000)
            batch, shards = [], []
    PageInterval.objects.bulk_create(batch, batch_size=5000)
    ShardInterval.objects.bulk_create(shards, batch_size=5000)


def measure(seconds: int) -> dict:
    from django.test import Client
    from django.urls import reverse

    from portal.runs import analysis, services
    from portal.runs.models import Run, RunFigures

    user, project, plan = _fixtures()
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    run = _new_run(project, plan, user, seconds, 1)
    t = time.perf_counter()
    _rows(run, seconds)
    out = {"seconds": seconds, "rows": seconds * LABELS, "write_s": round(time.perf_counter() - t, 1)}
    summary, series = analysis.summarize_with_series(Run.objects.get(id=run.id))
    Run.objects.filter(id=run.id).update(status=Run.Status.PASSED, summary=summary)
    url = reverse("runs:detail-data", args=[run.code])
    queries = {
        "report": {"only": "distribution"},
        "page": {"page": "Page 0"},
        "all": {},
        "zoom": {"page": "Page 0", "from": seconds // 2, "to": seconds // 2 + 600},
    }

    def timed(prefix: str) -> None:
        for name, query in queries.items():
            out[f"{prefix}{name}_points"] = len(_ok(client.get(url, query)).json().get("series", {}).get("t", []))
            out[f"{prefix}{name}_ms"] = _timed(lambda q=query: _ok(client.get(url, q)))

    timed("")
    RunFigures.objects.create(run=run, series=series, batches=[])
    services.run_rollup(run.id)
    timed("rolled_")
    return out


def child(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", required=True)
    p.add_argument("--pg-url", required=True)
    args = p.parse_args(argv)
    _setup("postgresql", args.pg_url)
    for seconds in (int(s) for s in args.lengths.split(",")):
        print(json.dumps(measure(seconds)), flush=True)
    return 0


def _hours(seconds: int) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def main(argv: list[str]) -> int:
    if argv[:1] == ["child"]:
        return child(argv[1:])
    p = argparse.ArgumentParser(prog="python -m bench drilldown", description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="3600,43200", help="run lengths in seconds (default 3600,43200)")
    args = p.parse_args(argv)
    pg_url = os.environ.get("DATABASE_URL", "")
    if not pg_url.startswith("postgres"):
        print("bench drilldown: set DATABASE_URL=postgres://…", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "bench.drilldown", "child", "--lengths", args.lengths, "--pg-url", pg_url]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
        return proc.returncode
    print(
        "| run | label rows | report's distribution | one page: points / ms | all pages: points / ms "
        "| 10-min zoom: points / ms | rolled up: page / all / zoom |"
    )
    print("|---|---|---|---|---|---|---|")
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        print(
            f"| {_hours(r['seconds'])} | {r['rows']:,} | {r['report_ms']} ms | {r['page_points']} / {r['page_ms']} | "
            f"{r['all_points']} / {r['all_ms']} | {r['zoom_points']} / {r['zoom_ms']} | "
            f"{r['rolled_page_ms']} / {r['rolled_all_ms']} / {r['rolled_zoom_ms']} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
