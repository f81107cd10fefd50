"""Issue 12 in the API: who started a run (a person, a token, a schedule) and its verdict against the baseline."""

import json

import pytest
from django.utils import timezone

from portal.accounts.models import ApiToken
from portal.runs.models import Run
from portal.schedules.baselines import run_judge
from portal.schedules.models import Schedule, ScheduleFire
from tests.portal.runs.factories import plan_run
from tests.portal.schedules.test_baselines import SEARCH, make_run

from .conftest import bearer, session

pytestmark = pytest.mark.django_db


@pytest.fixture
def soak_plan(plan):
    plan.hold = 20
    plan.save()
    return plan


def test_a_run_started_with_a_token_records_the_token_never_its_secret(plan, alice, token_secret):
    # given
    secret = token_secret("run")
    token = ApiToken.objects.get()

    # when
    response = bearer(secret).post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    # then: the run keeps the token's name and prefix; the secret is nowhere in the row or the answer
    assert response.status_code == 201
    run = Run.objects.get()
    assert run.api_token == token
    assert run.api_token_label == f"run token ({token.prefix}…)"
    assert secret not in run.api_token_label and secret[len(token.prefix) :] not in json.dumps(response.json())
    body = response.json()
    assert body["api_token"] == run.api_token_label
    assert body["started_by"] == f"alice via token run token ({token.prefix}…)"
    assert body["schedule"] is None


def test_a_run_started_in_the_browser_session_has_no_token(plan, alice):
    response = session(alice).post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    assert response.status_code == 201
    assert response.json()["api_token"] == ""
    assert response.json()["started_by"] == "alice"


def test_the_run_page_and_the_runs_list_say_via_which_token(client, plan, alice, token_secret):
    # given: a run started through the API with alice's token
    bearer(token_secret("run")).post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")
    run = Run.objects.get()
    prefix = ApiToken.objects.get().prefix
    client.force_login(alice)

    # when
    page = client.get(run.get_absolute_url()).content.decode()
    listing = client.get(f"/projects/{plan.project.code}/runs/").content.decode()

    # then
    for html in (page, listing):
        assert "via token" in html
        assert f"run token ({prefix}…)" in html


def test_a_scheduled_run_says_which_schedule_started_it(plan, alice):
    # given: a fire that started a run
    schedule = Schedule.objects.create(
        project=plan.project, plan=plan, plan_name=plan.name, cron="0 2 * * *", last_due_at=timezone.now()
    )
    run = plan_run(plan, start_at=None)
    due = timezone.now().replace(microsecond=0)
    ScheduleFire.objects.create(schedule=schedule, due_at=due, outcome="started", run=run)

    # when
    body = session(alice).get(f"/api/v1/runs/{run.code}/").json()

    # then
    assert body["schedule"]["code"] == str(schedule.code)
    assert body["schedule"]["description"] == schedule.description
    assert body["started_by"].startswith(f"the schedule “{schedule.description}”")
    assert body["api_token"] == ""


def test_the_baseline_verdict_is_in_the_run_its_list_and_its_summary_export(soak_plan, alice):
    # given: three baseline runs and a run whose search page is 3× slower, judged
    for seed in (1, 2, 3):
        make_run(soak_plan, seed)
    run = make_run(soak_plan, 4, slow={SEARCH: 3.0})
    untouched = make_run(soak_plan, 5)
    Run.objects.filter(pk=untouched.pk).update(plan=None)  # an unscheduled run: never judged
    stored = run_judge(run_id=run.id)
    assert stored.verdict == "regressed"
    client = session(alice)

    # when
    detail = client.get(f"/api/v1/runs/{run.code}/").json()
    listing = {r["code"]: r for r in client.get("/api/v1/runs/").json()["results"]}
    export = json.loads(client.get(f"/api/v1/runs/{run.code}/summary.json").content)

    # then: the detail has every row, the list the verdict and headline, the export all of it
    verdict = detail["baseline_verdict"]
    assert verdict["verdict"] == "regressed"
    assert verdict["headline"] == stored.headline
    assert verdict["baseline"] == stored.baseline_label
    assert verdict["tolerance_pct"] == stored.tolerance_pct
    search_apd = next(r for r in verdict["rows"] if r["page"] == SEARCH and r["figure"] == "APD")
    assert search_apd["verdict"] == "regressed"
    assert listing[str(run.code)]["baseline_verdict"]["verdict"] == "regressed"
    assert "rows" not in listing[str(run.code)]["baseline_verdict"]
    assert listing[str(untouched.code)]["baseline_verdict"] is None
    assert export["baseline_verdict"]["verdict"] == "regressed"
    assert export["baseline_verdict"]["rows"] == stored.rows
    assert export["started_by"] == "—"


@pytest.mark.django_db(transaction=True)
def test_the_ci_client_prints_the_baseline_verdict(live_server, plan, alice, token_secret, capsys, monkeypatch):
    """The real client against the real portal: a worker stand-in ends the run and judges it meanwhile."""
    import threading
    import time

    from django.db import connection

    from portal import client
    from portal.schedules.models import RunVerdict

    secret = token_secret("run")

    def finish_the_run():
        try:
            poll()
        finally:
            connection.close()

    def poll():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            run = Run.objects.filter(plan=plan).first()
            if run is not None:
                RunVerdict.objects.create(
                    run=run, verdict="within_noise", headline=f"Run #{run.number} is within noise of the baseline."
                )
                Run.objects.filter(pk=run.pk).update(status=Run.Status.PASSED, finished_at=timezone.now())
                return
            time.sleep(0.1)

    monkeypatch.setenv("PLIMSOLL_TOKEN", secret)
    worker = threading.Thread(target=finish_the_run)
    worker.start()
    try:
        code = client.main(["run", "--url", live_server.url, "--plan", str(plan.code), "--wait", "--timeout", "30"])
    finally:
        worker.join()

    # then
    assert code == client.PASSED, capsys.readouterr()
    out = capsys.readouterr().out
    assert "Against the baseline: within noise. Run #1 is within noise of the baseline." in out


def test_trials_started_with_a_token_record_it_on_each_run(plan, token_secret, django_capture_on_commit_callbacks):
    from portal.history.models import TrialSet

    secret = token_secret("run")
    prefix = ApiToken.objects.get().prefix

    with django_capture_on_commit_callbacks(execute=True):  # the first trial starts once the set is committed
        response = bearer(secret).post(f"/api/v1/plans/{plan.code}/trials/", {"size": 2}, format="json")

    assert response.status_code == 201, response.content
    trial_set = TrialSet.objects.get()
    assert trial_set.api_token == ApiToken.objects.get()
    (run,) = Run.objects.filter(trial_set=trial_set)  # the first trial starts at once; the next after it
    assert run.api_token_label == f"run token ({prefix}…)"
    assert session_body(run)["started_by"] == f"alice via token run token ({prefix}…)"


def session_body(run):
    return session(run.created_by).get(f"/api/v1/runs/{run.code}/").json()
