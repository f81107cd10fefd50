"""Plimsoll's own ``/metrics``: live runs in Prometheus text, so a team's Grafana charts a run
beside its servers (issue 29).

What a scrape reads is bounded by the active runs, their shards and labels, never by a run's
length: the shards' running totals from their last row, and each label's pages, hits, errors
and durations over the last WINDOW_S complete seconds. Counters are the shards' running totals
(Prometheus' ``rate()`` turns them into pages/s); the per-label figures are gauges over the
window, because per-label totals are not kept while a run is live.

Reached with ``Authorization: Bearer <PLIMSOLL_METRICS_TOKEN>``, or without a token from an
address in PLIMSOLL_METRICS_ALLOW (loopback by default): the figures name every team's plans.
"""

from __future__ import annotations

import hmac
import ipaddress
import math

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .models import Run
from .results import protocols, read

# The per-label gauges cover this many complete seconds before the newest one (which a shard
# may still be writing); a shard silent for longer than LAST_ROW_S is the watchdog's to judge.
WINDOW_S = 10
LAST_ROW_S = 30
RUN_LABELS = ["team", "project", "plan", "run"]


def _run_labels(run: Run) -> list[str]:
    return [run.project.team.name, run.project.name, run.plan_name, str(run.number)]


def collect() -> list:
    """The metric families of one scrape (plain function: the view and the tests call it)."""
    now = timezone.now()
    by_status = dict(Run.objects.filter(status__in=Run.ACTIVE).values_list("status").annotate(n=Count("id")))
    runs_gauge = GaugeMetricFamily("plimsoll_runs", "Runs by status, active ones only", labels=["status"])
    for status in Run.ACTIVE:
        runs_gauge.add_metric([status], by_status.get(status, 0))

    users = GaugeMetricFamily("plimsoll_run_active_users", "Virtual users running now", labels=RUN_LABELS)
    pages = CounterMetricFamily("plimsoll_run_pages", "Pages completed so far", labels=RUN_LABELS)
    errors = CounterMetricFamily("plimsoll_run_errors", "Pages that failed so far", labels=RUN_LABELS)
    # A summary without quantiles: its _sum and _count, so that APD = rate(_sum) / rate(_count).
    duration = SummaryMetricFamily(
        "plimsoll_run_page_duration_seconds", "Page durations so far (APD = rate(sum) / rate(count))", labels=RUN_LABELS
    )
    label_names = [*RUN_LABELS, "label"]
    w = f"over the last {WINDOW_S} complete seconds"
    pages_s = GaugeMetricFamily("plimsoll_page_pages_per_second", f"Pages per second {w}", labels=label_names)
    hits_s = GaugeMetricFamily("plimsoll_page_hits_per_second", f"Requests per second {w}", labels=label_names)
    errors_s = GaugeMetricFamily("plimsoll_page_errors_per_second", f"Failed pages per second {w}", labels=label_names)
    apd = GaugeMetricFamily("plimsoll_page_apd_seconds", f"Average page duration {w}", labels=label_names)
    live_protocols = protocols.LiveGauges(label_names, w)  # streams and WebSocket sessions (issue 26)

    running = (
        Run.objects.filter(status__in=[Run.Status.RUNNING, Run.Status.CANCELLING], start_at__lte=now)
        .select_related("project__team")
        .order_by("id")
    )
    for run in running:
        labels = _run_labels(run)
        current = math.floor((now - run.start_at).total_seconds())
        last = read.shards_last_rows(run, since=current - LAST_ROW_S)
        users.add_metric(labels, sum(r["active_users"] for r in last.values()))
        pages.add_metric(labels, sum(r["pages_total"] for r in last.values()))
        errors.add_metric(labels, sum(r["errors_total"] for r in last.values()))
        duration.add_metric(
            labels,
            count_value=sum(r["latency_count_total"] or 0 for r in last.values()),
            sum_value=sum(r["latency_sum_total"] or 0 for r in last.values()) / 1e6,
        )

        newest = max((r["second"] for r in last.values()), default=None)
        if newest is None:
            continue
        lo, hi = newest - WINDOW_S, newest - 1  # complete seconds: the newest may still be written
        sums = read.label_sums(run, lo=lo, hi=hi)
        for label, (n_pages, n_hits, n_errors, total_us, count) in sorted(sums.items()):
            key = [*labels, label]
            pages_s.add_metric(key, n_pages / WINDOW_S)
            hits_s.add_metric(key, n_hits / WINDOW_S)
            errors_s.add_metric(key, n_errors / WINDOW_S)
            if count:
                apd.add_metric(key, total_us / count / 1e6)
        live_protocols.add(run, labels, lo, hi, WINDOW_S)
    # Generator capacity (issue 25): each pool's registered slots and the shards running on them.
    from .services.admission import pool_overview

    slots = GaugeMetricFamily("plimsoll_pool_slots", "Engine slots of the live workers, by pool", labels=["pool"])
    busy = GaugeMetricFamily("plimsoll_pool_slots_used", "Slots running a shard now, by pool", labels=["pool"])
    for pool in pool_overview()["pools"]:
        slots.add_metric([pool["pool"] or "default"], pool["slots"])
        busy.add_metric([pool["pool"] or "default"], pool["used"])
    return [runs_gauge, slots, busy, users, pages, errors, duration, pages_s, hits_s, errors_s, apd, *live_protocols]


class _Collector:
    def collect(self):
        yield from collect()


def _allowed(request: HttpRequest) -> bool:
    token = settings.PLIMSOLL_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header.removeprefix("Bearer ").encode(), token.encode())
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in settings.PLIMSOLL_METRICS_ALLOW)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        return HttpResponse(
            "Plimsoll's metrics need the bearer token PLIMSOLL_METRICS_TOKEN, or a scrape from an address "
            "in PLIMSOLL_METRICS_ALLOW.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
