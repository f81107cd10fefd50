"""The history's chart payloads (portal/history/payloads.py) are what the journey's and the comparison's
one builder sends, on the history pages, the API and the share page alike."""

import typing
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from portal.history.models import TuningChange
from portal.history.payloads import (
    ComparisonCurves,
    CurveSeries,
    EnvironmentJourney,
    JourneyPoint,
    ProjectJourney,
    RunCurves,
    SideCurves,
)
from portal.runs.models import Run
from tests.portal.api.conftest import session
from tests.portal.history.test_compare_curves import _finished
from tests.portal.history.test_journey import summary
from tests.portal.runs.factories import plan_run
from tests.portal.sharing.test_share_links import public, share

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def keys(payload) -> set:
    return set(typing.get_type_hints(payload))


def test_the_journey_is_its_typed_payload_on_the_page_the_api_and_the_share_page(alice, alice_client, plan):
    # given: two runs of the plan on either side of an applied change
    change = TuningChange.objects.create(
        environment=plan.environment,
        number=1,
        title="Add an index",
        category=TuningChange.Category.INDEX,
        edits=[{"key": "index", "value": "on"}],
        status=TuningChange.Status.APPLIED,
        applied_at=T0 + timedelta(hours=1),
        made_by=alice,
    )
    for n, (apd, under) in enumerate(((80.0, None), (40.0, change)), start=1):
        at = T0 + timedelta(hours=2 * (n - 1))
        plan_run(
            plan, number=n, status=Run.Status.PASSED, start_at=at, finished_at=at + timedelta(minutes=1),
            summary=summary(apd), tuning_change=under,
        )  # fmt: skip
    environment, project = plan.environment, plan.project

    # then: the environment's journey, as the page, the API and the share page send it
    page = alice_client.get(f"/environments/{environment.code}/journey.json?plan={plan.code}").json()
    api = session(alice).get(f"/api/v1/environments/{environment.code}/journey/?plan={plan.code}").json()
    assert api == page
    assert set(page) - {"plans"} == keys(EnvironmentJourney)
    assert len(page["points"]) == 2 and all(set(p) == keys(JourneyPoint) for p in page["points"])
    _, token = share(alice_client, project, kind="journey", environment=environment.code, plan=plan.code)
    shared = public(token, "journey.json").json()
    assert set(shared) == keys(EnvironmentJourney)  # the same payload, its addresses and codes left out
    assert all(set(p) == keys(JourneyPoint) - {"url", "code"} for p in shared["points"])

    # and: the project's journey
    page = alice_client.get(f"/projects/{project.code}/journey.json?plan={plan.code}").json()
    assert set(page) - {"plans"} == keys(ProjectJourney)
    assert [set(s) for s in page["sections"]] == [keys(EnvironmentJourney)]


def test_the_comparison_curves_are_their_typed_payload(alice, alice_client, plan):
    before = _finished(plan, alice, 1, slow_ms=20.0, seconds=8)
    after = _finished(plan, alice, 2, slow_ms=40.0, seconds=8)

    url = reverse("history:compare-curves", args=[plan.project.code])
    data = alice_client.get(url, {"a": str(before.code), "b": str(after.code)}).json()

    assert set(data) == keys(ComparisonCurves)
    assert [set(side) for side in data["sides"]] == [keys(SideCurves)] * 2
    runs = [run for side in data["sides"] for run in side["runs"]]
    assert [run["number"] for run in runs] == [1, 2]
    assert all(set(run) == keys(RunCurves) and set(run["series"]) == keys(CurveSeries) for run in runs)
