"""``python -m bench store``: the results store (issue 9) at several run lengths, on SQLite and PostgreSQL.

Each run is written second by second through the real ``ShardSink`` (20 labels, about
1,000 pages/s, lognormal page durations, realistic TTFB and connect histograms), then
finalized by the real ``run_finalize`` (summary, chart series, comparison batches, roll-up).
Printed per backend and run length:

- bytes per label-second while live (per-second rows) and after the roll-up;
- the sink's write time (mean, p99), the live poll (``series.json?since=``, the live
  fragment) and the first full chart load of a live run;
- finalize: wall time (with the roll-up) and the peak extra Python memory (tracemalloc) of
  computing the figures; the old design (every row loaded, as before issue 9: the copy in
  tests/portal/runs/reference_analysis.py) side by side up to ``--old-upto`` seconds;
- a finished run's report page, ``series.json`` and the comparison of two single runs
  (the run against a copy of itself), as server time through Django's test client.

Each backend runs in a child process with its own database: a fresh SQLite file under
var/bench-store/, and ``<DATABASE_URL's database>_storebench`` on PostgreSQL (created if
missing; sizes are differences, so earlier runs in it do not count). Nothing else is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABELS = 20
PAGES_PER_S = 1000
POOL = 120  # distinct per-second reports, cycled (generating 20,000 samples a second would dominate)
README = Path(__file__).with_name("README.md")
MARK_BEGIN, MARK_END = "<!-- store:begin -->", "<!-- store:end -->"


def _reports(seed: int = 9) -> list[dict]:
    from workers.engine.histogram import Histogram

    rng = random.Random(seed)
    per_label = PAGES_PER_S // LABELS
    medians = [rng.uniform(15_000, 400_000) for _ in range(LABELS)]
    pool = []
    for _ in range(POOL):
        labels = {}
        for i in range(LABELS):
            n = max(0, int(rng.gauss(per_label, 4)))
            page, ttfb, connect = Histogram(), Histogram(), Histogram()
            for _ in range(n):
                d = rng.lognormvariate(0, 0.45) * medians[i]
                page.record(d)
                ttfb.record(d * rng.uniform(0.3, 0.8))
            for _ in range(rng.randint(0, 2)):
                connect.record(rng.uniform(150, 900))
            errors = 1 if rng.random() < 0.02 else 0
            labels[f"Page {i:02d}"] = {
                "pages": n + errors,
                "hits": n * 4 + errors,
                "errors": errors,
                "errors_by_kind": {"http_status": errors} if errors else {},
                "error_samples": {"http_status": "HTTP 503 Service Unavailable"} if errors else {},
                "bytes_in": n * rng.randint(8_000, 40_000),
                "bytes_out": n * 600,
                "hist": page.to_dict(),
                "ttfb_hist": ttfb.to_dict(),
                "connect_hist": connect.to_dict(),
            }
        pool.append(labels)
    return pool


# --------------------------------------------------------------------------------------
# The child: one backend
# --------------------------------------------------------------------------------------


def _setup(backend: str, pg_url: str, *, fresh: bool = True) -> None:
    """Points Django at the backend's bench database; ``fresh``: a new SQLite file (PostgreSQL keeps its data)."""
    var = ROOT / "var" / "bench-store"
    var.mkdir(parents=True, exist_ok=True)
    os.environ["PLIMSOLL_VAR_DIR"] = str(var)
    os.environ.setdefault("CELERY_BROKER_URL", "filesystem://")
    if backend == "sqlite":
        path = var / "store.sqlite3"
        for suffix in ("", "-wal", "-shm") if fresh else ():
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    else:
        import psycopg

        base, _, name = pg_url.rpartition("/")
        bench_db = f"{name}_storebench"
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [bench_db]).fetchone():
                conn.execute(f'CREATE DATABASE "{bench_db}"')
        os.environ["DATABASE_URL"] = f"{base}/{bench_db}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    if fresh:
        call_command("migrate", verbosity=0)


def _storage_bytes(backend: str) -> int:
    from django.db import connection

    with connection.cursor() as c:
        if backend == "sqlite":
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            c.execute("PRAGMA page_count")
            pages = c.fetchone()[0]
            c.execute("PRAGMA freelist_count")
            free = c.fetchone()[0]
            c.execute("PRAGMA page_size")
            return (pages - free) * c.fetchone()[0]
        c.execute(
            "SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t",
            [["runs_pageinterval", "runs_shardinterval", "runs_pagerollup", "runs_runfigures"]],
        )
        return int(c.fetchone()[0])


