"""The comparison of two runs or trial sets (issue 4): samples, verdicts, capacity, measurements, the page.

Runs are built from real interval rows with known latencies and summarised by the
run analysis itself, so every figure below is what a real run with those pages
would report.
"""

import random
import statistics
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.history.comparison import (
    batch_bounds,
    compare_sides,
    run_batches,
    run_capacity,
    side_for_run,
    side_for_runs,
    side_for_trialset,
)
from portal.history.models import ExternalMeasurement, TrialSet, TuningChange
from portal.projects.models import Project
from portal.runs.analysis import summarize
from portal.runs.models import Run
from portal.stats import analysis
from tests.portal.runs.factories import add_second, plan_run

pytestmark = pytest.mark.django_db

HOME = "Browse: Home"
ARTICLES = "Browse: Articles"


def make_run(
    plan,
    apd_ms=None,
    *,
    per_second=None,
    seconds=range(1, 6),
    pages=4,
    errors=0,
    labels=(HOME,),
    status=Run.Status.PASSED,
    trial_set=None,
    tuning_change=None,
    profile=None,
    thresholds=None,
):
    """A finished run whose pages each took `apd_ms` (or per_second[second]) in every measured second.

    Default plan: ramp-up 1 s, hold 5 s, so seconds 1–5 are the measurement window.
    """
    snapshot = plan.to_engine_dict()
    if profile is not None:
        snapshot["profile"] = profile
    if thresholds is not None:
        snapshot["thresholds"] = thresholds
    run = plan_run(
        plan,
        plan_snapshot=snapshot,
        config_snapshot=plan.environment.configuration,
        status=status,
        trial_set=trial_set,
        tuning_change=tuning_change,
        start_at=timezone.now(),
    )
    for s in seconds:
        latency = per_second[s] if per_second is not None else apd_ms
        add_second(
            run,
            s,
            labels={label: ([latency] * pages, {"http_status": errors} if errors else {}) for label in labels},
        )
    run.summary = summarize(run)
    run.save(update_fields=["summary"])
    return run


def make_trialset(plan, apds, *, label, **run_kwargs):
    trial_set = TrialSet.objects.create(
        project=plan.project,
        environment=plan.environment,
        plan=plan,
        plan_name=plan.name,
        label=label,
        size=len(apds),
        status=TrialSet.Status.DONE,
    )
    for apd in apds:
        make_run(plan, apd, trial_set=trial_set, **run_kwargs)
    return trial_set


# ------------------------------------------------------------------ trial sets


def test_three_trials_each_give_a_welch_verdict_with_speedup_and_reduction(plan):
    before = make_trialset(plan, [412, 405, 420], label="Baseline: Add index")
    after = make_trialset(plan, [200, 205, 198], label="After: Add index")

    report = compare_sides(side_for_trialset(before), side_for_trialset(after), title="Add index")

    assert report.samples == "trials"
    assert report.before.label == "Baseline: Add index (3 trials)"
    apd = report.apd
    c = apd.comparison
    assert (c.n_before, c.n_after, c.method) == (3, 3, "welch")
    assert c.before_mean == pytest.approx(412.3333, abs=1e-3)
    assert c.after_mean == pytest.approx(201.0, abs=1e-3)
    assert c.speedup == pytest.approx(412.3333 / 201.0, rel=1e-4)  # 2.05×
    assert apd.verdict == analysis.BETTER and apd.verdict_class == "verdict-better"
    assert (apd.before_text, apd.after_text, apd.speedup_text, apd.change_text) == (
        "412 ms",
        "201 ms",
        "2.05×",
        "51.3 % less",
    )
    assert report.headline.startswith("Add index: APD 412 ms → 201 ms (2.05× faster), well beyond the noise between")
    assert "3 trials each; the difference is" in report.basis
    assert "spread between trials" in report.basis
    assert report.problems == []
    # every page took the same time, so p95 moves with APD; throughput and errors did not change
    figures = {row.figure: row for row in report.total}
    assert list(figures) == ["APD", "p95", "pages/s", "error rate"]
    assert figures["p95"].verdict == analysis.BETTER
    assert figures["pages/s"].verdict == analysis.WITHIN_NOISE
    assert figures["pages/s"].change_text == "no change"
    assert figures["error rate"].verdict == analysis.WITHIN_NOISE
    assert figures["error rate"].note == "no errors on either side"
    # per page: the one page, same figures
    assert [page for page, _ in report.pages] == [HOME]
    assert [r.figure for r in report.pages[0][1]] == ["APD", "p95", "pages/s", "error rate"]
    assert report.pages[0][1][0].verdict == analysis.BETTER


