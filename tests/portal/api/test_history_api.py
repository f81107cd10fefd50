"""Tuning changes and external measurements through the API × personas."""

import pytest

from portal.history.models import ExternalMeasurement, TuningChange
from portal.projects.models import Environment
from portal.runs.services import run_create

from .conftest import PERSONAS, READERS, expected, session

pytestmark = pytest.mark.django_db

WRITERS = ("owner", "editor")


def change_document(environment, **extra):
    return {
        "environment": str(environment.code),
        "category": "index",
        "title": "Index the custom field",
        "reason": "Search scans every work item",
        "configuration": [{"key": "search.index", "value": "on"}],
        **extra,
    }


def measurement_document(environment, **extra):
    return {
        "environment": str(environment.code),
        "name": "Database backup",
        "unit": "min",
        "value": 42.5,
        "measured_at": "2026-11-01T02:00:00Z",
        **extra,
    }


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_recording_a_change_applies_it_for_editors_only(persona, request, environment):
    response = persona.post("/api/v1/tuning-changes/", change_document(environment), format="json")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=WRITERS)
    environment.refresh_from_db()
    if response.status_code == 201:
        body = response.json()
        assert (body["status"], body["number"]) == ("applied", 1)
        assert body["config_before"] == [{"key": "search.index", "value": "off"}]
        assert environment.configuration == [{"key": "search.index", "value": "on"}]
    else:
        assert environment.configuration == [{"key": "search.index", "value": "off"}]
        assert not TuningChange.objects.exists()


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_recording_a_measurement_is_for_editors_only(persona, request, environment):
    response = persona.post("/api/v1/measurements/", measurement_document(environment), format="json")
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=WRITERS)
    assert ExternalMeasurement.objects.exists() is (response.status_code == 201)


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_the_ledger_is_read_by_members_only(persona, request, environment, alice):
    session(alice).post("/api/v1/tuning-changes/", change_document(environment), format="json")
    session(alice).post("/api/v1/measurements/", measurement_document(environment), format="json")
    change, measurement = TuningChange.objects.get(), ExternalMeasurement.objects.get()

    name = request.node.callspec.params["persona"]
    for path in (f"/api/v1/tuning-changes/{change.code}/", f"/api/v1/measurements/{measurement.code}/"):
        assert persona.get(path).status_code == expected(name, ok=200, allowed=READERS)
    listed = persona.get(f"/api/v1/tuning-changes/?environment={environment.code}")
    if name in READERS:
        assert [c["title"] for c in listed.json()["results"]] == ["Index the custom field"]
    elif name == "outsider":
        assert listed.json()["results"] == []


def test_an_unchanged_configuration_gets_the_forms_message(alice, environment):
    document = change_document(environment, configuration=[{"key": "search.index", "value": "off"}])
    response = session(alice).post("/api/v1/tuning-changes/", document, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["configuration"]
    assert not TuningChange.objects.exists()


def test_a_change_is_not_applied_while_a_run_is_on_the_environment(alice, plan):
    run = run_create(plan=plan, user=alice)
    response = session(alice).post("/api/v1/tuning-changes/", change_document(plan.environment), format="json")
    assert response.status_code == 409
    assert f"Run #{run.number}" in response.json()["detail"]
    assert Environment.objects.get().configuration == [{"key": "search.index", "value": "off"}]
    assert not TuningChange.objects.exists()


def test_a_planned_change_is_applied_later(alice, environment):
    client = session(alice)
    code = client.post("/api/v1/tuning-changes/", change_document(environment, apply=False), format="json").json()[
        "code"
    ]
    assert TuningChange.objects.get().status == "planned"
    assert client.post(f"/api/v1/tuning-changes/{code}/apply/").json()["status"] == "applied"
    assert Environment.objects.get().configuration == [{"key": "search.index", "value": "on"}]


def test_a_measurement_in_the_future_gets_the_forms_message(alice, environment):
    document = measurement_document(environment, measured_at="2099-01-01T00:00:00Z")
    response = session(alice).post("/api/v1/measurements/", document, format="json")
    assert response.json()["fields"]["measured_at"] == ["That is in the future: give the time it was measured."]


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_trials_start_for_editors_and_run_tokens_and_stop(persona, request, plan):
    from portal.history.models import TrialSet

    from .conftest import RUNNERS

    response = persona.post(f"/api/v1/plans/{plan.code}/trials/", {"size": 2, "label": "before"}, format="json")
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=RUNNERS)
    assert TrialSet.objects.exists() is (response.status_code == 201)
    if response.status_code == 201:
        body = response.json()
        assert (body["size"], body["label"], body["status"]) == (2, "before", "running")
        stopped = persona.post(f"/api/v1/trial-sets/{body['code']}/stop/")
        assert stopped.status_code == 200 and stopped.json()["status"] == "stopped"


