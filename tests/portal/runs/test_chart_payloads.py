"""The run's time-chart payload (portal/runs/payloads.py RunSeries) is built by one selector and reads the
same on the run page, the share page and the API: the share view no longer copies it."""

import typing

import pytest

from portal.runs import selectors
from portal.runs.api.serializers import SeriesSerializer
from portal.runs.payloads import RunSeries
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
