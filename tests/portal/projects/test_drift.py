"""Drift between the ledger and the target (issue 28, item 9): two environments on one target are
named on the environment's page, and Verify reads the demo target's knobs and shows what differs."""

import pytest
from django.urls import reverse

from portal.projects import drift
from portal.projects.models import Environment, Project
from tests.processes import DemoTarget

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
LEDGER = [
    {"key": "search.index", "value": "on"},
    {"key": "tempdb.files", "value": "8"},
    {"key": "compression", "value": "off"},
    {"key": "db.backup.schedule", "value": "nightly"},
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    target = DemoTarget(tmp_path_factory.mktemp("drift-demo"), items=200)
    yield target
    target.close()


@pytest.fixture
def demo_env(project, demo):
    demo.reset()
    return Environment.objects.create(
        project=project,
        name="Demo",
        base_url=demo.base_url,
        config_url=f"{demo.base_url}/_demo/knobs",
        configuration=LEDGER,
    )


def test_verify_names_each_key_where_the_target_differs_from_the_ledger(demo_env, demo):
    # given: the ledger says the index is on and 8 tempdb files; the target was restarted with its defaults
    demo.set_knobs(**{"tempdb.files": 8})
    # when
    result = drift.configuration_drift(demo_env)
    # then
    assert result.error == ""
    assert result.drifted == [{"key": "search.index", "ledger": "on", "actual": "off"}]
    assert sorted(result.agreed) == ["compression", "tempdb.files"]
    assert result.unreported == ["db.backup.schedule"]
    assert "latency_ms" in result.unrecorded


def test_verify_on_the_page(alice_client, demo_env):
    url = reverse("projects:environment-verify", args=[demo_env.code])
    assert url in alice_client.get(demo_env.get_absolute_url()).content.decode()
    html = alice_client.post(url, **HTMX).content.decode()
    assert 'data-drifted="1"' in html and "<code>search.index</code>" in html and "<html" not in html


def test_a_target_that_does_not_answer_says_so(project, settings):
    env = Environment.objects.create(
        project=project, name="Gone", base_url="http://127.0.0.1:9", config_url="http://127.0.0.1:9/_demo/knobs"
    )
    result = drift.configuration_drift(env)
    assert result.error and "127.0.0.1:9" in result.error and result.drifted == []


def test_a_viewer_cannot_verify_and_an_outsider_gets_404(bob_client, demo_env, charlie, client):
    url = reverse("projects:environment-verify", args=[demo_env.code])
    assert bob_client.post(url).status_code == 403
    client.force_login(charlie)
    assert client.post(url).status_code == 404


def test_the_page_warns_of_another_environment_of_the_team_on_the_same_origin(alice_client, project, charlie):
    # given: two environments of the team (in two projects) on one target, spelled differently
    env = Environment.objects.create(project=project, name="Staging", base_url="http://127.0.0.1:8001")
    other_project = Project.objects.create(team=project.team, name="Other")
    Environment.objects.create(project=other_project, name="Staging copy", base_url="HTTP://127.0.0.1:8001/")
    Environment.objects.create(project=project, name="Elsewhere", base_url="http://127.0.0.1:8002")
    # and one of another team on it (not ours to show)
    Environment.objects.create(
        project=Project.objects.create(team=charlie.teams.get(), name="Theirs"),
        name="Secret",
        base_url="http://127.0.0.1:8001",
    )
    # when
    page = alice_client.get(env.get_absolute_url()).content.decode()
    # then
    assert 'id="same-origin"' in page and "Staging copy" in page
    assert "Elsewhere" not in page.split('id="same-origin"')[1].split("</div>")[0]
    assert "Secret" not in page


def test_verify_against_an_answer_nested_too_deep_says_it_is_not_a_configuration(project):
    """Issue 28 item 16: a configuration URL answering JSON nested 5,000 deep is a refusal, not a RecursionError."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Deep(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = ("[" * 5000 + "]" * 5000).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Deep)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        env = Environment.objects.create(project=project, name="Deep", base_url=url, config_url=f"{url}/knobs")
        result = drift.configuration_drift(env)
    finally:
        server.shutdown()
        server.server_close()
    assert result.error == f"{url}/knobs did not answer a JSON object of key → value."