def test_a_difference_smaller_than_the_spread_between_trials_is_within_noise(plan):
    before = make_trialset(plan, [400, 420, 410], label="Baseline")
    after = make_trialset(plan, [405, 415, 398], label="After")

    report = compare_sides(side_for_trialset(before), side_for_trialset(after), title="Add index")

    assert report.apd.verdict == analysis.WITHIN_NOISE
    assert report.apd.verdict_class == "verdict-noise"
    assert report.apd.comparison.method == "welch"
    assert "within the noise between trials" in report.headline
    assert "could be noise" in report.basis


def test_a_throughput_gain_reads_as_a_plus_percentage(plan):
    before = make_trialset(plan, [100, 100, 100], label="Baseline", pages=10)
    after = make_trialset(plan, [100, 100, 100], label="After", pages=12)

    rows = {r.figure: r for r in compare_sides(side_for_trialset(before), side_for_trialset(after)).total}

    assert rows["pages/s"].before_text == "10/s" and rows["pages/s"].after_text == "12/s"
    assert rows["pages/s"].change_text == "+20 %"
    assert rows["pages/s"].speedup_text == "1.20×"
    assert rows["pages/s"].verdict == analysis.BETTER  # no spread: beyond the 5 % tolerance
    assert rows["APD"].verdict == analysis.WITHIN_NOISE


def test_errors_appearing_after_are_worse(plan):
    before = make_trialset(plan, [100, 100, 100], label="Baseline")
    after = make_trialset(plan, [100, 100, 100], label="After", errors=1)  # 1 error in 5 pages per second

    rows = {r.figure: r for r in compare_sides(side_for_trialset(before), side_for_trialset(after)).total}

    assert rows["error rate"].after_text == "20 %"
    assert rows["error rate"].verdict == analysis.WORSE
    assert rows["error rate"].change_text == "up from 0 %"


# ------------------------------------------------------------------ single runs: batch means


def test_two_single_runs_are_compared_on_batch_means(plan):
    plan.hold = 20  # window: seconds 1–20, 10 batches of 2 s
    plan.save()
    rng = random.Random(4)
    slow = {s: round(rng.gauss(300, 15)) for s in range(1, 21)}
    fast = {s: round(rng.gauss(200, 15)) for s in range(1, 21)}
    run_a = make_run(plan, per_second=slow, seconds=range(1, 21), pages=2)
    run_b = make_run(plan, per_second=fast, seconds=range(1, 21), pages=2)

    report = compare_sides(side_for_run(run_a), side_for_run(run_b))

    assert report.samples == "batches"
    assert report.title == "Run #2 vs Run #1"
    c = report.apd.comparison
    assert (c.n_before, c.n_after, c.method, c.samples) == (10, 10, "welch", "batches")
    # each sample is the mean of a batch of per-second APDs: the method of batch means
    assert run_batches(run_a)[None]["apd_ms"] == pytest.approx(
        analysis.batch_means([slow[s] for s in range(1, 21)], 10), abs=0.01
    )
    assert c.before_mean == pytest.approx(statistics.fmean(slow.values()), abs=0.01)
    assert c.after_mean == pytest.approx(statistics.fmean(fast.values()), abs=0.01)
    assert report.apd.verdict == analysis.BETTER
    assert "One run on each side" in report.basis and "batch" in report.basis
    assert "10 batches each" in report.basis
    # the same pages every second: throughput has no spread and did not change
    assert run_batches(run_a)[None]["pages_per_s"] == [2.0] * 10
    assert {r.figure: r.verdict for r in report.total}["pages/s"] == analysis.WITHIN_NOISE


def test_batch_p95_comes_from_the_merged_histogram_of_the_batch(plan):
    # seconds 1–5: two batches (seconds 1–2 and 3–5)
    run = make_run(plan, seconds=[])
    add_second(run, 1, labels={HOME: ([10.0, 1000.0], {})})  # this second's own p95 is 1 s
    add_second(run, 2, labels={HOME: ([10.0] * 18, {})})
    for s in (3, 4, 5):
        add_second(run, s, labels={HOME: ([10.0] * 5, {})})

    batches = run_batches(run)[None]

    assert batch_bounds(5) == [0, 2, 5]
    # batch 1 merged: 19 pages at 10 ms, 1 at 1 s → p95 is 10 ms (averaging per-second p95s would say 505 ms)
    assert batches["p95_ms"] == [pytest.approx(10.0, rel=0.01), pytest.approx(10.0, rel=0.01)]
    assert batches["pages_per_s"] == [10.0, 5.0]
    # APD: the mean of the per-second APDs (505 ms and 10 ms)
    assert batches["apd_ms"] == [pytest.approx(257.5, rel=0.001), pytest.approx(10.0, rel=0.001)]
    assert batches["error_rate_pct"] == [0.0, 0.0]
    assert run_batches(run)[HOME]["pages_per_s"] == [10.0, 5.0]


