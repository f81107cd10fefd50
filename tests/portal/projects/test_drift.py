"""Drift between the ledger and the target (issue 28, item 9): two environments on one target are
named on the environment's page, Verify reads the demo target's knobs and shows what differs, and a
tuning change reads them right after it is applied (its hook's effect, or a change nobody made)."""

import json

import pytest
from django.urls import reverse

from portal.history import services as history
from portal.history.models import TuningChange
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


def test_a_change_applied_through_its_hook_reads_the_target_after_and_finds_it_agrees(
    alice, alice_client, demo_env, demo
):
    # given: the target as the ledger says (compression off), and a change whose hook turns it on
    demo.set_knobs(**{"compression": "off", "tempdb.files": 8, "search.index": "on"})
    change = history.change_create(
        environment=demo_env,
        user=alice,
        edits=[{"key": "compression", "value": "on"}],
        title="Gzip the pages",
        hook_url=demo_env.config_url,
        hook_body=json.dumps({"compression": "on"}),
    )
    # when
    history.change_apply(change, user=alice)
    # then: the target was read after the hook and agrees on every key it reports
    change.refresh_from_db()
    v = change.verification
    assert v["url"] == demo_env.config_url and v["error"] == "" and v["drifted"] == []
    assert sorted(v["agreed"]) == ["compression", "search.index", "tempdb.files"]
    assert v["unreported"] == ["db.backup.schedule"]
    page = alice_client.get(change.get_absolute_url()).content.decode()
    assert 'id="verification-ok"' in page and "agreed with the ledger on 3 keys" in page


def test_a_change_nobody_made_on_the_target_shows_as_drift_on_the_change_and_in_the_api(
    alice, alice_client, demo_env, demo
):
    # given: the target as the ledger says; a change recorded without a hook, and nobody touched the target
    demo.set_knobs(**{"compression": "off", "tempdb.files": 8, "search.index": "on"})
    change = history.change_create(
        environment=demo_env, user=alice, edits=[{"key": "tempdb.files", "value": "4"}], title="Four tempdb files"
    )
    # when
    history.change_apply(change, user=alice)
    # then: applied (the ledger says what was decided), and the drift is named on its page and in the API
    change.refresh_from_db()
    assert change.status == TuningChange.Status.APPLIED
    assert change.verification["drifted"] == [{"key": "tempdb.files", "ledger": "4", "actual": 8}]
    page = alice_client.get(change.get_absolute_url()).content.decode()
    assert 'id="verification-drift" data-drifted="1"' in page and "<code>tempdb.files</code>" in page
    document = alice_client.get(f"/api/v1/tuning-changes/{change.code}/").json()
    assert document["verification"]["drifted"] == [{"key": "tempdb.files", "ledger": "4", "actual": 8}]


def test_a_change_on_an_environment_without_a_configuration_url_reads_nothing(alice, alice_client, project):
    env = Environment.objects.create(project=project, name="Plain", base_url="http://127.0.0.1:9")
    change = history.change_create(environment=env, user=alice, edits=[{"key": "a", "value": "1"}], title="A")
    history.change_apply(change, user=alice)
    change.refresh_from_db()
    assert change.verification is None
    assert alice_client.get(f"/api/v1/tuning-changes/{change.code}/").json()["verification"] is None


def test_verify_through_the_api_for_a_read_token_and_404_outside_the_team(demo_env, demo, alice, team, charlie):
    from rest_framework.test import APIClient

    from portal.accounts.services import token_create

    # given: the target restarted with its defaults (index off) while the ledger says on
    demo.set_knobs(**{"search.index": "off", "tempdb.files": 8, "compression": "off"})
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user=alice, team=team, name='ci', scope='read')[1]}")
    # when
    answer = api.get(f"/api/v1/environments/{demo_env.code}/verify/")
    # then
    assert answer.status_code == 200, answer.content
    document = answer.json()
    assert document["drifted"] == [{"key": "search.index", "ledger": "on", "actual": "off"}]
    assert document["url"] == demo_env.config_url and document["error"] == ""
    assert sorted(document["agreed"]) == ["compression", "tempdb.files"]
    outsider = APIClient()
    outsider.force_authenticate(charlie)
    assert outsider.get(f"/api/v1/environments/{demo_env.code}/verify/").status_code == 404


def test_a_run_reads_the_target_as_it_starts_and_carries_the_doubt_when_it_differs(
    alice, alice_client, plan, demo_env, demo
):
    from portal.runs import services as runs
    from portal.runs.models import Run

    # given: the ledger says the index is on; the target was restarted with it off
    demo.set_knobs(**{"search.index": "off", "tempdb.files": 8, "compression": "off"})
    plan.environment = demo_env
    plan.save()
    run = runs.run_create(plan=plan, user=alice)
    # when
    runs.run_start(run.id)
    # then: the run records what the target said, against the configuration it names
    run.refresh_from_db()
    assert run.config_verification["drifted"] == [{"key": "search.index", "ledger": "on", "actual": "off"}]
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'id="config-drift" data-drifted="1"' in page and "<code>search.index</code> is <code>off</code>" in page
    document = alice_client.get(f"/api/v1/runs/{run.code}/").json()
    assert document["config_verification"]["drifted"] == run.config_verification["drifted"]
    exported = json.loads(alice_client.get(f"/api/v1/runs/{run.code}/summary.json").content)
    assert exported["config_verification"]["drifted"] == run.config_verification["drifted"]
    # and once it has ended it is left out of trends and verdicts, saying why
    Run.objects.filter(id=run.id).update(status=Run.Status.FINISHED, summary={"totals": {}})
    run.refresh_from_db()
    assert "search.index on in the ledger, off on the target" in "; ".join(run.doubts) and not run.counts


def test_a_run_on_a_target_that_agrees_carries_no_doubt(alice, plan, demo_env, demo):
    from portal.runs import services as runs

    demo.set_knobs(**{"search.index": "on", "tempdb.files": 8, "compression": "off"})
    plan.environment = demo_env
    plan.save()
    run = runs.run_create(plan=plan, user=alice)
    runs.run_start(run.id)
    run.refresh_from_db()
    assert run.config_verification["drifted"] == [] and run.config_verification["error"] == ""
    assert not any("configuration it names" in d for d in run.doubts)


def test_the_seeded_demo_environment_sees_its_index_dropped_by_a_restart(project, demo):
    from django.core.management import call_command

    # given: the seeded demo, whose ledger says the index is on (the experiment applied it) …
    call_command("seed_demo", base_url=demo.base_url)
    env = Environment.objects.get(name="Demo target")
    assert env.config_url == f"{demo.base_url}/_demo/config"
    env.configuration = [
        {**item, "value": "on"} if item["key"] == "db.index.work_items.area" else item for item in env.configuration
    ]
    env.save()
    # … and a target restarted with its defaults (no index)
    demo.set_knobs(**{"search.index": "off", "tempdb.files": 1, "compression": "off", "latency_ms": 0})
    # when
    result = drift.configuration_drift(env)
    # then: the index is named under the ledger's key, and nothing else is out of step
    assert result.error == "" and result.unreported == []
    assert result.drifted == [{"key": "db.index.work_items.area", "ledger": "on", "actual": "off"}]
