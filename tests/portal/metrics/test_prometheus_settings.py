"""An environment's Prometheus and its servers' label matchers: validated, the token encrypted and never shown back.

The readings themselves are tested against a real Prometheus in tests/e2e/test_prometheus_source.py.
"""

import http.server
import io
import threading

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.metrics.models import ServerSample
from portal.projects.models import Environment, Server
from portal.runs.models import Run
from portal.runs.services import RunError, run_create
from portal.telemetry.countersets import DEMO, LINUX
from portal.telemetry.promql import parse_selector, query_for, token_decrypt
from tests.portal.api.conftest import session
from tests.portal.projects.data import environment_data
from tests.portal.runs.factories import plan_run

pytestmark = pytest.mark.django_db

PROM = "http://127.0.0.1:9090"
NO_PROM = "Prometheus URL to read servers from it"


def test_label_matchers_are_parsed_and_become_one_query_of_the_counter_sets_metrics():
    assert parse_selector('{instance="web-01:9100", job=~"node|win"}') == [
        ("instance", "=", "web-01:9100"),
        ("job", "=~", "node|win"),
    ]
    query = query_for(DEMO, 'instance="127.0.0.1:8001"')
    assert query.startswith('{__name__=~"demo_process_cpu_seconds_total|demo_requests_total|')
    assert query.endswith(', instance="127.0.0.1:8001"}')
    assert "node_cpu_seconds_total" in query_for(LINUX, 'instance="x"')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at least one label matcher"),
        ("web-01", "Not a label matcher"),
        ('instance="a" job="b"', "Not a label matcher"),  # a comma is missing
        ('instance="a"} or vector(1) {x="', "Not a label matcher"),  # no PromQL beyond matchers
        ('__name__="up"', "match labels only"),
        ('job=~"("', "not valid"),
    ],
)
def test_bad_label_matchers_are_refused_with_a_reason(text, message):
    with pytest.raises(ValueError, match=message):
        parse_selector(text)


def _post(client, project, servers, **fields):
    return client.post(
        reverse("projects:environment-new", args=[project.code]), environment_data(servers=servers, **fields)
    )


def test_the_form_saves_the_prometheus_the_token_encrypted_and_the_servers_labels(alice_client, project):
    servers = [{"name": "web-01", "counter_set": "linux", "prometheus_selector": 'instance = "web-01:9100"'}]
    response = _post(alice_client, project, servers, prometheus_url=PROM + "/", prometheus_token="s3cret")
    assert response.status_code == 302, response.content.decode()[-2000:]
    env = Environment.objects.get(name="Production")
    assert env.prometheus_url == PROM
    assert "s3cret" not in env.prometheus_token and token_decrypt(env.prometheus_token) == "s3cret"
    assert env.servers.get().prometheus_selector == 'instance="web-01:9100"'

    # never shown back; an empty box keeps it, the box to forget it forgets it
    edit = reverse("projects:environment-edit", args=[env.code])
    page = alice_client.get(edit).content.decode()
    assert "s3cret" not in page and env.prometheus_token not in page
    rows = [{"id": env.servers.get().id, "name": "web-01", "counter_set": "linux"}]
    assert alice_client.post(edit, environment_data(rows, initial=1, prometheus_url=PROM)).status_code == 302
    env.refresh_from_db()
    assert token_decrypt(env.prometheus_token) == "s3cret"
    data = environment_data(rows, initial=1, prometheus_url=PROM, prometheus_token_clear="on")
    assert alice_client.post(edit, data).status_code == 302
    env.refresh_from_db()
    assert env.prometheus_token == ""


@pytest.mark.parametrize(
    ("servers", "fields", "message"),
    [
        ([{"name": "w", "counter_set": "linux", "prometheus_selector": "web-01"}], {}, "Not a label matcher"),
        (
            [{"name": "w", "counter_set": "linux", "prometheus_selector": 'instance="w"'}],
            {},
            "Prometheus URL to read servers from it",
        ),
        ([{"name": "w", "prometheus_selector": 'instance="w"'}], {"prometheus_url": PROM}, "Choose the counter set"),
        ([], {"prometheus_url": "http://10.20.30.40:9090"}, "cannot be queried"),  # outside the allowlist
    ],
)
def test_bad_prometheus_settings_are_form_errors_and_nothing_is_saved(alice_client, project, servers, fields, message):
    response = _post(alice_client, project, servers, **fields)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Environment.objects.filter(name="Production").exists()


