"""Issue 24.4 (server side): run labels in the start request, stored, shown and filterable; JUnit per judged figure."""

from xml.etree import ElementTree as ET

import pytest

from portal.runs.exports import junit, summary_json
from portal.runs.models import Run
from portal.schedules.baselines import run_judge
from tests.portal.schedules.test_baselines import SEARCH, make_run

from .conftest import session

pytestmark = pytest.mark.django_db


def start(user, plan, body):
    return session(user).post(f"/api/v1/plans/{plan.code}/runs/", body, format="json")


def test_labels_and_a_note_are_stored_shown_and_filterable(plan, alice, client):
    # when: a pipeline starts two runs with their build
    first = start(alice, plan, {"labels": {"build": "3f2a1c", "branch": "main"}, "note": "merge of #412"})
    Run.objects.update(status=Run.Status.PASSED)  # the environment is free for the next one
    second = start(alice, plan, {"labels": {"build": "9b8e7d", "branch": "main"}})

    # then: stored and answered
    assert first.status_code == 201, first.json()
    assert first.json()["labels"] == {"build": "3f2a1c", "branch": "main"}
    assert first.json()["note"] == "merge of #412"
    run = Run.objects.get(code=first.json()["code"])
    assert run.labels == {"build": "3f2a1c", "branch": "main"} and run.note == "merge of #412"
    # filterable: one label, or several (all of them)
    listed = session(alice).get("/api/v1/runs/?label=build:3f2a1c").json()["results"]
    assert [r["code"] for r in listed] == [first.json()["code"]]
    both = session(alice).get("/api/v1/runs/?label=branch:main").json()["results"]
    assert {r["code"] for r in both} == {first.json()["code"], second.json()["code"]}
    none = session(alice).get("/api/v1/runs/?label=branch:main&label=build:nothing").json()["results"]
    assert none == []
    # shown on the run page
    client.force_login(alice)
    html = client.get(run.get_absolute_url()).content.decode()
    assert 'id="run-labels"' in html and "build: 3f2a1c" in html and "merge of #412" in html
    assert '"build": "3f2a1c"' in summary_json.summary_json(run)


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"labels": {"build": "x" * 101}}, "labels", "The label “build” is 101 characters long; at most 100."),
        ({"labels": {"bad key": "x"}}, "labels", "“bad key” is not a label name"),
        ({"labels": ["build"]}, "labels", None),
        ({"labels": {}, "colour": "red"}, "colour", "Unknown field."),
    ],
)
def test_bad_labels_are_refused_and_no_run_starts(plan, alice, body, field, message):
    response = start(alice, plan, body)

    assert response.status_code == 400, response.json()
    text = str(response.json())
    assert field in text
    if message:
        assert message in text
    assert not Run.objects.exists()


@pytest.mark.parametrize("query", ["label=build", "label=:3f2a1c", "label=bad%20key:1", f"label=build:{'x' * 101}"])
def test_a_label_filter_the_api_cannot_answer_is_a_400(plan, alice, query):
    response = session(alice).get(f"/api/v1/runs/?{query}")
    assert response.status_code == 400
    assert "label" in str(response.json())


def test_junit_has_a_test_case_per_judged_figure_failing_where_it_regressed(plan):
    plan.hold = 20
    plan.save()
    for seed in (1, 2, 3):
        make_run(plan, seed)
    slow = make_run(plan, 4, slow={SEARCH: 5.0})
    run_judge(run_id=slow.id)
    slow = Run.objects.select_related("baseline_verdict").get(id=slow.id)

    root = ET.fromstring(junit.junit_xml(slow))

    suite = next(s for s in root.iter("testsuite") if s.get("name").endswith("against the baseline"))
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases[f"baseline: {SEARCH} APD"].find("failure") is not None
    assert cases["baseline: Browse: Home APD"].find("failure") is None
    assert int(suite.get("failures")) == sum(1 for r in slow.baseline_verdict.rows if r["verdict"] == "regressed")
    assert int(root.get("failures")) >= int(suite.get("failures")) > 0
