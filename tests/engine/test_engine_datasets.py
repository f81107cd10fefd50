"""Data sets: rows handed to iterations by mode (workers/engine/datasets.py), their validation, and a run."""

import asyncio
import random
import time
from collections import Counter

import pytest

from workers.engine.datasets import DataFeed
from workers.engine.plan import DataSet, Plan, PlanError
from workers.engine.runner import run, run_sync

from .test_engine_steps import StepsServer

ROWS = [("alice", "a-pass"), ("bob", "b-pass"), ("carol", "c-pass")]
COLUMNS = ("username", "password")


def names(feed, user, n, rng=None):
    rng = rng or random.Random(0)
    return [feed.take(user, rng)["username"] for _ in range(n)]


def test_sequential_user_k_starts_at_row_k_and_wraps():
    feed = DataFeed(COLUMNS, ROWS, "sequential")

    assert feed.take(0, random.Random()) == {"username": "alice", "password": "a-pass"}
    assert names(feed, 0, 3) == ["bob", "carol", "alice"]
    assert names(feed, 2, 4) == ["carol", "alice", "bob", "carol"]
    assert names(feed, 7, 2) == ["bob", "carol"]  # 7 % 3 == 1
    assert names(feed, 0, 1) == ["bob"]  # each user keeps its own place
    assert feed.remaining is None


def test_random_rows_are_spread_evenly_and_reproducible():
    feed = DataFeed(COLUMNS, ROWS, "random")

    counts = Counter(names(feed, 0, 3000, random.Random(42)))

    assert set(counts) == {"alice", "bob", "carol"}
    assert all(850 < n < 1150 for n in counts.values()), counts
    assert names(feed, 5, 20, random.Random(7)) == names(feed, 9, 20, random.Random(7))


def test_unique_rows_are_never_repeated_across_two_shards_and_run_out():
    rows = [(f"user{i}", "pw") for i in range(11)]
    shards = [DataFeed(COLUMNS, rows, "unique", shard=(s, 2)) for s in range(2)]
    taken = {0: [], 1: []}

    for s, feed in enumerate(shards):
        assert feed.remaining == (6 if s == 0 else 5)
        while (row := feed.take(user=s, rng=random.Random())) is not None:
            taken[s].append(row["username"])
        assert feed.take(user=99, rng=random.Random()) is None  # stays used up, for every user
        assert feed.remaining == 0

    assert taken[0] == ["user0", "user2", "user4", "user6", "user8", "user10"]
    assert taken[1] == ["user1", "user3", "user5", "user7", "user9"]
    everything = taken[0] + taken[1]
    assert sorted(everything) == sorted(r[0] for r in rows)  # each row once, none twice


def test_unique_on_one_shard_takes_the_rows_in_order():
    feed = DataFeed(COLUMNS, ROWS, "unique")

    assert [feed.take(u, random.Random())["username"] for u in (2, 0, 1)] == ["alice", "bob", "carol"]
    assert feed.take(0, random.Random()) is None


@pytest.mark.parametrize("shard", [(2, 2), (-1, 2), (0, 0)])
def test_a_bad_shard_is_refused(shard):
    with pytest.raises(ValueError, match="bad shard"):
        DataFeed(COLUMNS, ROWS, "unique", shard=shard)


# -- validation -------------------------------------------------------------------------------------------------


def plan_with(data_set):
    return {
        "base_url": "http://127.0.0.1:8001",
        "test_cases": [{"name": "Log in", "data_set": data_set, "steps": [{"name": "Home", "path": "/"}]}],
        "profile": {"users": 1, "hold": 1},
    }


def test_a_data_set_parses_converts_numbers_and_round_trips():
    plan = Plan.from_dict(plan_with({"columns": ["user", "n"], "rows": [["a", 1], ["b", 2.5]], "mode": "unique"}))

    assert plan.test_cases[0].data_set == DataSet(columns=("user", "n"), rows=(("a", "1"), ("b", "2.5")), mode="unique")
    assert Plan.from_dict(plan.to_dict()) == plan
    assert Plan.from_dict(plan_with({"columns": ["a"], "rows": [["x"]]})).test_cases[0].data_set.mode == "sequential"
    assert Plan.from_dict(plan_with(None)).test_cases[0].data_set is None


