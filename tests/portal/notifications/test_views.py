"""The Notifications page: add a channel (secret shown once), send a test, the log; alice, bob, charlie."""

import pytest
from django.urls import reverse

from portal.notifications import services
from portal.notifications.models import Channel, Delivery

pytestmark = pytest.mark.django_db


def test_alice_adds_a_webhook_and_sees_its_secret_once(alice_client, project):
    url = reverse("notifications:new", args=[project.code])
    data = {
        "name": "CI",
        "kind": "webhook",
        "events": ["regression"],
        "url": "http://127.0.0.1:9/h",
        "payload_format": "plimsoll",
    }
    response = alice_client.post(url, data, follow=True)
    channel = Channel.objects.get()
    assert channel.secret and channel.secret in response.content.decode()
    page = alice_client.get(reverse("notifications:project", args=[project.code])).content.decode()
    assert channel.secret not in page and "http://127.0.0.1:9/h" in page


def test_bad_url_is_a_clear_400(alice_client, project):
    url = reverse("notifications:new", args=[project.code])
    data = {"name": "CI", "kind": "webhook", "events": ["regression"], "url": "http://user@127.0.0.1/"}
    response = alice_client.post(url, data)
    assert response.status_code == 400 and "The webhook URL" in response.content.decode()
    assert not Channel.objects.exists()


def test_send_test_creates_a_delivery_in_the_log(alice_client, project, django_assert_max_num_queries):
    channel = services.channel_create(project=project, name="Team", kind="email", events=["regression"], emails="a@x.t")
    alice_client.post(reverse("notifications:test", args=[channel.code]))
    delivery = Delivery.objects.get()
    assert delivery.event == "test" and delivery.status == "pending"
    for n in range(3):
        services.channel_create(project=project, name=f"C{n}", kind="email", events=["regression"], emails="a@x.t")
    with django_assert_max_num_queries(10):
        page = alice_client.get(reverse("notifications:project", args=[project.code])).content.decode()
    assert "Pending" in page


def test_viewer_and_outsider(bob_client, project, client, charlie):
    channel = services.channel_create(project=project, name="Team", kind="email", events=["regression"], emails="a@x.t")
    assert bob_client.get(reverse("notifications:project", args=[project.code])).status_code == 200
    assert bob_client.post(reverse("notifications:test", args=[channel.code])).status_code == 403
    assert bob_client.post(reverse("notifications:delete", args=[channel.code])).status_code == 403
    data = {"name": "x", "kind": "email", "events": ["regression"], "emails": "b@x.t"}
    assert bob_client.post(reverse("notifications:new", args=[project.code]), data).status_code == 403
    client.force_login(charlie)
    assert client.get(reverse("notifications:project", args=[project.code])).status_code == 404
    assert client.post(reverse("notifications:test", args=[channel.code])).status_code == 404
    assert client.post(reverse("notifications:delete", args=[channel.code])).status_code == 404
    assert client.post(reverse("notifications:new", args=[project.code]), data).status_code == 404
    assert Channel.objects.count() == 1 and not Delivery.objects.exists()


def _webhook(project):
    return services.channel_create(
        project=project, name="CI", kind="webhook", events=["regression"], url="http://127.0.0.1:9/h"
    )


def test_alice_edits_a_webhook_and_its_secret_is_kept(alice_client, project):
    # given
    channel = _webhook(project)
    secret = channel.secret
    url = reverse("notifications:edit", args=[channel.code])
    page = alice_client.get(url).content.decode()
    assert "http://127.0.0.1:9/h" in page and secret not in page

    # when: new name, events, URL and format; the secret box left unticked
    data = {
        "name": "CI nightly",
        "events": ["regression", "experiment_finished"],
        "url": "http://127.0.0.1:10/hook",
        "payload_format": "slack",
        "enabled": "on",
    }
    response = alice_client.post(url, data, follow=True)

    # then
    channel.refresh_from_db()
    assert (channel.name, channel.events, channel.url, channel.payload_format, channel.enabled) == (
        "CI nightly", ["regression", "experiment_finished"], "http://127.0.0.1:10/hook", "slack", True,
    )  # fmt: skip
    assert channel.secret == secret
    assert secret not in response.content.decode()
    assert "Channel “CI nightly” saved." in response.content.decode()


def test_replacing_the_secret_shows_the_new_one_once(alice_client, project):
    channel = _webhook(project)
    old = channel.secret
    data = {"name": "CI", "events": ["regression"], "url": channel.url, "payload_format": "plimsoll",
            "enabled": "on", "replace_secret": "on"}  # fmt: skip

    response = alice_client.post(reverse("notifications:edit", args=[channel.code]), data, follow=True)

    channel.refresh_from_db()
    assert channel.secret != old and len(channel.secret) >= 40
    assert channel.secret in response.content.decode()
    assert (
        channel.secret not in alice_client.get(reverse("notifications:project", args=[project.code])).content.decode()
    )


def test_an_email_channel_is_paused_and_its_addresses_changed(alice_client, project):
    channel = services.channel_create(project=project, name="Team", kind="email", events=["regression"], emails="a@x.t")

    response = alice_client.post(
        reverse("notifications:edit", args=[channel.code]),
        {"name": "Team", "events": ["run_finished"], "emails": "b@x.t, c@x.t"},
    )

    assert response.status_code == 302
    channel.refresh_from_db()
    assert (channel.recipients, channel.events, channel.enabled, channel.secret) == (
        ["b@x.t", "c@x.t"], ["run_finished"], False, "",
    )  # fmt: skip
    page = alice_client.get(reverse("notifications:project", args=[project.code])).content.decode()
    assert "Paused" in page


def test_a_refused_edit_is_a_400_and_keeps_the_channel_as_it_was(alice_client, project):
    channel = _webhook(project)
    url = reverse("notifications:edit", args=[channel.code])

    bad_url = alice_client.post(url, {"name": "X", "events": ["regression"], "url": "http://user@127.0.0.1/"})
    no_event = alice_client.post(url, {"name": "X", "events": [], "url": "http://127.0.0.1:11/"})

    assert bad_url.status_code == 400 and "The webhook URL" in bad_url.content.decode()
    assert no_event.status_code == 400
    fresh = Channel.objects.get()
    assert (fresh.name, fresh.url, fresh.events, fresh.secret) == ("CI", channel.url, ["regression"], channel.secret)


def test_only_editors_and_owners_edit_a_channel(bob_client, client, charlie, project, django_user_model):
    from django.test import Client

    from portal.accounts.models import Membership

    dave = django_user_model.objects.create_user("dave")
    Membership.objects.create(team=project.team, user=dave, role=Membership.Role.EDITOR)
    dave_client = Client()
    dave_client.force_login(dave)
    channel = _webhook(project)
    url = reverse("notifications:edit", args=[channel.code])
    data = {"name": "Taken over", "events": ["regression"], "url": "http://127.0.0.1:12/", "enabled": "on"}

    # the viewer: 403 to the form and to the save
    assert bob_client.get(url).status_code == 403
    assert bob_client.post(url, data).status_code == 403
    # the outsider: 404, nothing about the channel
    client.force_login(charlie)
    for response in (client.get(url), client.post(url, data)):
        assert response.status_code == 404 and "CI" not in response.content.decode()
    assert Channel.objects.get().name == "CI"
    # an editor may
    assert dave_client.post(url, data).status_code == 302
    assert Channel.objects.get().name == "Taken over"
