"""Notifications per project: which events happened, which channels want them, and each delivery.

Everything here runs in Celery tasks on the default queue, after the run (or fire) committed:
``notify_run`` / ``notify_fire`` / ``notify_change`` decide the events and create one Delivery per channel
(unique on channel and subject, so a task delivered twice notifies once); ``delivery_attempt``
sends one, and a failing webhook (or Grafana channel: grafana.py) is tried again later with
backoff (RETRY_DELAYS) by a new task, so a slow or dead receiver delays nothing else.
"""

import hashlib
import hmac
import json
import logging
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from portal.common import task
from portal.runs.summary import RunSummary

from . import grafana
from .addresses import addresses_request, recipients_allowed, test_allowed
from .models import Channel, Delivery, Event

log = logging.getLogger(__name__)
Status = Delivery.Status

# Seconds to wait after failed attempt 1, 2, 3, 4: five tries over about 30 minutes.
RETRY_DELAYS = (60, 180, 540, 1020)
SNIPPET = 500
SIGNATURE_HEADER = "X-Plimsoll-Signature"


class ChannelError(ValueError):
    """A channel cannot be saved; the message is for the user."""


def channel_create(
    *,
    project,
    name: str,
    kind: str,
    events: list[str],
    emails: str = "",
    url: str = "",
    payload_format: str = "",
    token: str = "",
    dashboard_uid: str = "",
    panel_id: int | None = None,
    requested_by=None,
) -> Channel:
    """A new channel; a webhook or Grafana channel gets a fresh signing secret (the caller shows it once).

    An e-mail channel's addresses are mailed a confirmation link (``addresses.addresses_request``).
    A Grafana channel needs its base URL and a service account token (stored encrypted).
    """
    unknown = set(events) - set(Event.values)
    if unknown or not events:
        raise ChannelError("Choose at least one event." if not events else f"Unknown events: {', '.join(unknown)}.")
    channel = Channel(project=project, name=name.strip() or kind, kind=kind, events=list(events))
    if kind == Channel.Kind.EMAIL:
        channel.emails = ", ".join(a.strip() for a in emails.split(",") if a.strip())
        if not channel.recipients:
            raise ChannelError("Give at least one e-mail address.")
    elif kind == Channel.Kind.WEBHOOK:
        channel.url = _checked_url(url, "The webhook URL")
        channel.payload_format = payload_format or Channel.Format.PLIMSOLL
        channel.secret = secrets.token_urlsafe(32)
    elif kind == Channel.Kind.GRAFANA:
        _grafana_fields(channel, url=url, token=token, dashboard_uid=dashboard_uid, panel_id=panel_id)
        channel.secret = secrets.token_urlsafe(32)
    else:
        raise ChannelError(f"Unknown kind of channel “{kind}”.")
    channel.save()
    if channel.kind == Channel.Kind.EMAIL:
        addresses_request(team=project.team, emails=channel.recipients, requested_by=requested_by)
    return channel


def channel_update(
    *,
    channel: Channel,
    name: str,
    events: list[str],
    emails: str = "",
    url: str = "",
    payload_format: str = "",
    token: str = "",
    dashboard_uid: str = "",
    panel_id: int | None = None,
    enabled: bool = True,
    replace_secret: bool = False,
    requested_by=None,
) -> Channel:
    """Edits a channel in place; its kind stays (an e-mail list does not become a webhook).

    A webhook keeps its signing secret unless ``replace_secret``: receivers that check
    X-Plimsoll-Signature go on working after an edit of the URL or the events. A new secret
    is on the returned channel for the caller to show once. Nothing is saved when a value
    is refused (ChannelError), so a bad URL never loses the other edits' previous state.
    A Grafana channel keeps its token when ``token`` is empty.
    """
    unknown = set(events) - set(Event.values)
    if unknown or not events:
        raise ChannelError("Choose at least one event." if not events else f"Unknown events: {', '.join(unknown)}.")
    channel.name = name.strip() or channel.kind
    channel.events = list(events)
    channel.enabled = enabled
    if channel.kind == Channel.Kind.EMAIL:
        channel.emails = ", ".join(a.strip() for a in emails.split(",") if a.strip())
        if not channel.recipients:
            raise ChannelError("Give at least one e-mail address.")
    else:
        if channel.kind == Channel.Kind.GRAFANA:
            _grafana_fields(channel, url=url, token=token, dashboard_uid=dashboard_uid, panel_id=panel_id)
        else:
            channel.url = _checked_url(url, "The webhook URL")
            channel.payload_format = payload_format or Channel.Format.PLIMSOLL
        if replace_secret:
            channel.secret = secrets.token_urlsafe(32)
    channel.save()
    if channel.kind == Channel.Kind.EMAIL:
        addresses_request(team=channel.project.team, emails=channel.recipients, requested_by=requested_by)
    return channel


