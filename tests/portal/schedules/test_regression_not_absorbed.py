"""Issue 24.3: a regressed run stays out of the rolling baseline until its level is accepted (or explained)."""

import uuid

import pytest

from portal.history.models import TuningChange
from portal.history.services import change_apply, change_create
from portal.runs.models import Run
from portal.schedules.baselines import BaselineError, baseline_save, regression_accept, run_judge
from portal.schedules.models import Baseline, RunVerdict
from portal.schedules.selectors import regression_streak
from tests.portal.api.conftest import bearer, session, token_secret  # noqa: F401, F811 (a fixture)
from tests.portal.runs.factories import plan_run
from tests.portal.schedules.test_baselines import SEARCH, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def soak_plan(plan):
    plan.hold = 20
    plan.save()
    return plan


def night(plan, seed, *, slow=False):
    run = make_run(plan, seed, slow={SEARCH: 5.0} if slow else None)
    return run, run_judge(run_id=run.id)


@pytest.fixture
def lasting_regression(soak_plan):
    """Runs #1–#3 normal, then #4–#7 with the search page 5× slower, each judged as it ended."""
    normal = [night(soak_plan, seed)[0] for seed in (1, 2, 3)]
    slow = [night(soak_plan, seed, slow=True) for seed in (4, 5, 6, 7)]
    return normal, slow


def test_a_lasting_regression_is_reported_every_night_against_the_last_accepted_level(lasting_regression):
    _normal, slow = lasting_regression

    # then: the fourth slow night is still regressed, judged against #1–#3, never against the slow nights
    for run, verdict in slow:
        assert verdict.verdict == "regressed", (run.number, verdict.headline)
        assert "the last 3 valid runs (#1, #2, #3)" in verdict.baseline_label
    streak = regression_streak(plan_id=slow[0][0].plan_id)
    assert streak["since"].number == 4 and streak["runs"] == 4


def test_the_morning_view_says_since_when(lasting_regression, nightly, alice, client):
    client.force_login(alice)
    html = client.get(f"/projects/{nightly.project.code}/schedules/").content.decode()
    assert "Regressed since" in html and "run #4</a> (4 nights)" in html


def test_accepting_the_new_level_records_who_and_why_in_the_ledger_and_the_baseline_takes_it(
    lasting_regression, alice, soak_plan
):
    _normal, slow = lasting_regression
    first = slow[0][0]

    accepted = regression_accept(run=first, user=alice, reason="The new search engine is slower, by design")

    # then: the whole streak is accepted, with one event in the environment's ledger
    assert [v.run.number for v in accepted] == [4, 5, 6, 7]
    event = TuningChange.objects.get(category=TuningChange.Category.BASELINE)
    assert event.is_applied and event.number == 1 and event.made_by == alice
    assert event.reason == "The new search engine is slower, by design" and "#4, #5, #6, #7" in event.title
    assert event.environment_id == first.environment_id
    assert event.environment.configuration == [{"key": "search.index", "value": "off"}]  # no key touched
    for run, _ in slow:
        v = RunVerdict.objects.get(run=run)
        assert v.is_accepted and v.accepted_by == alice and v.accepted_change == event
    assert regression_streak(plan_id=soak_plan.id) is None

    # when: the next night runs at the new level
    run, verdict = night(soak_plan, 8, slow=True)

    # then: judged against the accepted slow nights alone (the level accepted: the normal nights #1–#3 before it
    # are left out though the default N of 7 would reach them), it is within noise
    assert verdict.baseline_label == "Baseline: the last 4 valid runs (#4, #5, #6, #7)"
    assert verdict.verdict == "within_noise", verdict.headline


def test_a_tuning_change_in_the_ledger_can_explain_a_regression(lasting_regression, alice, environment):
    _normal, slow = lasting_regression
    change = change_create(
        environment=environment, user=alice, edits=[{"key": "search.index", "value": "on"}], title="Reindex"
    )
    change_apply(change, call_hook_first=False)

    regression_accept(run=slow[0][0], user=alice, change=change)

    verdict = RunVerdict.objects.get(run=slow[0][0])
    assert verdict.accepted_change == change and verdict.is_accepted
    assert not TuningChange.objects.filter(category=TuningChange.Category.BASELINE).exists()


def test_accept_without_a_regression_or_a_reason_is_refused_and_changes_nothing(soak_plan, alice):
    for seed in (1, 2, 3):
        night(soak_plan, seed)
    run, verdict = night(soak_plan, 4)
    assert verdict.verdict == "within_noise"

    with pytest.raises(BaselineError, match="Run #4 has no regression to accept: its verdict is within noise."):
        regression_accept(run=run, user=alice, reason="why not")
    slow, _ = night(soak_plan, 5, slow=True)
    with pytest.raises(BaselineError, match="Say why the new level is normal"):
        regression_accept(run=slow, user=alice, reason="  ")

    assert not TuningChange.objects.exists()
    assert not RunVerdict.objects.filter(accepted_at__isnull=False).exists()


