"""Exact counters of what the demo target served, as JSON and as Prometheus text.

End-to-end tests compare what Plimsoll recorded against these numbers, so
they must be exact: every request outside ``/_demo/`` and ``/metrics`` is
counted once, after its response body has been written, and nothing else is.
Everything runs on the event loop's thread, so plain integers need no lock.
"""

from __future__ import annotations

import resource
from collections import Counter
from typing import Any


class Counters:
    def __init__(self) -> None:
        self.in_flight = 0  # gauges: not zeroed by reset()
        self.token_cache_entries = 0  # kept by demo.tokencache.TokenCache
        self.web_garden_busy = 0  # demo.webgarden: processes holding a work-item request
        self.web_garden_queued = 0  # work-item requests waiting for a process
        self.web_garden_processes = 1
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.by_path: Counter[str] = Counter()
        self.by_status: Counter[str] = Counter()
        self.bytes_sent = 0
        self.service_time_s = 0.0
        # demo.tempdb: allocations, and those that queued for their file's lock
        self.tempdb_allocations = 0
        self.tempdb_lock_waits = 0
        self.tempdb_lock_wait_s = 0.0
        # demo.tokencache: clean-ups of the token cache and the time they held its lock
        self.token_cache_cleanups = 0
        self.token_cache_cleanup_s = 0.0
        # wall-clock time (epoch seconds) the first clean-up that walked the cache began; a
        # clean-up adds to token_cache_cleanup_s only when it ends, up to a second later
        self.token_cache_first_stall_at: float | None = None
        # demo.webgarden: time work-item requests queued for a worker process
        self.web_garden_queue_wait_s = 0.0

    def record(self, path: str, status: int, body_bytes: int, seconds: float) -> None:
        self.requests += 1
        self.by_path[path] += 1
        self.by_status[str(status)] += 1
        self.bytes_sent += body_bytes
        self.service_time_s += seconds

    def snapshot(self) -> dict[str, Any]:
        total_ms = self.service_time_s * 1000
        return {
            "requests": self.requests,
            "by_path": dict(sorted(self.by_path.items())),
            "by_status": dict(sorted(self.by_status.items())),
            "bytes_sent": self.bytes_sent,
            "service_time_ms_total": round(total_ms, 3),
            "service_time_ms_mean": round(total_ms / self.requests, 3) if self.requests else 0.0,
            "in_flight": self.in_flight,
            "tempdb_allocations": self.tempdb_allocations,
            "tempdb_lock_waits": self.tempdb_lock_waits,
            "tempdb_lock_wait_ms_total": round(self.tempdb_lock_wait_s * 1000, 3),
            "token_cache_entries": self.token_cache_entries,
            "token_cache_cleanups": self.token_cache_cleanups,
            "token_cache_cleanup_ms_total": round(self.token_cache_cleanup_s * 1000, 3),
            "token_cache_first_stall_at": self.token_cache_first_stall_at,
            "web_garden_processes": self.web_garden_processes,
            "web_garden_busy": self.web_garden_busy,
            "web_garden_queued": self.web_garden_queued,
            "web_garden_queue_wait_ms_total": round(self.web_garden_queue_wait_s * 1000, 3),
        }


def cpu_seconds() -> tuple[float, float]:
    """(user, system) CPU seconds used by this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(counters: Counters, knobs: dict[str, Any], sessions: int) -> str:
    """Render the counters in the Prometheus text exposition format (0.0.4)."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, Any]]) -> None:
        lines.append(f"# HELP demo_{name} {help_text}")
        lines.append(f"# TYPE demo_{name} {kind}")
        lines.extend(f"demo_{name}{labels} {value}" for labels, value in samples)

    user, system = cpu_seconds()
    metric(
        "requests_total",
        "counter",
        "Requests served, excluding /_demo/ and /metrics.",
        [("", counters.requests)],
    )
    metric(
        "requests_by_path_total",
        "counter",
        "Requests served per route template.",
        [(f'{{path="{_label(p)}"}}', n) for p, n in sorted(counters.by_path.items())],
    )
    metric(
        "responses_by_status_total",
        "counter",
        "Responses per HTTP status code.",
        [(f'{{status="{s}"}}', n) for s, n in sorted(counters.by_status.items())],
    )
    metric(
        "response_body_bytes_total",
        "counter",
        "Response body bytes as sent (after compression).",
        [("", counters.bytes_sent)],
    )
    metric(
        "service_time_seconds_total",
        "counter",
        "Sum of service times, from the request reaching the app to its body written.",
        [("", f"{counters.service_time_s:.6f}")],
    )
    metric(
        "in_flight_requests",
        "gauge",
        "Requests being served now (the queue length).",
        [("", counters.in_flight)],
    )
    metric(
        "process_cpu_seconds_total",
        "counter",
        "CPU seconds used by the demo target process.",
        [('{mode="user"}', f"{user:.6f}"), ('{mode="system"}', f"{system:.6f}")],
    )
    metric(
        "tempdb_allocations_total",
        "counter",
        'Allocations from the shared "tempdb files" by pages that do database work.',
        [("", counters.tempdb_allocations)],
    )
    metric(
        "tempdb_lock_waits_total",
        "counter",
        "Allocations that queued for their tempdb file's lock.",
        [("", counters.tempdb_lock_waits)],
    )
    metric(
        "tempdb_lock_wait_seconds_total",
        "counter",
        "Time spent queuing for tempdb file locks.",
        [("", f"{counters.tempdb_lock_wait_s:.6f}")],
    )
    metric(
        "token_cache_entries",
        "gauge",
        "Entries in the security-token cache.",
        [("", counters.token_cache_entries)],
    )
    metric(
        "token_cache_cleanups_total",
        "counter",
        "Clean-ups of the security-token cache.",
        [("", counters.token_cache_cleanups)],
    )
    metric(
        "token_cache_cleanup_seconds_total",
        "counter",
        "Time clean-ups held the token cache's lock (every page waits meanwhile).",
        [("", f"{counters.token_cache_cleanup_s:.6f}")],
    )
    metric(
        "web_garden_processes",
        "gauge",
        "Worker processes of the web garden behind /workitems/{id} (simulated; the web_garden.processes knob).",
        [("", counters.web_garden_processes)],
    )
    metric(
        "web_garden_busy_processes",
        "gauge",
        "Web-garden processes holding a work-item request now.",
        [("", counters.web_garden_busy)],
    )
    metric(
        "web_garden_queued_requests",
        "gauge",
        "Work-item requests waiting for a web-garden process now.",
        [("", counters.web_garden_queued)],
    )
    metric(
        "web_garden_queue_wait_seconds_total",
        "counter",
        "Time work-item requests spent waiting for a web-garden process.",
        [("", f"{counters.web_garden_queue_wait_s:.6f}")],
    )
    metric("sessions", "gauge", "Login sessions held in memory.", [("", sessions)])
    metric(
        "knob_info",
        "gauge",
        "Current value of each configuration knob (always 1).",
        [(f'{{knob="{_label(k)}",value="{_label(str(v))}"}}', 1) for k, v in knobs.items()],
    )
    return "\n".join(lines) + "\n"