def _checked_url(url: str, what: str) -> str:
    from portal.outbound import OutboundRefused, parse_url, site_service_refusal

    try:
        parse_url(url)
    except OutboundRefused as exc:
        raise ChannelError(f"{what}: {exc}") from None
    if refusal := site_service_refusal(url):
        raise ChannelError(f"{what}: {refusal}")
    return url


def _grafana_fields(channel: Channel, *, url: str, token: str, dashboard_uid: str, panel_id: int | None) -> None:
    """A Grafana channel's URL, token (kept when empty on an edit) and dashboard/panel, checked."""
    channel.url = _checked_url(grafana.base_url(url), "The Grafana URL")
    if "?" in channel.url or "#" in channel.url:
        raise ChannelError("The Grafana URL: give Grafana's base address, e.g. https://grafana.example.org.")
    token = (token or "").strip()
    if token:
        channel.token = grafana.token_encrypt(token)
    elif not channel.token:
        raise ChannelError("Give a Grafana service account token (role Editor, or annotations:write).")
    dashboard_uid = (dashboard_uid or "").strip()
    if problem := grafana.check_target(dashboard_uid, panel_id):
        raise ChannelError(problem)
    channel.dashboard_uid, channel.panel_id = dashboard_uid, panel_id
    channel.payload_format = Channel.Format.PLIMSOLL


