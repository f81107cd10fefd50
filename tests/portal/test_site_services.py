"""Issue 30, item 1: the site's own services are out of reach of its outbound features and of load tests.

On the real stack (Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 running on this machine), a
webhook, a metrics URL or a change's hook aimed at them is refused before any connection, whatever
PLIMSOLL_OUTBOUND_ALLOWED says, and nothing of their answer is shown; response bodies of what *is*
allowed are shown to editors only, truncated.
"""

import json
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client
from django.urls import reverse

from portal import outbound
from portal.history import services as history
from portal.notifications import services as notifications
from portal.projects import tryit
from portal.projects.models import Environment, Step, TestCase
from portal.telemetry.scrape import scrape
from tests.processes import PYTHON, ROOT

pytestmark = pytest.mark.django_db

OWN = "one of this site's own services"
REDIS = ("127.0.0.1", 6379)
POSTGRES = ("127.0.0.1", 5432)


def listening(address) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
        return True
    except OSError:
        return False


def manage_py(code: str, tmp_path, **env) -> subprocess.CompletedProcess:
    """``manage.py shell -c code`` in a fresh process whose settings come from ``env`` alone (as a deployment's)."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PLIMSOLL_", "DATABASE_URL", "CELERY_", "EMAIL_"))}
    keep.update(PLIMSOLL_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [PYTHON, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=ROOT,
        env=keep,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_settings_name_every_service_the_site_uses(tmp_path):
    # given: a deployment's variables
    env = {
        "DATABASE_URL": "postgres://plimsoll@db.internal:6432/plimsoll",
        "CELERY_BROKER_URL": "redis://broker.internal:6380/0",
        "PLIMSOLL_CACHE_URL": "redis://cache.internal/1",
        "EMAIL_HOST": "smtp.internal",
        "EMAIL_PORT": "2525",
        "SITE_URL": "https://plimsoll.example.com",
        "PLIMSOLL_PORT": "8123",
        "PLIMSOLL_DENIED_SERVICES": "exporter.internal:9100",
    }
    code = "from django.conf import settings; import json; print(json.dumps(settings.PLIMSOLL_SITE_SERVICES))"

    # when
    result = manage_py(code, tmp_path, **env)

    # then: each one, with its default port when the URL names none
    assert result.returncode == 0, result.stderr
    assert [tuple(e) for e in json.loads(result.stdout)] == [
        ("db.internal", 6432),
        ("broker.internal", 6380),
        ("cache.internal", 6379),
        ("smtp.internal", 2525),
        ("plimsoll.example.com", 443),
        ("0.0.0.0", 8123),
        ("exporter.internal", 9100),
    ]


@pytest.mark.parametrize(("debug", "expected"), [("false", ""), ("true", "127.0.0.0/8,::1/128,localhost")])
def test_outbound_requests_allow_nothing_by_default_with_debug_off(tmp_path, debug, expected):
    code = "from django.conf import settings; print(repr(settings.PLIMSOLL_OUTBOUND_ALLOWED))"
    result = manage_py(code, tmp_path, DEBUG=debug)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(expected)


def test_on_the_real_stack_redis_postgres_and_the_portal_are_refused_whatever_the_allowlists_say(tmp_path):
    # given: the real stack's Redis and PostgreSQL, listening (so that the old code would have connected)
    assert listening(REDIS) and listening(POSTGRES), "Redis and PostgreSQL must run on 127.0.0.1 for this test"
    code = """
import json
from portal import outbound
from portal.runs.services import allowlist
from workers.engine.targets import TargetNotAllowed, check_url
out = {}
for url in ("http://127.0.0.1:6379/", "http://localhost:5432/", "http://127.0.0.2:6379/x", "http://127.0.0.1:8000/"):
    try:
        r = outbound.request("POST", url, body=b"FLUSHALL", timeout=2)
        out[url] = ["sent", r.status, r.body[:50].decode("latin-1")]
    except (outbound.OutboundRefused, outbound.OutboundFailed) as exc:
        out[url] = [type(exc).__name__, str(exc)]
    try:
        check_url(url, allowlist())  # a load test's base URL, as the run's start and the engine check it
        out[url].append("load allowed")
    except TargetNotAllowed as exc:
        out[url].append(str(exc))
