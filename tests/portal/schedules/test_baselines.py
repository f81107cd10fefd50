"""Regression verdicts against a baseline, from real interval rows summarised by the run analysis itself."""

import random

import pytest
from django.utils import timezone

from portal.history.models import TrialSet
from portal.runs.analysis import summarize
from portal.runs.models import Run
from portal.schedules.baselines import run_judge
from portal.schedules.models import Baseline, RunVerdict
from tests.portal.runs.factories import add_second, plan_run

pytestmark = pytest.mark.django_db

HOME, ARTICLES, SEARCH = "Browse: Home", "Browse: Articles", "Search: Search"
BASE_MS = {HOME: 40.0, ARTICLES: 60.0, SEARCH: 80.0}
SECONDS = range(1, 21)  # ramp-up 1 s, hold 20 s


@pytest.fixture
def soak_plan(plan):
    plan.hold = 20
    plan.save()
    return plan


def make_run(plan, seed, *, slow=None, status=Run.Status.PASSED):
    """A finished run whose pages took about BASE_MS (±5 %, random), ``slow`` {label: factor} slower."""
    rng = random.Random(seed)
    run = plan_run(
        plan,
        status=status,
        start_at=timezone.now(),
    )
    for s in SECONDS:
        labels = {}
        for label, ms in BASE_MS.items():
            factor = (slow or {}).get(label, 1.0)
            labels[label] = ([rng.gauss(ms * factor, ms * 0.05) for _ in range(6)], {})
        add_second(run, s, labels=labels)
    run.summary = summarize(run)
    run.save(update_fields=["summary"])
    return run


def test_the_default_baseline_is_the_last_seven_valid_runs(soak_plan):
    # given: a plan without a baseline of its own, nine runs of which one was cancelled
    for seed in range(1, 10):
        make_run(soak_plan, seed, status=Run.Status.CANCELLED if seed == 4 else Run.Status.PASSED)
    run = make_run(soak_plan, 10)

    verdict = run_judge(run_id=run.id)

    # then: it is judged against the last seven valid runs (a week of nights), the cancelled one skipped
    assert verdict.baseline_label == "Baseline: the last 7 valid runs (#2, #3, #5, #6, #7, #8, #9)"
    assert not verdict.provisional
    assert Baseline._meta.get_field("last_n").default == 7


def by_page(verdict: RunVerdict) -> dict:
    pages = {}
    for row in verdict.rows:
        pages.setdefault(row["page"], {})[row["figure"]] = row["verdict"]
    return pages


def test_a_dropped_search_index_regresses_the_search_page_only(soak_plan):
    for seed in (1, 2, 3):
        make_run(soak_plan, seed)
    slow = make_run(soak_plan, 4, slow={SEARCH: 5.0})  # the demo's search without its index

    verdict = run_judge(run_id=slow.id)

    assert verdict.verdict == "regressed"
    pages = by_page(verdict)
    assert pages[SEARCH]["APD"] == "regressed" and pages[SEARCH]["p95"] == "regressed"
    for page in (HOME, ARTICLES):
        assert set(pages[page].values()) == {"within_noise"}, (page, pages[page])
    assert verdict.headline.startswith("Run #4 regressed against Baseline: the last 3 valid runs (#1, #2, #3): ")
    assert "Search: Search APD" in verdict.headline
    assert "batches" in verdict.basis


@pytest.mark.parametrize("seed", range(10, 18))
def test_an_unchanged_run_is_within_noise(soak_plan, seed):
    # Repeated over eight seeds: a flaky false alarm would show here.
    for n in range(3):
        make_run(soak_plan, seed * 10 + n)
    run = make_run(soak_plan, seed * 10 + 5)
    verdict = run_judge(run_id=run.id)
    assert verdict.verdict == "within_noise", verdict.headline
    assert "is within noise of" in verdict.headline


def test_doubtful_runs_stay_out_of_the_baseline(soak_plan):
    make_run(soak_plan, 1)
    make_run(soak_plan, 2, status=Run.Status.PARTIAL, slow={HOME: 3.0})
    run = make_run(soak_plan, 3)
    verdict = run_judge(run_id=run.id)
    assert verdict.baseline_label == "Baseline: the last valid run (#1)"  # not "the last 1 valid runs"
    assert verdict.verdict == "within_noise"


def test_a_pinned_run_and_an_improvement(soak_plan):
    slow = make_run(soak_plan, 1, slow={ARTICLES: 2.0})
    make_run(soak_plan, 2)
    Baseline.objects.create(plan=soak_plan, kind="run", run=slow)
    run = make_run(soak_plan, 3)
    verdict = run_judge(run_id=run.id)
    assert verdict.verdict == "improved" and by_page(verdict)[ARTICLES]["APD"] == "improved"
    assert verdict.baseline_label == "Baseline run #1"


def test_a_pinned_trial_set(soak_plan):
    trial_set = TrialSet.objects.create(
        project=soak_plan.project, environment=soak_plan.environment, plan=soak_plan, plan_name=soak_plan.name,
        label="Before the index", size=2, status=TrialSet.Status.DONE,
    )  # fmt: skip
    for seed in (1, 2):
        Run.objects.filter(id=make_run(soak_plan, seed).id).update(trial_set=trial_set)
    Baseline.objects.create(plan=soak_plan, kind="trial_set", trial_set=trial_set)
    run = make_run(soak_plan, 3, slow={HOME: 2.0})
    verdict = run_judge(run_id=run.id)
    assert verdict.verdict == "regressed" and by_page(verdict)[HOME]["APD"] == "regressed"
    assert "Before the index (2 trials)" in verdict.baseline_label


def test_tolerance_keeps_a_small_real_slowdown_within_noise(soak_plan):
    for seed in (1, 2, 3):
        make_run(soak_plan, seed)
    run = make_run(soak_plan, 4, slow={SEARCH: 1.06})  # 6 % slower: beyond the noise, under 10 %
    assert run_judge(run_id=run.id).verdict == "within_noise"
    Baseline.objects.create(plan=soak_plan, kind="last_n", last_n=3, tolerance_pct=3)
    assert run_judge(run_id=run.id).verdict == "regressed"
    assert RunVerdict.objects.count() == 1  # judged again: the verdict is replaced, not added


def test_no_earlier_run_says_so(soak_plan):
    run = make_run(soak_plan, 1)
    verdict = run_judge(run_id=run.id)
    assert verdict.verdict == "no_baseline" and "No earlier valid run" in verdict.headline


def test_the_journey_carries_the_verdict(soak_plan):
    from portal.history.journey import environment_journey

    for seed in (1, 2, 3):
        make_run(soak_plan, seed)
    slow = make_run(soak_plan, 4, slow={SEARCH: 5.0})
    run_judge(run_id=slow.id)
    journey = environment_journey(soak_plan.environment, soak_plan)
    points = {p["number"]: p for p in journey["points"]}
    assert points[4]["baseline_verdict"] == "regressed"
    assert points[4]["baseline_headline"].startswith("Run #4 regressed")
    assert points[1]["baseline_verdict"] is None
