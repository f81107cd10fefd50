"""Soak verdicts: degradation onset and drift per hour against the baseline runs' (issue 12).

First the rules on explicit figures (plain functions), then real interval rows summarised by
the run analysis itself and judged by ``run_judge``, as a nightly soak is.
"""

import random

import pytest
from django.utils import timezone

from portal.runs.analysis import summarize
from portal.runs.models import Run
from portal.schedules import soak
from portal.schedules.baselines import run_judge
from tests.portal.runs.factories import add_second, plan_run

# ------------------------------------------------------------------ the rules, on explicit figures


def deg(onset=None, window=7200, apd_drift=0.0, pages_drift=0.0, steady_apd=100.0, steady_pages=50.0):
    return {
        "degradation": {
            "analysed": True,
            "degraded": onset is not None,
            "time_to_degradation_s": onset,
            "window": [60, 60 + window],
            "drift_ms_per_hour": apd_drift,
            "pages_per_s_drift_per_hour": pages_drift,
            "steady_apd_ms": steady_apd,
            "steady_pages_per_s": steady_pages,
        }
    }


def verdicts(run, baseline, tolerance=10.0):
    return {r["figure"]: r["verdict"] for r in soak.soak_rows(run, baseline, tolerance)}


def test_degrading_earlier_than_the_baseline_beyond_its_spread_is_a_regression():
    baseline = [deg(onset=4 * 3600), deg(onset=4.2 * 3600), deg(onset=4.1 * 3600)]
    assert verdicts(deg(onset=1.75 * 3600, window=6 * 3600), baseline)[soak.ONSET] == "regressed"
    # within their spread and the tolerance: no alarm
    assert verdicts(deg(onset=3.9 * 3600, window=6 * 3600), baseline)[soak.ONSET] == "within_noise"


def test_a_noisy_baseline_widens_the_noise():
    baseline = [deg(onset=1 * 3600), deg(onset=4 * 3600), deg(onset=2.5 * 3600)]
    (row,) = [r for r in soak.soak_rows(deg(onset=1.5 * 3600), baseline, 10.0) if r["figure"] == soak.ONSET]
    assert row["verdict"] == "within_noise" and row["noise"].startswith("± ")


def test_degrading_where_the_baseline_held_is_a_regression_and_holding_where_it_degraded_an_improvement():
    held = [deg(), deg(), deg()]  # 2 h windows, no degradation
    rows = {r["figure"]: r for r in soak.soak_rows(deg(onset=1800), held, 10.0)}
    assert rows[soak.ONSET]["verdict"] == "regressed"
    assert "the baseline never did" in rows[soak.ONSET]["change"]
    # the baseline held only 20 min: a degradation after 30 min says nothing against it
    short = [deg(window=1200)]
    assert verdicts(deg(onset=1800), short)[soak.ONSET] == "none"
    # every baseline run degraded within the run's window, the run held: improved
    degraded = [deg(onset=3000), deg(onset=3300)]
    assert verdicts(deg(), degraded)[soak.ONSET] == "improved"
    assert verdicts(deg(), held)[soak.ONSET] == "within_noise"


def test_drifting_faster_than_the_baseline_is_a_regression_in_either_direction_that_hurts():
    baseline = [deg(apd_drift=1.0, pages_drift=-0.1), deg(apd_drift=2.0, pages_drift=0.0), deg(apd_drift=1.5)]
    # APD rises 30 ms/h faster; the floor is 10 % of a 100 ms steady APD per hour (10 ms/h)
    assert verdicts(deg(apd_drift=31.5), baseline)[soak.APD_DRIFT] == "regressed"
    assert verdicts(deg(apd_drift=8.0), baseline)[soak.APD_DRIFT] == "within_noise"
    assert verdicts(deg(apd_drift=-20.0), baseline)[soak.APD_DRIFT] == "improved"
    # pages/s falling 8 per hour, against a floor of 5 (10 % of 50 pages/s): regressed; rising is no regression
    assert verdicts(deg(pages_drift=-8.0), baseline)[soak.PAGES_DRIFT] == "regressed"
    assert verdicts(deg(pages_drift=-3.0), baseline)[soak.PAGES_DRIFT] == "within_noise"
    assert verdicts(deg(pages_drift=8.0), baseline)[soak.PAGES_DRIFT] == "improved"


