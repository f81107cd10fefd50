"""The runs API × personas: who may read, start and stop; what a pipeline gets back."""

import csv
import io
from xml.etree import ElementTree as ET

import pytest

from portal.accounts.models import ApiWrite, Membership
from portal.runs.models import Run
from portal.runs.services import run_create
from tests.portal.runs.factories import plan_run, project_run

from .conftest import PERSONAS, READERS, RUNNERS, bearer, expected, session

pytestmark = pytest.mark.django_db

READ_PATHS = (
    "/api/v1/runs/{code}/",
    "/api/v1/runs/{code}/pages/",
    "/api/v1/runs/{code}/errors/",
    "/api/v1/runs/{code}/series/",
    "/api/v1/runs/{code}/shards/",
    "/api/v1/runs/{code}/junit.xml",
    "/api/v1/runs/{code}/pages.csv",
    "/api/v1/runs/{code}/series.csv",
    "/api/v1/runs/{code}/summary.json",
)


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
@pytest.mark.parametrize("path", READ_PATHS)
def test_it_reads_a_run_for_members_only(persona, request, finished_run, path):
    # when
    response = persona.get(path.format(code=finished_run.code))

    # then: members and their tokens read; the outsider gets a 404 that says nothing of the run
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=200, allowed=READERS)
    if response.status_code == 404:
        assert str(finished_run.code) not in response.content.decode()
        assert finished_run.plan_name not in response.content.decode()


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_the_run_list_holds_only_the_callers_teams_runs(persona, request, finished_run, charlie):
    # given: charlie's own team has a run too
    from portal.accounts.services import team_create

    other = team_create(name="Charlie's", owner=charlie)
    other_run = project_run(other.projects.create(name="Other"))

    # when
    response = persona.get("/api/v1/runs/")

    # then
    name = request.node.callspec.params["persona"]
    if name in UNAUTHENTICATED_NAMES:
        assert response.status_code == 401
        return
    codes = {r["code"] for r in response.json()["results"]}
    if name == "outsider":
        assert codes == {str(other_run.code)}
    else:
        assert codes == {str(finished_run.code)}


UNAUTHENTICATED_NAMES = ("anonymous", "expired", "revoked")


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_it_starts_a_run_for_editors_and_run_tokens(persona, request, plan):
    # when
    response = persona.post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    # then: the run exists exactly when the answer is 201, and the answer says where it is
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=RUNNERS)
    runs = Run.objects.filter(plan=plan)
    if response.status_code == 201:
        run = runs.get()
        assert response.json()["code"] == str(run.code)
        assert response["Location"].endswith(f"/api/v1/runs/{run.code}/")
        assert run.status == Run.Status.QUEUED
    else:
        assert not runs.exists()
        assert response.json()["status"] == response.status_code


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_it_stops_a_run_for_editors_and_run_tokens(persona, request, plan, alice):
    # given: a queued run
    run = run_create(plan=plan, user=alice)

    # when
    response = persona.post(f"/api/v1/runs/{run.code}/stop/")

    # then
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=200, allowed=RUNNERS)
    run.refresh_from_db()
    assert run.cancel_requested is (response.status_code == 200)


def test_a_second_run_on_a_busy_environment_is_a_409_naming_the_run(plan, alice):
    # given
    first = run_create(plan=plan, user=alice)

    # when
    response = session(alice).post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    # then
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "environment_busy"
    assert body["run"] == str(first.code)
    assert f"Run #{first.number}" in body["detail"]
    assert Run.objects.count() == 1


def test_a_target_outside_the_allowlist_is_a_422_with_the_reason(plan, alice, settings):
    # given: the environment points outside loopback
    plan.environment.base_url = "http://10.9.8.7:8080"
    plan.environment.save()

    # when
    response = session(alice).post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    # then
    assert response.status_code == 422
    assert response.json()["code"] == "target_not_allowed"
    assert "10.9.8.7" in response.json()["detail"]
    assert not Run.objects.exists()


def test_unknown_fields_are_refused_not_ignored(plan, alice):
    response = session(alice).post(f"/api/v1/plans/{plan.code}/runs/", {"users": 500}, format="json")

    assert response.status_code == 400
    assert response.json()["fields"] == {"users": ["Unknown field."]}
    assert not Run.objects.exists()


def test_a_plan_that_cannot_run_is_a_400_with_the_forms_message(plan, alice):
    # given: a plan whose mix is empty
    plan.mix.all().delete()

    # when
    response = session(alice).post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    # then
    assert response.status_code == 400
    assert response.json()["fields"]["non_field_errors"] == ["Add at least one test case to the mix."]


