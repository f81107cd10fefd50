"""Issue 30 item 6: an e-mail channel is no open relay (a real SMTP server on loopback, aiosmtpd).

Before: a fresh account sent *Send test* of an e-mail channel to 40 unverified addresses, ten times,
unthrottled. Now an address gets nothing but one confirmation mail until its owner confirms through
a single-use link, and mail is limited per recipient, per team and (Send test) per user.
"""

import re

import pytest
from django.urls import reverse

from portal.notifications import services
from portal.notifications.models import Channel, Delivery, MailAddress

from .addresses import confirm_addresses

pytestmark = pytest.mark.django_db


def new_channel(client, project, emails: str):
    data = {"name": "Ops", "kind": "email", "events": ["regression"], "emails": emails, "payload_format": "plimsoll"}
    return client.post(reverse("notifications:new", args=[project.code]), data)


def confirmation_link(mail) -> str:
    body = mail.get_body(("plain",)).get_content()
    match = re.search(r"http://\S+(/mail-addresses/confirm/\S+/)", body)
    assert match, body
    return match.group(1)


def press_send_test(client, channel):
    return client.post(reverse("notifications:test", args=[channel.code]), follow=True)


def test_a_channel_mails_only_confirmed_addresses(alice_client, client, project, smtp, mail_sent_at_commit):
    # given: a channel for two addresses nobody confirmed
    with mail_sent_at_commit():
        assert new_channel(alice_client, project, "ops@x.test, Boss@X.test").status_code == 302
    channel = Channel.objects.get()
    # then: each got one confirmation mail, whose subject and body carry nothing the requester typed
    assert sorted(rcpt for (rcpt,), _ in smtp) == ["boss@x.test", "ops@x.test"]
    assert {mail["Subject"] for _, mail in smtp} == {"Confirm Plimsoll notifications to this address"}
    assert all("Ops" not in mail.get_body(("plain",)).get_content() for _, mail in smtp)
    links = {rcpt[0]: confirmation_link(mail) for rcpt, mail in smtp}
    # the token is stored hashed
    address = MailAddress.objects.get(email="ops@x.test")
    assert address.token_hash and links["ops@x.test"].split("/")[-2] not in address.token_hash
    page = alice_client.get(reverse("notifications:project", args=[project.code])).content.decode()
    assert page.count("awaiting confirmation") == 2
    smtp.clear()

    # when: Send test before anyone confirmed
    with mail_sent_at_commit():
        press_send_test(alice_client, channel)
    # then: nothing goes out, and the log says why
    assert smtp == []
    delivery = Delivery.objects.get()
    assert delivery.status == "failed" and "ops@x.test: not confirmed yet" in delivery.error

    # when: ops opens the link (no account needed) and confirms
    page = client.get(links["ops@x.test"]).content.decode()
    assert "the team <strong>alice&#x27;s team</strong> asks" in page and "ops@x.test" in page
    assert MailAddress.objects.get(email="ops@x.test").confirmed_at is None  # opening alone confirms nothing
    assert client.post(links["ops@x.test"]).status_code == 200
    assert client.post(links["ops@x.test"]).status_code == 410  # the link is spent
    with mail_sent_at_commit():
        press_send_test(alice_client, channel)
    # then: the test reaches ops only
    ((rcpt, mail),) = smtp
    assert rcpt == ["ops@x.test"]
    latest = Delivery.objects.order_by("-id").first()
    assert latest.status == "sent" and "not sent to boss@x.test: not confirmed yet" in latest.error


def test_saving_again_sends_no_second_confirmation_and_an_address_gets_few(
    alice_client, project, smtp, mail_sent_at_commit, settings, django_user_model
):
    settings.PLIMSOLL_MAIL_CONFIRMATIONS_PER_ADDRESS_DAY = 2
    with mail_sent_at_commit():
        new_channel(alice_client, project, "victim@x.test")
        new_channel(alice_client, project, "victim@x.test")  # the same team asks again: no new mail
    assert len(smtp) == 1
    # other teams asking for the same address: the address's daily limit holds over the whole site
    for n in range(3):
        other = django_user_model.objects.create_user(f"spammer{n}", password="x")
        client = alice_client.__class__()
        client.force_login(other)
        own = other.teams.get().projects.create(name="P")
        with mail_sent_at_commit():
            new_channel(client, own, "victim@x.test")
    assert len(smtp) == 2


