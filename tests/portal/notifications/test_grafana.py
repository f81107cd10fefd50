"""Grafana annotation channels (issue 29 item 3) against a real HTTP server on loopback that answers as
Grafana's ``POST /api/annotations`` does: it checks the Bearer token (401 otherwise), keeps each body and
answers ``{"id": …, "message": "Annotation added"}``. Grafana itself is not packaged here."""

import hmac
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.history.services import change_apply, change_create
from portal.notifications import services
from portal.notifications.models import Channel, Delivery

pytestmark = pytest.mark.django_db
TOKEN = "glsa_test_token_0123456789"


class FakelessGrafana:
    """A small HTTP server speaking the part of Grafana's annotation API Plimsoll uses."""

    def __init__(self, *, token=TOKEN, statuses=()):
        self.token, self.statuses = token, list(statuses)
        self.requests, self.annotations = [], []
        grafana = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                grafana.requests.append((self.path, dict(self.headers), body))
                status = grafana.statuses.pop(0) if grafana.statuses else 200
                if self.path != "/api/annotations":
                    status, answer = 404, {"message": "Not found"}
                elif self.headers.get("Authorization") != f"Bearer {grafana.token}":
                    status, answer = 401, {"message": "invalid API key"}
                elif status == 200:
                    grafana.annotations.append(json.loads(body))
                    answer = {"message": "Annotation added", "id": len(grafana.annotations)}
                else:
                    answer = {"message": "Internal Server Error"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def grafana():
    made = []

    def make(**kwargs):
        made.append(FakelessGrafana(**kwargs))
        return made[-1]

    yield make
    for g in made:
        g.close()


@pytest.fixture
def finished_run(plan):
    from portal.schedules.models import RunVerdict
    from tests.portal.runs.factories import plan_run

    start = timezone.now().replace(microsecond=0) - timedelta(minutes=10)
    run = plan_run(
        plan, number=7, status="failed", summary={"verdict": "failed", "totals": {"apd_ms": 98.0}}, start_at=start,
        finished_at=start + timedelta(minutes=5),
    )  # fmt: skip
    RunVerdict.objects.create(
        run=run, verdict="regressed", headline="Run #7 regressed against Baseline: APD 45 ms → 98 ms.",
        baseline_label="Baseline", rows=[],
    )  # fmt: skip
    return run


def grafana_channel(project, url, **fields):
    return services.channel_create(
        project=project,
        name="Dashboards",
        kind="grafana",
        events=["run_finished", "change_applied"],
        url=url,
        token=TOKEN,
        **fields,
    )


def test_a_finished_run_is_a_region_annotation_signed_with_the_token(project, finished_run, grafana):
    server = grafana()
    channel = grafana_channel(project, server.url + "/api/annotations/", dashboard_uid="srv-01", panel_id=4)
    assert channel.url == server.url  # the API path is taken off a pasted address
    assert TOKEN not in channel.token and channel.token  # stored encrypted

    (delivery,) = services.notify_run(run_id=finished_run.id)
    assert services.delivery_attempt(delivery_id=delivery.id) is None

    ((path, headers, body),) = server.requests
    assert path == "/api/annotations" and headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["X-Plimsoll-Signature"] == "sha256=" + hmac.new(channel.secret.encode(), body, "sha256").hexdigest()
    (annotation,) = server.annotations
    assert annotation["time"] == int(finished_run.start_at.timestamp() * 1000)
    assert annotation["timeEnd"] - annotation["time"] == 5 * 60 * 1000
    assert (annotation["dashboardUID"], annotation["panelId"]) == ("srv-01", 4)
    assert annotation["tags"] == [
        "plimsoll", "project:Intranet", "run", "plan:Smoke", f"environment:{finished_run.environment_name}",
        "status:failed", "verdict:regressed",
    ]  # fmt: skip
    assert annotation["text"].startswith("Run #7 regressed against Baseline: APD 45 ms → 98 ms.")
    assert f'<a href="http://127.0.0.1:8000/runs/{finished_run.code}/">Open in Plimsoll</a>' in annotation["text"]
    delivery.refresh_from_db()
    assert (delivery.status, delivery.status_code) == ("sent", 200)
    assert '"Annotation added"' in delivery.response_snippet


def test_an_applied_tuning_change_is_a_point_annotation(project, environment, alice, grafana, mail_sent_at_commit):
    server = grafana()
    grafana_channel(project, server.url)  # no dashboard: an organization annotation
    change = change_create(
        environment=environment, user=alice, edits=[{"key": "pool.size", "value": "20"}], title="Pool 50 → 20"
    )
    with mail_sent_at_commit():  # the tasks (notify, then send) run here, after the commit, as in a worker
        change_apply(change, user=alice)

    (annotation,) = server.annotations
    change.refresh_from_db()
    assert annotation["time"] == annotation["timeEnd"] == int(change.applied_at.timestamp() * 1000)
    assert "dashboardUID" not in annotation and "panelId" not in annotation
    assert annotation["tags"] == ["plimsoll", "project:Intranet", "tuning-change", "environment:Staging", "other"]
    assert annotation["text"].startswith("Tuning change #1 on Staging: Pool 50 → 20 (pool.size = 20).")
    assert Delivery.objects.get().status == "sent"
    assert services.notify_change(change_id=change.id) == []  # once


def test_a_refused_token_fails_at_once_and_says_so(project, finished_run, grafana):
    server = grafana(token="another")
    grafana_channel(project, server.url)
    (delivery,) = services.notify_run(run_id=finished_run.id)
    assert services.delivery_attempt(delivery_id=delivery.id) is None  # no retry: waiting will not help
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.status_code) == ("failed", 1, 401)
    assert delivery.error.startswith("HTTP 401: Grafana refused the token")
    assert len(server.requests) == 1 and server.annotations == []


