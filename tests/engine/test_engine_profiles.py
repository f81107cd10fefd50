"""Load profiles: validation, the shapes as pure functions (schedule.py), and runs of each kind.

Runs use a fake HTTP client (no server) when only timing matters, and the
loopback test target (conftest.py) when real requests must flow.
"""

import asyncio
import copy
import json
import math
import statistics
import time

import pytest

from workers.engine import schedule
from workers.engine.histogram import Histogram
from workers.engine.http import AiohttpClient, Response
from workers.engine.plan import Plan, PlanError
from workers.engine.runner import run, run_sync

from .test_engine_cli import run_cli

CASES = [{"name": "A", "steps": [{"name": "Home", "path": "/"}]}]


def plan_with(profile, base_url="http://127.0.0.1:9", cases=CASES, timeout=5.0):
    return Plan.from_dict(
        {"base_url": base_url, "test_cases": copy.deepcopy(cases), "profile": profile, "request_timeout": timeout}
    )


def profile(d):
    return plan_with(d).profile


EXCHANGE = {  # the Exchange suite's shape, in seconds (1 h ramp-up, 5 h measured, 30 min down, 15 min quiet)
    "kind": "steps",
    "levels": [
        {"users": u, "ramp_up": 3600, "hold": 18000, "ramp_down": 1800, "quiet": 900} for u in (200, 300, 400, 450, 500)
    ],
}


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "d",
    [
        {"kind": "constant", "users": 5, "hold": 60},
        {"users": 5, "ramp_up": 10, "hold": 60, "ramp_down": 5},
        {"kind": "ramp", "users": 5, "hold": 60},
        EXCHANGE,
        {"kind": "pacing", "users": 5, "ramp_up": 10, "hold": 60, "ramp_down": 5, "pacing": 12},
        {"kind": "arrival_rate", "rate": 50, "rate_start": 5, "ramp_up": 30, "hold": 60, "max_users": 200},
        {"kind": "arrival_rate", "rate": 50, "hold": 60, "max_users": 200},
    ],
)
def test_every_kind_parses_and_round_trips(d):
    plan = plan_with(d)

    assert Plan.from_dict(plan.to_dict()) == plan
    assert plan.to_dict()["profile"]["kind"] == d.get("kind", "ramp")


def test_a_profile_without_kind_is_todays_ramp():
    p = profile({"users": 4, "ramp_up": 2, "hold": 3})

    assert (p.kind, p.users, p.ramp_up, p.hold, p.ramp_down) == ("ramp", 4, 2.0, 3.0, 0.0)


