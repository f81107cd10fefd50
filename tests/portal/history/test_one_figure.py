"""One figure, one value (issue 15, item 1).

A run's APD, p95, pages/s and error rate must read the same on its report, in every
comparison (page and API), on the journey (page data and API), in its trial set (page and
API) and in its exports. A trial set's figure is its counting trials **pooled** as one
window, wherever it is shown. Runs are written through the real sink and finalized by the
real finalize (tests/portal/runs/test_store.py), for each load profile.
"""

import csv
import io
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.services import token_create
from portal.history import comparison, journey
from portal.history.models import TrialSet, TuningChange
from portal.history.views.experiments import spread
from portal.runs import analysis
from portal.runs.models import PageInterval, Run
from portal.runs.results import storage
from portal.runs.templatetags.plimsoll import ms, pct, rate
from tests.portal.runs.factories import plan_run
from tests.portal.runs.test_store import PROFILES, _finish, _record
from workers.engine.histogram import Histogram

pytestmark = pytest.mark.django_db

KEYS = ("apd_ms", "p95_ms", "pages_per_s", "error_rate_pct")
NAMES = {"APD": "apd_ms", "p95": "p95_ms", "pages/s": "pages_per_s", "error rate": "error_rate_pct"}


def _new_run(plan, number, **fields):
    defaults = {"config_snapshot": plan.environment.configuration, "start_at": None}
    return plan_run(plan, number=number, **{**defaults, **fields})


def _made(plan, number, profile, *, seed, slow_from=None, **fields):
    run = _finish(_record(_new_run(plan, number, **fields), profile, shards=1, seed=seed, slow_from=slow_from))
    assert run.summary and run.counts, run.doubts
    return run


def _figures(summary_row: dict) -> dict:
    return {k: summary_row.get(k) for k in KEYS}


def _raw_pooled(runs) -> dict:
    """The pooled figures computed here from the raw rows: every run's window rows merged as one window."""
    hist, pages, errors, seconds = Histogram(), 0, 0, 0
    for run in runs:
        windows = analysis.cut_windows(run, analysis.last_second(run))
        seconds += sum(w["seconds"] for w in windows)
        for values in PageInterval.objects.filter(run=run).values_list("second", "pages", "errors", "hist_bin", "hist"):
            second, n, e, hist_bin, hist_json = values
            if any(w["start"] <= second < w["end"] for w in windows):
                hist.merge(storage.histogram(hist_bin, hist_json))
                pages += n
                errors += e
    return {
        "apd_ms": hist.mean / 1000,
        "p95_ms": hist.percentile(95) / 1000,
        "pages_per_s": pages / seconds,
        "error_rate_pct": 100.0 * errors / pages,
    }


def _rows(report_json: dict, side: str) -> dict:
    return {NAMES[r["figure"]]: r[side] for r in report_json["total"] if r["figure"] in NAMES}


def _page_rows(report_json: dict, side: str) -> dict:
    return {p["page"]: {NAMES[r["figure"]]: r[side] for r in p["rows"]} for p in report_json["pages"]}


