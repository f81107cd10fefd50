"""Counter sets, the exposition parser and the bottleneck hints: plain functions, synthetic inputs.

The hints are tested on both sides: each fires on its story and stays quiet on the cases
that look alike but are not (a plateau at high CPU, a busy generator, a cache that grows
while throughput holds, a noisy series).
"""

import pytest

from portal.metrics.hints import generator_hint, growing_series_hints, knee_hints
from portal.telemetry.countersets import COUNTER_SETS, DEMO, LINUX, POSTGRES, WINDOWS
from portal.telemetry.exposition import ExpositionError, extract, figures

NODE = """# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.
# TYPE node_cpu_seconds_total counter
node_cpu_seconds_total{cpu="0",mode="idle"} %(idle0)s
node_cpu_seconds_total{cpu="0",mode="user"} %(user0)s
node_cpu_seconds_total{cpu="0",mode="system"} 10
node_cpu_seconds_total{cpu="1",mode="idle"} %(idle1)s
node_cpu_seconds_total{cpu="1",mode="user"} %(user1)s
node_cpu_seconds_total{cpu="1",mode="system"} 10
# TYPE node_load1 gauge
node_load1 1.5
# TYPE node_network_receive_bytes_total counter
node_network_receive_bytes_total{device="lo"} 999999999
node_network_receive_bytes_total{device="eth0"} %(rx)s
"""


def node(idle0, user0, idle1, user1, rx):
    return NODE % {"idle0": idle0, "user0": user0, "idle1": idle1, "user1": user1, "rx": rx}


def test_counter_sets_cover_the_four_sources_and_name_their_main_series():
    assert set(COUNTER_SETS) == {"linux", "windows", "postgres", "demo"}
    for cs in COUNTER_SETS.values():
        keys = {s.key for s in cs.series}
        assert set(cs.main) <= keys and (cs.cpu is None or cs.cpu in keys)
        assert all(s.kind in ("rate", "gauge", "ratio", "fraction", "used") for s in cs.series)
    windows = {s.name for s in WINDOWS.series}
    assert {"SQL batch requests", "SQL lock waits", "Buffer cache hit ratio", "SQL user connections"} <= windows
    assert {"Transactions", "Locks held", "Deadlocks", "Cache hit ratio"} <= {s.name for s in POSTGRES.series}


def test_node_cpu_busy_is_the_share_of_all_cores_and_loopback_is_left_out():
    # 5 s apart: core 0 busy 2.5 s of 5 (50 %), core 1 busy 0.5 s of 5 (10 %): the machine 30 % busy
    first = extract(node(100, 50, 100, 50, 1_000_000), LINUX)
    second = extract(node(102.5, 52.5, 104.5, 50.5, 6_000_000), LINUX)
    out = figures(LINUX, [(0.0, first), (5.0, second)])
    assert out["cpu"] == [None, pytest.approx(30.0)]
    assert out["cpu_user"] == [None, pytest.approx(30.0)]
    assert out["load1"] == [1.5, 1.5]  # a gauge as it is
    assert out["net_rx"] == [None, pytest.approx(1.0)]  # 5 MB in 5 s; lo's 999 MB not counted
    assert out["disk_busy"] == [None, None]  # not exposed: no figure rather than zero


def test_memory_used_is_total_minus_available_and_rows_stored_before_it_still_read():
    memory = (
        "# TYPE node_memory_MemTotal_bytes gauge\nnode_memory_MemTotal_bytes 8e9\n"
        "# TYPE node_memory_MemAvailable_bytes gauge\nnode_memory_MemAvailable_bytes %s\n"
    )
    out = figures(LINUX, [(0.0, extract(memory % 6e9, LINUX)), (5.0, extract(memory % 5.5e9, LINUX))])
    assert out["mem_used"] == [pytest.approx(2000.0), pytest.approx(2500.0)]  # MB
    assert out["mem_available"] == [pytest.approx(6000.0), pytest.approx(5500.0)]
    # a run scraped before "Memory used" existed stored one value fewer and no denominator
    old = extract(node(100, 50, 100, 50, 1000), LINUX)[: len(LINUX.series) - 1]
    newer = extract(node(102.5, 52.5, 102.5, 52.5, 2000), LINUX)[: len(LINUX.series) - 1]
    out = figures(LINUX, [(0.0, old), (5.0, newer)])
    assert out["mem_used"] == [None, None] and out["cpu"] == [None, pytest.approx(50.0)]


def test_a_gap_or_a_counter_reset_gives_no_rate_rather_than_a_wrong_one():
    a = extract(node(100, 50, 100, 50, 1000), LINUX)
    b = extract(node(105, 50, 105, 50, 2000), LINUX)
    reset = extract(node(1, 1, 1, 1, 10), LINUX)
    out = figures(LINUX, [(0.0, a), (5.0, None), (10.0, b), (15.0, reset)])
    assert out["net_rx"] == [None, None, None, None]
    assert out["load1"] == [1.5, None, 1.5, 1.5]


def test_ratios_of_counters_and_fractions_kept_by_the_exporter():
    pg = '# TYPE pg_stat_database_blks_hit counter\npg_stat_database_blks_hit{datname="a"} %s\n' + (
        '# TYPE pg_stat_database_blks_read counter\npg_stat_database_blks_read{datname="a"} %s\n'
    )
    out = figures(POSTGRES, [(0.0, extract(pg % (900, 100), POSTGRES)), (5.0, extract(pg % (1890, 110), POSTGRES))])
    assert out["cache_hit"] == [None, pytest.approx(99.0)]  # 990 hits of 1000 reads in the interval
    win = (
        "# TYPE windows_mssql_bufman_buffer_cache_hits gauge\nwindows_mssql_bufman_buffer_cache_hits 97\n"
        "# TYPE windows_mssql_bufman_buffer_cache_lookups gauge\nwindows_mssql_bufman_buffer_cache_lookups 100\n"
    )
    assert figures(WINDOWS, [(0.0, extract(win, WINDOWS))])["sql_buffer_hit"] == [pytest.approx(97.0)]


