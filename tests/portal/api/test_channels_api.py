"""Notification channels and their deliveries through the API (issue 24, item 6): the channels page's rules."""

import uuid

import pytest

from portal.accounts.services import token_create
from portal.notifications.models import Channel, Delivery, MailAddress
from portal.notifications.services import channel_create
from tests.portal.notifications.test_mail_addresses import confirmation_link
from tests.portal.notifications.test_notifications import smtp  # noqa: F401  (a real SMTP server on loopback)

from .conftest import PERSONAS, READERS, bearer, expected, session

pytestmark = pytest.mark.django_db

EDITORS = ("owner", "editor")
HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture(autouse=True)
def limits_of_this_test(settings):
    """The mail limits count in the cache by ids that come back after a rollback: a key prefix per test."""
    settings.CACHES = {
        alias: {**conf, "KEY_PREFIX": f"{conf.get('KEY_PREFIX', '')}-{uuid.uuid4().hex[:8]}"}
        for alias, conf in settings.CACHES.items()
    }


def webhook(project, **changes) -> Channel:
    fields = {"project": project, "name": "CI hook", "kind": "webhook", "events": ["regression"], "url": HOOK}
    return channel_create(**{**fields, **changes})


def test_a_webhooks_secret_is_in_the_creation_answer_only(alice, project):
    client = session(alice)

    response = client.post(
        "/api/v1/channels/",
        {
            "project": str(project.code),
            "name": "Chat",
            "kind": "webhook",
            "events": ["regression", "schedule_skipped"],
            "url": HOOK,
            "payload_format": "slack",
        },
        format="json",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    channel = Channel.objects.get()
    assert body["secret"] == channel.secret and len(channel.secret) >= 40
    assert (body["kind"], body["url"], body["payload_format"], body["events"]) == (
        "webhook",
        HOOK,
        "slack",
        ["regression", "schedule_skipped"],
    )
    # never again: not on reading, listing or changing it
    again = client.get(f"/api/v1/channels/{channel.code}/").json()
    listed = client.get("/api/v1/channels/").json()["results"]
    changed = client.patch(f"/api/v1/channels/{channel.code}/", {"name": "Chat ops"}, format="json").json()
    for answer in (again, listed, changed):
        assert channel.secret not in str(answer)
    assert changed["secret"] is None
    channel.refresh_from_db()
    assert channel.name == "Chat ops" and channel.secret == body["secret"]  # the secret stays on an edit


def test_replacing_the_secret_shows_the_new_one_once(alice, project):
    channel = webhook(project)
    old = channel.secret

    response = session(alice).patch(f"/api/v1/channels/{channel.code}/", {"replace_secret": True}, format="json")

    assert response.status_code == 200, response.content
    channel.refresh_from_db()
    assert channel.secret != old and response.json()["secret"] == channel.secret


def test_an_email_channel_goes_through_the_confirmation_mail(alice, project, smtp, mail_sent_at_commit):  # noqa: F811
    # when
    with mail_sent_at_commit():
        response = session(alice).post(
            "/api/v1/channels/",
            {
                "project": str(project.code),
                "name": "Ops",
                "kind": "email",
                "events": ["run_error"],
                "emails": ["Ops@X.test"],
            },
            format="json",
        )

    # then: the address is mailed the page's confirmation link and shown as unconfirmed; no secret
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["emails"] == [{"email": "Ops@X.test", "confirmed": False}] and body["secret"] is None
    assert [rcpt for rcpt, _ in smtp] == [["ops@x.test"]]
    assert smtp[0][1]["Subject"] == "Confirm Plimsoll notifications to this address"
    address = MailAddress.objects.get(email="ops@x.test")
    assert address.confirmed_at is None and address.requested_by == alice
    # once confirmed (by the link, as on the page), the API says so
    assert session(alice).post(confirmation_link(smtp[0][1])).status_code == 200
    channel = Channel.objects.get()
    assert session(alice).get(f"/api/v1/channels/{channel.code}/").json()["emails"] == [
        {"email": "Ops@X.test", "confirmed": True}
    ]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"kind": "webhook", "url": "ftp://127.0.0.1/x"}, "non_field_errors", "The webhook URL"),
        ({"kind": "webhook", "url": ""}, "non_field_errors", "The webhook URL"),
        ({"kind": "email", "emails": []}, "non_field_errors", "at least one e-mail address"),
        ({"kind": "email", "emails": ["not-an-address"]}, "emails", ""),
        ({"kind": "webhook", "url": HOOK, "events": []}, "events", ""),
        ({"kind": "webhook", "url": HOOK, "events": ["lunch"]}, "events", ""),
        ({"kind": "pigeon"}, "kind", ""),
        ({"kind": "webhook", "url": HOOK, "secret": "mine"}, "secret", "Unknown field."),
    ],
)
def test_bad_input_is_a_400_in_the_apis_shape_and_saves_nothing(alice, project, body, field, message):
    body = {"project": str(project.code), "name": "X", "events": ["regression"], **body}

    response = session(alice).post("/api/v1/channels/", body, format="json")

    assert response.status_code == 400, response.content
    error = response.json()
    assert (error["status"], error["code"]) == (400, "invalid")
    assert field in error["fields"], error
    assert message in " ".join(map(str, error["fields"][field]))
    assert not Channel.objects.exists()