print(json.dumps(out))
"""

    # when: the portal runs on them, every allowlist includes loopback, and it is asked to send there
    result = manage_py(
        code,
        tmp_path,
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/plimsoll_h30a_security",
        CELERY_BROKER_URL="redis://127.0.0.1:6379/7",
        PLIMSOLL_OUTBOUND_ALLOWED="127.0.0.0/8,::1/128,localhost",
        PLIMSOLL_ALLOWED_TARGETS="127.0.0.0/8,::1/128,localhost",
    )

    # then: each is refused before connecting, as one of the site's own services; nothing of an answer came back
    assert result.returncode == 0, result.stderr
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    for url, (kind, message, load) in outcomes.items():
        assert kind == "OutboundRefused" and OWN in message, (url, kind, message)
        assert OWN in load, (url, load)


class Answering(ThreadingHTTPServer):
    """A loopback receiver whose every answer is ``status`` and ``body``."""

    def __init__(self, status: int, body: bytes):
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(handler):
                self.requests += 1
                handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
                handler.send_response(status)
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_port}/hook"
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture
def stack_services(settings):
    """The site's services as settings derive them on the real stack (test above): Redis and PostgreSQL here."""
    assert listening(REDIS) and listening(POSTGRES), "Redis and PostgreSQL must run on 127.0.0.1 for this test"
    settings.PLIMSOLL_SITE_SERVICES = [REDIS, POSTGRES, ("127.0.0.1", 8000), ("0.0.0.0", 8000)]
    settings.PLIMSOLL_OUTBOUND_ALLOWED = "127.0.0.0/8,::1/128,localhost"


def test_a_webhook_to_a_service_of_the_site_is_refused_when_saved(stack_services, project):
    for url in ("http://127.0.0.1:6379/", "http://127.0.0.2:5432/x", "http://[::1]:8000/", "http://localhost:5432/"):
        with pytest.raises(notifications.ChannelError, match=OWN):
            notifications.channel_create(project=project, name="Probe", kind="webhook", events=["regression"], url=url)
    assert not project.channels.exists()


def test_a_webhook_aimed_at_redis_is_refused_and_its_log_shows_nothing_of_an_answer(stack_services, project, settings):
    # given: an editor's webhook aimed at the real Redis (saved before the setting named it, say)
    settings.PLIMSOLL_SITE_SERVICES = []
    channel = notifications.channel_create(
        project=project, name="Probe", kind="webhook", events=["regression"], url="http://localhost:6379/"
    )
    settings.PLIMSOLL_SITE_SERVICES = [REDIS, POSTGRES]

    # when: it is sent
    delivery = notifications.channel_test(channel=channel)
    assert notifications.delivery_attempt(delivery_id=delivery.id) is None  # refused: never retried

    # then: refused as the site's own, nothing sent, nothing of Redis in the log
    delivery.refresh_from_db()
    assert (
        delivery.status == "failed" and delivery.error.startswith("Refused, nothing was sent") and OWN in delivery.error
    )
    assert delivery.status_code is None and delivery.response_snippet == ""


@pytest.mark.parametrize("url", ["http://127.0.0.1:5432/metrics", "http://127.0.0.1:6379/metrics"])
def test_a_metrics_url_aimed_at_postgres_or_redis_is_refused(stack_services, url):
    # the form's check and the scrape itself
    with pytest.raises(outbound.OutboundRefused, match=OWN):
        outbound.check(url)
    _, values, gap = scrape(url, "demo", timeout=2)
    assert values is None and OWN in gap


def test_a_changes_hook_aimed_at_postgres_is_refused_without_a_request(stack_services, environment, alice):
    change = history.change_create(
        environment=environment,
        user=alice,
        edits=[{"key": "search.index", "value": "on"}],
        title="Index",
        hook_url="http://localhost:5432/",
    )
    result = history.call_hook(change)
    assert result["error"].startswith("Hook refused, no request was sent") and OWN in result["error"]
    assert "body" not in result and "status" not in result


