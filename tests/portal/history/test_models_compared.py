"""Scalability models compared (issue 19): σ, κ and the peak before and after a change, in words.

Two steps runs are built from real interval rows whose levels follow the Universal
Scalability Law with known σ, and summarised by the run analysis itself.
"""

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.history import services
from portal.history.comparison import compare_sides, side_for_run, side_for_runs
from portal.history.journey import change_models, environment_journey
from portal.runs.analysis import summarize
from portal.runs.models import Run
from portal.stats.scalability import usl
from tests.portal.runs.factories import add_second, plan_run

pytestmark = pytest.mark.django_db

USERS = (5, 10, 20, 40, 80)
HOLD = 4
PROFILE = {
    "kind": "steps",
    "levels": [{"users": u, "ramp_up": 0, "hold": HOLD, "ramp_down": 0, "quiet": 0} for u in USERS],
}


def usl_run(plan, sigma, *, kappa=0.0, tuning_change=None, status=Run.Status.PASSED):
    """A finished steps run whose levels serve λ = 10 pages/s per user, slowed by σ and κ (whole pages)."""
    snapshot = {**plan.to_engine_dict(), "profile": PROFILE, "thresholds": {}}
    run = plan_run(
        plan,
        plan_snapshot=snapshot,
        status=status,
        tuning_change=tuning_change,
        start_at=timezone.now(),
    )
    for level, users in enumerate(USERS):
        pages = round(float(usl(users, 10.0, sigma, kappa)))
        for s in range(level * HOLD, (level + 1) * HOLD):
            add_second(run, s, users=users, labels={"Search": ([50.0] * pages, {})})
    run.summary = summarize(run)
    run.save(update_fields=["summary"])
    return run


def test_a_change_that_removes_contention_shows_sigma_falling_in_the_comparison(plan):
    before, after = usl_run(plan, 0.21), usl_run(plan, 0.03)

    report = compare_sides(side_for_run(before), side_for_run(after), title="tempdb: 8 files")

    m = report.models
    assert m["comparable"] is True
    assert m["before"]["sigma"] == pytest.approx(0.21, abs=0.02) and m["after"]["sigma"] == pytest.approx(
        0.03, abs=0.01
    )
    assert m["sentence"].startswith(
        f"σ fell from {m['before']['sigma']:.2g} to {m['after']['sigma']:.2g}: the change removed contention."
    )
    assert "The modelled peak went from" in m["sentence"]


def pool_run(plan, slots):
    """A finished steps run on a pool of `slots` slots of 10 pages/s each: a sharp ceiling, no scalability model."""
    snapshot = {**plan.to_engine_dict(), "profile": PROFILE, "thresholds": {}}
    run = plan_run(plan, plan_snapshot=snapshot, status=Run.Status.PASSED, start_at=timezone.now())
    for level, users in enumerate(USERS):
        for s in range(level * HOLD, (level + 1) * HOLD):
            add_second(run, s, users=users, labels={"Search": ([50.0] * (10 * min(users, slots)), {})})
    run.summary = summarize(run)
    run.save(update_fields=["summary"])
    return run


def test_two_sharp_ceilings_compare_by_their_measured_ceilings(plan):
    # given: a pool of 4 slots before the change, 8 after (issue 28 item 1): neither side fits the law
    before, after = pool_run(plan, 4), pool_run(plan, 8)

    m = compare_sides(side_for_run(before), side_for_run(after), title="pool: 8 slots").models

    assert m["comparable"] is False and m["before"]["sigma"] is None and m["after"]["sigma"] is None
    assert (m["before"]["ceiling_pages_per_s"], m["after"]["ceiling_pages_per_s"]) == (40.0, 80.0)
    assert m["sentence"] == (
        "No scalability model on either side: both levels rise to a sharp ceiling, which went from 40 pages/s "
        "(reached at 5 users) to 80 pages/s (at 10 users): +100 %."
    )


def test_no_models_are_compared_without_steps_runs_and_a_poor_side_says_why(plan):
    flat = usl_run(plan, 0.21)
    flat.summary.pop("capacity")
    flat.save()
    assert compare_sides(side_for_run(flat), side_for_run(usl_run(plan, 0.03))).models is None

    # two sides whose levels still scale linearly have nothing to compare
    report = compare_sides(side_for_run(usl_run(plan, 0.0005)), side_for_run(usl_run(plan, 0.0004)))
    assert report.models["comparable"] is False
    assert report.models["sentence"].startswith("No models to compare (before: The levels do not reach saturation")


def test_a_side_that_scales_linearly_reads_as_sigma_about_zero(plan):
    report = compare_sides(side_for_run(usl_run(plan, 0.21)), side_for_run(usl_run(plan, 0.0005)))

    assert report.models["comparable"] is True and report.models["after"]["linear"] is True
    assert report.models["after"]["sigma"] is None  # no number printed for a model that never saturated
    assert report.models["sentence"] == (
        f"σ fell from {report.models['before']['sigma']:.2g} to about 0: after the change throughput grows "
        "linearly up to 80 users, so the change removed contention."
    )


def test_trials_are_pooled_into_one_model_per_side(plan):
    report = compare_sides(
        side_for_runs("Before", [usl_run(plan, 0.21), usl_run(plan, 0.2)]),
        side_for_runs("After", [usl_run(plan, 0.03), usl_run(plan, 0.035)]),
    )
    assert len(report.models["before"]["levels"]) == 2 * len(USERS)
    assert report.models["sentence"].startswith("σ fell from 0.2")


