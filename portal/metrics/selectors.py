"""Reads of a run's server metrics: the chart series, per-window figures, gaps and hints."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from portal.runs.models import Run
from portal.runs.results import read
from portal.runs.summary import RunSummary
from portal.telemetry.countersets import COUNTER_SETS
from portal.telemetry.exposition import figures

from . import hints as hint_rules
from .models import MetricCollection, ServerSample
from .payloads import RunServers, ServersChart


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _stats(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "p95": None, "max": None, "n": 0}
    return {
        "mean": round(statistics.fmean(values), 2),
        "p95": round(_p95(values), 2),
        "max": round(max(values), 2),
        "n": len(values),
    }


def _windows(run: Run) -> list[dict]:
    summary_windows = RunSummary.of(run).windows
    if summary_windows:
        return [{"label": w["label"], "start": w["start"], "end": w["end"]} for w in summary_windows]
    return [{"label": label, "start": start, "end": end} for start, end, label in run.measurement_windows]


def _moments(kind: str, offsets: list[float], i: int) -> float:
    """When figure ``i`` was true: at its scrape (gauges), or the middle of the interval it covers (rates)."""
    if kind in ("gauge", "fraction") or i == 0:
        return offsets[i]
    return (offsets[i - 1] + offsets[i]) / 2


LOST_ROUNDS = "no scrape: the collector was lost (its worker stopped) until the watchdog restarted it"


def _gaps(samples: list[ServerSample], interval: int) -> list[dict]:
    """Consecutive failed scrapes as one gap each, with its reason shown once; missed rounds too."""
    gaps: list[dict] = []
    for before, s in zip([None, *samples], samples, strict=False):
        if before is not None and s.tick > before.tick + 1:
            missed = s.tick - before.tick - 1
            gaps.append(
                {
                    "from": before.offset_s + interval,
                    "to": s.offset_s - interval,
                    "last_tick": s.tick - 1,
                    "scrapes": missed,
                    "reason": LOST_ROUNDS,
                }
            )
        if s.values is not None:
            continue
        last = gaps[-1] if gaps else None
        if last and last["reason"] == s.error and s.tick == last["last_tick"] + 1:
            last["to"], last["last_tick"], last["scrapes"] = s.offset_s, s.tick, last["scrapes"] + 1
        else:
            gaps.append({"from": s.offset_s, "to": s.offset_s, "last_tick": s.tick, "scrapes": 1, "reason": s.error})
    for g in gaps:
        g["from"], g["to"] = round(g["from"]), round(g["to"] + interval)
        del g["last_tick"]
    return gaps


def run_servers(run: Run) -> RunServers | None:
    """Everything the Servers section shows, or None when the run scraped no server."""
    collection = MetricCollection.objects.filter(run=run).first()
    if collection is None:
        return None
    by_server: dict[int, list[ServerSample]] = defaultdict(list)
    for s in ServerSample.objects.filter(run=run).order_by("tick"):
        by_server[s.server_id].append(s)
    windows = _windows(run)
    servers = []
    for source in collection.servers:
        counter_set = COUNTER_SETS.get(source["counter_set"])
        if counter_set is None:
            continue
        samples = by_server.get(source["id"], [])
        offsets = [s.offset_s for s in samples]
        values = figures(counter_set, [(s.offset_s, s.values) for s in samples])
        series = []
        for sr in counter_set.series:
            ys = values[sr.key]
            if all(v is None for v in ys):
                continue  # the exporter does not expose it: no empty rows
            at = [round(_moments(sr.kind, offsets, i), 2) for i in range(len(ys))]
            series.append(
                {
                    "key": sr.key,
                    "name": sr.name,
                    "unit": sr.unit,
                    "main": sr.key in counter_set.main,
                    "cpu": sr.key == counter_set.cpu,
                    "t": at,
                    "values": ys,
                    "windows": [
                        _stats(
                            [v for t, v in zip(at, ys, strict=True) if v is not None and w["start"] <= t <= w["end"]]
                        )
                        for w in windows
                    ],
                }
            )
        servers.append(
            {
                "id": source["id"],
                "name": source["name"],
                "role": source.get("role", ""),
                # where the figures came from: the scraped endpoint, or the Prometheus and the server's labels there
                "url": source["url"] or f"{source.get('prometheus', '')} {{{source.get('selector', '')}}}".strip(),
                "counter_set": counter_set.name,
                "scrapes": len(samples),
                "good_scrapes": sum(1 for s in samples if s.values is not None),
                "gaps": _gaps(samples, collection.interval_s),
                "series": series,
            }
        )
    return {
        "interval_s": collection.interval_s,
        "windows": windows,
        "servers": servers,
        "restarts": collection.restarts,
        "hints": [h.__dict__ for h in run_hints(run, servers, windows)],
    }


def run_servers_chart(run: Run) -> ServersChart:
    """``servers.json``: the Servers section's data (empty without a scraped server) for the run page's charts,
    which fetch it again every few seconds while the run is active."""
    data = run_servers(run) or {"servers": [], "windows": [], "hints": []}
    return {**data, "active": run.is_active, "duration_s": run.planned_duration}


def _pages_per_second(run: Run) -> dict[int, int]:
    return read.pages_per_second(run)


def run_hints(run: Run, servers: list[dict], windows: list[dict]) -> list:
    """The bottleneck hints of a finished run (none while it runs: the knee is not known yet)."""
    summary = RunSummary.of(run)
    if not summary:
        return []
    # A generator that lagged a few seconds puts its p99 in doubt (the report says so), but was not the limit.
    out = list(hint_rules.generator_hint(summary.saturated if summary.saturation_sustained else None))
    capacity = summary.capacity
    if capacity.get("analysed"):
        labels = [w["label"] for w in windows]
        levels = sorted(capacity["levels"], key=lambda lv: lv["users"])
        cpu_by_server = {}
        for server in servers:
            cpu = next((s for s in server["series"] if s["cpu"]), None)
            if cpu is None:
                continue
            by_label = dict(zip(labels, cpu["windows"], strict=True))
            cpu_by_server[server["name"]] = [(by_label.get(lv["label"]) or {}).get("mean") for lv in levels]
        out += hint_rules.knee_hints(
            knee_users=capacity.get("knee_users"),
            level_users=[lv["users"] for lv in levels],
            cpu_by_server=cpu_by_server,
            generator_saturated=summary.saturated,
        )
    elif len(windows) == 1:
        w = windows[0]
        pages = _pages_per_second(run)
        for server in servers:
            candidates = [s for s in server["series"] if not s["cpu"]]
            if not candidates:
                continue
            # Throughput over the same scrape intervals as the server's series.
            ref = candidates[0]["t"]
            keep = [i for i, t in enumerate(ref) if w["start"] <= t <= w["end"]]
            throughput = []
            for i in keep:
                lo, hi = (ref[i - 1] if i else ref[i] - 1), ref[i]
                span = range(math.floor(lo), max(math.floor(lo) + 1, math.floor(hi)))
                throughput.append(sum(pages.get(s, 0) for s in span) / len(span))
            named = {
                f"{server['name']}: {s['name']}": [s["values"][i] for i in keep]
                for s in candidates
                if len(s["values"]) == len(ref)
            }
            out += hint_rules.growing_series_hints(throughput=throughput, series=named)
    return out


def prometheus_problems(environment) -> list[str]:
    """What went wrong reading the environment's Prometheus in its latest run that read it (for its page)."""
    servers = {s.id: s.name for s in environment.servers.all() if environment.prometheus_url and s.prometheus_selector}
    if not servers:
        return []
    latest = (
        ServerSample.objects.filter(run__environment=environment, server_id__in=servers)
        .order_by("-run__start_at", "-run_id")
        .values_list("run_id", "run__number")
        .first()
    )
    if latest is None:
        return []
    run_id, number = latest
    rows = ServerSample.objects.filter(run_id=run_id, server_id__in=servers).order_by("tick")
    reasons: dict[int, tuple[str, int]] = {}
    for server_id, error in rows.values_list("server_id", "error"):
        if error:
            reasons[server_id] = (error, reasons.get(server_id, ("", 0))[1] + 1)
    return [
        f"Run #{number}, server “{servers[sid]}”: {count} reading{'s' if count != 1 else ''} from Prometheus "
        f"failed; the last: {reason}"
        for sid, (reason, count) in reasons.items()
    ]