def _settle(backend: str) -> None:
    """Gives back the space of deleted and rewritten rows, so that sizes measure only live data."""
    from django.db import connection

    with connection.cursor() as c:
        if backend == "sqlite":
            c.execute("VACUUM")
        else:
            c.execute("VACUUM FULL runs_pageinterval, runs_shardinterval, runs_pagerollup, runs_runfigures")


def _fixtures():
    from django.contrib.auth import get_user_model

    from portal.projects.models import Environment, MixEntry, Plan, Project, Step, TestCase

    user = get_user_model().objects.create_user(f"bench{time.time_ns()}", password="x")
    team = user.teams.get()
    project = Project.objects.create(team=team, name="Store bench")
    env = Environment.objects.create(project=project, name="Bench", base_url="http://127.0.0.1:9")
    tc = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=tc, position=0, name="Home", path="/")
    plan = Plan.objects.create(project=project, environment=env, name="Soak", users=100, ramp_up=0, hold=60)
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
    return user, project, plan


def _new_run(project, plan, user, seconds: int, number: int):
    from django.utils import timezone

    from portal.runs.models import Run, RunShard

    snapshot = plan.to_engine_dict()
    snapshot["profile"] = {"kind": "constant", "users": 100, "hold": seconds}
    run = Run.objects.create(
        project=project,
        number=number,
        plan=plan,
        environment=plan.environment,
        plan_name=plan.name,
        environment_name=plan.environment.name,
        plan_snapshot=snapshot,
        analysis_settings=plan.analysis_settings(),
        created_by=user,
        status=Run.Status.RUNNING,
        start_at=timezone.now(),
        shard_count=1,
    )
    RunShard.objects.create(run=run, shard_no=0, user_count=100, status=RunShard.Status.RUNNING)
    return run


def _ok(response):
    if response.status_code != 200:
        raise RuntimeError(f"{response.request['PATH_INFO']}: HTTP {response.status_code}")
    return response


