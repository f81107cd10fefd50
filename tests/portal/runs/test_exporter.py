"""Plimsoll's own /metrics (issue 29): what a Prometheus scrape reads of live runs, written by the real sink."""

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.runs import services
from portal.runs.exporter import WINDOW_S
from portal.runs.models import Run, RunShard
from tests.portal.runs.factories import plan_run
from workers.engine.histogram import Histogram

pytestmark = pytest.mark.django_db

LABELS = ["Home", "Search"]


def _write(run, seconds: int, *, shards: int = 2, seed: int = 3):
    """Writes ``seconds`` seconds of each shard through the real sink; returns what was written, per shard."""
    run.status = Run.Status.RUNNING
    run.start_at = timezone.now() - timedelta(seconds=seconds, milliseconds=500)
    run.shard_count = shards
    run.save()
    rng = random.Random(seed)
    written = []
    for n in range(shards):
        RunShard.objects.create(run=run, shard_no=n, user_count=3, status=RunShard.Status.RUNNING)
        sink = services.ShardSink(run.id, n)
        for second in range(seconds):
            labels = {}
            for i, label in enumerate(LABELS):
                pages = rng.randint(1, 9)
                errors = rng.randint(0, 1)
                hist = Histogram()
                for _ in range(pages - errors):
                    hist.record(rng.lognormvariate(0, 0.4) * 30_000 * (i + 1))
                labels[label] = {
                    "pages": pages,
                    "hits": 2 * pages,
                    "errors": errors,
                    "errors_by_kind": {"http_status": errors} if errors else {},
                    "bytes_in": 1000 * pages,
                    "hist": hist.to_dict(),
                }
            report = {"second": second, "active_users": 3 + n, "iterations_completed": 1, "labels": labels}
            sink(report)
            written.append((n, second, labels))
    return written


def _scrape(client, **extra) -> dict:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples[(s.name, s.labels.get("label"), s.labels.get("status"))] = s.value
    return samples


def test_a_scrape_reports_a_live_run_as_its_shards_wrote_it(client, run):
    written = _write(run, 40)

    samples = _scrape(client)

    # then: the counters are the whole run's, from the shards' running totals
    pages = sum(stats["pages"] for _, _, labels in written for stats in labels.values())
    errors = sum(stats["errors"] for _, _, labels in written for stats in labels.values())
    hists = [Histogram.from_dict(stats["hist"]) for _, _, labels in written for stats in labels.values()]
    assert samples[("plimsoll_run_pages_total", None, None)] == pages
    assert samples[("plimsoll_run_errors_total", None, None)] == errors
    assert samples[("plimsoll_run_page_duration_seconds_count", None, None)] == sum(h.count for h in hists)
    assert samples[("plimsoll_run_page_duration_seconds_sum", None, None)] == pytest.approx(
        sum(h.sum for h in hists) / 1e6
    )
    assert samples[("plimsoll_run_active_users", None, None)] == 3 + 4  # the shards' last seconds
    assert samples[("plimsoll_runs", None, "running")] == 1
    # and: each label's gauges are over the last complete seconds (39 may still be written: 29–38)
    for label in LABELS:
        window = [labels[label] for _, second, labels in written if 39 - WINDOW_S <= second <= 38]
        assert samples[("plimsoll_page_pages_per_second", label, None)] == sum(w["pages"] for w in window) / WINDOW_S
        assert samples[("plimsoll_page_hits_per_second", label, None)] == sum(w["hits"] for w in window) / WINDOW_S
        assert samples[("plimsoll_page_errors_per_second", label, None)] == sum(w["errors"] for w in window) / WINDOW_S
        merged = Histogram()
        for w in window:
            merged.merge(Histogram.from_dict(w["hist"]))
        assert samples[("plimsoll_page_apd_seconds", label, None)] == pytest.approx(merged.mean / 1e6)


def test_a_scrape_reads_as_much_of_a_long_run_as_of_a_short_one(client, run, plan, alice):
    _write(run, 30)
    with CaptureQueriesContext(connection) as short:
        _scrape(client)
    run.status = Run.Status.PASSED
    run.save()
    long_run = plan_run(plan, number=2, created_by=alice, start_at=None)
    _write(long_run, 300)

    with CaptureQueriesContext(connection) as long:
        _scrape(client)

    assert len(long.captured_queries) == len(short.captured_queries)
    rows = [q["sql"] for q in long.captured_queries if "runs_pageinterval" in q["sql"]]
    assert rows and all("second" in sql for sql in rows)  # a window of seconds, never the whole run


def test_the_metrics_need_the_token_or_an_allowed_address(client, settings, run):
    _write(run, 5)
    settings.PLIMSOLL_METRICS_TOKEN = "s3cret-token-for-grafana"

    assert client.get("/metrics", REMOTE_ADDR="192.0.2.7").status_code == 403
    wrong = client.get("/metrics", REMOTE_ADDR="192.0.2.7", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 403 and b"plimsoll_" not in wrong.content
    samples = _scrape(client, REMOTE_ADDR="192.0.2.7", HTTP_AUTHORIZATION="Bearer s3cret-token-for-grafana")
    assert samples[("plimsoll_runs", None, "running")] == 1
    assert _scrape(client)[("plimsoll_runs", None, "running")] == 1  # loopback, the default allowlist
    assert client.post("/metrics").status_code == 405


def test_the_pools_slots_and_their_use_are_exported(client, run):
    from portal.runs.models import GeneratorWorker

    now = timezone.now()
    GeneratorWorker.objects.create(
        node="engine@a", host="a", slots=4, queues=["engine"], started_at=now, heartbeat_at=now
    )
    GeneratorWorker.objects.create(
        node="engine@b", host="b", slots=2, queues=["engine"], started_at=now, heartbeat_at=now - timedelta(hours=1)
    )  # silent for an hour: not counted
    _write(run, 5, shards=2)

    samples = _scrape(client)

    assert samples[("plimsoll_pool_slots", None, None)] == 4
    assert samples[("plimsoll_pool_slots_used", None, None)] == 2
