"""Real runs on the demo target: a change in the ledger drops the search index between two nights, and the
plan's history shows one change point on the search page, attributed to that change and to the new build."""

import json

import pytest

from portal.history.models import TuningChange
from portal.history.services import change_apply, change_create
from portal.runs.services.labels import run_label
from portal.schedules.change_points import plan_change_points
from tests.e2e.test_baseline_end_to_end import demo_target, nightly_plan, run_to_end  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NIGHTS = 5  # each side: the fewest runs a new level needs (portal.stats.shifts.MIN_RUNS)


def night(plan, user, build):
    run = run_to_end(plan, user)
    return run_label(run=run, labels={"build": build})


def test_a_dropped_index_is_one_change_point_named_by_its_change_and_build(
    nightly_plan,  # noqa: F811
    demo_target,  # noqa: F811
    celery_worker,
    alice,
):
    demo_target.set_knobs(**{"search.index": "on", "latency_ms": 20, "tempdb.files": 16})
    before = [night(nightly_plan, alice, "aaa111") for _ in range(NIGHTS)]
    # the change goes through the ledger: its hook flips the target's knob
    change = change_create(
        environment=nightly_plan.environment,
        user=alice,
        title="Drop index ix_work_items_area",
        category=TuningChange.Category.INDEX,
        edits=[{"key": "db.index.work_items.area", "value": "off"}],
        hook_url=f"{demo_target.base_url}/_demo/knobs",
        hook_body=json.dumps({"search.index": "off"}),
    )
    change_apply(change, user=alice)
    change.refresh_from_db()
    assert change.status == TuningChange.Status.APPLIED, change.error_message
    after = [night(nightly_plan, alice, "bbb222") for _ in range(NIGHTS)]

    found = plan_change_points(plan=nightly_plan)

    search = [c for c in found if c.page == "Search: Search" and c.figure == "APD"]
    assert len(search) == 1, ([c.text for c in found], after[0].summary["pages"])
    shift = search[0]
    assert shift.run_number == after[0].number and shift.previous_run_number == before[-1].number
    assert shift.change_pct > 10 and shift.labels == {"build": "bbb222"}
    assert [c.title for c in shift.changes] == ["Drop index ix_work_items_area"]
    assert shift.text.endswith("(build bbb222; after the change ‘Drop index ix_work_items_area’)")
    # the home page does not use the index: no change point of its APD
    assert not [c for c in found if c.page == "Browse: Home" and c.figure == "APD"], [c.text for c in found]