def test_delivery_answers_are_shown_to_editors_only_and_truncated(project, alice, bob):
    # given: a receiver that answers a long body carrying a secret of its own
    receiver = Answering(200, b"receiver-secret " + b"x" * 5000)
    try:
        channel = notifications.channel_create(
            project=project, name="CI", kind="webhook", events=["regression"], url=receiver.url
        )
        delivery = notifications.channel_test(channel=channel)
        notifications.delivery_attempt(delivery_id=delivery.id)
    finally:
        receiver.shutdown()
        receiver.server_close()
    assert receiver.requests == 1
    url = reverse("notifications:project", args=[project.code])
    editor, viewer = Client(), Client()
    editor.force_login(alice)
    viewer.force_login(bob)

    # when
    as_editor = editor.get(url).content.decode()
    as_viewer = viewer.get(url).content.decode()

    # then: the editor sees the start of the answer only; the viewer sees the delivery but not the answer
    assert "receiver-secret" in as_editor and "x" * 300 not in as_editor
    assert "receiver-secret" not in as_viewer and "Sent" in as_viewer


def test_a_hooks_answer_is_shown_to_editors_only(environment, alice, bob, settings):
    settings.PLIMSOLL_OUTBOUND_ALLOWED = "127.0.0.0/8"
    receiver = Answering(200, b'{"hook-secret": true}' + b" " * 3000 + b"tail-of-the-answer")
    try:
        change = history.change_create(
            environment=environment,
            user=alice,
            edits=[{"key": "search.index", "value": "on"}],
            title="Index",
            hook_url=receiver.url,
        )
        history.change_apply(change, user=alice)
    finally:
        receiver.shutdown()
        receiver.server_close()
    url = reverse("history:change", args=[change.code])
    editor, viewer = Client(), Client()
    editor.force_login(alice)
    viewer.force_login(bob)
    as_editor, as_viewer = editor.get(url), viewer.get(url)
    assert as_editor.status_code == as_viewer.status_code == 200
    assert "hook-secret" in as_editor.content.decode() and "tail-of-the-answer" not in as_editor.content.decode()
    assert "hook-secret" not in as_viewer.content.decode()


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:6379", "http://localhost:5432", "http://127.0.0.2:8000"])
def test_try_it_on_an_environment_aimed_at_a_service_of_the_site_sends_nothing(stack_services, project, base_url):
    # given: an environment aimed at the real Redis, PostgreSQL or the portal's port (it may be saved: the
    # page says why a run would be refused), and a test case an editor tries on it
    environment = Environment.objects.create(project=project, name="Probe", base_url=base_url)
    case = TestCase.objects.create(project=project, name="Probe")
    Step.objects.create(test_case=case, position=0, name="Ask", method="POST", path="/", body="FLUSHALL")

    # when
    result = tryit.test_case_try(test_case=case, environment=environment)

    # then: refused as the site's own before any connection, nothing of an answer to show
    assert OWN in result.refused and result.exchanges == [] and not result.completed


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "http://localhost:5432"])
def test_verify_prometheus_and_grafana_aimed_at_a_service_of_the_site_are_refused(stack_services, environment, url):
    """The outbound features that came after: the target's configuration (Verify), an environment's
    Prometheus and a Grafana channel go through the same helper, so Redis and PostgreSQL stay out of reach."""
    from portal.projects.drift import configuration_drift
    from portal.telemetry import promql

    environment.config_url = f"{url}/_demo/knobs"
    verification = configuration_drift(environment)
    assert OWN in verification.error and verification.drifted == verification.unrecorded == []

    with pytest.raises(ValueError, match=OWN):
        promql.check_prometheus_url(url)
    with pytest.raises(promql.PrometheusError, match=OWN):
        promql._get(url, "/api/v1/query", {"query": "up"}, "", timeout=2)

    with pytest.raises(notifications.ChannelError, match=OWN):
        notifications.channel_create(
            project=environment.project, name="Grafana", kind="grafana", events=["regression"], url=url, token="t"
        )
