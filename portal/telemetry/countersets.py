"""Counter sets: which of a server's Prometheus series to keep, with a friendly name and unit.

A counter set is code, not data: each one knows the metric names of one exporter
(node_exporter, windows_exporter, postgres_exporter, the demo target) and how to turn
them into figures a performance engineer reads (CPU % busy, batch requests/s, lock
waits/s). A series sums every sample of its metric whose labels match (``labels``: all
of them must equal; ``exclude``: none may), so "CPU busy" is every mode except idle.
Its kind says how the stored raw values become a figure:

* ``rate``: a counter; per second between two scrapes, times ``scale``;
* ``gauge``: as it is, times ``scale``;
* ``ratio``: 100 × Δmetric / Δ(denominator metrics) between two scrapes (a hit ratio of counters);
* ``fraction``: 100 × metric / denominator at each scrape (a ratio the exporter keeps as two raw values);
* ``used``: (denominator − metric) × ``scale`` at each scrape (memory used = total − available).

Stored samples hold a counter set's values by position (every series, then the denominators):
a series is only ever added at the end of a counter set, and only to one without a denominator
yet (after the first denominator, a new series would shift where the stored ones are read).

``per`` names a label whose distinct values divide the sum (CPU seconds over every core
→ the share of the whole machine). No Django here: the collector and the tests use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Series:
    key: str
    name: str
    unit: str
    metric: tuple[str, ...]
    kind: str = "rate"  # rate | gauge | ratio | fraction | used
    labels: dict[str, str] = field(default_factory=dict)
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)
    scale: float = 1.0
    per: str | None = None
    denominator: tuple[str, ...] = ()


@dataclass(frozen=True)
class CounterSet:
    key: str
    name: str
    description: str
    series: tuple[Series, ...]
    main: tuple[str, ...]  # drawn on the run page's chart; every series is in the tables
    cpu: str | None = None  # the series that says how busy the CPU was (for the hints)

    def get(self, key: str) -> Series | None:
        return next((s for s in self.series if s.key == key), None)


def _s(key, name, unit, metric, kind="rate", **kw) -> Series:
    return Series(key, name, unit, (metric,) if isinstance(metric, str) else tuple(metric), kind, **kw)


LINUX = CounterSet(
    "linux",
    "Linux host (node_exporter)",
    "CPU busy by mode, load, memory, disk and network of a Linux machine from node_exporter (port 9100).",
    (
        _s("cpu", "CPU busy", "%", "node_cpu_seconds_total", exclude={"mode": ("idle",)}, scale=100, per="cpu"),
        _s("cpu_user", "CPU user", "%", "node_cpu_seconds_total", labels={"mode": "user"}, scale=100, per="cpu"),
        _s("cpu_system", "CPU system", "%", "node_cpu_seconds_total", labels={"mode": "system"}, scale=100, per="cpu"),
        _s("cpu_iowait", "CPU iowait", "%", "node_cpu_seconds_total", labels={"mode": "iowait"}, scale=100, per="cpu"),
        _s("load1", "Load (1 min)", "", "node_load1", "gauge"),
        _s("mem_available", "Memory available", "MB", "node_memory_MemAvailable_bytes", "gauge", scale=1e-6),
        _s("disk_read", "Disk reads", "MB/s", "node_disk_read_bytes_total", scale=1e-6),
        _s("disk_written", "Disk writes", "MB/s", "node_disk_written_bytes_total", scale=1e-6),
        _s("disk_busy", "Disk busy (all disks)", "%", "node_disk_io_time_seconds_total", scale=100),
        _s(
            "net_rx",
            "Network received",
            "MB/s",
            "node_network_receive_bytes_total",
            exclude={"device": ("lo",)},
            scale=1e-6,
        ),
        _s(
            "net_tx",
            "Network sent",
            "MB/s",
            "node_network_transmit_bytes_total",
            exclude={"device": ("lo",)},
            scale=1e-6,
        ),
        # Last, so the raw values of runs stored before it keep their positions.
        _s(
            "mem_used",
            "Memory used",
            "MB",
            "node_memory_MemAvailable_bytes",
            "used",
            denominator=("node_memory_MemTotal_bytes",),
            scale=1e-6,
        ),
    ),
    main=("cpu", "disk_busy"),
    cpu="cpu",
)

WINDOWS = CounterSet(
    "windows",
    "Windows host + IIS + SQL Server (windows_exporter)",
    "CPU, memory, disk, IIS requests and SQL Server counters from windows_exporter (port 9182) with the "
    "cpu, memory, logical_disk, iis and mssql collectors enabled.",
    (
        _s("cpu", "CPU busy", "%", "windows_cpu_time_total", exclude={"mode": ("idle",)}, scale=100, per="core"),
        _s("mem_available", "Memory available", "MB", "windows_memory_available_bytes", "gauge", scale=1e-6),
        _s("disk_read", "Disk reads", "MB/s", "windows_logical_disk_read_bytes_total", scale=1e-6),
        _s("disk_written", "Disk writes", "MB/s", "windows_logical_disk_write_bytes_total", scale=1e-6),
        _s("iis_requests", "IIS requests", "/s", "windows_iis_requests_total"),
        _s("iis_connections", "IIS connections", "", "windows_iis_current_connections", "gauge"),
        _s("sql_batches", "SQL batch requests", "/s", "windows_mssql_sqlstats_batch_requests"),
        _s("sql_lock_waits", "SQL lock waits", "/s", "windows_mssql_locks_lock_waits"),
        _s("sql_deadlocks", "SQL deadlocks", "/s", "windows_mssql_locks_deadlocks"),
        _s(
            "sql_buffer_hit",
            "Buffer cache hit ratio",
            "%",
            "windows_mssql_bufman_buffer_cache_hits",
            "fraction",
            denominator=("windows_mssql_bufman_buffer_cache_lookups",),
        ),
        _s("sql_connections", "SQL user connections", "", "windows_mssql_genstats_user_connections", "gauge"),
    ),
    main=("cpu", "sql_batches", "sql_lock_waits"),
    cpu="cpu",
)

POSTGRES = CounterSet(
    "postgres",
    "PostgreSQL (postgres_exporter)",
    "Transactions, locks, deadlocks and cache hits from postgres_exporter (port 9187).",
    (
        _s("tps", "Transactions", "/s", ("pg_stat_database_xact_commit", "pg_stat_database_xact_rollback")),
        _s("rollbacks", "Rollbacks", "/s", "pg_stat_database_xact_rollback"),
        _s("locks", "Locks held", "", "pg_locks_count", "gauge"),
        _s("deadlocks", "Deadlocks", "/s", "pg_stat_database_deadlocks"),
        _s(
            "cache_hit",
            "Cache hit ratio",
            "%",
            "pg_stat_database_blks_hit",
            "ratio",
            denominator=("pg_stat_database_blks_hit", "pg_stat_database_blks_read"),
        ),
        _s("connections", "Connections", "", "pg_stat_database_numbackends", "gauge"),
        _s("temp_bytes", "Temp files written", "MB/s", "pg_stat_database_temp_bytes", scale=1e-6),
    ),
    main=("tps", "locks"),
)

DEMO = CounterSet(
    "demo",
    "Plimsoll demo target",
    "The bundled demo target's /metrics: its process CPU, requests, tempdb lock waits, token cache and web garden.",
    (
        _s("cpu", "Process CPU (of one core)", "%", "demo_process_cpu_seconds_total", scale=100),
        _s("requests", "Requests", "/s", "demo_requests_total"),
        _s("in_flight", "Requests in flight", "", "demo_in_flight_requests", "gauge"),
        _s("tempdb_lock_waits", "tempdb lock waits", "/s", "demo_tempdb_lock_waits_total"),
        _s("token_cache", "Token cache entries", "", "demo_token_cache_entries", "gauge"),
        _s(
            "token_cache_cleanups",
            "Token cache clean-up time",
            "ms/s",
            "demo_token_cache_cleanup_seconds_total",
            scale=1000,
        ),
        _s("web_garden_busy", "Web-garden processes busy", "", "demo_web_garden_busy_processes", "gauge"),
        _s("web_garden_queued", "Work-item requests queued", "", "demo_web_garden_queued_requests", "gauge"),
    ),
    main=("cpu", "requests"),
    cpu="cpu",
)

COUNTER_SETS: dict[str, CounterSet] = {cs.key: cs for cs in (LINUX, WINDOWS, POSTGRES, DEMO)}
CHOICES = [(cs.key, cs.name) for cs in COUNTER_SETS.values()]
