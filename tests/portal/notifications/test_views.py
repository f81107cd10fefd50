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