def test_too_many_trials_get_the_forms_message(alice, plan):
    from portal.history.models import TrialSet

    response = session(alice).post(f"/api/v1/plans/{plan.code}/trials/", {"size": 500}, format="json")
    assert response.status_code == 400 and response.json()["fields"]["size"]
    assert not TrialSet.objects.exists()


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_the_journey_is_the_pages_data_for_members_only(persona, request, finished_run, alice):
    environment, project = finished_run.environment, finished_run.project
    name = request.node.callspec.params["persona"]
    for api, page in (
        (f"/api/v1/environments/{environment.code}/journey/", f"/environments/{environment.code}/journey.json"),
        (f"/api/v1/projects/{project.code}/journey/", f"/projects/{project.code}/journey.json"),
    ):
        response = persona.get(api)
        assert response.status_code == expected(name, ok=200, allowed=READERS)
        if response.status_code == 200:
            assert response.json() == session(alice).get(page).json()
            assert response.json()["plans"][0]["code"] == str(finished_run.plan.code)


def test_the_journey_of_an_unknown_plan_is_404(alice, environment):
    import uuid

    response = session(alice).get(f"/api/v1/environments/{environment.code}/journey/?plan={uuid.uuid4()}")
    assert response.status_code == 404 and response.json()["detail"] == "No such plan here."


@pytest.fixture
def second_run(finished_run, alice):
    """Another finished run of the same plan, slower on every page."""
    from django.utils import timezone

    from portal.runs import analysis
    from portal.runs.models import Run
    from tests.portal.runs.factories import add_second, plan_run

    run = plan_run(
        finished_run.plan,
        number=2,
        plan_snapshot=finished_run.plan_snapshot,
        analysis_settings=finished_run.analysis_settings,
        created_by=alice,
        status=Run.Status.FINISHING,
        start_at=None,
    )
    for second in range(7):
        add_second(run, second, users=5, labels={"Home": ([90, 100], {}), "Articles": ([400, 420], {})})
    Run.objects.filter(pk=run.pk).update(
        summary=analysis.summarize(run), status=Run.Status.FAILED, finished_at=timezone.now()
    )
    return run


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_a_comparison_of_two_runs_is_the_pages_report(persona, request, finished_run, second_run):
    from portal.history import comparison
    from portal.runs.models import Run

    url = f"/api/v1/projects/{finished_run.project.code}/compare/?a={finished_run.code}&b={second_run.code}"
    response = persona.get(url)

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=200, allowed=READERS)
    if response.status_code != 200:
        return
    a, b = (comparison.side_for_run(Run.objects.get(pk=r.pk)) for r in (finished_run, second_run))
    report = comparison.compare_sides(a, b)
    body = response.json()
    assert (body["headline"], body["verdict"], body["basis"]) == (report.headline, report.verdict, report.basis)
    assert [r["figure"] for r in body["total"]] == [r.figure for r in report.total]
    assert body["before"]["runs"] == [str(finished_run.code)] and body["after"]["runs"] == [str(second_run.code)]
    assert [p["page"] for p in body["pages"]] == ["Articles", "Home"]


