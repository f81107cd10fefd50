"""PATCH, a test case's steps one by one, a data set's mode, include anyway and deleting a measurement,
× personas: writers change exactly what they name; everybody else changes nothing."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from portal.history.models import ExternalMeasurement
from portal.projects.models import DataSet, Environment, Plan, Step
from portal.runs.models import Run

from .conftest import PERSONAS, expected, session

pytestmark = pytest.mark.django_db

WRITERS = ("owner", "editor")


def steps_of(test_case):
    return list(test_case.steps.order_by("position").values_list("name", "path", "position"))


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_patching_a_plan_changes_only_the_named_fields(persona, request, plan):
    before = Plan.objects.values("name", "users", "hold", "threshold_apd_ms").get()

    response = persona.patch(f"/api/v1/plans/{plan.code}/", {"threshold_apd_ms": 750}, format="json")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=200, allowed=WRITERS)
    after = Plan.objects.values("name", "users", "hold", "threshold_apd_ms").get()
    if response.status_code == 200:
        assert after == {**before, "threshold_apd_ms": 750}
        assert [e.test_case_id for e in plan.mix.all()] == [plan.mix.get().test_case_id]  # the mix stays
    else:
        assert after == before


def test_a_patch_runs_the_same_rules_as_a_put(alice, plan):
    # when: a ramp longer than the longest run allowed, and a name already taken
    Plan.objects.create(project=plan.project, environment=plan.environment, name="Other")
    response = session(alice).patch(f"/api/v1/plans/{plan.code}/", {"hold": 10**9, "name": "other"}, format="json")

    # then: refused with the form's messages, and nothing changed
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert fields["name"] == ["This project already has a plan called “other”."]
    assert "the longest run allowed" in fields["hold"][0]
    plan.refresh_from_db()
    assert (plan.name, plan.hold) == ("Smoke", 5)


def test_patching_an_environment_keeps_its_servers_and_refuses_its_configuration(alice, environment):
    client = session(alice)
    client.patch(f"/api/v1/environments/{environment.code}/", {"servers": [{"name": "web-01"}]}, format="json")

    response = client.patch(f"/api/v1/environments/{environment.code}/", {"description": "Staging"}, format="json")
    refused = client.patch(
        f"/api/v1/environments/{environment.code}/", {"configuration": [{"key": "a", "value": "b"}]}, format="json"
    )

    assert response.status_code == 200, response.json()
    env = Environment.objects.get()
    assert (env.description, [s.name for s in env.servers.all()]) == ("Staging", ["web-01"])
    assert refused.status_code == 400
    assert "tuning changes" in refused.json()["fields"]["configuration"][0]


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_steps_are_read_by_members_and_added_by_writers(persona, request, test_case):
    name = request.node.callspec.params["persona"]
    listed = persona.get(f"/api/v1/test-cases/{test_case.code}/steps/")
    added = persona.post(
        f"/api/v1/test-cases/{test_case.code}/steps/", {"name": "Search", "path": "/search?q=x"}, format="json"
    )

    assert listed.status_code == expected(
        name, ok=200, allowed=("owner", "editor", "viewer", "read_token", "run_token")
    )
    if listed.status_code == 200:
        assert [s["name"] for s in listed.json()] == ["Home", "Articles"]
    assert added.status_code == expected(name, ok=201, allowed=WRITERS)
    wanted = [("Home", "/", 0), ("Articles", "/articles", 1)]
    if added.status_code == 201:
        wanted.append(("Search", "/search?q=x", 2))
        assert added.json()["position"] == 2
    assert steps_of(test_case) == wanted


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_one_step_is_changed_moved_and_deleted_by_writers_only(persona, request, test_case):
    home, articles = test_case.steps.order_by("position")
    base = f"/api/v1/test-cases/{test_case.code}/steps"
    name = request.node.callspec.params["persona"]

    patched = persona.patch(f"{base}/{articles.code}/", {"think_time": 3}, format="json")
    moved = persona.post(f"{base}/{articles.code}/move/", {"position": 0}, format="json")
    deleted = persona.delete(f"{base}/{home.code}/")

    for response, ok in ((patched, 200), (moved, 200), (deleted, 204)):
        assert response.status_code == expected(name, ok=ok, allowed=WRITERS)
    if name in WRITERS:
        assert steps_of(test_case) == [("Articles", "/articles", 0)]
        assert Step.objects.get().think_time == 3
    else:
        assert steps_of(test_case) == [("Home", "/", 0), ("Articles", "/articles", 1)]
        assert Step.objects.get(pk=articles.pk).think_time == 0.5


def test_a_step_gets_the_forms_messages_and_belongs_to_its_test_case(alice, test_case, project):
    client = session(alice)
    home = test_case.steps.get(position=0)

    bad = client.post(
        f"/api/v1/test-cases/{test_case.code}/steps/", {"name": "Use", "path": "/a/{{nope}}"}, format="json"
    )
    other = client.post(
        "/api/v1/test-cases/", {"project": str(project.code), "name": "Other", "steps": []}, format="json"
    )
    crossed = client.get(f"/api/v1/test-cases/{other.json()['code']}/steps/{home.code}/")

    assert bad.status_code == 400
    assert bad.json()["fields"]["path"] == ["{{nope}} is not extracted by an earlier step nor a column of the data set"]
    assert crossed.status_code == 404  # a step is reached only through its own test case
    assert Step.objects.filter(test_case=test_case).count() == 2


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_a_data_sets_mode_is_changed_by_writers_only(persona, request, test_case, alice):
    upload = SimpleUploadedFile("users.csv", b"username\nann\nbob\n", content_type="text/csv")
    created = session(alice).post(
        f"/api/v1/test-cases/{test_case.code}/data-set/", {"file": upload, "mode": "sequential"}, format="multipart"
    )
    assert created.status_code == 201, created.json()

    response = persona.patch(f"/api/v1/test-cases/{test_case.code}/data-set/", {"mode": "unique"}, format="json")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=200, allowed=WRITERS)
    data_set = DataSet.objects.get()
    assert data_set.mode == ("unique" if name in WRITERS else "sequential")
    assert data_set.row_count == 2  # the rows stay


def test_a_mode_that_does_not_exist_is_refused(alice, test_case):
    DataSet.objects.create(test_case=test_case, file_name="u.csv", columns=["u"], rows=[["a"]], row_count=1)
    response = session(alice).patch(
        f"/api/v1/test-cases/{test_case.code}/data-set/", {"mode": "shuffled"}, format="json"
    )
    assert response.status_code == 400 and "mode" in response.json()["fields"]
    assert DataSet.objects.get().mode == "sequential"


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_including_a_doubtful_run_anyway_is_for_writers(persona, request, finished_run):
    Run.objects.filter(pk=finished_run.pk).update(status=Run.Status.PARTIAL)

    response = persona.post(f"/api/v1/runs/{finished_run.code}/include/", {"include": True}, format="json")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=200, allowed=WRITERS)
    finished_run.refresh_from_db()
    assert finished_run.include_anyway is (name in WRITERS)
    if response.status_code == 200:
        body = response.json()
        assert body["include_anyway"] is True and body["counts"] is True and body["doubts"]
        # and out again
        again = persona.post(f"/api/v1/runs/{finished_run.code}/include/", {"include": False}, format="json")
        assert again.json()["counts"] is False


def test_a_running_run_cannot_be_included(alice, finished_run):
    Run.objects.filter(pk=finished_run.pk).update(status=Run.Status.RUNNING)
    response = session(alice).post(f"/api/v1/runs/{finished_run.code}/include/", {"include": True}, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["include"] == ["The run has not finished: its figures cannot be judged yet."]


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_deleting_a_measurement_is_for_writers(persona, request, environment, alice):
    created = session(alice).post(
        "/api/v1/measurements/",
        {
            "environment": str(environment.code),
            "name": "Backup",
            "unit": "min",
            "value": 12,
            "measured_at": "2026-11-01T02:00:00Z",
        },
        format="json",
    )

    response = persona.delete(f"/api/v1/measurements/{created.json()['code']}/")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=204, allowed=WRITERS)
    assert ExternalMeasurement.objects.exists() is (name not in WRITERS)