def test_a_5xx_is_retried_by_the_webhooks_backoff(project, finished_run, grafana):
    server = grafana(statuses=[502, 500])
    grafana_channel(project, server.url)
    (delivery,) = services.notify_run(run_id=finished_run.id)
    delays = [services.delivery_attempt(delivery_id=delivery.id) for _ in range(3)]
    assert delays == [60, 180, None]
    bodies = {body for _, _, body in server.requests}
    assert len(server.requests) == 3 and len(bodies) == 1  # the same annotation each time
    assert len(server.annotations) == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("sent", 3)


def test_outside_the_allowlist_nothing_is_sent(project, finished_run, grafana, settings):
    server = grafana()
    grafana_channel(project, server.url)
    settings.PLIMSOLL_OUTBOUND_ALLOWED = "10.1.2.0/24"
    (delivery,) = services.notify_run(run_id=finished_run.id)
    services.delivery_attempt(delivery_id=delivery.id)
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.error.startswith("Refused, nothing was sent")
    assert server.requests == []


def test_a_channel_test_is_a_point_now(project, grafana):
    server = grafana()
    channel = grafana_channel(project, server.url, dashboard_uid="abc")
    delivery = services.channel_test(channel=channel)
    services.delivery_attempt(delivery_id=delivery.id)
    (annotation,) = server.annotations
    assert annotation["time"] == annotation["timeEnd"]
    assert abs(annotation["time"] / 1000 - timezone.now().timestamp()) < 60
    assert annotation["tags"] == ["plimsoll", "project:Intranet", "test"] and annotation["dashboardUID"] == "abc"


def test_the_form_refuses_bad_grafana_channels(alice_client, project):
    url = reverse("notifications:new", args=[project.code])
    base = {"name": "G", "kind": "grafana", "events": ["run_finished"], "url": "http://127.0.0.1:3000"}
    cases = [
        ({}, "Give a Grafana service account token"),
        ({"token": TOKEN, "url": "ftp://127.0.0.1/"}, "The Grafana URL"),
        ({"token": TOKEN, "dashboard_uid": "no spaces here"}, "A dashboard UID is 1 to 40"),
        ({"token": TOKEN, "panel_id": "3"}, "A panel belongs to a dashboard"),
        ({"token": TOKEN, "dashboard_uid": "d", "panel_id": "0"}, "greater than or equal to 1"),
    ]
    for extra, message in cases:
        response = alice_client.post(url, {**base, **extra})
        assert response.status_code == 400 and message in response.content.decode(), extra
    assert not Channel.objects.exists()
    response = alice_client.post(url, {**base, "token": TOKEN, "dashboard_uid": "d-1", "panel_id": "2"}, follow=True)
    channel = Channel.objects.get()
    page = response.content.decode()
    assert channel.secret in page and TOKEN not in page  # the signing secret once, the token never
    assert "Annotations to <code>http://127.0.0.1:3000/api/annotations</code>" in page