def test_send_test_is_limited_per_user(alice_client, project, settings, mail_sent_at_commit):
    settings.PLIMSOLL_CHANNEL_TESTS_PER_USER_HOUR = 2
    channel = services.channel_create(project=project, name="Ops", kind="email", events=["regression"], emails="a@x.t")
    pages = [press_send_test(alice_client, channel).content.decode() for _ in range(3)]
    assert "You sent 2 tests in the last hour" in pages[2]
    assert Delivery.objects.count() == 2


def test_mail_to_one_recipient_is_limited_per_hour(project, team, smtp, settings):
    settings.PLIMSOLL_MAIL_PER_RECIPIENT_HOUR = 2
    channel = services.channel_create(project=project, name="Ops", kind="email", events=["regression"], emails="o@x.t")
    confirm_addresses(team, "o@x.t")
    for _ in range(3):
        delivery = services.channel_test(channel=channel)
        services.delivery_attempt(delivery_id=delivery.id)
    assert len(smtp) == 2
    assert Delivery.objects.order_by("-id").first().error == "Not sent: o@x.t: over the mail limit this hour"


def test_mail_from_one_team_is_limited_per_hour_and_spends_no_recipients_count(project, team, charlie, smtp, settings):
    """The sender's limit: one team's channels send at most PLIMSOLL_MAIL_PER_TEAM_HOUR mails an hour, counted per
    recipient; what they send over it leaves the recipient's own count alone."""
    settings.PLIMSOLL_MAIL_PER_TEAM_HOUR = 3
    settings.PLIMSOLL_MAIL_PER_RECIPIENT_HOUR = 4
    channel = services.channel_create(
        project=project, name="Ops", kind="email", events=["regression"], emails="a@x.t, b@x.t"
    )
    confirm_addresses(team, "a@x.t", "b@x.t")
    # when: three tests to two addresses
    for _ in range(3):
        services.delivery_attempt(delivery_id=services.channel_test(channel=channel).id)
    # then: three mails in all, and the log names what was held
    assert [rcpt for rcpt, _ in smtp] == [["a@x.t", "b@x.t"], ["a@x.t"]]
    errors = list(Delivery.objects.order_by("id").values_list("error", flat=True))
    assert errors[1] == "not sent to b@x.t: over the mail limit this hour"
    assert errors[2] == "Not sent: a@x.t: over the mail limit this hour; b@x.t: over the mail limit this hour"
    # another team's channel still reaches a@x.t up to a@x.t's own limit: the refusals above spent none of it
    other = charlie.teams.get()
    theirs = services.channel_create(
        project=other.projects.create(name="Theirs"), name="Ops", kind="email", events=["regression"], emails="a@x.t"
    )
    confirm_addresses(other, "a@x.t")
    for _ in range(3):
        services.delivery_attempt(delivery_id=services.channel_test(channel=theirs).id)
    assert len(smtp) == 4  # a@x.t: 2 above + 2 more = its limit of 4


def test_confirmations_one_user_asks_for_are_limited_and_spend_no_addresss_count(
    alice_client, project, smtp, mail_sent_at_commit, settings, django_user_model
):
    settings.PLIMSOLL_MAIL_CONFIRMATIONS_PER_USER_HOUR = 2
    settings.PLIMSOLL_MAIL_CONFIRMATIONS_PER_ADDRESS_DAY = 1
    # when: alice names four addresses
    with mail_sent_at_commit():
        new_channel(alice_client, project, "a@x.t, b@x.t, c@x.t, d@x.t")
    # then: two confirmation mails; the others wait, and their own counts are untouched
    assert sorted(rcpt for (rcpt,), _ in smtp) == ["a@x.t", "b@x.t"]
    other = django_user_model.objects.create_user("frank", password="x")
    client = alice_client.__class__()
    client.force_login(other)
    with mail_sent_at_commit():
        new_channel(client, other.teams.get().projects.create(name="P"), "c@x.t")
    assert sorted(rcpt for (rcpt,), _ in smtp) == ["a@x.t", "b@x.t", "c@x.t"]