@pytest.mark.parametrize("kind", sorted(PROFILES))
def test_a_runs_figures_and_a_trial_sets_pooled_figures_agree_everywhere(kind, plan, alice, team, alice_client):
    profile = PROFILES[kind]
    started = timezone.now() - timedelta(hours=3)
    trial_set = TrialSet.objects.create(
        project=plan.project,
        environment=plan.environment,
        plan=plan,
        plan_name=plan.name,
        label="Baseline",
        size=3,
        status=TrialSet.Status.DONE,
    )
    trials = [_made(plan, n, profile, seed=n, trial_set=trial_set) for n in (1, 2, 3)]
    change = TuningChange.objects.create(
        environment=plan.environment,
        number=1,
        title="Add index",
        status=TuningChange.Status.APPLIED,
        applied_at=started + timedelta(hours=1),
    )
    after = _made(plan, 4, profile, seed=9, slow_from=20, tuning_change=change)
    for i, run in enumerate([*trials, after]):  # trials before the change, the single run after it
        Run.objects.filter(id=run.id).update(start_at=started + timedelta(minutes=30 * i if i < 3 else 150))
    trials = [Run.objects.get(id=r.id) for r in trials]
    after = Run.objects.get(id=after.id)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user=alice, team=team, name='t', scope='read')[1]}")

    # ---------------------------------------------------------------- one run
    one, other = trials[0], after
    own = _figures(one.summary["totals"])
    own_pages = {p["label"]: _figures(p) for p in one.summary["pages"]}
    assert all(v is not None for v in own.values())

    # its report (the page renders the summary's totals) and its API, and its exports
    html = alice_client.get(one.get_absolute_url()).content.decode()
    assert f'data-figure="apd">{ms(own["apd_ms"])}<' in html
    assert f'data-figure="pages-per-s">{rate(own["pages_per_s"])}<' in html
    assert f'<div class="value">{ms(own["p95_ms"])}</div><div class="label">p95</div>' in html
    assert f"({pct(own['error_rate_pct'])})" in html
    detail = api.get(f"/api/v1/runs/{one.code}/").json()
    assert _figures(detail["summary"]["totals"]) == own
    assert _figures(api.get(f"/api/v1/runs/{one.code}/summary.json").json()["summary"]["totals"]) == own
    exported = list(csv.DictReader(io.StringIO(api.get(f"/api/v1/runs/{one.code}/pages.csv").content.decode())))
    assert {row["label"]: {k: float(row[k]) for k in KEYS} for row in exported} == own_pages
    assert {p["label"]: _figures(p) for p in api.get(f"/api/v1/runs/{one.code}/pages/").json()} == own_pages

    # every comparison it is part of, on either side, shows its own figures (not the mean of its batches)
    for a, b, side in ((one, other, "before"), (other, one, "after")):
        report = comparison.compare_sides(comparison.side_for_run(a), comparison.side_for_run(b))
        assert report.samples == "batches"
        shown = {
            NAMES[r.figure]: (r._before if side == "before" else r._after) for r in report.total if r.figure in NAMES
        }
        assert shown == own
        by_api = api.get(f"/api/v1/projects/{plan.project.code}/compare/", {"a": a.code, "b": b.code}).json()
        assert _rows(by_api, side) == own
        assert _page_rows(by_api, side) == own_pages
        assert "The figures shown are each side's own" in by_api["basis"]
        # the batches still decide the verdict: their mean is not what is shown
        batches = comparison.run_batches(one)[None]["apd_ms"]
        assert sum(batches) / len(batches) != pytest.approx(own["apd_ms"], abs=1e-9)

    # the journey's point of the run (selector and API)
    data = journey.environment_journey(plan.environment, plan)
    point = next(p for p in data["points"] if p["code"] == str(one.code))
    assert {k: point[k] for k in KEYS} == own
    by_api = api.get(f"/api/v1/projects/{plan.project.code}/journey/", {"plan": plan.code}).json()
    point = next(p for p in by_api["sections"][0]["points"] if p["code"] == str(one.code))
    assert {k: point[k] for k in KEYS} == own

    # its trial set lists its own figures per trial
    page = alice_client.get(trial_set.get_absolute_url()).content.decode()
    row = re.search(rf"<td><a href=\"{one.get_absolute_url()}\">#{one.number}</a></td>(.*?)</tr>", page, re.S).group(1)
    assert ms(own["apd_ms"]) in row and ms(own["p95_ms"]) in row and rate(own["pages_per_s"]) in row

    # ---------------------------------------------------------------- the trial set: pooled
    pooled = _figures(comparison.set_figures(trials)["totals"])
    raw = _raw_pooled(trials)
    assert pooled == pytest.approx(raw, rel=1e-9)
    # pooled is not the mean of the trials' figures (their windows differ in pages)
    assert pooled["apd_ms"] != pytest.approx(sum(t.summary["totals"]["apd_ms"] for t in trials) / 3, rel=1e-9)

    # the trial set's page and API
    table = spread(trials)
    assert {
        key: table[name]["value"]
        for name, key, _ in (
            ("apd", "apd_ms", ""),
            ("p95", "p95_ms", ""),
            ("pages_per_s", "pages_per_s", ""),
            ("error_rate", "error_rate_pct", ""),
        )
    } == pooled
    footer = page.split('id="spread"', 1)[1].split("</tr>", 1)[0]
    assert f'data-figure="apd">{ms(pooled["apd_ms"])}' in footer
    assert f'data-figure="pages-per-s">{rate(pooled["pages_per_s"])}' in footer
    by_api = api.get(f"/api/v1/trial-sets/{trial_set.code}/").json()["figures"]
    assert _figures(by_api["totals"]) == pooled
    assert sorted(by_api["counted"]) == sorted(str(t.code) for t in trials)

    # the trial set in a comparison (against the single run after the change), UI and API
    report = comparison.compare_sides(comparison.side_for_trialset(trial_set), comparison.side_for_run(after))
    assert {NAMES[r.figure]: r._before for r in report.total if r.figure in NAMES} == pooled
    assert {NAMES[r.figure]: r._after for r in report.total if r.figure in NAMES} == _figures(after.summary["totals"])
    by_api = api.get(f"/api/v1/projects/{plan.project.code}/compare/", {"a": trial_set.code, "b": after.code}).json()
    assert _rows(by_api, "before") == pooled
    assert _rows(by_api, "after") == _figures(after.summary["totals"])
    html = alice_client.get(
        reverse("history:compare", args=[plan.project.code]), {"a": trial_set.code, "b": after.code}
    )
    apd_row = next(r for r in report.total if r.figure == "APD")
    assert apd_row.before_text in html.content.decode() and apd_row.after_text in html.content.decode()

    # trial set against trial set (Welch on the trials): still the pooled figures, on both sides
    twin = comparison.side_for_trialset(trial_set)
    report = comparison.compare_sides(twin, comparison.side_for_trialset(trial_set))
    assert report.samples == "trials"
    assert {NAMES[r.figure]: r._before for r in report.total if r.figure in NAMES} == pooled
    assert {NAMES[r.figure]: r._after for r in report.total if r.figure in NAMES} == pooled

    # the journey's effect of the change: the trials under the initial configuration, pooled, vs the run after
    effect = next(e for e in journey.environment_journey(plan.environment, plan)["effects"] if e["number"] == 1)
    assert effect["apd"]["before"] == pooled["apd_ms"]
    assert effect["apd"]["after"] == after.summary["totals"]["apd_ms"]
    assert effect["pages_per_s"]["before"] == pooled["pages_per_s"]
    by_api = api.get(f"/api/v1/projects/{plan.project.code}/journey/", {"plan": plan.code}).json()
    effect = next(e for e in by_api["sections"][0]["effects"] if e["number"] == 1)
    assert effect["apd"]["before"] == pooled["apd_ms"]
    assert effect["pages_per_s"]["after"] == after.summary["totals"]["pages_per_s"]