def test_garbage_and_foreign_text_are_refused_with_a_reason():
    with pytest.raises(ExpositionError, match="not Prometheus text") as refused:
        extract("<html><body>Not found</body></html>\n", DEMO)
    # a gap is shown to every viewer: it names the fault, never what the server answered (issue 30)
    assert "Not found" not in str(refused.value) and "html" not in str(refused.value)
    with pytest.raises(ExpositionError, match="none of the counter set's series"):
        extract(node(1, 1, 1, 1, 1), DEMO)


# -- hints ----------------------------------------------------------------------------
USERS = [10, 20, 40, 80]


def test_software_bottleneck_at_a_knee_with_low_cpu_and_a_healthy_generator():
    hints = knee_hints(
        knee_users=20,
        level_users=USERS,
        cpu_by_server={"web": [8, 12, 13, 12], "db": [3, 4, 4, 5]},
        generator_saturated=None,
    )
    assert [h.kind for h in hints] == ["software"]
    assert "locks, pools, queues" in hints[0].text
    assert "web CPU at most 13 % from 20 users up" in hints[0].evidence


@pytest.mark.parametrize(
    ("knee", "cpus", "saturated"),
    [
        (None, {"web": [8, 12, 13, 12]}, None),  # no knee: throughput kept growing
        (20, {"web": [30, 50, 75, 76]}, None),  # CPU passed 70 % on the plateau
        (20, {"web": [8, 12, 13, 12]}, "loop lag p99 above 50 ms"),  # the generator was the limit
        (20, {}, None),  # no server measured its CPU
        (20, {"web": [8, None, None, None]}, None),  # nothing measured from the knee up
    ],
)
def test_no_software_hint_when_its_conditions_do_not_all_hold(knee, cpus, saturated):
    hints = knee_hints(knee_users=knee, level_users=USERS, cpu_by_server=cpus, generator_saturated=saturated)
    assert "software" not in [h.kind for h in hints]


def test_hardware_bound_names_the_server_whose_cpu_passed_90_at_the_knee():
    hints = knee_hints(
        knee_users=40,
        level_users=USERS,
        cpu_by_server={"web": [40, 70, 96, 99], "db": [10, 20, 30, 30]},
        generator_saturated=None,
    )
    assert [h.kind for h in hints] == ["hardware"]
    assert hints[0].text.startswith("Hardware bound on web")
    assert (
        knee_hints(knee_users=40, level_users=USERS, cpu_by_server={"web": [40, 70, 89, 99]}, generator_saturated=None)
        == []
    )  # 89 % at the knee is neither


def test_a_series_growing_while_throughput_falls_is_named():
    throughput = [3000, 3050, 2990, 3010, 2500, 1500, 1200, 900, 1000]
    cache = [10_000, 25_000, 40_000, 55_000, 70_000, 85_000, 100_000, 115_000, 130_000]
    hints = growing_series_hints(
        throughput=throughput,
        series={"demo: Token cache entries": cache, "demo: In flight": [5, 4, 6, 5, 5, 4, 6, 5, 5]},
    )
    assert [h.kind for h in hints] == ["growing"]
    assert hints[0].text.startswith("demo: Token cache entries grew from 10,000 to 130,000 while throughput fell")


@pytest.mark.parametrize(
    ("throughput", "series"),
    [
        ([3000] * 9, list(range(10, 100, 10))),  # the cache grows, but throughput holds
        ([3000, 2000, 1000, 900, 800, 700, 600, 500, 400], [5, 5, 5, 5, 5, 5, 5, 5, 5]),  # falls, nothing grows
        ([3000, 2000, 1000, 900, 800, 700, 600, 500, 400], [1, 9, 2, 8, 1, 9, 3, 9, 2]),  # noise, not growth
        ([3000, 2000, 1000], [1, 2, 3]),  # too few scrapes to tell
    ],
)
def test_no_growth_hint_without_both_a_fall_and_a_steady_rise(throughput, series):
    assert growing_series_hints(throughput=throughput, series={"x": series}) == []


def test_generator_hint_only_when_saturated():
    assert generator_hint(None) == []
    assert generator_hint("CPU above 90 % for 3 s")[0].kind == "generator"


def test_the_demo_counter_set_finds_every_series_in_the_demos_own_metrics_text():
    # a misspelt metric name would silently drop its series from the report: every one must be there
    from demo.counters import Counters, prometheus_text

    values = extract(prometheus_text(Counters(), {}, 0), DEMO)
    assert len(values) == len(DEMO.series)
    assert [s.key for s, v in zip(DEMO.series, values, strict=True) if v is None] == []


def test_a_knee_at_one_user_reads_in_the_singular():
    hints = knee_hints(
        knee_users=1, level_users=[1, 2, 4], cpu_by_server={"web": [20.0, 21.0, 22.0]}, generator_saturated=None
    )
    evidence = [e for h in hints for e in h.evidence]
    assert "after 1 user (the knee) throughput grows less than half as fast as the users" in evidence
    assert not any("1 users" in e for e in evidence)