def test_a_channels_kind_and_project_stay(alice, project, team):
    from portal.projects.models import Project

    channel = webhook(project)
    other = Project.objects.create(team=team, name="Second")
    client = session(alice)

    kind = client.patch(f"/api/v1/channels/{channel.code}/", {"kind": "email"}, format="json")
    moved = client.patch(f"/api/v1/channels/{channel.code}/", {"project": str(other.code)}, format="json")

    assert kind.status_code == 400 and "kind" in kind.json()["fields"]
    assert moved.status_code == 400 and "project" in moved.json()["fields"]
    channel.refresh_from_db()
    assert (channel.kind, channel.project) == ("webhook", project)


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_and_owners_create_channels(persona, request, project):
    body = {"project": str(project.code), "name": "Hook", "kind": "webhook", "events": ["regression"], "url": HOOK}

    response = persona.post("/api/v1/channels/", body, format="json")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=EDITORS), (name, response.content)
    assert Channel.objects.exists() == (name in EDITORS)


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_every_member_reads_channels_and_deliveries_and_nobody_else(persona, request, project):
    channel = webhook(project)
    Delivery.objects.create(channel=channel, key="run:1", event="regression", payload={"run": 1}, status="sent")

    listed = persona.get("/api/v1/channels/")
    one = persona.get(f"/api/v1/channels/{channel.code}/")
    deliveries = persona.get(f"/api/v1/channels/{channel.code}/deliveries/")

    name = request.node.callspec.params["persona"]
    assert one.status_code == expected(name, ok=200, allowed=READERS)
    assert deliveries.status_code == expected(name, ok=200, allowed=READERS)
    if name in READERS:
        assert [c["code"] for c in listed.json()["results"]] == [str(channel.code)]
        assert [(d["key"], d["status"]) for d in deliveries.json()] == [("run:1", "sent")]
        assert channel.secret not in str(one.json()) + str(listed.json())
    elif name == "outsider":
        assert listed.json()["results"] == []


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_and_owners_change_and_delete_channels(persona, request, project):
    channel = webhook(project)
    name = request.node.callspec.params["persona"]

    changed = persona.patch(f"/api/v1/channels/{channel.code}/", {"enabled": False}, format="json")
    channel.refresh_from_db()
    assert changed.status_code == expected(name, ok=200, allowed=EDITORS), (name, changed.content)
    assert channel.enabled == (name not in EDITORS)

    deleted = persona.delete(f"/api/v1/channels/{channel.code}/")
    assert deleted.status_code == expected(name, ok=204, allowed=EDITORS)
    assert Channel.objects.exists() == (name not in EDITORS)


def test_a_put_changes_every_field_and_the_list_filters_by_project(alice, project, team):
    from portal.projects.models import Project

    channel = webhook(project)
    other = Project.objects.create(team=team, name="Second")
    webhook(other, name="Elsewhere")
    client = session(alice)
    body = {
        "name": "Teams",
        "events": ["run_finished", "degradation"],
        "url": "http://127.0.0.1:10/teams",
        "payload_format": "teams",
        "enabled": False,
    }

    response = client.put(f"/api/v1/channels/{channel.code}/", body, format="json")

    assert response.status_code == 200, response.content
    channel.refresh_from_db()
    assert (channel.name, channel.events, channel.url) == ("Teams", ["run_finished", "degradation"], body["url"])
    assert (channel.payload_format, channel.enabled) == ("teams", False)
    filtered = client.get(f"/api/v1/channels/?project={project.code}").json()["results"]
    assert [c["code"] for c in filtered] == [str(channel.code)]
    assert len(client.get("/api/v1/channels/").json()["results"]) == 2


def test_deliveries_newest_first_and_the_last_ten_in_the_channel(alice, project):
    channel = webhook(project)
    for n in range(12):
        Delivery.objects.create(channel=channel, key=f"run:{n}", event="regression", payload={"n": n})
    client = session(alice)

    deliveries = client.get(f"/api/v1/channels/{channel.code}/deliveries/").json()
    one = client.get(f"/api/v1/channels/{channel.code}/").json()

    assert [d["key"] for d in deliveries] == [f"run:{n}" for n in range(11, -1, -1)]
    assert [d["key"] for d in one["recent_deliveries"]] == [f"run:{n}" for n in range(11, 1, -1)]
    assert client.get(f"/api/v1/channels/{uuid.uuid4()}/deliveries/").status_code == 404


@pytest.mark.parametrize("persona", READERS, indirect=True)
def test_a_deliverys_answer_is_shown_to_editors_only_and_truncated(persona, request, project, bob, team):
    # given: a delivery whose receiver answered a long body (what any server said: Redis's, once)
    channel = webhook(project)
    answer = "receiver-secret " + "x" * 484
    Delivery.objects.create(
        channel=channel, key="run:1", event="regression", payload={}, status="sent", response_snippet=answer
    )
    viewer_token = bearer(token_create(user=bob, team=team, name="viewer's", scope="read")[1])
    name = request.node.callspec.params["persona"]

    # when: the channel, the list and the delivery log are read
    for client in (persona, viewer_token):
        shown = [
            client.get(f"/api/v1/channels/{channel.code}/").json()["recent_deliveries"][0]["response_snippet"],
            client.get("/api/v1/channels/").json()["results"][0]["recent_deliveries"][0]["response_snippet"],
            client.get(f"/api/v1/channels/{channel.code}/deliveries/").json()[0]["response_snippet"],
        ]

        # then: editors (and owners, and their tokens) get the answer's first 200 characters, as on the page;
        # viewers (and their tokens) the status and error only
        if client is persona and name in ("owner", "editor", "read_token", "run_token"):
            assert shown == [answer[:200]] * 3, name
        else:
            assert shown == [""] * 3, name