def test_the_accept_form_is_for_writers_of_the_run_team(lasting_regression, alice, bob, charlie, client):
    run = lasting_regression[1][0][0]
    url = f"/runs/{run.code}/accept/"
    client.force_login(charlie)
    assert client.post(url, {"reason": "x"}).status_code == 404
    client.force_login(bob)
    assert client.post(url, {"reason": "x"}).status_code == 403
    assert not RunVerdict.objects.filter(accepted_at__isnull=False).exists()

    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    assert 'id="accept-regression"' in page
    response = client.post(url, {"reason": "slower by design"}, follow=True)
    assert "Accepted as the new normal: runs #4, #5, #6, #7." in response.content.decode()
    assert 'id="baseline-accepted"' in response.content.decode()


def test_a_pinned_baseline_keeps_working(lasting_regression, soak_plan):
    normal, _ = lasting_regression
    baseline_save(plan=soak_plan, kind="run", last_n=3, run=normal[0], tolerance_pct=10)
    run, verdict = night(soak_plan, 9, slow=True)
    assert verdict.baseline_label == "Baseline run #1"
    assert verdict.verdict == "regressed"


def test_a_pin_to_a_run_that_cannot_be_a_baseline_is_refused(soak_plan):
    other_plan = type(soak_plan).objects.get(pk=soak_plan.pk)
    other_plan.pk = other_plan.id = None
    other_plan.code = uuid.uuid4()
    other_plan.name = "Other"
    other_plan.save()
    foreign = plan_run(other_plan, status=Run.Status.PASSED, plan_snapshot=soak_plan.to_engine_dict())
    cancelled = make_run(soak_plan, 2, status=Run.Status.CANCELLED)
    regressed = [night(soak_plan, seed)[0] for seed in (3, 4, 5)]
    slow, verdict = night(soak_plan, 6, slow=True)
    assert verdict.verdict == "regressed" and regressed

    with pytest.raises(BaselineError, match="Choose a finished run of this plan."):
        baseline_save(plan=soak_plan, kind="run", last_n=3, run=foreign, tolerance_pct=10)
    with pytest.raises(BaselineError, match=r"Run #\d+ cannot be a baseline \(.*cancelled.*\)"):
        baseline_save(plan=soak_plan, kind="run", last_n=3, run=cancelled, tolerance_pct=10)
    with pytest.raises(BaselineError, match=r"cannot be a baseline"):
        baseline_save(plan=soak_plan, kind="run", last_n=3, run=slow, tolerance_pct=10)
    assert not Baseline.objects.exists()


def test_accept_through_the_api(lasting_regression, alice, bob, charlie, token_secret):  # noqa: F811
    run = lasting_regression[1][0][0]
    url = f"/api/v1/runs/{run.code}/accept/"
    # the outsider does not see the run, the viewer may not write, a run token may not accept
    assert session(charlie).post(url, {"reason": "x"}, format="json").status_code == 404
    assert session(bob).post(url, {"reason": "x"}, format="json").status_code == 403
    assert bearer(token_secret("run")).post(url, {"reason": "x"}, format="json").status_code == 403
    # no reason, no change: a 400 that says why, and nothing accepted
    refused = session(alice).post(url, {}, format="json")
    assert refused.status_code == 400 and "Say why the new level is normal" in str(refused.json())
    assert not RunVerdict.objects.filter(accepted_at__isnull=False).exists()

    response = session(alice).post(url, {"reason": "slower by design"}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["accepted"] is True and response.json()["accepted_by"] == "alice"
    assert response.json()["accept_reason"] == "slower by design"
    assert RunVerdict.objects.filter(accepted_at__isnull=False).count() == 4
    again = session(alice).post(url, {"reason": "twice"}, format="json")
    assert again.status_code == 400 and "its verdict is accepted already" in str(again.json())


def test_the_baseline_as_code(lasting_regression, soak_plan, alice, bob, charlie):
    normal, slow = lasting_regression
    url = f"/api/v1/plans/{soak_plan.code}/baseline/"

    # the default, and the morning view's "regressed since" as data
    body = session(alice).get(url).json()
    assert body["kind"] == "last_n" and body["pinned"] is False and body["last_n"] == 7
    assert body["regressed_since"] == {"run": str(slow[0][0].code), "number": 4, "runs": 4}
    assert session(charlie).get(url).status_code == 404
    assert session(bob).put(url, {"kind": "last_n", "last_n": 5}, format="json").status_code == 403

    # pinned to a run of the plan, with its tolerance
    pinned = session(alice).put(url, {"kind": "run", "run": str(normal[0].code), "tolerance_pct": 5}, format="json")
    assert pinned.status_code == 200, pinned.json()
    assert pinned.json()["run"] == str(normal[0].code) and pinned.json()["pinned"] is True
    baseline = Baseline.objects.get(plan=soak_plan)
    assert baseline.run == normal[0] and baseline.tolerance_pct == 5

    # a regressed run cannot be pinned, nor a run that is not there: a 400 that says why, nothing changed
    refused = session(alice).put(url, {"kind": "run", "run": str(slow[1][0].code)}, format="json")
    assert refused.status_code == 400 and "cannot be a baseline" in str(refused.json())
    missing = session(alice).put(url, {"kind": "run", "run": str(uuid.uuid4())}, format="json")
    assert missing.status_code == 400 and "Choose a finished run of this plan." in str(missing.json())
    assert session(alice).put(url, {"kind": "last_n", "last_n": 50}, format="json").status_code == 400
    baseline.refresh_from_db()
    assert baseline.run == normal[0] and baseline.tolerance_pct == 5