def test_runs_not_analysed_for_degradation_have_no_soak_rows():
    not_analysed = {"degradation": {"analysed": False, "reason": "too short"}}
    assert soak.soak_rows(not_analysed, [deg()], 10.0) == []
    assert soak.soak_rows(deg(), [not_analysed, {}], 10.0) == []
    assert soak.soak_rows({}, [deg()], 10.0) == []
    # a baseline run without the pages/s drift (summarised before it existed) still gives the other rows
    old = deg()
    del old["degradation"]["pages_per_s_drift_per_hour"]
    assert set(verdicts(deg(), [old])) == {soak.ONSET, soak.APD_DRIFT}


# ------------------------------------------------------------------ real rows, judged as a nightly soak is

LABELS = {"Browse: Home": 40.0, "Search: Search": 80.0}
HOLD = 120


@pytest.fixture
def soak_plan(plan):
    plan.hold = HOLD
    plan.degradation_steady_s = 20
    plan.degradation_sustain_s = 10
    plan.save()
    return plan


def make_soak_run(plan, seed, *, leak_from=None, leak_ms_per_s=0.0):
    """A finished soak: pages at about LABELS' durations (±5 %), APD climbing after ``leak_from`` (a leak)."""
    rng = random.Random(seed)
    run = plan_run(
        plan,
        analysis_settings=plan.analysis_settings(),
        status=Run.Status.PASSED,
        start_at=timezone.now(),
    )
    for s in range(1, HOLD + 1):
        extra = leak_ms_per_s * (s - leak_from) if leak_from is not None and s > leak_from else 0.0
        labels = {label: ([rng.gauss(ms + extra, ms * 0.05) for _ in range(6)], {}) for label, ms in LABELS.items()}
        add_second(run, s, labels=labels)
    run.summary = summarize(run)
    run.save(update_fields=["summary"])
    return run


@pytest.mark.django_db
def test_a_leaking_night_regresses_on_onset_and_apd_drift(soak_plan):
    # given: three calm nights, then one whose pages slow down by 3 ms more every second from second 50
    for seed in (1, 2, 3):
        make_soak_run(soak_plan, seed)
    leaking = make_soak_run(soak_plan, 4, leak_from=50, leak_ms_per_s=3.0)
    assert leaking.summary["degradation"]["degraded"] is True

    # when
    verdict = run_judge(run_id=leaking.id)

    # then: regressed, and the soak rows say why; the headline names the soak
    assert verdict.verdict == "regressed"
    rows = {r["figure"]: r for r in verdict.soak_rows}
    assert rows[soak.ONSET]["verdict"] == "regressed"
    assert rows[soak.APD_DRIFT]["verdict"] == "regressed"
    assert rows[soak.PAGES_DRIFT]["verdict"] == "within_noise"  # the same pages every second
    assert [r["figure"] for r in verdict.soak_regressed] == [soak.ONSET, soak.APD_DRIFT]


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(10, 20))
def test_a_calm_night_has_no_soak_alarm(soak_plan, seed):
    for s in (1, 2, 3):
        make_soak_run(soak_plan, s)
    calm = make_soak_run(soak_plan, seed)

    verdict = run_judge(run_id=calm.id)

    assert {r["figure"]: r["verdict"] for r in verdict.soak_rows} == {
        soak.ONSET: "within_noise",
        soak.APD_DRIFT: "within_noise",
        soak.PAGES_DRIFT: "within_noise",
    }


@pytest.mark.django_db
def test_the_run_page_the_fires_and_the_api_show_the_soak_verdict(soak_plan, alice, client):
    from portal.schedules.models import Schedule, ScheduleFire

    for seed in (1, 2, 3):
        make_soak_run(soak_plan, seed)
    leaking = make_soak_run(soak_plan, 4, leak_from=50, leak_ms_per_s=3.0)
    schedule = Schedule.objects.create(
        project=soak_plan.project, plan=soak_plan, plan_name=soak_plan.name, cron="0 2 * * *",
        last_due_at=timezone.now(),
    )  # fmt: skip
    ScheduleFire.objects.create(schedule=schedule, due_at=timezone.now(), outcome="started", run=leaking)
    run_judge(run_id=leaking.id)
    client.force_login(alice)

    run_page = client.get(leaking.get_absolute_url()).content.decode()
    schedule_page = client.get(schedule.get_absolute_url()).content.decode()
    api = client.get(f"/api/v1/runs/{leaking.code}/").json()

    assert 'id="soak-verdict"' in run_page and "Degradation onset" in run_page
    assert "soak: degradation onset" in schedule_page and "soak: apd drift per hour" in schedule_page
    soak_rows = [r for r in api["baseline_verdict"]["rows"] if r["figure"] in soak.FIGURES]
    assert {r["figure"]: r["verdict"] for r in soak_rows}[soak.ONSET] == "regressed"
