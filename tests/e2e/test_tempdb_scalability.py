"""The tempdb story on the demo target, through the portal and a real worker: σ falls with 8 files.

With one "tempdb file" every page that allocates queues for one lock held 5 ms
(demo/tempdb.py): a single user already keeps it busy, so throughput stays flat at
about 180 pages/s whatever the users, a fully serialized step (σ near 1). With 8 files
the same levels scale linearly. A capacity-search plan of six short levels (users
without think time) runs twice under each configuration; its runs end *done* with their
capacity, and the comparison and the journey say that σ fell: the change removed contention.

Twice, not once: each side's model is fitted on both runs' levels pooled, as the comparison and
the journey do for trials. With 8 files the top levels are bound by the 2-core machine's CPU (at
8 users 74 % of linear scaling, σ ≈ 0.05): from one run of 3 s levels (their residuals about 3 %
of the curve, 2026-12-07), σ's 95 % interval has 3 degrees of freedom and reached 0 in 42 of 300
simulated runs (CI: "No models to compare", the after side unfitted); from two runs, 9 degrees of
freedom, in 0 of 300. One file on a loaded machine left levels of 136–170 pages/s, no model (r²
0.37): the pooled levels are steadier.
"""

import pytest

from portal.history import services as history
from portal.history.comparison import compare_sides, side_for_runs
from portal.history.journey import environment_journey
from portal.projects.management.commands.seed_demo import TEMPDB_LEVELS
from portal.projects.models import Environment, MixEntry, Plan, PlanLevel, Step, TestCase
from portal.runs.models import Run
from portal.runs.services import run_create
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

USERS = TEMPDB_LEVELS  # the seeded demo's capacity plan (1, 2, 3, 4, 6, 8 users), with shorter holds


def finished(run: Run, timeout: float = 90) -> Run:
    wait_until(lambda: Run.objects.get(id=run.id).status in Run.FINISHED, timeout=timeout, what="the run to end")
    run.refresh_from_db()
    return run


def test_more_tempdb_files_make_sigma_fall(project, alice, demo_target, celery_worker):
    # given: the article page (it allocates from tempdb) without think time, six levels of 3 s,
    # a capacity search with APD at most 30 ms
    env = Environment.objects.create(
        project=project,
        name="Demo tempdb",
        base_url=demo_target.base_url,
        configuration=[{"key": "tempdb.files", "value": "1"}],
    )
    article = TestCase.objects.create(project=project, name="Article")
    Step.objects.create(test_case=article, name="Article", path="/articles/7", think_time=0)
    plan = Plan.objects.create(
        project=project,
        environment=env,
        name="Capacity: tempdb",
        profile_kind=Plan.ProfileKind.STEPS,
        threshold_apd_ms=30,
        capacity_search=True,
    )
    for position, users in enumerate(USERS):
        PlanLevel.objects.create(plan=plan, position=position, users=users, ramp_up=1, hold=3)
    MixEntry.objects.create(plan=plan, test_case=article, weight=1)
    try:
        # when: two runs with one file, the change to 8 files, two runs after it
        demo_target.set_knobs(**{"tempdb.files": 1, "latency_ms": 0})
        befores = [finished(run_create(plan=plan, user=alice)) for _ in range(2)]
        change = history.change_create(
            environment=env,
            user=alice,
            edits=[{"key": "tempdb.files", "value": "8"}],
            category="storage",
            title="tempdb: one file per processor",
        )
        demo_target.set_knobs(**{"tempdb.files": 8})
        history.change_apply(change, user=alice)
        afters = [finished(run_create(plan=plan, user=alice)) for _ in range(2)]
    finally:
        demo_target.set_knobs(**{"tempdb.files": 1})

    # then: every capacity search ended with its answer, each run with one file below each with 8
    runs = befores + afters
    levels = {r.number: [lv["pages_per_s"] for lv in r.summary["capacity"]["levels"]] for r in runs}
    assert all(r.status == Run.Status.DONE for r in runs), ([r.status for r in runs], levels)
    for r in runs:
        print(f"  capacity search, run #{r.number}: {r.summary['capacity']['answer']}")
    assert max(r.summary["capacity"]["capacity_users"] for r in befores) < min(
        r.summary["capacity"]["capacity_users"] for r in afters
    ), levels
    # each run's summary has its model, or the reason it has none, in words
    assert all(r.summary["capacity"]["model"]["sentence"] for r in runs), levels
    report = compare_sides(side_for_runs("One file", befores), side_for_runs("Eight files", afters), title=change.title)
    # one file: a fully serialized step, told in words (both runs' levels, a point per run and level)
    m_before = report.models["before"]
    print(f"tempdb levels (pages/s): {levels}\n  1 file: {m_before['sentence']}")
    assert m_before["fitted"] is True and m_before["sigma"] > 0.5, (m_before, levels)
    # sensible values: λ is what one user got, within a third, and the fit's quality is reported
    one_user = sum(levels[r.number][0] for r in befores) / len(befores)
    assert 0.67 * one_user <= m_before["lambda"] <= 1.5 * one_user, (m_before, levels)
    assert m_before["r2"] is not None and len(m_before["levels"]) == 2 * len(USERS), m_before
    print(f"  1 file: λ {m_before['lambda']}, σ {m_before['sigma']}, κ {m_before['kappa']}, r² {m_before['r2']}")
    assert m_before["sentence"].startswith("Contention σ = "), m_before
    # 8 files: σ fell, and the comparison and the journey say so
    print(f"  {report.models['sentence']}")
    assert report.models["comparable"] is True, report.models
    assert report.models["sentence"].startswith(f"σ fell from {m_before['sigma']:.2g}"), report.models
    assert "the change removed contention" in report.models["sentence"]
    effect = environment_journey(env, plan)["effects"][0]
    assert effect["models"]["sentence"] == report.models["sentence"]
