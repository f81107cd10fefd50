"""Metrics endpoints on servers: checked on save and before each run; the report's data is team-scoped."""

import pytest
from django.urls import reverse

from portal.metrics.models import MetricCollection, ServerSample
from portal.projects.models import Environment, Server
from portal.runs.models import Run
from portal.runs.services import RunError, run_create
from tests.portal.projects.data import environment_data
from tests.portal.runs.factories import plan_run

pytestmark = pytest.mark.django_db


def _post(client, project, servers, **fields):
    return client.post(
        reverse("projects:environment-new", args=[project.code]), environment_data(servers=servers, **fields)
    )


def test_a_server_gets_a_metrics_endpoint_a_counter_set_and_the_environment_an_interval(alice_client, project):
    servers = [{"name": "web-01", "metrics_url": "http://127.0.0.1:9100/metrics", "counter_set": "linux"}]
    response = _post(alice_client, project, servers, metrics_interval_s="10")
    assert response.status_code == 302
    env = Environment.objects.get(name="Production")
    assert env.metrics_interval_s == 10
    assert list(env.servers.values_list("metrics_url", "counter_set")) == [("http://127.0.0.1:9100/metrics", "linux")]


def test_the_interval_defaults_to_5_s_when_the_form_has_none(alice_client, project):
    assert _post(alice_client, project, []).status_code == 302
    assert Environment.objects.get(name="Production").metrics_interval_s == 5


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.20.30.40:9100/metrics", "cannot be scraped"),  # outside the allowlist (loopback only)
        ("ftp://127.0.0.1/metrics", "cannot be scraped"),  # not http(s)
        ("http://user:pw@127.0.0.1:9100/metrics", "cannot be scraped"),  # credentials in the URL
    ],
)
def test_an_endpoint_that_cannot_be_scraped_is_a_form_error_and_nothing_is_saved(alice_client, project, url, message):
    response = _post(alice_client, project, [{"name": "web-01", "metrics_url": url, "counter_set": "linux"}])
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Environment.objects.filter(name="Production").exists()


def test_an_endpoint_needs_its_counter_set(alice_client, project):
    response = _post(alice_client, project, [{"name": "web-01", "metrics_url": "http://127.0.0.1:9100/metrics"}])
    assert response.status_code == 200
    assert "Choose the counter set" in response.content.decode()


def test_an_endpoint_outside_the_allowlist_refuses_the_run_before_it_starts(plan, alice, settings):
    # saved while it was allowed, then the allowlist changed: the run must not start
    Server.objects.create(
        environment=plan.environment,
        name="db-01",
        metrics_url="http://10.20.30.40:9187/metrics",
        counter_set="postgres",
    )
    with pytest.raises(RunError, match="db-01.*metrics endpoint is refused"):
        run_create(plan=plan, user=alice)
    assert not Run.objects.exists()


def test_the_servers_json_is_scoped_to_the_team(plan, alice, alice_client, client, charlie, bob):
    run = plan_run(plan, number=1, plan_name="p", environment_name="e", status=Run.Status.PASSED, start_at=None)
    MetricCollection.objects.create(
        run=run,
        interval_s=5,
        servers=[{"id": 7, "name": "web", "url": "http://127.0.0.1:1/metrics", "counter_set": "demo"}],
    )
    ServerSample.objects.create(
        run=run, server_id=7, tick=0, offset_s=0.1, values=None, error="HTTP 503 from the metrics endpoint"
    )
    url = reverse("metrics:run-servers", args=[run.code])
    data = alice_client.get(url).json()
    assert data["servers"][0]["gaps"][0]["reason"] == "HTTP 503 from the metrics endpoint"
    client.force_login(bob)  # a viewer reads
    assert client.get(url).status_code == 200
    client.force_login(charlie)  # another team's run does not exist
    assert client.get(url).status_code == 404


def test_the_demo_seed_points_its_server_at_the_demo_metrics_once():
    from django.core.management import call_command

    call_command("seed_demo", base_url="http://127.0.0.1:8001")
    call_command("seed_demo", base_url="http://127.0.0.1:8001")  # again: nothing created twice
    server = Server.objects.get(environment__name="Demo target")
    assert (server.metrics_url, server.counter_set) == ("http://127.0.0.1:8001/metrics", "demo")
    config = {item["key"]: item["value"] for item in server.environment.configuration}
    assert config["web_garden.processes"] == "1"  # the knob's untuned state, for a tuning change to fix


def test_an_admitted_run_starts_its_server_collection_through_the_signal(plan, settings):
    """runs does not import metrics: it sends run_admitted, to which portal.metrics connects in ready()."""
    from django.utils import timezone

    from portal.runs.services import lifecycle
    from portal.runs.signals import run_admitted

    Server.objects.create(
        environment=plan.environment, name="web-01", metrics_url="http://127.0.0.1:9/metrics", counter_set="demo"
    )
    run = plan_run(plan, number=1, plan_name="p", environment_name="e", start_at=timezone.now())
    assert any("metrics" in str(r) for r in run_admitted.receivers)  # connected by the app, not by this test
    lifecycle._metrics_start(run.id)
    collection = MetricCollection.objects.get(run=run)
    assert [s["name"] for s in collection.servers] == ["web-01"]


def test_a_failing_receiver_of_run_admitted_is_logged_and_the_run_goes_on(plan, caplog):
    from portal.runs.services import lifecycle
    from portal.runs.signals import run_admitted

    def broken(sender, run_id, **kwargs):
        raise RuntimeError("collector down")

    run_admitted.connect(broken, dispatch_uid="test.broken")
    try:
        lifecycle._metrics_start(123456)  # no such run: the metrics receiver fails too, and is logged
    finally:
        run_admitted.disconnect(dispatch_uid="test.broken")
    assert "collector down" in caplog.text
    assert "the run goes on without it" in caplog.text