def test_a_demoted_owners_write_token_can_no_longer_start_runs(plan, alice, bob, team, token_secret):
    # given: alice's run token, then alice becomes a viewer (bob, made owner, keeps the team owned)
    client = bearer(token_secret("run"))
    Membership.objects.filter(user=bob).update(role=Membership.Role.OWNER)
    Membership.objects.filter(user=alice).update(role=Membership.Role.VIEWER)

    # when
    response = client.post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    # then
    assert response.status_code == 403
    assert not Run.objects.exists()


def test_a_token_sees_only_its_own_team(finished_run, alice, charlie, django_user_model):
    # given: alice is also in charlie's team, and has a token for that team
    from portal.accounts.services import team_create, token_create

    other = team_create(name="Charlie's", owner=charlie)
    Membership.objects.create(team=other, user=alice, role=Membership.Role.EDITOR)
    _, secret = token_create(user=alice, team=other, name="other team", scope="read")

    # when
    response = bearer(secret).get(f"/api/v1/runs/{finished_run.code}/")

    # then
    assert response.status_code == 404


def test_writes_record_the_user_and_the_token_name(plan, alice, token_secret):
    bearer(token_secret("run")).post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")

    write = ApiWrite.objects.get()
    assert (write.user, write.token_name, write.method, write.status_code) == (alice, "run token", "POST", 201)
    assert write.path == f"/api/v1/plans/{plan.code}/runs/"


def test_long_poll_answers_at_once_for_a_finished_run_and_waits_for_an_active_one(finished_run, plan, alice):
    import time

    client = session(alice)
    started = time.monotonic()
    assert client.get(f"/api/v1/runs/{finished_run.code}/?wait=30").json()["status"] == finished_run.status
    assert time.monotonic() - started < 2

    # an active run (nothing moves it in this test) is held for the time asked
    Run.objects.filter(pk=finished_run.pk).update(status=Run.Status.RUNNING)
    started = time.monotonic()
    assert client.get(f"/api/v1/runs/{finished_run.code}/?wait=1.5").json()["status"] == "running"
    assert time.monotonic() - started >= 1.5

    # longer than 60 s is refused, with a field message
    response = client.get(f"/api/v1/runs/{finished_run.code}/?wait=61")
    assert response.status_code == 400
    assert "wait" in response.json()["fields"]


def test_junit_has_a_testcase_per_threshold_per_window_with_measured_value_and_limit(finished_run, alice):
    # when
    response = session(alice).get(f"/api/v1/runs/{finished_run.code}/junit.xml")

    # then: the failures match the summary's thresholds, figures included
    assert response["Content-Type"].startswith("application/xml")
    root = ET.fromstring(response.content)
    cases = root.findall("./testsuite/testcase")
    thresholds = finished_run.summary["windows"][0]["thresholds"]
    assert len(cases) == len(thresholds) == 2
    failed = [t for t in thresholds if not t["passed"]]
    assert [c.get("name") for c in cases if c.find("failure") is not None] == [
        f"{t['name']} ≤ {t['limit']:g} {t['unit']}" for t in failed
    ]
    apd = next(t for t in thresholds if t["name"] == "APD")
    failure = cases[0].find("failure")
    assert f"{apd['actual']:g} ms" in failure.get("message") and "≤ 100 ms" in failure.get("message")
    assert root.get("failures") == str(len(failed)) and finished_run.verdict == "failed"


def test_pages_csv_and_series_csv_hold_the_reports_figures(finished_run, alice):
    client = session(alice)
    pages = list(
        csv.DictReader(io.StringIO(client.get(f"/api/v1/runs/{finished_run.code}/pages.csv").content.decode()))
    )
    assert [(p["label"], float(p["apd_ms"])) for p in pages] == [
        (p["label"], p["apd_ms"]) for p in finished_run.summary["pages"]
    ]
    series = list(
        csv.DictReader(io.StringIO(client.get(f"/api/v1/runs/{finished_run.code}/series.csv").content.decode()))
    )
    assert [int(r["t"]) for r in series] == list(range(7))
    assert {float(r["pages_per_s"]) for r in series} == {5.0}


def test_runs_filter_by_status_and_verdict_and_refuse_bad_filters(finished_run, alice):
    client = session(alice)
    assert client.get("/api/v1/runs/?verdict=failed").json()["count"] == 1
    assert client.get("/api/v1/runs/?verdict=passed").json()["count"] == 0
    assert client.get("/api/v1/runs/?status=running").json()["count"] == 0
    assert client.get(f"/api/v1/runs/?plan={finished_run.plan.code}").json()["count"] == 1
    bad = client.get("/api/v1/runs/?status=sleeping")
    assert bad.status_code == 400 and "status" in bad.json()["fields"]


def test_run_list_takes_a_fixed_number_of_queries(finished_run, alice, django_assert_max_num_queries):
    client = session(alice)
    for n in range(2, 12):
        plan_run(finished_run.plan, number=n, created_by=alice)
    with django_assert_max_num_queries(6):
        response = client.get("/api/v1/runs/")
    assert response.json()["count"] == 11
