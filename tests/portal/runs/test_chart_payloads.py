"""The run's time-chart payload (portal/runs/payloads.py RunSeries) is built by one selector and reads the
same on the run page, the share page and the API: the share view no longer copies it."""

import typing

import pytest

from portal.runs import selectors
from portal.runs.api.serializers import SeriesSerializer
from portal.runs.payloads import ProtocolSeries, RunDetail, RunSeries, WindowDistribution
from tests.portal.api.conftest import session
from tests.portal.runs.test_store import PROFILES, _finish, _record
from tests.portal.sharing.test_share_links import public, share

pytestmark = pytest.mark.django_db


def test_the_payload_type_is_the_apis_documented_shape():
    assert set(typing.get_type_hints(RunSeries)) - {"since"} == set(SeriesSerializer().fields)


def test_run_page_share_page_and_api_send_the_one_selectors_payload(alice, alice_client, plan, run):
    finished = _finish(_record(run, PROFILES["steps"]))
    expected = selectors.run_series(finished, live=False)
    assert set(expected) == set(typing.get_type_hints(RunSeries))

    page = alice_client.get(f"/runs/{finished.code}/series.json").json()
    api = session(alice).get(f"/api/v1/runs/{finished.code}/series/").json()
    _, token = share(alice_client, plan.project, kind="run", run=finished.code)
    shared = public(token, f"runs/{finished.code}/series.json").json()

    assert page == api == shared == expected
    assert len(expected["windows"]) == 2 and expected["t"]


def test_the_protocol_chart_and_the_drilldown_are_one_selectors_payload_on_run_page_and_share_page(
    alice_client, plan, run
):
    # given: a finished run, shared
    finished = _finish(_record(run, PROFILES["constant"]))
    _, token = share(alice_client, plan.project, kind="run", run=finished.code)
    label = finished.summary["pages"][0]["label"]

    # then: the streams and WebSocket chart reads the same on both pages, the typed payload (never polled again)
    expected = selectors.run_protocol_series(finished, live=False)
    assert set(expected) == set(typing.get_type_hints(ProtocolSeries))
    page = alice_client.get(f"/runs/{finished.code}/protocols.json").json()
    shared = public(token, f"runs/{finished.code}/protocols.json").json()
    assert page == shared == expected

    # and: the drill-down of a page and a range, and the distribution alone, the same on both pages
    for query, payload in (
        (f"?page={label}&from=2&to=9", RunDetail),
        ("?only=distribution", WindowDistribution),
        ("", RunDetail),
    ):
        page = alice_client.get(f"/runs/{finished.code}/detail.json{query}").json()
        shared = public(token, f"runs/{finished.code}/detail.json{query}").json()
        assert set(page) == set(typing.get_type_hints(payload)), query
        assert page == shared, query
    assert page["range"] == {"from": page["range"]["from"], "to": page["range"]["to"], "of": "measurement window"}

    # and: a malformed range is refused alike
    for response in (
        alice_client.get(f"/runs/{finished.code}/detail.json?from=9&to=2"),
        public(token, f"runs/{finished.code}/detail.json?from=9&to=2"),
    ):
        assert response.status_code == 400
        assert response.json() == {"error": "to must be after from"}