def sign(secret: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of the raw body>``, as GitHub's webhooks sign theirs."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# ---------------------------------------------------------------------------- events


def run_events(run, verdict=None) -> list[str]:
    """The events a finished run raises."""
    events = [Event.RUN_FINISHED]
    if run.status == "failed":
        events.append(Event.THRESHOLDS_FAILED)
    if run.status in ("error", "partial", "incomplete", "stopped"):
        events.append(Event.RUN_ERROR)
    degradation = RunSummary.of(run).degradation
    if degradation.get("onset_s") is not None:
        events.append(Event.DEGRADATION)
    if verdict is not None and verdict.verdict == "regressed":
        events.append(Event.REGRESSION)
    return events


def run_payload(run, events: list[str], verdict=None) -> dict:
    summary = RunSummary.of(run)
    totals, degradation = summary.totals, summary.degradation
    payload = {
        "event": events[-1] if len(events) > 1 else events[0],
        "events": events,
        "project": run.project.name,
        "run": {
            "number": run.number,
            "plan": run.plan_name,
            "environment": run.environment_name,
            "status": run.status,
            "thresholds": run.verdict,
            "url": settings.SITE_URL + run.get_absolute_url(),
            "started_at": run.start_at.isoformat() if run.start_at else None,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "apd_ms": totals.get("apd_ms"),
            "p95_ms": totals.get("p95_ms"),
            "pages_per_s": totals.get("pages_per_s"),
            "error_rate_pct": totals.get("error_rate_pct"),
            # A soak's degradation in words ("Throughput fell 58 % … at 6 min 10 s"), when one was found.
            "degradation": degradation.get("sentence") if degradation.get("degraded") else None,
            # Planned against achieved load ("ran 20 of 100 users for 30 s: …"), when it fell short (issue 25).
            "load": run.load_sentence if run.load and not run.load.get("complete") else None,
            # A stop criterion that ended it (issue 24): the rule, its window's figures, the sentence.
            "stopped_by": run.stopped_by,
        },
        "headline": f"Run #{run.number} of {run.plan_name}: {run.get_status_display().lower()}.",
        "verdict": None,
    }
    if run.status == "finished" and run.not_judged:  # an import's thresholds on figures its file cannot carry
        payload["headline"] += " " + run.verdict_clause[:1].upper() + run.verdict_clause[1:] + "."
    elif run.status == "finished":
        payload["headline"] += " The plan sets no thresholds, so it has no pass/fail verdict."
    if run.error_message:
        payload["headline"] += " " + run.error_message.splitlines()[0][:200]
    if verdict is not None:
        payload["headline"] = verdict.headline
        payload["verdict"] = {
            "verdict": verdict.verdict,
            "baseline": verdict.baseline_label,
            "kpis": [
                {
                    **{k: r[k] for k in ("page", "figure", "verdict", "before", "after", "change")},
                    "soak": bool(r.get("soak")),
                }
                for r in verdict.rows
                if r["page"] is None or r["verdict"] in ("regressed", "improved")
            ],
        }
    if run.status == "stopped" and run.stopped_by:
        # Whatever the verdict says, the first thing a reader learns is that the target broke and the run stopped.
        stop = f"Run #{run.number} of {run.plan_name} was stopped by its criteria: {run.stop_sentence}."
        payload["headline"] = stop if verdict is None else f"{stop} {verdict.headline}"
    if schedule_fire := getattr(run, "schedule_fire", None):
        payload["schedule"] = _schedule_dict(schedule_fire.schedule)
    return payload


def _schedule_dict(schedule) -> dict:
    return {
        "description": schedule.description,
        "url": settings.SITE_URL + reverse("schedules:edit", args=[schedule.code]),
    }


def notify_run(*, run_id: int) -> list[Delivery]:
    """Notifies the project's channels of a finished run (with its baseline verdict when there is one)."""
    from portal.runs.models import Run

    run = Run.objects.select_related("project").filter(id=run_id, status__in=Run.FINISHED).first()
    if run is None:
        return []
    verdict = getattr(run, "baseline_verdict", None)
    events = run_events(run, verdict)
    return _deliver(run.project, events, f"run:{run.id}", lambda: run_payload(run, events, verdict))


def notify_fire(*, fire_id: int) -> list[Delivery]:
    """Notifies a skipped or missed schedule fire."""
    from portal.schedules.models import ScheduleFire

    fire = ScheduleFire.objects.select_related("schedule__project").filter(id=fire_id).first()
    if fire is None or fire.outcome not in ("skipped", "missed"):
        return []
    schedule = fire.schedule

    def payload():
        return {
            "event": Event.SCHEDULE_SKIPPED,
            "events": [Event.SCHEDULE_SKIPPED],
            "project": schedule.project.name,
            "headline": f"{schedule.plan_name}: the fire due {fire.due_at:%Y-%m-%d %H:%M} UTC was {fire.outcome}. "
            f"{fire.reason}",
            "schedule": _schedule_dict(schedule),
            "fire": {"due_at": fire.due_at.isoformat(), "outcome": fire.outcome, "reason": fire.reason},
            "run": None,
            "verdict": None,
        }

    return _deliver(schedule.project, [Event.SCHEDULE_SKIPPED], f"fire:{fire.id}", payload)


def experiment_payload(experiment) -> dict:
    """What an experiment's end says: the comparison's headline and its verdict per figure, in total."""
    from portal.history.choices import experiment_report

    report = experiment_report(experiment) if experiment.status == "done" else None
    status = experiment.get_status_display().lower()
    url = settings.SITE_URL + experiment.get_absolute_url()
    if report is not None and report.samples:
        headline = report.headline
        kpis = [
            {
                "page": None,
                "figure": r.figure,
                "verdict": r.verdict or "none",
                "before": r.before_text,
                "after": r.after_text,
                "change": r.change_text,
            }
            for r in report.total
        ]
    else:
        headline = f"Experiment “{experiment.title}”: {status}."
        if experiment.error_message:
            headline += " " + experiment.error_message.splitlines()[0][:200]
        elif experiment.status == "done":
            headline += " Not enough counting runs on both sides to compare."
        kpis = []
    return {
        "event": Event.EXPERIMENT_FINISHED,
        "events": [Event.EXPERIMENT_FINISHED],
        "project": experiment.project.name,
        "headline": headline,
        "experiment": {
            "title": experiment.title,
            "status": experiment.status,
            "change": experiment.change.title,
            "plan": experiment.plan.name,
            "environment": experiment.environment.name,
            "trials": experiment.trials,
            "verdict": report.verdict if report is not None and report.samples else None,
            "kpis": kpis,
            "basis": report.basis if report is not None else "",
            "url": url,
        },
        "run": None,
        "verdict": None,
    }


def notify_experiment(*, experiment_id: int) -> list[Delivery]:
    """Notifies that an experiment ended (its last trial finished, or it failed or stopped on its own)."""
    from portal.history.models import Experiment

    experiment = (
        Experiment.objects.select_related("project", "plan", "environment", "change")
        .filter(id=experiment_id, status__in=("done", "failed", "stopped"))
        .first()
    )
    if experiment is None:
        return []
    return _deliver(
        experiment.project,
        [Event.EXPERIMENT_FINISHED],
        f"experiment:{experiment.id}",
        lambda: experiment_payload(experiment),
    )


def change_payload(change) -> dict:
    """What an applied tuning change says: its number and title, the keys it set, where and when."""
    keys = ", ".join(
        f"{e['key']} = {e['value']}" if e.get("value") is not None else f"{e['key']} removed"
        for e in (change.edits or [])[:5]
    )
    environment = change.environment
    headline = f"Tuning change #{change.number} on {environment.name}: {change.title}" + (f" ({keys})" if keys else "")
    return {
        "event": Event.CHANGE_APPLIED,
        "events": [Event.CHANGE_APPLIED],
        "project": environment.project.name,
        "headline": headline + ".",
        "change": {
            "number": change.number,
            "title": change.title,
            "category": change.category,
            "environment": environment.name,
            "applied_at": change.applied_at.isoformat(),
            "edits": change.edits,
            "made_by": change.made_by.get_username() if change.made_by_id else None,
            "url": settings.SITE_URL + change.get_absolute_url(),
        },
        "run": None,
        "verdict": None,
    }


def notify_change(*, change_id: int) -> list[Delivery]:
    """Notifies that a tuning change was applied (Grafana marks it on the dashboards)."""
    from portal.history.models import TuningChange

    change = (
        TuningChange.objects.select_related("environment__project", "made_by")
        .filter(id=change_id, status=TuningChange.Status.APPLIED)
        .first()
    )
    if change is None:
        return []
    project = change.environment.project
    return _deliver(project, [Event.CHANGE_APPLIED], f"change:{change.id}", lambda: change_payload(change))


def channel_test(*, channel: Channel, now: datetime | None = None, requested_by=None) -> Delivery:
    """The "send test" button: a delivery that says it is a test (limited per user: limits.TooMany)."""
    if requested_by is not None:
        test_allowed(user=requested_by)
    now = now or timezone.now()
    payload = {
        "event": "test",
        "events": ["test"],
        "project": channel.project.name,
        "headline": f"A test from Plimsoll for the channel “{channel.name}”: it works.",
        "run": None,
        "verdict": None,
    }
    delivery = Delivery.objects.create(channel=channel, key=f"test:{now.isoformat()}", event="test", payload=payload)
    transaction.on_commit(lambda: _enqueue(delivery.id))
    return delivery


def _deliver(project, events: list[str], key: str, payload_of) -> list[Delivery]:
    channels = [c for c in project.channels.filter(enabled=True) if set(c.events) & set(events)]
    if not channels:
        return []
    payload = payload_of()
    created = []
    for channel in channels:
        try:
            with transaction.atomic():
                delivery = Delivery.objects.create(channel=channel, key=key, event=payload["event"], payload=payload)
        except IntegrityError:
            continue  # already notified (the task ran twice)
        created.append(delivery)
        transaction.on_commit(lambda d=delivery.id: _enqueue(d))
    return created


def _enqueue(delivery_id: int, countdown: float = 0) -> None:
    delivery_send_task = task("delivery_send_task")

    try:
        delivery_send_task.apply_async((delivery_id,), countdown=countdown)
    except Exception:  # the broker is down: the log shows the delivery pending
        log.exception("delivery %s: could not enqueue", delivery_id)


# ---------------------------------------------------------------------------- sending


def delivery_attempt(*, delivery_id: int, now: datetime | None = None) -> float | None:
    """Sends one delivery once; returns the delay before the next try, or None when done (sent or failed).

    Claimed with a conditional UPDATE, so a task delivered twice sends once.
    """
    now = now or timezone.now()
    claimed = Delivery.objects.filter(id=delivery_id, status__in=(Status.PENDING, Status.RETRYING)).update(
        status=Status.SENDING, last_attempt_at=now
    )
    if not claimed:
        return None
    delivery = Delivery.objects.select_related("channel__project").get(id=delivery_id)
    attempts = delivery.attempts + 1
    if delivery.channel.kind == Channel.Kind.EMAIL:
        ok, code, snippet, error, retry = _send_email(delivery)
    else:
        ok, code, snippet, error, retry = _send_webhook(delivery)
    delay = None
    if ok:
        status = Status.SENT
    elif retry and attempts <= len(RETRY_DELAYS):
        status, delay = Status.RETRYING, RETRY_DELAYS[attempts - 1]
    else:
        status = Status.FAILED
    Delivery.objects.filter(id=delivery_id).update(
        status=status,
        attempts=attempts,
        status_code=code,
        response_snippet=snippet[:SNIPPET],
        error=error,
        next_attempt_at=now + timedelta(seconds=delay) if delay else None,
    )
    return delay


def _send_email(delivery: Delivery):
    """To the channel's confirmed addresses within the mail limits (issue 30); the others are named in the log."""
    from portal.mail import mail_send

    to, held = recipients_allowed(delivery.channel)
    if not to:
        return False, None, "", "Not sent: " + "; ".join(held), False
    try:
        mail_send(
            template="notification",
            to=to,
            context={"payload": delivery.payload, "channel": delivery.channel.name},
        )
    except OSError as exc:  # SMTP down or refused: worth another try
        return False, None, "", f"{type(exc).__name__}: {exc}", True
    return True, None, f"sent to {', '.join(to)}", "; ".join(f"not sent to {h}" for h in held), False


def webhook_body(channel: Channel, payload: dict) -> bytes:
    """The JSON body in the channel's format (Plimsoll's own, or what Slack or Teams accept directly)."""
    text = payload["headline"]
    link = (
        (payload.get("run") or {}).get("url")
        or (payload.get("experiment") or {}).get("url")
        or (payload.get("schedule") or {}).get("url")
        or (payload.get("change") or {}).get("url")
        or ""
    )
    if channel.payload_format == Channel.Format.SLACK:
        body = {"text": f"{text} <{link}|Open in Plimsoll>" if link else text}
    elif channel.payload_format == Channel.Format.TEAMS:
        body = {
            "@type": "MessageCard",
            "@context": "https://schema.org/extensions",
            "summary": text[:150],
            "text": text,
            "potentialAction": [
                {"@type": "OpenUri", "name": "Open in Plimsoll", "targets": [{"os": "default", "uri": link}]}
            ]
            if link
            else [],
        }
    else:
        body = payload
    return json.dumps(body, separators=(",", ":")).encode()


def _send_webhook(delivery: Delivery):
    """A webhook's POST, or a Grafana channel's (its annotation, to ``<url>/api/annotations`` with its token)."""
    from portal.outbound import OutboundFailed, OutboundRefused, request

    channel = delivery.channel
    url, extra = channel.url, {}
    if channel.kind == Channel.Kind.GRAFANA:
        body = json.dumps(grafana.annotation(channel, delivery.payload, now=timezone.now()), separators=(",", ":"))
        body = body.encode()
        url = channel.url + grafana.ANNOTATIONS_PATH
        try:
            extra["Authorization"] = "Bearer " + grafana.token_decrypt(channel.token)
        except grafana.TokenUnreadable as exc:
            return False, None, "", f"Not sent: {exc}", False
    else:
        body = webhook_body(channel, delivery.payload)
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(channel.secret, body),
        "X-Plimsoll-Event": delivery.event,
        "X-Plimsoll-Delivery": str(delivery.id),
        **extra,
    }
    try:
        # Where the portal's own requests may go (PLIMSOLL_OUTBOUND_ALLOWED), never the site's own services.
        response = request("POST", url, body=body, headers=headers, timeout=10, max_bytes=64_000)
    except OutboundRefused as exc:  # not allowed: no request was sent, and none will be
        return False, None, "", f"Refused, nothing was sent: {exc}", False
    except OutboundFailed as exc:
        return False, None, "", str(exc), True
    snippet = response.body[:SNIPPET].decode("utf-8", "replace")
    if 200 <= response.status < 300:
        return True, response.status, snippet, "", False
    # 4xx other than 408/429 will not get better by waiting; 5xx, 408 and 429 might.
    retry = response.status >= 500 or response.status in (408, 429)
    error = f"HTTP {response.status}"
    if channel.kind == Channel.Kind.GRAFANA and response.status in (401, 403):
        error += (
            ": Grafana refused the token (a service account token with the Editor role, or annotations:write, "
            "and annotations:create on that dashboard); edit the channel to give another"
        )
    return False, response.status, snippet, error, retry