def test_an_edit_keeps_the_token_unless_a_new_one_is_given(alice_client, project):
    channel = grafana_channel(project, "http://127.0.0.1:3000")
    stored = channel.token
    edit = reverse("notifications:edit", args=[channel.code])
    data = {"name": "G2", "events": ["change_applied"], "url": "http://127.0.0.1:3001", "enabled": "on"}
    assert alice_client.post(edit, data).status_code == 302
    channel.refresh_from_db()
    assert (channel.name, channel.url, channel.token) == ("G2", "http://127.0.0.1:3001", stored)
    assert alice_client.post(edit, {**data, "token": "new-token"}).status_code == 302
    channel.refresh_from_db()
    from portal.notifications.grafana import token_decrypt

    assert token_decrypt(channel.token) == "new-token"
    assert TOKEN not in alice_client.get(edit).content.decode()


def test_the_api_creates_and_refuses_grafana_channels(alice, project):
    from tests.portal.api.conftest import session

    client = session(alice)
    body = {
        "project": str(project.code),
        "name": "Dashboards",
        "kind": "grafana",
        "events": ["run_finished", "change_applied"],
        "url": "http://127.0.0.1:3000",
    }
    response = client.post("/api/v1/channels/", body, format="json")
    assert response.status_code == 400
    assert "Give a Grafana service account token" in str(response.json()), response.json()
    response = client.post("/api/v1/channels/", {**body, "token": TOKEN, "panel_id": 2}, format="json")
    assert response.status_code == 400 and "A panel belongs to a dashboard" in str(response.json())
    response = client.post(
        "/api/v1/channels/", {**body, "token": TOKEN, "dashboard_uid": "d-1", "panel_id": 2}, format="json"
    )
    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["secret"] and answer["has_token"] is True and "token" not in answer
    assert (answer["kind"], answer["dashboard_uid"], answer["panel_id"]) == ("grafana", "d-1", 2)
    code = answer["code"]
    response = client.patch(f"/api/v1/channels/{code}/", {"panel_id": None, "dashboard_uid": ""}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["dashboard_uid"], response.json()["panel_id"]) == ("", None)
    assert Channel.objects.get().token and Delivery.objects.count() == 0


def test_webhooks_and_mail_hear_of_an_applied_change_too(project, environment, alice, grafana, smtp):
    from .addresses import confirm_addresses

    server = grafana()  # any HTTP receiver: a Slack webhook here
    services.channel_create(
        project=project, name="Chat", kind="webhook", events=["change_applied"], url=server.url + "/hook",
        payload_format="slack",
    )  # fmt: skip
    services.channel_create(project=project, name="Ops", kind="email", events=["change_applied"], emails="o@x.test")
    confirm_addresses(project.team, "o@x.test")
    change = change_create(environment=environment, user=alice, edits=[{"key": "k", "value": "1"}], title="K to 1")
    change_apply(change, user=alice)
    for delivery in services.notify_change(change_id=change.id):
        services.delivery_attempt(delivery_id=delivery.id)
    ((_, _, body),) = server.requests
    text = json.loads(body)["text"]
    assert text.startswith("Tuning change #1 on Staging: K to 1 (k = 1).")
    assert f"/changes/{change.code}/|Open in Plimsoll>" in text
    ((_, mail),) = smtp
    assert f"Tuning change #1 on Staging, by {alice.get_username()}" in mail.get_body(("plain",)).get_content()
