"""A scheduled capacity search judged against its baseline (issue 19): a lower capacity is a regression.

Steps runs of four levels are built from real interval rows and summarised by the run
analysis itself; the verdict is the one a schedule stores (``run_judge``).
"""

import pytest
from django.utils import timezone

from portal.runs.analysis import summarize
from portal.runs.models import Run
from portal.schedules.baselines import run_judge
from tests.portal.runs.factories import add_second, plan_run

pytestmark = pytest.mark.django_db

USERS = (10, 20, 40, 80)
HOLD = 4
PROFILE = {
    "kind": "steps",
    "levels": [{"users": u, "ramp_up": 0, "hold": HOLD, "ramp_down": 0, "quiet": 0} for u in USERS],
}
HELD = 100.0  # APD limit (ms)


def search_run(plan, apds):
    """A capacity search that ended done: level i served 5 pages a second at ``apds[i]`` ms, APD at most 100 ms."""
    snapshot = {**plan.to_engine_dict(), "profile": PROFILE, "thresholds": {"apd_ms": HELD}}
    run = plan_run(
        plan,
        plan_snapshot=snapshot,
        analysis_settings={"capacity_search": True},
        status=Run.Status.DONE,
        start_at=timezone.now(),
    )
    for level, (users, apd) in enumerate(zip(USERS, apds, strict=True)):
        for s in range(level * HOLD, (level + 1) * HOLD):
            add_second(run, s, users=users, labels={"Search": ([apd] * 5, {})})
    run.summary = summarize(run)
    run.save(update_fields=["summary"])
    return run


def capacity_row(verdict) -> dict:
    return next(r for r in verdict.rows if r["page"] is None and r["figure"] == "capacity")


def test_a_lower_capacity_than_the_baseline_is_a_regression(plan):
    # given: three capacity searches that held up to 40 users (80 users broke 100 ms)
    for _ in range(3):
        search_run(plan, [40.0, 50.0, 60.0, 300.0])
    # when: the next one holds only 20 users, every level's APD unchanged but the third
    worse = search_run(plan, [40.0, 50.0, 150.0, 300.0])
    assert worse.summary["capacity"]["capacity_users"] == 20 and worse.status == Run.Status.DONE

    verdict = run_judge(run_id=worse.id)

    # then: the capacity row regressed, and the verdict and headline say so
    row = capacity_row(verdict)
    assert (row["verdict"], row["before"], row["after"]) == ("regressed", "40 users", "20 users"), row
    assert verdict.verdict == "regressed"
    assert "all pages capacity 40 users → 20 users" in verdict.headline, verdict.headline


def test_the_same_capacity_as_the_baseline_is_within_noise(plan):
    for _ in range(3):
        search_run(plan, [40.0, 50.0, 60.0, 300.0])
    same = search_run(plan, [40.0, 50.0, 60.0, 300.0])

    verdict = run_judge(run_id=same.id)

    assert capacity_row(verdict)["verdict"] == "within_noise"
    assert verdict.verdict == "within_noise", verdict.headline


def test_a_higher_capacity_is_an_improvement(plan):
    for _ in range(3):
        search_run(plan, [40.0, 50.0, 150.0, 300.0])
    better = search_run(plan, [40.0, 50.0, 60.0, 300.0])

    verdict = run_judge(run_id=better.id)

    assert capacity_row(verdict)["verdict"] == "improved"
