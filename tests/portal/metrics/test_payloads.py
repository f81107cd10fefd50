"""The Servers section's payload (portal/metrics/payloads.py) is what its one selector sends: servers.json
(run_servers_chart) with or without a scraped server, and the section's data (run_servers) typed."""

import typing

import pytest
from django.urls import reverse

from portal.metrics import selectors
from portal.metrics.payloads import RunServers, Server, ServersChart, ServerSeries, WindowStats
from portal.runs.models import Run
from tests.portal.metrics.test_history import scrape_demo
from tests.portal.runs.factories import plan_run

pytestmark = pytest.mark.django_db


def keys(payload, optional=False) -> set:
    hints = typing.get_type_hints(payload)
    return set(hints) if optional else set(hints) - payload.__optional_keys__


def test_servers_json_is_the_typed_payload_with_and_without_a_scraped_server(alice_client, plan):
    # given: a run without server metrics
    run = plan_run(plan, status=Run.Status.PASSED)
    url = reverse("metrics:run-servers", args=[run.code])

    # then: servers.json holds the required keys, empty, and never polls a finished run again
    data = alice_client.get(url).json()
    assert set(data) == keys(ServersChart)
    assert data["servers"] == [] and data["active"] is False and data == selectors.run_servers_chart(run)

    # given: a scraped demo server
    scrape_demo(run, 0.3, 10)

    # then: every key, each server's and each series' as typed
    data = alice_client.get(url).json()
    assert set(data) == keys(ServersChart, optional=True)
    (server,) = data["servers"]
    assert set(server) == keys(Server)
    assert {s["key"] for s in server["series"]} == {"cpu", "requests"}
    assert all(set(s) == keys(ServerSeries) for s in server["series"])
    assert all(set(w) == keys(WindowStats) for s in server["series"] for w in s["windows"])
    assert set(selectors.run_servers(run)) == keys(RunServers) == set(data) - {"active", "duration_s"}
