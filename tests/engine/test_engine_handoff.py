"""A handoff: a run asked to hand over drains, reports everything and stops; ``resume_at`` continues it."""

import time

from workers.engine.plan import Plan
from workers.engine.runner import HANDOFF, run_sync

from .test_engine_runner import Reports


class HandoffAt(Reports):
    """A sink that answers HANDOFF from ``second`` on (a worker told to stop)."""

    def __init__(self, second):
        super().__init__()
        self.second = second

    def __call__(self, report):
        super().__call__(report)
        return HANDOFF if report["second"] >= self.second else None


def closed_plan(base_url, **profile):
    return Plan.from_dict(
        {
            "base_url": base_url,
            "test_cases": [
                {
                    "name": "Browse",
                    "steps": [
                        {"name": "Home", "path": "/", "think_time": 0.05},
                        {"name": "Slow", "path": "/slow?d=0.3", "think_time": 0.05},
                    ],
                }
            ],
            "profile": {"users": 6, "ramp_up": 0, "hold": 4, **profile},
        }
    )


def test_a_handoff_drains_in_flight_pages_and_a_continuation_resumes_the_schedule(target):
    # given: a 4 s closed-model run whose sink asks for a handoff after second 1
    target.reset()
    plan = closed_plan(target.url)
    start = time.time() + 0.2
    first = HandoffAt(1)

    # when: it runs, then a continuation resumes at the second after the last one reported
    handed = run_sync(plan, sink=first, start_at=start)
    resume = first.seconds[-1] + 1
    second = Reports()
    rest = run_sync(plan, sink=second, start_at=start, resume_at=resume)

    # then: the first part stopped early with nothing aborted, and every request served is reported once
    assert handed.handed_off and not rest.handed_off
    assert handed.aborted == 0
    assert first.seconds[-1] <= 3
    assert second.seconds[0] == resume
    assert set(first.seconds).isdisjoint(second.seconds)
    assert first.label_sum("hits") + second.label_sum("hits") == target.served
    # the same 6 users run again after the handoff, each in a fresh session
    assert max(r["active_users"] for r in second.reports) == 6
    assert rest.requests > 0


def test_a_continuation_of_an_arrival_rate_starts_only_the_arrivals_due_after_it(target):
    # given: 20 arrivals/s for 3 s, resumed at second 2
    target.reset()
    plan = Plan.from_dict(
        {
            "base_url": target.url,
            "test_cases": [{"name": "Browse", "steps": [{"name": "Home", "path": "/"}]}],
            "profile": {"kind": "arrival_rate", "rate": 20, "rate_start": 20, "max_users": 10, "ramp_up": 0, "hold": 3},
        }
    )

    # when
    totals = run_sync(plan, sink=Reports(), start_at=time.time() + 0.1, resume_at=2)

    # then: the arrivals of the last second only (20, to one either side), none caught up
    assert 19 <= totals.iterations_started <= 21
    assert totals.requests == target.served


def test_unique_rows_continue_after_a_handoff(target):
    # given: a unique data set of 200 rows; the first part hands off, reporting the rows it took
    target.reset()
    rows = [[f"u{n}"] for n in range(200)]
    plan = Plan.from_dict(
        {
            "base_url": target.url,
            "test_cases": [
                {
                    "name": "Browse",
                    "data_set": {"columns": ["user"], "rows": rows, "mode": "unique"},
                    "steps": [{"name": "Home", "path": "/?u={{user}}", "think_time": 0.05}],
                }
            ],
            "profile": {"users": 4, "ramp_up": 0, "hold": 3},
        }
    )
    start = time.time() + 0.1
    first = run_sync(plan, sink=HandoffAt(0), start_at=start)

    # when: the continuation is given what was taken
    rest = run_sync(plan, sink=Reports(), start_at=start, resume_at=2, data_taken=first.data_taken)

    # then: it takes the rows after those, so no row is used twice
    taken_first = first.data_taken["Browse"]
    assert 0 < taken_first < rest.data_taken["Browse"] <= 200
    assert rest.iterations_started == rest.data_taken["Browse"] - taken_first
    # as the target saw it: every row it was sent came once, all of them among the rows taken, and
    # none skipped beyond those of the iterations in flight when the first part handed over (4 users)
    assert target.rows and max(target.rows.values()) == 1, target.rows.most_common(3)
    taken = {f"u{n}" for n in range(rest.data_taken["Browse"])}
    assert set(target.rows) <= taken
    assert len(taken - set(target.rows)) <= 4
    assert any(f"u{n}" in target.rows for n in range(taken_first, rest.data_taken["Browse"]))