def test_the_users_of_every_kind_are_the_numbers_shards_split():
    assert profile(EXCHANGE).users == 500  # the largest level
    assert profile({"kind": "arrival_rate", "rate": 5, "hold": 1, "max_users": 70}).users == 70
    assert profile({"kind": "arrival_rate", "rate": 5, "hold": 1, "max_users": 70}).rate_start == 5.0


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({"kind": "linear", "users": 1, "hold": 1}, "profile.kind: must be one of constant, ramp, steps, pacing"),
        ({"kind": "constant", "users": 1, "hold": 0}, "profile.hold: must be greater than 0"),
        ({"kind": "constant", "users": 1, "hold": 5, "ramp_up": 1}, "profile.ramp_up: unknown key"),
        ({"kind": "steps", "levels": []}, "profile.levels: must be a non-empty list"),
        ({"kind": "steps", "users": 3, "levels": [{"users": 1, "hold": 1}]}, "profile.users: unknown key"),
        (
            {"kind": "steps", "levels": [{"users": 1, "hold": 1}, {"users": 2, "hold": 1}, {"users": 0, "hold": 1}]},
            "profile.levels[2].users: must be at least 1",
        ),
        ({"kind": "steps", "levels": [{"users": 1, "hold": 0}]}, "profile.levels[0].hold: must be greater than 0"),
        ({"kind": "steps", "levels": [{"users": 1}]}, "profile.levels[0].hold: is required"),
        ({"kind": "steps", "levels": [{"users": 1, "hold": 1, "quiet": -1}]}, "profile.levels[0].quiet: must be at"),
        ({"kind": "steps", "levels": [{"users": 1, "hold": 1, "pause": 1}]}, "profile.levels[0].pause: unknown key"),
        ({"kind": "steps", "levels": [{"users": 1, "hold": 1}] * 101}, "profile.levels: must have at most 100"),
        ({"kind": "pacing", "users": 2, "hold": 5}, "profile.pacing: is required"),
        ({"kind": "pacing", "users": 2, "hold": 5, "pacing": 0}, "profile.pacing: must be greater than 0"),
        ({"kind": "arrival_rate", "rate": 0, "hold": 5, "max_users": 1}, "profile.rate: must be greater than 0"),
        ({"kind": "arrival_rate", "rate": 5, "hold": 5}, "profile.max_users: is required"),
        ({"kind": "arrival_rate", "rate": 5, "hold": 5, "max_users": 0}, "profile.max_users: must be within 1.."),
        ({"kind": "arrival_rate", "rate": 5, "hold": 5, "max_users": 1, "rate_start": -1}, "profile.rate_start: must"),
        ({"kind": "arrival_rate", "rate": 5, "hold": 0, "max_users": 1}, "profile: ramp_up + hold must be greater"),
        ({"kind": "arrival_rate", "rate": 5, "hold": 1, "max_users": 1, "users": 1}, "profile.users: unknown key"),
        ({"kind": "arrival_rate", "rate": 2e6, "hold": 1, "max_users": 1}, "profile.rate: must be at most"),
        ([], "profile: must be an object"),
    ],
)
def test_profile_errors_name_the_field(d, message):
    with pytest.raises(PlanError) as excinfo:
        plan_with(d)

    assert str(excinfo.value).startswith(message)


# -- shapes as pure functions -------------------------------------------------------------------


def test_constant_runs_everybody_for_the_hold():
    p = profile({"kind": "constant", "users": 7, "hold": 30})

    assert [schedule.users_at(t, p) for t in (-0.1, 0.0, 29.99, 30.0)] == [0, 7, 7, 0]
    assert schedule.total_duration(p) == 30.0
    assert schedule.measurement_windows(p) == [(0.0, 30.0, "Hold")]
    assert schedule.rate_at(5, p) is None


