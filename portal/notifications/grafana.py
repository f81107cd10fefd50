"""Grafana annotation channels (issue 29 item 3): runs and applied tuning changes pushed to a team's Grafana.

A Grafana channel is a webhook with another body: each delivery is one ``POST <url>/api/annotations``
(Grafana's annotation HTTP API) with ``Authorization: Bearer <service account token>``, signed and retried
by the same code as webhooks (``services.delivery_attempt``). The body:

- a finished run: a region annotation from its start to its end (``time``/``timeEnd`` in milliseconds),
  its status and baseline verdict in the text and the tags;
- an applied tuning change: a point annotation at the moment it was applied;
- a channel test: a point annotation now.

``dashboardUID`` (and ``panelId``) are sent when the channel names them; without them the annotation
belongs to the organization and shows on every dashboard whose annotation query asks for its tags.
The token is stored Fernet-encrypted (keyed from SECRET_KEY, as the Prometheus token) and never shown.
"""

import re
from datetime import datetime
from html import escape

from portal.tokens import SealBroken, seal, unseal

UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
ANNOTATIONS_PATH = "/api/annotations"


class TokenUnreadable(ValueError):
    """The stored token cannot be decrypted (SECRET_KEY changed)."""


def token_encrypt(token: str) -> str:
    return seal("grafana token", token)


def token_decrypt(stored: str) -> str:
    try:
        return unseal("grafana token", stored)
    except SealBroken:
        raise TokenUnreadable(
            "The stored Grafana token cannot be read (the site's SECRET_KEY changed): enter it again."
        ) from None


def base_url(url: str) -> str:
    """Grafana's base URL as stored: no trailing slash, and ``/api/annotations`` taken off if pasted."""
    url = (url or "").strip().rstrip("/")
    return url.removesuffix(ANNOTATIONS_PATH).rstrip("/")


def check_target(dashboard_uid: str, panel_id) -> str | None:
    """What is wrong with a dashboard UID / panel pair, or None."""
    if dashboard_uid and not UID.match(dashboard_uid):
        return "A dashboard UID is 1 to 40 letters, digits, - or _ (the part after /d/ in the dashboard's address)."
    if panel_id is not None and not dashboard_uid:
        return "A panel belongs to a dashboard: give the dashboard UID too, or no panel."
    return None


def _ms(iso: str | None) -> int | None:
    return int(datetime.fromisoformat(iso).timestamp() * 1000) if iso else None


def annotation(channel, payload: dict, *, now: datetime) -> dict:
    """The body Grafana's ``POST /api/annotations`` takes for one delivery's payload."""
    run, change = payload.get("run"), payload.get("change")
    tags = ["plimsoll", f"project:{payload['project']}"]
    if run:
        start = _ms(run.get("started_at")) or _ms(run.get("finished_at")) or int(now.timestamp() * 1000)
        end = _ms(run.get("finished_at")) or start
        tags += ["run", f"plan:{run['plan']}", f"environment:{run['environment']}", f"status:{run['status']}"]
        if payload.get("verdict"):
            tags.append(f"verdict:{payload['verdict']['verdict']}")
        link = run["url"]
    elif change:
        start = end = _ms(change["applied_at"])
        tags += ["tuning-change", f"environment:{change['environment']}", change["category"]]
        link = change["url"]
    else:  # a test, an experiment or a schedule's fire: a point now
        start = end = int(now.timestamp() * 1000)
        tags.append(payload["event"])
        link = (payload.get("experiment") or {}).get("url") or (payload.get("schedule") or {}).get("url") or ""
    text = escape(payload["headline"])
    if link:
        text += f' <a href="{escape(link)}">Open in Plimsoll</a>'
    body = {"time": start, "timeEnd": end, "tags": tags, "text": text}
    if channel.dashboard_uid:
        body["dashboardUID"] = channel.dashboard_uid
        if channel.panel_id is not None:
            body["panelId"] = channel.panel_id
    return body