def test_a_comparison_with_a_missing_side_is_400_and_an_unknown_one_404(alice, finished_run):
    import uuid

    client = session(alice)
    base = f"/api/v1/projects/{finished_run.project.code}/compare/"
    assert client.get(f"{base}?a={finished_run.code}").json()["fields"]["b"]
    assert client.get(f"{base}?a={finished_run.code}&b={uuid.uuid4()}").status_code == 404


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_reverting_a_change_puts_the_configuration_back_for_editors_only(persona, request, environment, alice):
    code = session(alice).post("/api/v1/tuning-changes/", change_document(environment), format="json").json()["code"]

    response = persona.post(f"/api/v1/tuning-changes/{code}/revert/")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=WRITERS)
    environment.refresh_from_db()
    if response.status_code == 201:
        body = response.json()
        assert (body["number"], body["title"]) == (2, "Revert: Index the custom field")
        assert environment.configuration == [{"key": "search.index", "value": "off"}]
    else:
        assert environment.configuration == [{"key": "search.index", "value": "on"}]
        assert TuningChange.objects.count() == 1


def experiment_document(plan, **extra):
    return {
        "plan": str(plan.code),
        "title": "Index on the custom field",
        "trials": 2,
        "apply_mode": "manual",
        "change": {"title": "Add the index", "configuration": [{"key": "search.index", "value": "on"}]},
        **extra,
    }


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_experiments_are_planned_by_editors_and_started_and_stopped_with_run_tokens(persona, request, plan, alice):
    from portal.history.models import Experiment

    from .conftest import RUNNERS

    name = request.node.callspec.params["persona"]
    created = persona.post("/api/v1/experiments/", experiment_document(plan), format="json")
    assert created.status_code == expected(name, ok=201, allowed=WRITERS)
    assert Experiment.objects.exists() is (created.status_code == 201)

    code = (
        session(alice)
        .post("/api/v1/experiments/", experiment_document(plan, title="Second"), format="json")
        .json()["code"]
    )
    started = persona.post(f"/api/v1/experiments/{code}/start/")
    assert started.status_code == expected(name, ok=200, allowed=RUNNERS)
    experiment = Experiment.objects.get(code=code)
    if started.status_code == 200:
        assert started.json()["status"] == "baseline" and started.json()["baseline"] == str(experiment.baseline.code)
        stopped = persona.post(f"/api/v1/experiments/{code}/stop/")
        assert stopped.status_code == 200 and stopped.json()["status"] == "stopped"
    else:
        assert experiment.status == "draft"


def test_an_experiment_by_hook_without_a_hook_gets_the_forms_message(alice, plan):
    from portal.history.models import Experiment

    response = session(alice).post("/api/v1/experiments/", experiment_document(plan, apply_mode="hook"), format="json")
    assert response.status_code == 400
    assert "needs the change's hook URL" in response.json()["fields"]["apply_mode"][0]
    assert not Experiment.objects.exists() and not TuningChange.objects.exists()


def test_confirming_an_experiment_that_is_not_waiting_is_409(alice, plan):
    code = session(alice).post("/api/v1/experiments/", experiment_document(plan), format="json").json()["code"]
    response = session(alice).post(f"/api/v1/experiments/{code}/confirm/")
    assert response.status_code == 409 and "not waiting" in response.json()["detail"]


@pytest.mark.parametrize(
    "path", ["/api/v1/experiments/", "/api/v1/trial-sets/", "/api/v1/tuning-changes/", "/api/v1/measurements/"]
)
def test_history_lists_take_a_fixed_number_of_queries(alice, plan, path, django_assert_max_num_queries):
    from portal.history import services

    client = session(alice)
    for n in range(10):
        client.post("/api/v1/experiments/", experiment_document(plan, title=f"E {n}"), format="json")
        services.trialset_start(plan=plan, size=2, user=alice)
        client.post("/api/v1/measurements/", measurement_document(plan.environment, value=n), format="json")
    with django_assert_max_num_queries(12):
        response = client.get(path)
    assert response.json()["count"] >= 10