def test_the_api_takes_the_token_write_only(alice, project):
    document = {
        "project": str(project.code),
        "name": "X",
        "base_url": "http://127.0.0.1:9000",
        "prometheus_url": PROM,
        "prometheus_token": "s3cret",
        "servers": [{"name": "db", "counter_set": "linux", "prometheus_selector": 'instance="db:9100"'}],
    }
    created = session(alice).post("/api/v1/environments/", document, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert "s3cret" not in created.content.decode() and "prometheus_token" not in body
    assert body["prometheus_url"] == PROM and body["prometheus_token_set"] is True
    assert body["servers"][0]["prometheus_selector"] == 'instance="db:9100"'
    code = body["code"]
    # a patch that does not name the token keeps it
    assert session(alice).patch(f"/api/v1/environments/{code}/", {"name": "Y"}, format="json").status_code == 200
    assert token_decrypt(Environment.objects.get(code=code).prometheus_token) == "s3cret"
    bad = session(alice).patch(
        f"/api/v1/environments/{code}/",
        {"servers": [{"name": "db", "counter_set": "linux", "prometheus_selector": "db"}]},
        format="json",
    )
    assert bad.status_code == 400 and "Not a label matcher" in bad.content.decode()


def test_the_environment_page_says_what_went_wrong_reading_prometheus(alice_client, plan):
    env = plan.environment
    env.prometheus_url = PROM
    env.save()
    server = Server.objects.create(environment=env, name="web-01", counter_set="linux", prometheus_selector='a="b"')
    run = plan_run(plan)
    for tick in range(3):
        ServerSample.objects.create(
            run=run, server_id=server.id, tick=tick, offset_s=tick, error="Prometheus refused the token (HTTP 401)"
        )
    page = alice_client.get(env.get_absolute_url()).content.decode()
    assert "server “web-01”: 3 readings from Prometheus failed; the last: Prometheus refused the token" in page


def test_reading_a_past_run_needs_a_prometheus_and_says_which_server_failed(plan, misbehaving_url):
    run = plan_run(plan)
    with pytest.raises(CommandError, match="has no Prometheus URL"):
        call_command("metrics_from_prometheus", run.id)
    env = plan.environment
    env.prometheus_url = misbehaving_url
    env.save()
    server = Server.objects.create(environment=env, name="web-01", counter_set="linux", prometheus_selector='a="b"')
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 server"):
        call_command("metrics_from_prometheus", run.id, stderr=err)
    assert f"server {server.id}: Prometheus answered an error (bad_data): parse error" in err.getvalue()
    # and every round of the window is a gap with that reason, for the run's page
    gaps = ServerSample.objects.filter(run=run, server_id=server.id)
    assert gaps.count() > 2 and all(g.values is None and "parse error" in g.error for g in gaps)


@pytest.fixture
def misbehaving_url():
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b'{"status":"error","errorType":"bad_data","error":"parse error"}'
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_prometheus_outside_the_allowlist_refuses_the_run_before_it_starts(plan, alice):
    # saved while it was allowed, then the allowlist changed: the run must not start
    env = plan.environment
    env.prometheus_url = "http://10.20.30.40:9090"
    env.save()
    Server.objects.create(environment=env, name="db-01", counter_set="linux", prometheus_selector='instance="db"')
    with pytest.raises(RunError, match="environment's Prometheus is refused"):
        run_create(plan=plan, user=alice)
    assert not Run.objects.exists()


def test_an_answer_nested_too_deep_is_not_prometheus_json_not_a_recursion_error():
    """Issue 28 item 16: JSON nested 5,000 deep from a "Prometheus" is its usual refusal."""
    from portal.telemetry import promql

    class Deep(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = ("[" * 5000 + "]" * 5000).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Deep)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(promql.PrometheusError, match="not its API's JSON"):
            promql.instant(f"http://127.0.0.1:{server.server_address[1]}", "", '{job="x"}', LINUX, 0.0, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
