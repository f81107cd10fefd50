"""A tuning change's server figures before → after through the API: who may read them, and the answer
when there is nothing to read or Prometheus fails. The figures themselves, read from a real Prometheus,
are checked in tests/e2e/test_prometheus_change.py (the API beside the page)."""

import pytest

from portal.history.services import change_apply, change_create
from portal.projects.models import Server
from tests.processes import free_port

from .conftest import PERSONAS, READERS, expected, session

pytestmark = pytest.mark.django_db


def _change(environment, alice, *, apply=True):
    change = change_create(environment=environment, user=alice, edits=[{"key": "k", "value": "v"}], title="K")
    return change_apply(change, user=alice) if apply else change


def _path(change) -> str:
    return f"/api/v1/tuning-changes/{change.code}/prometheus/"


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_the_figures_are_read_by_members_only(persona, request, environment, alice):
    change = _change(environment, alice)

    response = persona.get(_path(change))

    assert response.status_code == expected(request.node.callspec.params["persona"], ok=200, allowed=READERS)


def test_an_environment_without_prometheus_says_so(environment, alice):
    change = _change(environment, alice)

    body = session(alice).get(_path(change)).json()

    assert body["available"] is False and body["reason"] == "no_prometheus"
    assert "no Prometheus data source" in body["message"]
    assert (body["basis"], body["before"], body["after"], body["servers"]) == (None, None, None, [])
    assert body["change"] == str(change.code)


def test_a_planned_change_and_servers_without_labels_say_so(environment, alice):
    environment.prometheus_url = "http://127.0.0.1:9090"
    environment.save()
    Server.objects.create(environment=environment, name="web", counter_set="demo")  # scraped, no selector

    planned = session(alice).get(_path(_change(environment, alice, apply=False))).json()
    applied = session(alice).get(_path(_change(environment, alice))).json()

    assert (planned["available"], planned["reason"]) == (False, "not_applied")
    assert (applied["available"], applied["reason"]) == (False, "no_servers")
    assert "selector" in applied["message"]


def test_a_prometheus_that_does_not_answer_is_each_servers_message(environment, alice):
    # A loopback port nobody listens on: a real refused connection, said per server, not a 5xx.
    environment.prometheus_url, environment.metrics_interval_s = f"http://127.0.0.1:{free_port()}", 1
    environment.save()
    for name in ("web-01", "web-02"):
        Server.objects.create(environment=environment, name=name, counter_set="demo", prometheus_selector='job="x"')
    change = _change(environment, alice)

    response = session(alice).get(_path(change))

    assert response.status_code == 200
    body = response.json()
    assert body["available"] is True and body["basis"] == "window" and "15 minutes before" in body["note"]
    assert body["before"]["run"] is None and body["before"]["label"] == "15 min before"
    assert body["before"]["end"] == body["after"]["start"]
    assert [s["name"] for s in body["servers"]] == ["web-01", "web-02"]
    for server in body["servers"]:
        assert server["figures"] == [] and server["selector"] == 'job="x"'
        assert server["error"].startswith("15 min before: Prometheus: http://127.0.0.1:"), server["error"]
        assert "could not be reached" in server["error"] and "Connection refused" in server["error"]
        # The change was applied a moment ago: its after side is not one reading long yet, and says so.
        assert "15 min after: shorter than one reading" in server["error"]