@pytest.mark.parametrize("users", [1, 7, 10, 1000])
def test_users_at_agrees_with_every_users_window(users):
    p = profile({"users": users, "ramp_up": 13.0, "hold": 7.0, "ramp_down": 11.0})
    ids = range(users)

    for tenth in range(-5, 320):
        t = tenth / 10
        assert schedule.users_at(t, p) == schedule.active_users_at(t, p, ids), t
    # and exactly at every user's edges, where float rounding would show
    for k in range(0, users, max(1, users // 50)):
        for edge in schedule.user_window(k, p):
            assert schedule.users_at(edge, p) == schedule.active_users_at(edge, p, ids)


def test_steps_levels_follow_each_other_with_quiet_time_between():
    p = profile(
        {
            "kind": "steps",
            "levels": [
                {"users": 20, "ramp_up": 10, "hold": 50, "ramp_down": 5, "quiet": 15},
                {"users": 30, "ramp_up": 10, "hold": 50, "ramp_down": 5, "quiet": 15},
                {"users": 40, "hold": 50, "quiet": 15},
            ],
        }
    )

    # level 1: 0..65 then quiet to 80; level 2: 80..145 then quiet to 160; level 3: 160..210
    assert schedule.total_duration(p) == 210.0  # the last level's quiet is not waited for
    assert schedule.measurement_windows(p) == [
        (10.0, 60.0, "Level 1: 20 users"),
        (90.0, 140.0, "Level 2: 30 users"),
        (160.0, 210.0, "Level 3: 40 users"),
    ]
    assert schedule.measurement_window(p) == (10.0, 60.0)
    at = {t: schedule.users_at(t, p) for t in (0, 4.99, 10, 59.9, 62.5, 65, 70, 80, 90, 140, 159.9, 160, 209.9, 210)}
    assert at == {
        0: 1,
        4.99: 10,
        10: 20,
        59.9: 20,
        62.5: 9,  # the last to start leave first: 9 of 20 halfway down
        65: 0,
        70: 0,  # quiet
        80: 1,
        90: 30,
        140: 29,
        159.9: 0,
        160: 40,
        209.9: 40,
        210: 0,
    }
    # user 25 is only in levels 2 and 3, one window (one session) each
    assert schedule.user_windows(25, p) == [(80 + 10 * 25 / 30, 140 + 5 * 4 / 30), (160.0, 210.0)]
    assert len(schedule.user_windows(0, p)) == 3
    # brute force agrees everywhere
    for t in range(0, 215):
        assert schedule.users_at(t, p) == schedule.active_users_at(t, p, range(40))


def test_steps_of_the_exchange_suite():
    p = profile(EXCHANGE)

    windows = schedule.measurement_windows(p)
    assert [label for *_, label in windows] == [
        f"Level {i}: {u} users" for i, u in enumerate((200, 300, 400, 450, 500), 1)
    ]
    assert windows[1][:2] == (24300.0 + 3600, 24300.0 + 3600 + 18000)
    assert schedule.total_duration(p) == 5 * 24300 - 900


def test_pacing_users_ramp_and_their_rate_follows():
    p = profile({"kind": "pacing", "users": 10, "ramp_up": 10, "hold": 20, "ramp_down": 10, "pacing": 4})

    assert schedule.users_at(15, p) == 10
    assert schedule.rate_at(15, p) == 2.5  # 10 users, one iteration each every 4 s
    assert schedule.users_at(4.5, p) == 5
    assert schedule.rate_at(4.5, p) == 1.25
    assert schedule.measurement_windows(p) == [(10.0, 30.0, "Hold")]


def test_arrival_rate_ramps_linearly_then_holds():
    p = profile({"kind": "arrival_rate", "rate": 100, "rate_start": 20, "ramp_up": 10, "hold": 30, "max_users": 50})

    assert [schedule.rate_at(t, p) for t in (0, 5, 10, 39.9, 40)] == [20, 60, 100, 100, 0]
    assert schedule.users_at(5, p) is None  # the users follow the target's response times
    assert schedule.total_duration(p) == 40.0
    assert schedule.measurement_windows(p) == [(10.0, 40.0, "Hold")]
    # (20 + 100) / 2 * 10 in the ramp, 100 * 30 in the hold
    assert schedule.arrival_count(p) == 600 + 3000
    times = [t for _, t in schedule.arrivals(p)]
    assert len(times) == 3600
    assert times[0] == 0.0
    # each arrival is due when the integral of the rate reaches its number
    for j in (1, 17, 599, 600, 601, 2500, 3599):
        assert schedule.arrivals_until(times[j], p) == pytest.approx(j, abs=1e-6)
    # deterministic spacing: exactly 1/rate in the hold, shrinking through the ramp
    hold_gaps = [b - a for a, b in zip(times[700:], times[701:], strict=False)]
    assert max(hold_gaps) == pytest.approx(0.01) == min(hold_gaps)
    assert times[1] - times[0] > times[300] - times[299] > times[599] - times[598]


def test_arrival_rate_from_zero():
    p = profile({"kind": "arrival_rate", "rate": 10, "rate_start": 0, "ramp_up": 4, "hold": 1, "max_users": 5})

    times = [t for _, t in schedule.arrivals(p)]
    assert len(times) == 20 + 10
    assert times[:3] == [0.0, pytest.approx(math.sqrt(2 * 1 / 2.5)), pytest.approx(math.sqrt(2 * 2 / 2.5))]


def test_arrivals_split_over_shards_without_overlap():
    p = profile({"kind": "arrival_rate", "rate": 30, "rate_start": 3, "ramp_up": 5, "hold": 5, "max_users": 9})

    whole = list(schedule.arrivals(p))
    parts = [list(schedule.arrivals(p, (n, 3))) for n in range(3)]

    assert sorted(a for part in parts for a in part) == whole
    assert [len(part) for part in parts] == [len(whole) // 3 + (n < len(whole) % 3) for n in range(3)]


def test_preview_has_the_shape_its_corners_and_windows():
    p = profile(
        {"kind": "steps", "levels": [{"users": 10, "ramp_up": 5, "hold": 20, "quiet": 5}, {"users": 20, "hold": 20}]}
    )

    chart = schedule.preview(p, points=50)

    assert chart["kind"] == "steps"
    assert chart["duration"] == 50.0
    assert chart["t"] == sorted(chart["t"])
    assert chart["t"][0] == 0 and chart["t"][-1] == 50.0
    assert 50 <= len(chart["t"]) <= 50 + 20
    assert len(chart["users"]) == len(chart["t"])
    assert "rate" not in chart
    assert {25.0, 30.0}.issubset(chart["t"])  # the end of level 1 and the start of level 2, exactly
    assert max(chart["users"]) == 20
    assert chart["users"][chart["t"].index(30.0)] == 20
    assert chart["windows"] == [
        {"start": 5.0, "end": 25.0, "label": "Level 1: 10 users"},
        {"start": 30.0, "end": 50.0, "label": "Level 2: 20 users"},
    ]
    json.dumps(chart)  # ready for a JSON endpoint


def test_preview_of_an_arrival_rate_is_a_rate():
    p = profile({"kind": "arrival_rate", "rate": 100, "rate_start": 0, "ramp_up": 10, "hold": 10, "max_users": 80})

    chart = schedule.preview(p)

    assert "users" not in chart
    assert chart["max_users"] == 80
    assert chart["rate"][0] == 0.0
    assert chart["rate"][chart["t"].index(5.0)] == 50.0 if 5.0 in chart["t"] else True
    assert chart["rate"][-1] == 100.0  # the hold's rate up to the end
    assert len(chart["t"]) >= 200
    assert chart["windows"] == [{"start": 10.0, "end": 20.0, "label": "Hold"}]


@pytest.mark.serial  # a duration: the preview within 0.5 s
def test_preview_of_a_huge_ramp_is_quick():
    p = profile({"users": 1_000_000, "ramp_up": 3600, "hold": 72 * 3600})
    started = time.perf_counter()

    chart = schedule.preview(p)

    assert time.perf_counter() - started < 0.5
    assert max(chart["users"]) == 1_000_000


# -- runs ----------------------------------------------------------------------------------------


class FakeClient:
    """Answers after ``delay`` seconds (a list: one per request, the last repeated); logs when each was sent."""

    def __init__(self, log, delay=0.0, t0=0.0):
        self.log = log
        self.delays = delay if isinstance(delay, list) else [delay]
        self.closed = False
        self.n = 0

    async def request(self, method, url, headers, body, timeout):
        self.log.append(time.time())
        delay = self.delays[min(self.n, len(self.delays) - 1)]
        self.n += 1
        await asyncio.sleep(delay)
        return Response(200, {}, b"Welcome", 7, len(body), delay, delay)

    async def close(self):
        self.closed = True


class LoggingClient:
    """A real client that notes when each request is sent."""

    def __init__(self, log):
        self.log = log
        self.inner = AiohttpClient()

    async def request(self, method, url, headers, body, timeout):
        self.log.append(time.time())
        return await self.inner.request(method, url, headers, body, timeout)

    async def close(self):
        await self.inner.close()


@pytest.mark.serial  # requests' send times against the schedule
def test_constant_and_steps_runs_follow_the_schedule():
    sent, clients, reports = [], [], []

    def factory():
        clients.append(FakeClient(sent, delay=0.01))
        return clients[-1]

    cases = [{"name": "A", "steps": [{"name": "Home", "path": "/", "think_time": 0.09}]}]
    plan = plan_with(
        {"kind": "steps", "levels": [{"users": 2, "hold": 0.6, "quiet": 0.4}, {"users": 3, "hold": 0.8}]},
        cases=cases,
    )
    start_at = time.time() + 0.2

    totals = run_sync(plan, sink=reports.append, start_at=start_at, client_factory=factory)

    offsets = [t - start_at for t in sent]
    assert not [o for o in offsets if 0.62 < o < 0.98]  # quiet between the levels
    assert len(clients) == 5  # a fresh client (a new session) per user and level
    assert all(c.closed for c in clients)
    assert [r["active_users"] for r in reports] == [2, 3]
    assert 1.75 < totals.duration_s < 2.1  # 0.6 + 0.4 quiet + 0.8
    assert totals.pages == len(sent)

    sent.clear()
    reports.clear()
    constant = plan_with({"kind": "constant", "users": 3, "hold": 0.5}, cases=cases)
    run_sync(constant, sink=reports.append, client_factory=lambda: FakeClient(sent, delay=0.01))
    assert [r["active_users"] for r in reports] == [3]
    assert 9 <= len(sent) <= 18  # 3 users, one page every 0.1 s for 0.5 s (fewer if the machine is busy)


@pytest.mark.serial  # iterations' start times, within 60 ms
@pytest.mark.parametrize(
    ("delay", "expected_starts", "dropped"),
    [
        (0.05, [0.0, 0.3, 0.6, 0.9], 0),  # on time: one iteration every 0.3 s, whatever the page took
        (0.45, [0.0, 0.45, 0.9], 1),  # late: the next starts at once; the one due at 0.9 never could
    ],
)
def test_pacing_starts_iterations_on_schedule_or_at_once_when_late(delay, expected_starts, dropped):
    sent, reports = [], []
    plan = plan_with({"kind": "pacing", "users": 1, "hold": 1.2, "pacing": 0.3})
    # Half a second to set the run up: late in the whole suite (a large process, leftover threads)
    # setting up took over 0.2 s, and the whole grid then started late (every start +0.07 s).
    start_at = time.time() + 0.5

    totals = run_sync(
        plan, sink=reports.append, start_at=start_at, client_factory=lambda: FakeClient(sent, delay=delay)
    )

    starts = [t - start_at for t in sent]
    assert starts == [pytest.approx(s, abs=0.06) for s in expected_starts]
    assert totals.iterations_started == len(expected_starts)
    assert totals.iterations_dropped == dropped == sum(r["iterations_dropped"] for r in reports)
    # each page is timed from when its iteration was due: the late ones carry their lateness
    h = totals.histogram
    assert h.count == len(expected_starts)
    if dropped:
        assert h.max / 1e6 == pytest.approx(delay + (0.9 - 0.6), abs=0.06)  # due at 0.6, sent at 0.9
        assert h.min / 1e6 == pytest.approx(delay, abs=0.03)
    else:
        assert h.max / 1e6 < delay + 0.03


@pytest.mark.serial  # a rate, and lateness within 20 ms
def test_arrival_rate_starts_the_planned_number_on_time(target):
    # given: 200 iterations/s for 5 s against a fast local server (it was 10 s: the same tolerances, relative)
    hold, due = 5, 5 * 200
    sent, reports = [], []
    plan = plan_with({"kind": "arrival_rate", "rate": 200, "hold": hold, "max_users": 50}, base_url=target.url)
    start_at = time.time() + 0.3

    totals = run_sync(plan, sink=reports.append, start_at=start_at, client_factory=lambda: LoggingClient(sent))

    # then: within 2 % of rate x hold were sent within the hold (exactly 1000 are due), and on time
    offsets = sorted(t - start_at for t in sent)
    in_window = sum(0 <= o < hold for o in offsets)
    lateness = sorted(o - j / 200 for j, o in enumerate(offsets))
    print(
        f"arrival rate: {in_window} of {due} sent within the {hold} s; lateness p50 {1000 * lateness[due // 2]:.1f} "
        f"ms, p99 {1000 * lateness[due * 99 // 100]:.1f} ms, max {1000 * lateness[-1]:.1f} ms; "
        f"per second {[r['iterations_started'] for r in reports]}"
    )
    assert abs(in_window - due) <= 0.02 * due
    assert totals.iterations_started == sum(r["iterations_started"] for r in reports) == due
    assert totals.iterations_dropped == 0
    assert totals.errors == 0
    assert target.served == due
    assert statistics.median(lateness) < 0.02
    full_seconds = [r["iterations_started"] for r in reports if r["second"] < hold]
    assert all(170 <= n <= 230 for n in full_seconds[1:]), full_seconds
    assert max(r["active_users"] for r in reports) <= 50


@pytest.mark.serial  # how many 0.5 s iterations fit in a 2 s hold
def test_arrivals_without_a_free_user_are_dropped_and_counted(target):
    # given: 20 arrivals/s for 2 s on at most 2 users, each iteration 0.5 s long
    reports = []
    cases = [{"name": "A", "steps": [{"name": "Nap", "path": "/slow?d=0.5"}]}]
    plan = plan_with({"kind": "arrival_rate", "rate": 20, "hold": 2, "max_users": 2}, base_url=target.url, cases=cases)

    totals = run_sync(plan, sink=reports.append)

    # then: every one of the 40 arrivals was either started or dropped; 2 users do about 8
    assert totals.iterations_started + totals.iterations_dropped == 40
    assert 6 <= totals.iterations_started <= 10
    assert totals.iterations_dropped == sum(r["iterations_dropped"] for r in reports) >= 30
    assert target.served == totals.iterations_started
    assert max(r["active_users"] for r in reports) == 2


@pytest.mark.serial  # the gaps between arrivals, within 3 ms
def test_two_arrival_rate_shards_add_up_to_the_plan():
    plan = plan_with({"kind": "arrival_rate", "rate": 100, "hold": 2, "max_users": 10})
    sent = [[], []]
    clients = [[], []]
    start_at = time.time() + 0.3

    def factory(n):
        clients[n].append(FakeClient(sent[n], delay=0.005))
        return clients[n][-1]

    async def both():
        return await asyncio.gather(
            *(
                run(plan, sink=None, shard=(n, 2), start_at=start_at, client_factory=lambda n=n: factory(n))
                for n in range(2)
            )
        )

    shard0, shard1 = asyncio.run(both())

    assert shard0.iterations_started == shard1.iterations_started == 100
    assert shard0.iterations_started + shard1.iterations_started == schedule.arrival_count(plan.profile) == 200
    assert shard0.iterations_dropped == shard1.iterations_dropped == 0
    assert len(clients[0]) <= 5 and len(clients[1]) <= 5  # each shard's half of max_users
    merged = sorted(t - start_at for t in sent[0] + sent[1])
    gaps = [b - a for a, b in zip(merged, merged[1:], strict=False)]
    assert statistics.median(gaps) == pytest.approx(0.01, abs=0.003)  # interleaved: 100/s together


def test_an_arrival_rate_shard_must_say_which_arrivals_are_its_own():
    plan = plan_with({"kind": "arrival_rate", "rate": 10, "hold": 1, "max_users": 10})

    with pytest.raises(ValueError, match="needs shard="):
        run_sync(plan, sink=None, user_ids=[0, 2, 4], client_factory=lambda: FakeClient([]))
    with pytest.raises(ValueError, match="shard must be"):
        run_sync(plan, sink=None, shard=(2, 2), client_factory=lambda: FakeClient([]))


def test_a_closed_model_shard_runs_every_nth_user():
    plan = plan_with({"users": 4, "ramp_up": 0.4, "hold": 0.2})
    sent, clients, reports = [], [], []

    def factory():
        clients.append(FakeClient(sent, delay=0.05))
        return clients[-1]

    totals = run_sync(plan, sink=reports.append, shard=(1, 2), client_factory=factory)

    assert len(clients) == 2  # users 1 and 3
    assert totals.iterations_started == totals.pages == len(sent) > 0
    assert max(r["active_users"] for r in reports) == 2


@pytest.mark.serial  # loop lag within a second, CPU
def test_the_cli_runs_an_arrival_rate_and_reports_the_health_figures(target):
    result = run_cli("--url", f"{target.url}/", "--rate", "50", "--users", "25", "--duration", "1", "--json")

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["iterations_started"] == 50 == target.served
    assert summary["iterations_dropped"] == 0
    assert 0 <= summary["loop_lag_ms_p99"] < 1000
    assert 0 <= summary["cpu_pct_max"] <= 400
    assert summary["max_rss_kb"] > 10_000  # a Python process with aiohttp: tens of MB


def test_the_cli_describes_a_steps_plan_and_refuses_users_for_it(target, tmp_path):
    plan = {
        "base_url": target.url,
        "test_cases": [{"name": "Browse", "steps": [{"name": "Home", "path": "/", "think_time": 0.05}]}],
        "profile": {"kind": "steps", "levels": [{"users": 1, "hold": 0.3}, {"users": 2, "hold": 0.3}]},
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))

    ok = run_cli("--plan", str(path))
    refused = run_cli("--plan", str(path), "--users", "3")

    assert ok.returncode == 0, ok.stderr
    assert ": steps of 1, 2 users" in ok.stdout
    assert "generator loop lag p99" in ok.stdout
    assert refused.returncode == 2
    assert "--users and --duration do not apply to a steps profile" in refused.stderr


@pytest.mark.serial  # a rate: over 30 pages in a 1 s hold
def test_reports_carry_connect_and_ttfb_histograms(target):
    reports = []
    plan = plan_with(
        {"kind": "constant", "users": 3, "hold": 1.0},
        base_url=target.url,
        cases=[{"name": "A", "steps": [{"name": "Home", "path": "/", "think_time": 0.02}]}],
    )

    totals = run_sync(plan, sink=reports.append)

    label = totals.labels["A: Home"]
    assert label.ttfb_histogram.count == label.histogram.count == label.pages > 30
    assert label.ttfb_histogram.max <= label.histogram.max
    assert 3 <= label.connect_histogram.count <= 6  # one connection per user, kept alive
    assert 0 < label.connect_histogram.max < 1_000_000
    merged = Histogram()
    for r in reports:
        for v in r["labels"].values():
            merged.merge(Histogram.from_dict(v["connect_hist"]))
    assert merged == label.connect_histogram
    assert set(totals.to_dict()["labels"]["A: Home"]) >= {"latency_ms", "connect_ms", "ttfb_ms"}


@pytest.mark.serial  # a duration: stopped within 4 s
def test_a_stop_cancels_the_arrivals_in_flight(target):
    reports = []
    plan = plan_with(
        {"kind": "arrival_rate", "rate": 10, "hold": 30, "max_users": 50},
        base_url=target.url,
        cases=[{"name": "A", "steps": [{"name": "Nap", "path": "/slow?d=3"}]}],
    )
    started = time.monotonic()

    def sink(report):
        reports.append(report)
        return report["second"] >= 1

    totals = run_sync(plan, sink=sink)

    assert time.monotonic() - started < 4
    assert totals.stopped
    assert totals.aborted == totals.iterations_started >= 15  # every one was still waiting for its 3 s page
    assert totals.pages == 0