def test_one_run_against_a_trial_set_uses_batches_on_both_sides(plan):
    run = make_run(plan, 300)
    trials = make_trialset(plan, [200, 210, 190], label="After: Add index")

    report = compare_sides(side_for_run(run), side_for_trialset(trials))

    assert report.samples == "batches"
    c = report.apd.comparison
    assert (c.n_before, c.n_after) == (2, 6)  # 5 measured seconds → 2 batches per run, pooled on the trial side
    assert "Run #1 is a single run, so both sides are compared on batches" in report.basis
    assert "the 3 runs of After: Add index (3 trials) pool their batches" in report.basis
    assert report.apd.verdict == analysis.BETTER


# ------------------------------------------------------------------ doubtful runs


def test_a_doubtful_run_is_shown_but_left_out_unless_included(plan):
    before = make_trialset(plan, [400, 410, 405], label="Baseline")
    after = make_trialset(plan, [200, 205], label="After")
    cancelled = make_run(plan, 5000, trial_set=after, status=Run.Status.CANCELLED)

    report = compare_sides(side_for_trialset(before), side_for_trialset(after))

    assert [r.id for r in report.after.excluded] == [cancelled.id]
    assert report.after.label == "After (3 trials)"
    assert report.apd.comparison.n_after == 2
    assert report.apd.comparison.after_mean == pytest.approx(202.5)
    assert f"run #{cancelled.number} (it was cancelled)" in report.basis

    cancelled.include_anyway = True
    cancelled.save(update_fields=["include_anyway"])
    report = compare_sides(side_for_trialset(before), side_for_trialset(after))

    assert report.after.excluded == []
    assert report.apd.comparison.n_after == 3
    assert report.apd.comparison.after_mean == pytest.approx((200 + 205 + 5000) / 3)
    assert f"Included although doubtful (by a user's choice): run #{cancelled.number}" in report.basis


def test_a_side_with_no_counting_run_has_no_verdicts_and_says_why(plan):
    good = make_run(plan, 300)
    partial = make_run(plan, 200, status=Run.Status.PARTIAL)

    report = compare_sides(side_for_run(good), side_for_run(partial))

    assert report.samples == ""
    assert all(row.comparison is None for row in report.total)
    assert report.apd.note == "no run on the after side counts"
    assert report.apd.verdict_class == "verdict-none"
    assert report.headline == "Run #2 vs Run #1: no comparison, no run on the after side counts."
    assert report.problems == ["No run on the after side counts (run #2: a shard was lost)."]


def test_different_plans_and_pages_on_one_side_are_problems_not_errors(plan, project, environment, test_case):
    from portal.projects.models import MixEntry, Plan

    other = Plan.objects.create(project=project, environment=environment, name="Soak", users=5, ramp_up=1, hold=5)
    MixEntry.objects.create(plan=other, test_case=test_case, weight=1)
    run_a = make_run(plan, 300, labels=(HOME, ARTICLES))
    run_b = make_run(other, 200, labels=(HOME,))

    report = compare_sides(side_for_run(run_a), side_for_run(run_b))

    assert "The two sides ran different plans (Smoke before, Soak after)" in report.problems[0]
    pages = dict(report.pages)
    assert list(pages) == [ARTICLES, HOME]
    articles_apd = pages[ARTICLES][0]
    assert articles_apd.comparison is None
    assert articles_apd.note == "not measured on the after side"
    assert articles_apd.before_text == "300 ms" and articles_apd.after_text == "—"
    assert pages[HOME][0].verdict == analysis.BETTER


def test_side_for_runs_splits_counting_runs_from_doubtful_ones_oldest_first(plan):
    first = make_run(plan, 100)
    error = make_run(plan, 100, status=Run.Status.ERROR)
    third = make_run(plan, 100)

    side = side_for_runs("Last week", [third, error, first])

    assert [r.id for r in side.runs] == [first.id, third.id]
    assert [r.id for r in side.excluded] == [error.id]
    assert side.label == "Last week" and side.measurements == []