def test_the_compare_page_the_journey_and_the_change_show_the_models(alice_client, plan, alice):
    # given: a steps run on the initial configuration, the change applied, a steps run under it
    usl_run(plan, 0.21)
    change = services.change_create(
        environment=plan.environment,
        user=alice,
        edits=[{"key": "tempdb.files", "value": "8"}],
        category="storage",
        title="tempdb: one file per processor",
    )
    change = services.change_apply(change, user=alice)
    after = usl_run(plan, 0.03, tuning_change=change)
    before = Run.objects.filter(tuning_change__isnull=True).get()

    # then: the comparison page
    url = reverse("history:compare", args=[plan.project.code]) + f"?a={before.code}&b={after.code}"
    page = alice_client.get(url).content.decode()
    assert "<h3>Scalability models</h3>" in page and "the change removed contention" in page
    # the journey's effect of the change
    effect = environment_journey(plan.environment, plan)["effects"][0]
    assert "the change removed contention" in effect["models"]["sentence"]
    assert (
        "the change removed contention"
        in alice_client.get(
            reverse("history:environment-journey", args=[plan.environment.code]) + f"?plan={plan.code}"
        ).content.decode()
    )
    # and the change's own page in the ledger
    assert [item["plan"] for item in change_models(change)] == [plan]
    page = alice_client.get(change.get_absolute_url()).content.decode()
    assert "Scalability before and after" in page and "the change removed contention" in page


def test_an_outsider_cannot_read_the_changes_models(charlie_client, plan, alice):
    change = services.change_create(
        environment=plan.environment, user=alice, edits=[{"key": "tempdb.files", "value": "8"}], title="t"
    )
    assert charlie_client.get(change.get_absolute_url()).status_code == 404


def test_a_done_capacity_search_counts_like_a_passed_run(plan):
    # given: capacity searches that ended done on both sides
    before = usl_run(plan, 0.21, status=Run.Status.DONE)
    after = usl_run(plan, 0.03, status=Run.Status.DONE)

    side = side_for_run(before)
    report = compare_sides(side, side_for_run(after))

    assert side.runs == [before] and side.excluded == []
    assert report.models["comparable"] is True and report.apd.comparison is not None
    assert environment_journey(plan.environment, plan)["counting"] == 2


def test_a_comparison_of_capacity_searches_gives_each_answer_and_the_models_in_the_api(alice_client, plan, alice):
    from tests.portal.api.conftest import session

    # given: two capacity searches that ended done, before and after a change that removed contention
    runs = []
    for sigma in (0.21, 0.03):
        run = usl_run(plan, sigma, status=Run.Status.DONE)
        run.analysis_settings = {"capacity_search": True}
        run.summary = summarize(run)
        run.save()
        runs.append(run)
    before, after = runs

    # when: they are compared
    report = compare_sides(side_for_run(before), side_for_run(after))

    # then: each search's answer is there, in words, on the page and in the API, with the models
    answers = [(a["side"], a["capacity"]) for a in report.answers]
    assert answers == [("before", before.summary["capacity"]["answer"]), ("after", after.summary["capacity"]["answer"])]
    assert answers[0][1].startswith(f"Capacity: {USERS[-1]} users, ")
    url = reverse("history:compare", args=[plan.project.code]) + f"?a={before.code}&b={after.code}"
    page = alice_client.get(url).content.decode()
    assert 'id="compare-answers"' in page and answers[1][1] in page
    body = (
        session(alice)
        .get(f"/api/v1/projects/{plan.project.code}/compare/", {"a": str(before.code), "b": str(after.code)})
        .json()
    )
    assert [a["capacity"] for a in body["answers"]] == [a for _, a in answers]
    assert body["models"]["sentence"] == report.models["sentence"]
    assert (
        body["models"]["sentence"].startswith("σ fell from 0.2") and "removed contention" in body["models"]["sentence"]
    )
    assert {"lambda", "sigma", "kappa", "peak_users", "peak_pages_per_s", "r2"} <= set(body["models"]["before"])
    assert "before_after" not in body["models"]


def test_the_journey_and_the_change_read_a_side_that_scales_linearly_as_about_zero(alice_client, plan, alice):
    # given: a steps run that saturates (σ = 0.21), the change, a steps run that scales linearly up to 80 users
    usl_run(plan, 0.21)
    change = services.change_create(
        environment=plan.environment, user=alice, edits=[{"key": "tempdb.files", "value": "8"}], title="tempdb"
    )
    change = services.change_apply(change, user=alice)
    usl_run(plan, 0.0005, tuning_change=change)

    journey = alice_client.get(
        reverse("history:environment-journey", args=[plan.environment.code]) + f"?plan={plan.code}"
    ).content.decode()
    ledger = alice_client.get(change.get_absolute_url()).content.decode()

    # then: both say σ fell to about 0 and the peak lies beyond the last level, with no empty figure
    for page in (journey, ledger):
        assert "to about 0: after the change throughput grows linearly" in page
        assert " → ≈ 0, κ " in page and "pages/s → beyond 80 users" in page
        assert "→ ," not in page and "→  pages/s" not in page