def _timed(fn, repeat: int = 3) -> float:
    """The best of ``repeat`` calls, in ms (server time; the first call warms caches)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return round(best * 1000, 1)


def _peak_mb(fn) -> tuple[float, float]:
    """(seconds, peak extra MB of Python allocations) of one call."""
    tracemalloc.start()
    t = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return round(elapsed, 2), round(peak / 2**20, 1)


def _copy_rows(src, dst) -> None:
    """A second run with the same rows (for the comparison of two single runs), copied in SQL."""
    from django.db import connection

    cols = (
        "shard_no, second, label, pages, hits, errors, errors_by_kind, error_samples, bytes_in, bytes_out, "
        "hist, connect_hist, ttfb_hist, hist_bin, ttfb_bin, connect_count, connect_sum_us"
    )
    scols = (
        "shard_no, second, active_users, iterations_started, iterations_completed, iterations_dropped, "
        "loop_lag_p99_ms, loop_lag_max_ms, cpu_pct, pages, errors, latency_sum_us, latency_count, "
        "pages_total, errors_total, hits, bytes_in, hist_bin"
    )
    with connection.cursor() as c:
        c.execute(
            f"INSERT INTO runs_pageinterval (run_id, {cols}) "
            f"SELECT %s, {cols} FROM runs_pageinterval WHERE run_id = %s",
            [dst.id, src.id],
        )
        # The running totals the sink writes, computed here too: rows kept before they existed lack them.
        running = ", ".join(
            f"SUM({col}) OVER (PARTITION BY shard_no ORDER BY second)"
            for col in ("latency_sum_us", "latency_count", "iterations_dropped")
        )
        c.execute(
            f"INSERT INTO runs_shardinterval (run_id, {scols}, latency_sum_total, latency_count_total, dropped_total) "
            f"SELECT %s, {scols}, {running} FROM runs_shardinterval WHERE run_id = %s",
            [dst.id, src.id],
        )


# Browsers on a live run's page, each polling its fragment and chart data back to back: the bench
# writes ~100 seconds of a run per wall second, so browsers polling every 2 s would barely poll;
# without pauses they make far more polls per write than real ones (a stress case).
POLLERS = 3
POLL_BLOCK_S = 60  # seconds written with the pollers on, then as many with them off, in turn


def poller(argv: list[str]) -> int:
    """Browsers on the live page, in a process of their own (as behind separate web workers): poll
    while the flag file exists, until the stop file appears; prints their poll times."""
    import threading

    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--pg-url", default="")
    p.add_argument("--run-id", type=int, required=True)
    p.add_argument("--flag", required=True)
    p.add_argument("--stop", required=True)
    p.add_argument("--browsers", type=int, default=POLLERS)
    p.add_argument("--every", type=float, default=0.0, help="seconds between a browser's polls (0: back to back)")
    args = p.parse_args(argv)
    _setup(args.backend, args.pg_url, fresh=False)
    from django.test import Client
    from django.urls import reverse

    from portal.runs.models import Run

    run = Run.objects.select_related("created_by").get(id=args.run_id)
    series_url = reverse("runs:series", args=[run.code])
    detail_url = reverse("runs:detail", args=[run.code])
    times: list[float] = []

    def browse() -> None:
        from django.db import connection

        client = Client(SERVER_NAME="127.0.0.1")
        client.force_login(run.created_by)
        since = None
        while not os.path.exists(args.stop):
            if not os.path.exists(args.flag):
                time.sleep(0.2)
                continue
            t = time.perf_counter()
            if since is None:
                body = _ok(client.get(series_url)).json()  # the first load, then only what is new
            else:
                body = _ok(client.get(series_url, {"since": since})).json()
            _ok(client.get(detail_url, headers={"HX-Request": "true"}))
            times.append(time.perf_counter() - t)
            if body.get("t"):
                since = body["t"][-1] + 1
            if args.every:  # as the live page does: the next poll a fixed interval after this one began
                time.sleep(max(0.0, args.every - (time.perf_counter() - t)))
        connection.close()

    threads = [threading.Thread(target=browse) for _ in range(args.browsers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(times), flush=True)
    return 0


# Real time (``--real-time``): browsers as the live page polls, each every 2 s.
BROWSERS = 5
BROWSER_EVERY_S = 2.0


def _write(
    backend: str, pg_url: str, run, seconds: int, *, start: int = 0, real_time: bool = False, browsers: int = POLLERS
) -> dict:
    """Writes ``seconds`` of reports (from second ``start``) through the real sink; the sink's write time
    with and without browsers polling the live run (another process), in alternating POLL_BLOCK_S blocks.

    As fast as it can, with POLLERS browsers polling back to back (a stress case); or, with
    ``real_time``, one second of run per wall second and each browser polling every BROWSER_EVERY_S,
    as on the live page."""
    import tempfile

    from portal.runs import services

    pool = _reports()
    sink = services.ShardSink(run.id, 0)
    alone, polled = [], []
    tmp = Path(tempfile.mkdtemp(prefix="bench-store-"))
    flag, stop = tmp / "poll", tmp / "stop"
    cmd = [sys.executable, "-m", "bench.store", "poller", "--backend", backend, "--pg-url", pg_url]
    cmd += ["--run-id", str(run.id), "--flag", str(flag), "--stop", str(stop), "--browsers", str(browsers)]
    cmd += ["--every", str(BROWSER_EVERY_S if real_time else 0)]
    pollers = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True) if browsers else None
    t0 = time.perf_counter()
    try:
        for i, second in enumerate(range(start, start + seconds)):
            if real_time:
                time.sleep(max(0.0, t0 + i - time.perf_counter()))
            on = bool(browsers) and seconds >= 4 * POLL_BLOCK_S and (i // POLL_BLOCK_S) % 2 == 1
            if on != flag.exists():
                flag.touch() if on else flag.unlink()
            report = {
                "second": second,
                "active_users": 100,
                "iterations_started": 40,
                "iterations_completed": 40,
                "loop_lag_ms": {"p99": 1.2, "max": 2.5},
                "cpu_pct": 35.0,
                "labels": pool[second % POOL],
            }
            t = time.perf_counter()
            sink(report)
            # A block's first seconds are a transition (pollers' first loads): counted on neither side.
            if i % POLL_BLOCK_S >= 5:
                (polled if on else alone).append(time.perf_counter() - t)
    finally:
        write_s = time.perf_counter() - t0
        stop.touch()
        polls = json.loads((pollers.communicate(timeout=120)[0].strip().splitlines() or ["[]"])[-1]) if pollers else []
    out = {"write_s": round(write_s, 1), "polls": len(polls), "browsers": browsers}
    for name, times in (("sink", alone), ("sink_polled", polled)):
        if times:
            times.sort()
            out[f"{name}_mean_ms"] = round(statistics.fmean(times) * 1000, 2)
            out[f"{name}_p99_ms"] = round(times[int(len(times) * 0.99)] * 1000, 2)
            out[f"{name}_max_ms"] = round(times[-1] * 1000, 2)
    if polls:
        polls.sort()
        out["poll_median_ms"] = round(statistics.median(polls) * 1000, 1)
        out["poll_p99_ms"] = round(polls[int(len(polls) * 0.99)] * 1000, 1)
    return out


DATASET_PROJECT = "Store bench data set {seconds} s"


class _Progress(dict):
    """The figures of one length; each is also printed to stderr as it is measured (a long run shows its way)."""

    def __init__(self, **figures):
        super().__init__()
        for key, value in figures.items():
            self[key] = value

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        print(json.dumps({key: value}), file=sys.stderr, flush=True)


def _dataset(seconds: int):
    """A kept data set of this length (``--keep``): a run whose rows are copied, and its write figures."""
    from portal.runs.models import Run

    run = Run.objects.filter(project__name=DATASET_PROJECT.format(seconds=seconds), number=9).order_by("-id").first()
    return run, (run.source or {}).get("write") if run else None


def _real_time(backend: str, pg_url: str, project, plan, user, run, seconds: int, extra: int, hold: int) -> dict:
    """``extra`` more seconds of ``run`` (a copy of it: the run itself is measured on), written in real
    time, browsers on and off in turn; the copy is deleted after."""
    from django.db import connection

    rt = _new_run(project, plan, user, max(hold, seconds + extra), 3)
    _copy_rows(run, rt)
    try:
        return _write(backend, pg_url, rt, extra, start=seconds, real_time=True, browsers=BROWSERS)
    finally:
        with connection.cursor() as c:
            for table in ("runs_pageinterval", "runs_shardinterval"):
                c.execute(f"DELETE FROM {table} WHERE run_id = %s", [rt.id])
        rt.delete()


def measure(
    backend: str,
    seconds: int,
    old: bool,
    *,
    pg_url: str = "",
    keep: bool = False,
    reuse: bool = False,
    real_time: int = 0,
    stress: bool = True,
    planned: int = 0,
) -> dict:
    from django.test import Client
    from django.urls import reverse

    from portal.history import comparison
    from portal.runs import analysis, selectors, services
    from portal.runs.models import Run, RunShard
    from tests.portal.runs import reference_analysis

    _settle(backend)
    base = _storage_bytes(backend)  # what the earlier lengths left: sizes below are differences
    user, project, plan = _fixtures()
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    hold = max(seconds, planned)  # a longer plan: the live chart's buckets are those of its length
    run = _new_run(project, plan, user, hold, 1)
    kept, written = _dataset(seconds) if reuse else (None, None)
    if kept is not None:
        _copy_rows(kept, run)  # the same rows as a fresh write; the write figures are the data set's
    else:
        written = _write(backend, pg_url, run, seconds, browsers=POLLERS if stress else 0)
    label_seconds = seconds * LABELS
    live_bytes = _storage_bytes(backend) - base
    if keep and kept is None:
        project.name = DATASET_PROJECT.format(seconds=seconds)
        project.save(update_fields=["name"])
        dataset = _new_run(project, plan, user, seconds, 9)
        dataset.source = {"write": written}
        dataset.save(update_fields=["source"])
        before = _storage_bytes(backend)
        _copy_rows(run, dataset)
        base += _storage_bytes(backend) - before  # the kept copy is not this run's
    out = _Progress(
        backend=backend,
        seconds=seconds,
        **written,
        reused_data_set=kept is not None,
        live_bytes_per_label_s=round(live_bytes / label_seconds, 1),
    )
    series_url = reverse("runs:series", args=[run.code])
    detail_url = reverse("runs:detail", args=[run.code])
    run = Run.objects.get(id=run.id)
    out["live_poll_ms"] = _timed(lambda: _ok(client.get(series_url, {"since": seconds - 5})))
    out["live_fragment_ms"] = _timed(lambda: _ok(client.get(detail_url, headers={"HX-Request": "true"})))
    out["live_figures_ms"] = _timed(lambda: selectors.run_live_figures(run))
    out["live_first_load_ms"] = _timed(lambda: _ok(client.get(series_url)), repeat=1)
    if real_time:
        rt = _real_time(backend, pg_url, project, plan, user, run, seconds, real_time, hold)
        for key, value in rt.items():
            out[f"rt_{key}"] = value

    if old:
        out["old_finalize_s"], out["old_finalize_mb"] = _peak_mb(
            lambda: (reference_analysis.summarize(run), reference_analysis.series(run), comparison.compute_batches(run))
        )
        out["old_series_ms"] = _timed(lambda: reference_analysis.series(run), repeat=1)
        out["old_compare_ms"] = _timed(lambda: comparison.compute_batches(run), repeat=1)
    out["figures_s"], out["figures_mb"] = _peak_mb(
        lambda: analysis.summarize_with_series(run, sampler=comparison.BatchSampler(run))
    )

    twin = _new_run(project, plan, user, hold, 2)
    _copy_rows(run, twin)
    RunShard.objects.filter(run__in=[run, twin]).update(status=RunShard.Status.DONE)
    t = time.perf_counter()
    services.run_finalize(run.id)
    out["finalize_s"] = round(time.perf_counter() - t, 2)
    services.run_finalize(twin.id)
    out["status"] = Run.objects.get(id=run.id).status
    t = time.perf_counter()
    services.run_rollup(run.id)  # what the watchdog does PLIMSOLL_ROLLUP_AFTER after the run
    out["rollup_s"] = round(time.perf_counter() - t, 2)
    services.run_rollup(twin.id)

    # Only the finished run's bytes: the twin's rows are rolled up too, so halve what both take.
    _settle(backend)
    out["stored_bytes_per_label_s"] = round((_storage_bytes(backend) - base) / 2 / label_seconds, 1)

    compare_url = reverse("history:compare", args=[project.code])
    out["report_ms"] = _timed(lambda: _ok(client.get(detail_url)))
    out["series_ms"] = _timed(lambda: _ok(client.get(series_url)))
    out["compare_ms"] = _timed(lambda: _ok(client.get(compare_url, {"a": str(run.code), "b": str(twin.code)})))
    return out


LIVE_SIZE_SAMPLE_S = 1800  # seconds written through the real sink, then repeated to each length


def _fill(src, dst, seconds: int, sample: int) -> None:
    """``dst`` gets ``seconds`` of rows: ``src``'s ``sample`` seconds repeated, shifted in time, in SQL."""
    from django.db import connection

    cols = (
        "shard_no, label, pages, hits, errors, errors_by_kind, error_samples, bytes_in, bytes_out, "
        "hist, connect_hist, ttfb_hist, hist_bin, ttfb_bin, connect_count, connect_sum_us"
    )
    scols = (
        "shard_no, active_users, iterations_started, iterations_completed, iterations_dropped, "
        "loop_lag_p99_ms, loop_lag_max_ms, cpu_pct, pages, errors, latency_sum_us, latency_count, "
        "pages_total, errors_total, hits, bytes_in, hist_bin, latency_sum_total, latency_count_total, dropped_total"
    )
    blocks = -(-seconds // sample)
    with connection.cursor() as c:
        for table, columns in (("runs_pageinterval", cols), ("runs_shardinterval", scols)):
            c.execute(
                f"INSERT INTO {table} (run_id, second, {columns}) "
                f"SELECT %s, second + k * %s, {columns} FROM {table}, generate_series(0, %s) k "
                "WHERE run_id = %s AND second + k * %s < %s",
                [dst.id, sample, blocks - 1, src.id, sample, seconds],
            )


def live_size(backend: str, pg_url: str, lengths: list[int], sample: int = LIVE_SIZE_SAMPLE_S) -> list[dict]:
    """The interval tables' size while a 20-page run is live, previous design against this one.

    ``sample`` seconds are written through the real sink, then repeated (in SQL) to each length, as
    a run planned for that length holds them at its last second. *Previous*: every per-second row,
    as before issue 27 (the roll-up came only after the run). *Now*: after the live roll-up has taken
    all it may (``live_rollup``, what the watchdog's ticks do as the run goes): per-second rows for the
    last PLIMSOLL_LIVE_ROLLUP_AFTER seconds only, spans before them.
    """
    from django.conf import settings
    from django.db import connection

    from portal.runs.results import rollup

    user, project, plan = _fixtures()
    src = _new_run(project, plan, user, sample, 1)
    written = _write(backend, pg_url, src, sample, browsers=0)
    out = []
    for number, seconds in enumerate(lengths, start=10):
        _settle(backend)
        base = _storage_bytes(backend)
        run = _new_run(project, plan, user, seconds, number)
        _fill(src, run, seconds, sample)
        previous = _storage_bytes(backend) - base
        t = time.perf_counter()
        rolled = rollup.live_rollup(run.id, limit_s=seconds)
        rollup_s = time.perf_counter() - t
        _settle(backend)
        now = _storage_bytes(backend) - base
        row = _Progress(
            backend=backend,
            live_size_s=seconds,
            sample_s=sample,
            sink_mean_ms=written.get("sink_mean_ms"),
            live_rollup_after_s=settings.PLIMSOLL_LIVE_ROLLUP_AFTER,
            previous_bytes=previous,
            now_bytes=now,
            rows_rolled=rolled,
            live_rollup_s=round(rollup_s, 1),
        )
        out.append(dict(row))
        with connection.cursor() as c:
            for table in ("runs_pageinterval", "runs_shardinterval", "runs_pagerollup"):
                c.execute(f"DELETE FROM {table} WHERE run_id = %s", [run.id])
        run.delete()
    return out


def many(journey_runs: int = 2000, list_runs: int = 10000) -> dict:
    """Many runs: a plan's journey with ``journey_runs`` finished runs and the runs list at ``list_runs``.

    Each run carries the summary a real finalize wrote (the newest finished run's: a soak's, with its
    windows, degradation series and page table), so the pages read what they would in production.
    """
    from datetime import timedelta

    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from portal.runs.models import Run, run_digest
    from portal.runs.views import RUNS_PER_PAGE

    source = Run.objects.filter(status=Run.Status.PASSED).exclude(summary=None).order_by("-id").first()
    if source is None:
        raise RuntimeError("bench store --many: no finished run to copy a summary from (give --lengths too)")
    user, project, plan = _fixtures()
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    t0 = timezone.now()
    fields = {
        "project": project,
        "plan": plan,
        "environment": plan.environment,
        "plan_name": plan.name,
        "environment_name": plan.environment.name,
        "plan_snapshot": source.plan_snapshot,
        "analysis_settings": source.analysis_settings,
        "summary": source.summary,
        "digest": run_digest(source.summary, source.plan_snapshot),  # bulk_create skips Run.save
        "created_by": user,
        "status": Run.Status.PASSED,
        "shard_count": 1,
    }

    def add(first: int, count: int, **extra) -> None:
        for lo in range(first, first + count, 500):
            Run.objects.bulk_create(
                [
                    Run(
                        **fields,
                        **extra,
                        number=n,
                        start_at=t0 + timedelta(hours=n),
                        finished_at=t0 + timedelta(hours=n),
                    )
                    for n in range(lo, min(first + count, lo + 500))
                ]
            )

    add(1, journey_runs)
    size = len(json.dumps(source.summary))
    journey_url = reverse("history:environment-journey", args=[plan.environment.code])
    journey_data = reverse("history:environment-journey-data", args=[plan.environment.code])
    out = _Progress(summary_kb=round(size / 1024, 1), journey_runs=journey_runs)
    out["journey_ms"] = _timed(lambda: _ok(client.get(journey_url, {"plan": str(plan.code)})))
    out["journey_json_ms"] = _timed(lambda: _ok(client.get(journey_data, {"plan": str(plan.code)})))
    add(journey_runs + 1, list_runs - journey_runs)
    list_url = reverse("runs:list")
    out["list_runs"] = Run.objects.filter(project=project).count()
    out["list_first_ms"] = _timed(lambda: _ok(client.get(list_url)))
    last = -(-out["list_runs"] // RUNS_PER_PAGE)
    out["list_last_ms"] = _timed(lambda: _ok(client.get(list_url, {"page": last})))
    return dict(out)


def child(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=("sqlite", "postgresql"), required=True)
    p.add_argument("--lengths", required=True)
    p.add_argument("--old-upto", type=int, default=900)
    p.add_argument("--pg-url", default="")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--many", action="store_true")
    p.add_argument("--real-time", type=int, default=0)
    p.add_argument("--no-stress", action="store_true")
    p.add_argument("--planned", type=int, default=0)
    p.add_argument("--live-size", default="")
    p.add_argument("--sample", type=int, default=LIVE_SIZE_SAMPLE_S)
    args = p.parse_args(argv)
    _setup(args.backend, args.pg_url, fresh=not (args.backend == "sqlite" and args.reuse))
    if args.live_size:
        lengths = [int(s) for s in args.live_size.split(",") if s]
        for row in live_size(args.backend, args.pg_url, lengths, args.sample):
            print(json.dumps(row), flush=True)
        return 0
    for seconds in (int(s) for s in args.lengths.split(",") if s):
        row = measure(
            args.backend,
            seconds,
            old=seconds <= args.old_upto,
            pg_url=args.pg_url,
            keep=args.keep,
            reuse=args.reuse,
            real_time=args.real_time,
            stress=not args.no_stress,
            planned=args.planned,
        )
        print(json.dumps(row), flush=True)
    if args.many:
        print(json.dumps({"backend": args.backend, "many": many()}), flush=True)
    return 0


# --------------------------------------------------------------------------------------
# The parent: both backends, the table, the README
# --------------------------------------------------------------------------------------


def _hours(seconds: int) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def render(rows: list[dict], command: str) -> str:
    lines = [
        f"Command: `{command}`. 20 labels, ~1,000 pages/s, one shard, written second by second through",
        "the real `ShardSink`; finalized by the real `run_finalize`. Server times are the best of 3 through",
        "Django's test client; memory is tracemalloc's peak (Python allocations) while computing the figures.",
        "*Old* is the design before issue 9 (every row loaded and merged; tests/portal/runs/reference_analysis.py)",
        "on the same rows, run only on short runs (it needs ~1.35 GB per hour of run).",
        "",
        "| backend | run | B/label-s live | B/label-s stored | sink mean / p99 (alone; polled) | live poll / fragment "
        "| first live load | finalize / roll-up (new) | figures: time / peak MB (new) | figures: time / peak MB (old) "
        "| report | series.json (new / old) | comparison (new / old) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if not any("seconds" in r for r in rows):
        lines = [f"Command: `{command}`."]  # --live-size alone: only its table
    for r in (r for r in rows if "seconds" in r):
        old_fig = f"{r['old_finalize_s']} s / {r['old_finalize_mb']}" if "old_finalize_s" in r else "—"
        old_series = f" / {r['old_series_ms']} ms" if "old_series_ms" in r else ""
        old_cmp = f" / {r['old_compare_ms']} ms (batches only)" if "old_compare_ms" in r else ""
        lines.append(
            f"| {r['backend']} | {_hours(r['seconds'])} | {r['live_bytes_per_label_s']} | "
            f"{r['stored_bytes_per_label_s']} | {r.get('sink_mean_ms', '—')} / {r.get('sink_p99_ms', '—')} ms; "
            f"{r.get('sink_polled_mean_ms', '—')} / {r.get('sink_polled_p99_ms', '—')} ms | "
            f"{r['live_poll_ms']} / {r['live_fragment_ms']} ms | {r['live_first_load_ms']} ms | "
            f"{r['finalize_s']} / {r['rollup_s']} s | {r['figures_s']} s / {r['figures_mb']} | {old_fig} | "
            f"{r['report_ms']} ms | "
            f"{r['series_ms']} ms{old_series} | {r['compare_ms']} ms{old_cmp} |"
        )
    timed = [r for r in rows if "rt_write_s" in r]
    if timed:
        lines += [
            "",
            "Real time (`--real-time`): each run continued one second per wall second (a copy of it, from its",
            f"last second on), with {BROWSERS} browsers polling its chart data (`?since=`) and live fragment every",
            f"{BROWSER_EVERY_S:g} s as the live page does, on and off in alternate {POLL_BLOCK_S} s blocks "
            "(each block's first 5 s not counted).",
            "",
            "| backend | run | sink write mean / p99 / max, no browsers | the same, browsers polling "
            "| poll median / p99 |",
            "|---|---|---|---|---|",
        ]
        for r in timed:
            lines.append(
                f"| {r['backend']} | {_hours(r['seconds'])} | {r.get('rt_sink_mean_ms', '—')} / "
                f"{r.get('rt_sink_p99_ms', '—')} / {r.get('rt_sink_max_ms', '—')} ms | "
                f"{r.get('rt_sink_polled_mean_ms', '—')} / {r.get('rt_sink_polled_p99_ms', '—')} / "
                f"{r.get('rt_sink_polled_max_ms', '—')} ms | {r.get('rt_poll_median_ms', '—')} / "
                f"{r.get('rt_poll_p99_ms', '—')} ms |"
            )
    sized = [r for r in rows if "live_size_s" in r]
    if sized:
        r0 = sized[0]
        lines += [
            "",
            f"Live size (`--live-size`): the interval tables while a run of {LABELS} pages (~{PAGES_PER_S:,} pages/s)"
            f" is live, at its last second; {r0['sample_s']} s written through the real sink (mean "
            f"{r0['sink_mean_ms']} ms a second), repeated in SQL to each length. *Previous*: every per-second row "
            "(the roll-up came after the run). *Now*: after the live roll-up (per-second rows for the last "
            f"{r0['live_rollup_after_s']} s, spans before them that keep each second's pages and durations).",
            "",
            "| backend | run | previous design | now (live roll-up) | now, B/label-s | live roll-up of it all |",
            "|---|---|---|---|---|---|",
        ]
        for r in sized:
            lines.append(
                f"| {r['backend']} | {_hours(r['live_size_s'])} | {r['previous_bytes'] / 1e9:.3f} GB "
                f"({r['previous_bytes'] / (r['live_size_s'] * LABELS):.0f} B/label-s) | "
                f"{r['now_bytes'] / 1e9:.3f} GB | "
                f"{r['now_bytes'] / (r['live_size_s'] * LABELS):.0f} | {r['live_rollup_s']} s |"
            )
    for r in (r for r in rows if "many" in r):
        m = r["many"]
        lines += [
            "",
            f"Many runs ({r['backend']}): a plan's journey with {m['journey_runs']:,} runs "
            f"(summaries of {m['summary_kb']} KB each): page {m['journey_ms']} ms, data {m['journey_json_ms']} ms; "
            f"the runs list at {m['list_runs']:,} runs: "
            f"first page {m['list_first_ms']} ms, last {m['list_last_ms']} ms.",
        ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["child"]:
        return child(argv[1:])
    if argv[:1] == ["poller"]:
        return poller(argv[1:])
    p = argparse.ArgumentParser(prog="python -m bench store", description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="900,3600", help="run lengths in seconds (default 900,3600)")
    p.add_argument("--backends", default="sqlite,postgresql")
    p.add_argument("--old-upto", type=int, default=900, help="run the old design up to this length (default 900 s)")
    p.add_argument("--readme", action="store_true", help="write the table into bench/README.md")
    p.add_argument(
        "--many", action="store_true", help="also time a plan's journey with 2,000 runs and the runs list at 10,000"
    )
    p.add_argument(
        "--keep", action="store_true", help="keep a copy of each length's rows (PostgreSQL, or SQLite with --reuse)"
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="copy the rows an earlier --keep kept instead of writing them again (with the kept write figures)",
    )
    p.add_argument(
        "--real-time",
        type=int,
        default=0,
        metavar="SECONDS",
        help=f"also continue each run for SECONDS in real time, {BROWSERS} browsers polling every "
        f"{BROWSER_EVERY_S:g} s in alternate {POLL_BLOCK_S} s blocks (at least {4 * POLL_BLOCK_S})",
    )
    p.add_argument(
        "--no-stress",
        action="store_true",
        help=f"write without the {POLLERS} browsers polling back to back in alternate blocks (a faster write)",
    )
    p.add_argument(
        "--planned",
        type=int,
        default=0,
        metavar="SECONDS",
        help="plan each run for SECONDS (written only for its --lengths): a live chart's buckets, and so "
        "the rows a poll reads, are those of the planned length (a 48 h plan: 241 s)",
    )
    p.add_argument(
        "--live-size",
        default="",
        metavar="SECONDS,…",
        help="instead: the interval tables' size while a run of each length is live, previous design and "
        "now side by side (e.g. 3600,43200,172800: 1 h, 12 h, a 48 h soak)",
    )
    p.add_argument(
        "--sample",
        type=int,
        default=LIVE_SIZE_SAMPLE_S,
        help=f"with --live-size: seconds written through the sink, then repeated (default {LIVE_SIZE_SAMPLE_S})",
    )
    args = p.parse_args(argv)
    if args.real_time and args.real_time < 4 * POLL_BLOCK_S:
        p.error(f"--real-time needs at least {4 * POLL_BLOCK_S} seconds (two blocks with browsers, two without)")
    pg_url = os.environ.get("DATABASE_URL", "")
    rows = []
    for backend in args.backends.split(","):
        if backend == "postgresql" and not pg_url.startswith("postgres"):
            print("bench store: set DATABASE_URL=postgres://… for the PostgreSQL half", file=sys.stderr)
            return 2
        cmd = [
            sys.executable,
            "-m",
            "bench.store",
            "child",
            "--backend",
            backend,
            "--lengths",
            args.lengths,
            "--old-upto",
            str(args.old_upto),
            "--pg-url",
            pg_url,
            *(["--keep"] if args.keep else []),
            *(["--reuse"] if args.reuse else []),
            *(["--many"] if args.many else []),
            "--real-time",
            str(args.real_time),
            *(["--no-stress"] if args.no_stress else []),
            "--planned",
            str(args.planned),
            *(["--live-size", args.live_size, "--sample", str(args.sample)] if args.live_size else []),
        ]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode:
            print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
            return proc.returncode
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
                print(line, flush=True)
    command = "python -m bench store " + " ".join(argv)
    table = render(rows, command.strip())
    print(table)
    if args.readme:
        text = README.read_text()
        block = f"{MARK_BEGIN}\n{table}\n{MARK_END}"
        if MARK_BEGIN in text:
            head, _, rest = text.partition(MARK_BEGIN)
            text = head + block + rest.partition(MARK_END)[2]
        else:
            text = text.rstrip("\n") + "\n\n### 4. Results store (`python -m bench store`)\n\n" + block + "\n"
        README.write_text(text)
        print(f"bench store: table written to {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