# ------------------------------------------------------------------ capacity


STEPS = {
    "kind": "steps",
    "levels": [{"users": u, "ramp_up": 0, "hold": 5, "ramp_down": 0, "quiet": 0} for u in (10, 20, 40)],
}


def make_step_run(plan, apds, pages):
    """Levels of 10, 20, 40 users, 5 s each (seconds 0–4, 5–9, 10–14), APD ≤ 500 ms as threshold."""
    run = make_run(plan, seconds=[], profile=STEPS, thresholds={"apd_ms": 500})
    for level, (apd, n) in enumerate(zip(apds, pages, strict=True)):
        for s in range(level * 5, level * 5 + 5):
            add_second(run, s, users=STEPS["levels"][level]["users"], labels={HOME: ([apd] * n, {})})
    run.summary = summarize(run)
    run.save(update_fields=["summary"])
    return run


def test_step_runs_show_capacity_before_and_after(plan):
    # before: 40 users break the 500 ms APD, and throughput stops growing after 20 users
    before = make_step_run(plan, apds=[100, 300, 900], pages=[10, 20, 22])
    after = make_step_run(plan, apds=[100, 150, 300], pages=[10, 20, 40])

    assert run_capacity(before).capacity_users == 20
    report = compare_sides(side_for_run(before), side_for_run(after), title="Add index")

    cap = report.capacity
    assert cap is report.total[-1] and cap.figure == "capacity" and cap.unit == "users"
    assert (cap.before_text, cap.after_text, cap.speedup_text, cap.change_text) == (
        "20 users",
        "40 users",
        "2.00×",
        "+100 %",
    )
    assert cap.verdict == analysis.BETTER
    assert cap.comparison.samples == "runs"
    assert cap.note == (
        "the knee (after it throughput grows less than half as fast as the users): 20 users before, none after"
    )


def test_capacity_is_left_out_when_a_side_has_no_levels(plan):
    steps = make_step_run(plan, apds=[100, 300, 900], pages=[10, 20, 22])
    flat = make_run(plan, 200)

    report = compare_sides(side_for_run(steps), side_for_run(flat))

    assert report.capacity is None
    assert run_capacity(flat) is None
    assert "The plan's load profile was edited between the runs" in " ".join(report.problems)


# ------------------------------------------------------------------ external measurements


def test_external_measurements_join_the_comparison(plan, environment, alice):
    change = TuningChange.objects.create(
        environment=environment,
        title="Move backups to RBS",
        edits=[{"key": "sharepoint.rbs", "value": "on"}],
        config_before=environment.configuration,
        config_after=[*environment.configuration, {"key": "sharepoint.rbs", "value": "on"}],
        status=TuningChange.Status.APPLIED,
        number=1,
        applied_at=timezone.now(),
    )
    before = make_run(plan, 300)
    after = make_run(plan, 290, tuning_change=change)
    now = timezone.now()
    ExternalMeasurement.objects.create(
        environment=environment, name="Database backup", unit="s", value=2490, measured_at=now, run=before
    )
    # measured under the change, not attached to a run: joins the side of runs under that change
    ExternalMeasurement.objects.create(
        environment=environment,
        name="Database backup",
        unit="s",
        value=38,
        measured_at=now + timedelta(hours=1),
        tuning_change=change,
    )
    # only on one side: no row
    ExternalMeasurement.objects.create(
        environment=environment, name="Crawl", unit="min", value=50, measured_at=now, run=before
    )

    report = compare_sides(side_for_run(before), side_for_run(after))

    assert report.title == "Move backups to RBS"  # one change separates the sides
    assert [m.value for m in report.before.measurements] == [2490, 50]
    assert [m.value for m in report.after.measurements] == [38]
    [row] = report.measurements
    assert (row.figure, row.unit, row.page) == ("Database backup", "s", None)
    assert (row.before_text, row.after_text, row.change_text, row.speedup_text) == (
        "2,490 s",
        "38 s",
        "98.5 % less",
        "65.5×",
    )
    assert row.comparison.reduction_pct == pytest.approx(98.47, abs=0.01)
    assert row.verdict == analysis.BETTER
    assert row.comparison.samples == "measurements"


# ------------------------------------------------------------------ the page


