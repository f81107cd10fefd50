"""Notifications through real receivers on loopback: an SMTP server (aiosmtpd) and an HTTP server."""

import json
import threading
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from portal.notifications import services
from portal.notifications.models import Channel, Delivery
from portal.schedules.models import RunVerdict, ScheduleFire
from portal.schedules.services import schedules_tick
from tests.portal.runs.factories import plan_run
from tests.processes import free_port

from .addresses import confirm_addresses

pytestmark = pytest.mark.django_db
ALL_EVENTS = ["run_finished", "thresholds_failed", "run_error", "regression", "degradation", "schedule_skipped"]


@pytest.fixture
def smtp(settings):
    """A real SMTP server on loopback; Django's SMTP backend sends to it."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Sink

    class Keep(Sink):
        def __init__(self):
            self.messages = []

        async def handle_DATA(self, server, session, envelope):
            self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content, policy=policy.default)))
            return "250 OK"

    handler = Keep()
    controller = Controller(handler, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield handler.messages
    controller.stop()


class Receiver:
    """A real HTTP server on loopback that answers with the next status of ``statuses`` and keeps each request."""

    def __init__(self, statuses):
        self.statuses = list(statuses)
        self.requests = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"receiver says %d" % status)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(*statuses):
        made.append(Receiver(statuses))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def regressed_run(nightly_run):
    RunVerdict.objects.create(
        run=nightly_run,
        verdict="regressed",
        headline=f"Run #{nightly_run.number} regressed against Baseline: the last 3 valid runs: "
        "Search: Search APD 40 ms → 200 ms (400 % more).",
        baseline_label="Baseline: the last 3 valid runs (#1, #2, #3)",
        rows=[
            {"page": None, "figure": "APD", "verdict": "regressed", "before": "45 ms", "after": "98 ms",
             "change": "118 % more", "noise": "", "basis": ""},
            {"page": "Search: Search", "figure": "APD", "verdict": "regressed", "before": "40 ms",
             "after": "200 ms", "change": "400 % more", "noise": "±3 ms", "basis": ""},
            {"page": "Browse: Home", "figure": "APD", "verdict": "within_noise", "before": "40 ms",
             "after": "41 ms", "change": "2.5 % more", "noise": "±3 ms", "basis": ""},
        ],
    )  # fmt: skip
    return nightly_run


@pytest.fixture
def nightly_run(plan):
    return plan_run(
        plan, number=4, status="passed", start_at=None, finished_at=timezone.now(),
        summary={"verdict": "passed", "totals": {"apd_ms": 98.0, "p95_ms": 300.0, "pages_per_s": 12.0}},
    )  # fmt: skip


def test_email_through_a_real_smtp_server(smtp, project, regressed_run):
    services.channel_create(project=project, name="Team", kind="email", events=["regression"], emails="ops@x.test")
    confirm_addresses(project.team, "ops@x.test")  # only confirmed addresses get mail (test_mail_addresses.py)
    (delivery,) = services.notify_run(run_id=regressed_run.id)
    assert services.delivery_attempt(delivery_id=delivery.id) is None

    (rcpt, mail), = smtp  # fmt: skip
    assert rcpt == ["ops@x.test"]
    assert mail["Subject"].strip().startswith("[Plimsoll] Intranet: Run #4 regressed against Baseline")
    text = mail.get_body(("plain",)).get_content()
    html = mail.get_body(("html",)).get_content()
    assert "Search: Search · APD: 40 ms → 200 ms (400 % more) — regressed" in text
    assert "Browse: Home" not in text  # only what moved, and the totals
    assert f"http://127.0.0.1:8000/runs/{regressed_run.code}/" in text
    assert f'<a href="http://127.0.0.1:8000/runs/{regressed_run.code}/">Run #4 of Smoke</a>' in html
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("sent", 1)


def test_a_channel_gets_only_the_events_it_wants(project, nightly_run):
    services.channel_create(project=project, name="Regressions", kind="email", events=["regression"], emails="a@x.test")
    assert services.notify_run(run_id=nightly_run.id) == []  # passed, no verdict: nothing for this channel
    everything = services.channel_create(project=project, name="All", kind="email", events=ALL_EVENTS, emails="b@x.t")
    (delivery,) = services.notify_run(run_id=nightly_run.id)
    assert delivery.channel == everything and delivery.payload["events"] == ["run_finished"]
    assert services.notify_run(run_id=nightly_run.id) == []  # a task delivered twice notifies once


def test_webhook_is_signed_retried_after_500s_and_logged(project, regressed_run, receiver):
    hook = receiver(500, 503, 200)
    channel = services.channel_create(project=project, name="CI", kind="webhook", events=ALL_EVENTS, url=hook.url)
    (delivery,) = services.notify_run(run_id=regressed_run.id)

    delays = [services.delivery_attempt(delivery_id=delivery.id) for _ in range(3)]

    assert delays == [60, 180, None]  # backoff, then sent
    assert len(hook.requests) == 3
    headers, body = hook.requests[-1]
    expected = "sha256=" + __import__("hmac").new(channel.secret.encode(), body, "sha256").hexdigest()
    assert headers["X-Plimsoll-Signature"] == expected
    payload = json.loads(body)
    assert payload["event"] == "regression" and payload["verdict"]["verdict"] == "regressed"
    assert payload["run"]["url"].endswith(f"/runs/{regressed_run.code}/")
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.status_code) == ("sent", 3, 200)
    assert delivery.response_snippet == "receiver says 200"


def test_webhook_gives_up_after_five_tries(project, nightly_run, receiver):
    hook = receiver(*[500] * 6)
    services.channel_create(project=project, name="CI", kind="webhook", events=ALL_EVENTS, url=hook.url)
    (delivery,) = services.notify_run(run_id=nightly_run.id)
    delays = [services.delivery_attempt(delivery_id=delivery.id) for _ in range(6)]
    assert delays == [60, 180, 540, 1020, None, None]
    assert sum(delays[:4]) == 1800  # five tries over 30 minutes
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.error) == ("failed", 5, "HTTP 500")
    assert len(hook.requests) == 5


def test_nothing_is_sent_outside_the_allowlist(project, nightly_run, receiver, settings):
    hook = receiver(200)
    services.channel_create(project=project, name="CI", kind="webhook", events=ALL_EVENTS, url=hook.url)
    settings.PLIMSOLL_OUTBOUND_ALLOWED = "10.1.2.0/24"
    (delivery,) = services.notify_run(run_id=nightly_run.id)
    assert services.delivery_attempt(delivery_id=delivery.id) is None
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.error.startswith("Refused, nothing was sent")
    assert hook.requests == []


def test_slack_and_teams_payloads(project, regressed_run, receiver):
    hook = receiver()
    for fmt in ("slack", "teams"):
        services.channel_create(
            project=project, name=fmt, kind="webhook", events=["regression"], url=hook.url, payload_format=fmt
        )
    for delivery in services.notify_run(run_id=regressed_run.id):
        services.delivery_attempt(delivery_id=delivery.id)
    bodies = [json.loads(body) for _, body in hook.requests]
    slack = next(b for b in bodies if "text" in b and "@type" not in b)
    teams = next(b for b in bodies if b.get("@type") == "MessageCard")
    assert slack["text"].startswith("Run #4 regressed") and "|Open in Plimsoll>" in slack["text"]
    assert teams["potentialAction"][0]["targets"][0]["uri"].endswith(f"/runs/{regressed_run.code}/")


def test_a_skipped_fire_is_notified(project, nightly, plan, alice, smtp, django_capture_on_commit_callbacks):
    from datetime import timedelta

    from portal.runs.services import run_create

    from ..schedules.conftest import utc

    channel = services.channel_create(
        project=project, name="Night", kind="email", events=["schedule_skipped"], emails="n@x.test"
    )
    confirm_addresses(project.team, "n@x.test")
    run_create(plan=plan, user=alice)  # holds the environment all night
    schedules_tick(now=utc(2026, 5, 1, 2, 0, 5))
    schedules_tick(now=utc(2026, 5, 1, 2, 0, 5) + timedelta(minutes=31))
    fire = ScheduleFire.objects.get(schedule=nightly)
    assert fire.outcome == "skipped"
    (delivery,) = services.notify_fire(fire_id=fire.id)
    services.delivery_attempt(delivery_id=delivery.id)
    (_, mail), = smtp  # fmt: skip
    assert "was skipped" in mail["Subject"] and delivery.channel == channel
    assert "still busy with run #1" in mail.get_body(("plain",)).get_content()


def test_bad_channels_have_clear_messages(project):
    with pytest.raises(services.ChannelError, match="at least one event"):
        services.channel_create(project=project, name="x", kind="email", events=[], emails="a@x.test")
    with pytest.raises(services.ChannelError, match="webhook URL"):
        services.channel_create(project=project, name="x", kind="webhook", events=ALL_EVENTS, url="ftp://x")
    assert not Channel.objects.exists() and not Delivery.objects.exists()


@pytest.mark.parametrize(
    ("status", "summary", "expected"),
    [
        ("passed", {}, ["run_finished"]),
        ("failed", {"verdict": "failed"}, ["run_finished", "thresholds_failed"]),
        ("partial", {}, ["run_finished", "run_error"]),
        ("error", None, ["run_finished", "run_error"]),
        ("passed", {"degradation": {"onset_s": 540}}, ["run_finished", "degradation"]),
        ("passed", {"degradation": {"onset_s": None}}, ["run_finished"]),
    ],
)
def test_the_events_of_a_finished_run(nightly_run, status, summary, expected):
    nightly_run.status, nightly_run.summary = status, summary
    assert services.run_events(nightly_run) == expected