@pytest.mark.parametrize(
    ("data_set", "message"),
    [
        (
            {"columns": ["username", "password"], "rows": [["a", "b"], ["c"]]},
            "test_cases[0].data_set.rows[1]: has 1 value, but there are 2 columns (username, password)",
        ),
        (
            {"columns": ["u"], "rows": [["a", "b"]]},
            "test_cases[0].data_set.rows[0]: has 2 values, but there is 1 column",
        ),
        ({"columns": ["u"], "rows": ["a"]}, "test_cases[0].data_set.rows[0]: must be a list of 1 values"),
        ({"columns": ["u"], "rows": []}, "test_cases[0].data_set.rows: must be a non-empty list"),
        ({"columns": [], "rows": [[]]}, "test_cases[0].data_set.columns: must be a non-empty list"),
        ({"columns": ["user name"], "rows": [["a"]]}, "test_cases[0].data_set.columns[0]: must be an identifier"),
        ({"columns": ["u", "u"], "rows": [["a", "b"]]}, "test_cases[0].data_set.columns[1]: duplicate column 'u'"),
        ({"columns": ["u"], "rows": [[True]]}, "test_cases[0].data_set.rows[0][0]: must be a string or a number"),
        ({"columns": ["u"], "rows": [[None]]}, "test_cases[0].data_set.rows[0][0]: must be a string or a number"),
        (
            {"columns": ["u"], "rows": [["a"]], "mode": "shuffle"},
            "test_cases[0].data_set.mode: must be one of sequential, random, unique",
        ),
        ({"columns": ["u"], "rows": [["a"]], "order": 1}, "test_cases[0].data_set.order: unknown key"),
        ({"rows": [["a"]]}, "test_cases[0].data_set.columns: is required"),
        (["u"], "test_cases[0].data_set: must be an object"),
    ],
)
def test_bad_data_sets_are_named_by_path(data_set, message):
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict(plan_with(data_set))

    assert str(excinfo.value).startswith(message)


# -- in a run ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    s = StepsServer()
    yield s
    s.stop()


def test_a_run_uses_columns_as_variables_and_drops_iterations_when_unique_rows_run_out(server):
    server.reset()
    rows = [[f"user{i}", f"pw{i}"] for i in range(6)]
    plan = {
        "base_url": server.url,
        "test_cases": [
            {
                "name": "Sign up",
                "data_set": {"columns": ["username", "password"], "rows": rows, "mode": "unique"},
                "steps": [
                    {
                        "name": "Register",
                        "method": "POST",
                        "path": "/record?who={{username}}",
                        "body_type": "form",
                        "body": "username={{username}}&password={{password}}",
                        "think_time": 0.05,
                    }
                ],
            }
        ],
        "profile": {"users": 2, "hold": 1.6},
        "request_timeout": 5,
    }
    reports = []

    totals = run_sync(plan, sink=reports.append)

    assert totals.errors == 0
    seen = [r["form"]["username"] for r in server.records if r["path"] == "/record"]
    assert sorted(seen) == [f"user{i}" for i in range(6)]  # each row once
    assert all(r["query"]["who"] == r["form"]["username"] for r in server.records)
    assert all(r["form"]["password"] == "pw" + r["form"]["username"][4:] for r in server.records)
    assert totals.iterations_started == totals.iterations_completed == 6
    # then each user tries about once a second, finds no row, and counts a dropped iteration
    dropped = sum(r["iterations_dropped"] for r in reports)
    assert dropped == totals.iterations_dropped
    assert 2 <= dropped <= 6


def test_two_shards_of_a_run_never_use_the_same_unique_row(server):
    server.reset()
    rows = [[f"user{i}"] for i in range(9)]
    plan = {
        "base_url": server.url,
        "test_cases": [
            {
                "name": "Sign up",
                "data_set": {"columns": ["username"], "rows": rows, "mode": "unique"},
                "steps": [{"name": "Register", "path": "/record?who={{username}}", "think_time": 0.02}],
            }
        ],
        "profile": {"users": 4, "hold": 1.2},
        "request_timeout": 5,
    }

    async def both():
        start_at = time.time() + 0.2
        return await asyncio.gather(*(run(plan, sink=None, shard=(s, 2), start_at=start_at) for s in range(2)))

    shard0, shard1 = asyncio.run(both())

    seen = [r["query"]["who"] for r in server.records]
    assert sorted(seen) == sorted(r[0] for r in rows)  # every row once, across both shards
    assert shard0.iterations_started == 5  # rows 0, 2, 4, 6, 8
    assert shard1.iterations_started == 4  # rows 1, 3, 5, 7
    assert shard0.iterations_dropped >= 2 and shard1.iterations_dropped >= 2  # 2 users each, then none left