def compare_url(project, a=None, b=None):
    url = reverse("history:compare", args=[project.code])
    params = [f"{k}={v}" for k, v in (("a", a), ("b", b)) if v]
    return url + ("?" + "&".join(params) if params else "")


def test_alice_compares_two_runs(alice_client, plan):
    run_a = make_run(plan, 412)
    run_b = make_run(plan, 201)

    response = alice_client.get(compare_url(plan.project, run_a.code, run_b.code))

    assert response.status_code == 200
    report = response.context["report"]
    assert report.before.runs == [run_a] and report.after.runs == [run_b]
    html = response.content.decode()
    assert 'id="headline"' in html and "Run #2 vs Run #1: APD 412 ms → 201 ms" in html
    assert 'class="badge verdict-better" data-verdict="better"' in html
    assert 'id="compare-total"' in html and 'id="compare-pages"' in html
    assert f'href="{compare_url(plan.project, run_b.code, run_a.code)}"'.replace("&", "&amp;") in html  # swap


def test_a_trial_set_against_a_run_and_the_excluded_runs_listed(alice_client, plan):
    trials = make_trialset(plan, [400, 410], label="Baseline: Add index")
    cancelled = make_run(plan, 5000, trial_set=trials, status=Run.Status.CANCELLED)
    run = make_run(plan, 200)

    response = alice_client.get(compare_url(plan.project, trials.code, run.code))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Baseline: Add index (3 trials)" in html
    assert 'id="compare-excluded"' in html
    assert f'href="{cancelled.get_absolute_url()}"' in html and "it was cancelled" in html


def test_bob_the_viewer_reads_a_comparison(bob_client, plan):
    run_a, run_b = make_run(plan, 300), make_run(plan, 200)
    assert bob_client.get(compare_url(plan.project, run_a.code, run_b.code)).status_code == 200


def test_charlie_gets_404_for_another_teams_project_and_run(charlie_client, charlie, plan):
    run_a, run_b = make_run(plan, 300), make_run(plan, 200)
    own = Project.objects.create(team=charlie.teams.get(), name="Charlie's")

    assert charlie_client.get(compare_url(plan.project, run_a.code, run_b.code)).status_code == 404
    assert charlie_client.get(compare_url(own, run_a.code, run_b.code)).status_code == 404
    assert charlie_client.get(compare_url(own)).status_code == 200  # his own project's picker


def test_an_unknown_or_malformed_code_is_404(alice_client, plan):
    run = make_run(plan, 300)
    assert alice_client.get(compare_url(plan.project, run.code, "not-a-uuid")).status_code == 404
    assert alice_client.get(compare_url(plan.project, run.code, plan.code)).status_code == 404  # a plan's code


def test_the_picker_lists_finished_runs_and_trial_sets_newest_first(alice_client, plan):
    old = make_run(plan, 300)
    trials = make_trialset(plan, [200, 210], label="After: Add index")
    make_run(plan, 100, status=Run.Status.RUNNING)  # still going: not offered

    response = alice_client.get(compare_url(plan.project, old.code))

    assert response.status_code == 200 and "report" not in response.context
    choices = response.context["choices"]
    assert [label.split(" · ")[:3] for _, label in choices["runs"]] == [
        ["Run #3", "Smoke", "passed"],
        ["Run #2", "Smoke", "passed"],
        ["Run #1", "Smoke", "passed"],
    ]
    assert choices["trial_sets"][0][0] == str(trials.code)
    assert choices["trial_sets"][0][1].startswith("Trial set: After: Add index (2 runs) · ")
    html = response.content.decode()
    assert f'<option value="{old.code}" selected>' in html  # a is preselected
    assert 'id="no-runs"' not in html


def test_the_picker_has_an_empty_state_without_finished_runs(alice_client, plan):
    make_run(plan, 100, status=Run.Status.QUEUED)

    response = alice_client.get(compare_url(plan.project))

    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="no-runs"' in html and "Nothing to compare yet" in html
    assert 'id="picker"' not in html


def test_run_page_and_project_pages_link_to_the_comparison(alice_client, plan):
    run = make_run(plan, 300)
    compare = reverse("history:compare", args=[plan.project.code])

    assert f'href="{compare}?a={run.code}"' in alice_client.get(run.get_absolute_url()).content.decode()
    assert f'href="{compare}"' in alice_client.get(plan.project.get_absolute_url()).content.decode()
    assert f'href="{compare}"' in alice_client.get(reverse("runs:project", args=[plan.project.code])).content.decode()
