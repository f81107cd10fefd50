"""A tuning change's server figures before → after, read from a real Prometheus (issue 29 item 1).

Debian's ``/usr/bin/prometheus`` scrapes the demo target every second (the fixture of
test_prometheus_source.py); the test loads the demo target hard, applies a change, loads it
lightly, and checks the change page's figures against the demo's own counter read directly.
"""

import re
import time
import urllib.request
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from portal.history.services import change_apply, change_create
from portal.metrics.before_after import change_before_after
from portal.projects.models import Server
from portal.runs.models import Run
from tests.portal.runs.factories import plan_run

from .test_prometheus_source import misbehaving, prometheus  # noqa: F401  (the real Prometheus, a bad one)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


def _requests_total(base_url: str) -> float:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(v) for v in re.findall(r"^demo_requests_total(?:\{[^}]*\})? (\S+)$", text, re.M))


def _load(base_url: str, seconds: float, pause: float) -> tuple[float, float, float]:
    """Loopback requests for ``seconds`` (bounded), one every ``pause``; (start, end, requests/s by the counter)."""
    start, before = time.time(), _requests_total(base_url)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base_url}/", timeout=5) as r:
            r.read()
        time.sleep(pause)
    end, after = time.time(), _requests_total(base_url)
    return start, end, (after - before) / (end - start)


def _datetime(t: float):
    return datetime.fromtimestamp(t, tz=UTC)


@pytest.fixture
def demo_env(plan, prometheus):  # noqa: F811
    base, instance = prometheus
    env = plan.environment
    env.prometheus_url, env.metrics_interval_s = base, 1
    env.save()
    Server.objects.create(
        environment=env, name="demo", counter_set="demo", prometheus_selector=f'job="demo", instance="{instance}"'
    )
    return env


def test_a_changes_before_and_after_come_from_prometheus(demo_target, demo_env, plan, alice, alice_client):
    # Before the change: a hard load, as run #1.
    a0, a1, rate_before = _load(demo_target.base_url, 6, 0.002)
    plan_run(plan, status=Run.Status.FINISHED, start_at=_datetime(a0), finished_at=_datetime(a1))
    change = change_create(
        environment=demo_env, user=alice, edits=[{"key": "search.index", "value": "on"}], title="Index on"
    )
    change_apply(change, user=alice)
    # Runs are minutes apart in life; here 2 s, so that Prometheus' readings of run #2 (each the last scrape
    # at or before its time: up to a scrape late) no longer see run #1's load.
    time.sleep(2)
    # Under the change: a light load, as run #2.
    b0, b1, rate_after = _load(demo_target.base_url, 6, 0.1)
    plan_run(plan, status=Run.Status.FINISHED, start_at=_datetime(b0), finished_at=_datetime(b1), tuning_change=change)
    assert rate_before > 3 * rate_after > 0, (rate_before, rate_after)
    time.sleep(2.5)  # Prometheus scrapes the last seconds of run #2

    figures = change_before_after(change)

    assert figures.basis == "runs" and figures.step_s == 1
    assert (figures.before.label, figures.after.label) == ("Run #1 (Smoke)", "Run #2 (Smoke)")
    (server,) = figures.servers
    assert not server.error, server.error
    rows = {r.key: r for r in server.rows}
    assert rows["requests"].before == pytest.approx(rate_before, rel=0.35), (rows["requests"], rate_before)
    assert rows["requests"].after == pytest.approx(rate_after, rel=0.35), (rows["requests"], rate_after)
    assert rows["requests"].better is False  # fewer requests done: more is better for work done
    assert [r.key for r in server.rows][:2] == ["cpu", "requests"]  # the counter set's main series first

    # The change's page loads them (its section asks for the fragment).
    page = alice_client.get(change.get_absolute_url()).content.decode()
    fragment_url = reverse("history:change-prometheus", args=[change.code])
    assert f'hx-get="{fragment_url}"' in page
    fragment = alice_client.get(fragment_url).content.decode()
    assert 'data-key="requests"' in fragment and "the last run before the change" in fragment

    # The API answers the same figures, for automation.
    api = alice_client.get(f"/api/v1/tuning-changes/{change.code}/prometheus/").json()
    assert api["available"] is True and api["basis"] == "runs" and api["step_s"] == 1
    assert (api["before"]["label"], api["after"]["label"]) == ("Run #1 (Smoke)", "Run #2 (Smoke)")
    assert (api["before"]["run_number"], api["after"]["run_number"]) == (1, 2)
    assert api["before"]["start"] == figures.before.start.isoformat().replace("+00:00", "Z")
    (api_server,) = api["servers"]
    assert api_server["error"] == "" and api_server["name"] == "demo"
    api_rows = {r["key"]: r for r in api_server["figures"]}
    assert api_rows.keys() == rows.keys()
    for key, row in rows.items():
        assert (api_rows[key]["before"], api_rows[key]["after"]) == (row.before, row.after), key
        assert api_rows[key]["better"] == row.better
    assert api_rows["requests"]["change_pct"] == pytest.approx(rows["requests"].change_pct, abs=0.01)

    # Without a run of the plan under it, the change's own time ± 15 minutes (cut at now).
    Run.objects.filter(tuning_change=change).delete()
    figures = change_before_after(change)
    assert figures.basis == "window" and "15 minutes before it was applied" in figures.note
    rows = {r.key: r for r in figures.servers[0].rows}
    assert rows["requests"].before > rows["requests"].after > 0


def test_a_bad_prometheus_is_said_per_server(demo_target, demo_env, plan, alice, alice_client, misbehaving):  # noqa: F811
    demo_env.prometheus_url = f"{misbehaving}/error"
    demo_env.save()
    change = change_create(environment=demo_env, user=alice, edits=[{"key": "k", "value": "v"}], title="K")
    change_apply(change, user=alice)
    started = time.monotonic()
    figures = change_before_after(change)
    assert time.monotonic() - started < 10
    (server,) = figures.servers
    assert "Prometheus answered an error (execution): query timed out" in server.error and not server.rows
    fragment = alice_client.get(reverse("history:change-prometheus", args=[change.code])).content.decode()
    assert "No figures from Prometheus" in fragment
    api = alice_client.get(f"/api/v1/tuning-changes/{change.code}/prometheus/").json()
    assert api["available"] is True and api["servers"][0]["figures"] == []
    assert "Prometheus answered an error (execution): query timed out" in api["servers"][0]["error"]


def test_no_prometheus_no_section(plan, alice, alice_client):
    change = change_create(environment=plan.environment, user=alice, edits=[{"key": "k", "value": "v"}], title="K")
    change_apply(change, user=alice)
    assert change_before_after(change) is None
    assert 'id="prometheus"' not in alice_client.get(change.get_absolute_url()).content.decode()
    fragment = alice_client.get(reverse("history:change-prometheus", args=[change.code])).content.decode()
    assert 'id="prometheus-none"' in fragment
    api = alice_client.get(f"/api/v1/tuning-changes/{change.code}/prometheus/").json()
    assert (api["available"], api["reason"]) == (False, "no_prometheus")
