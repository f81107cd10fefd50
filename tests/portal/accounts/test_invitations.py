"""Invitations, sign-up and the mail module, through the views with Django's test client.

Personas: alice owns a team, bob is a viewer in it, charlie is an outsider with his own team.
"""

import re
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from portal.accounts import services
from portal.accounts.models import Invitation, Membership
from portal.mail import mail_render

pytestmark = pytest.mark.django_db


def invite(client, team, email="dana@example.com", role="editor"):
    return client.post(reverse("accounts:invitation-create", args=[team.code]), {"email": email, "role": role})


def link_in(mail) -> str:
    match = re.search(r"http://\S+/invitations/(\S+)/", mail.body)
    assert match, mail.body
    return match.group(1)


def test_an_owner_invites_by_email_and_the_mail_holds_a_link_whose_token_is_stored_hashed(
    alice_client, team, mail_sent_at_commit, mailoutbox
):
    # when
    with mail_sent_at_commit():
        response = invite(alice_client, team)

    # then: one mail, text and HTML, with the link; the database has only the token's hash
    assert response.status_code == 302
    assert len(mailoutbox) == 1
    mail = mailoutbox[0]
    assert mail.to == ["dana@example.com"]
    assert "alice invites you to alice's team" in mail.subject
    assert "as editor" in mail.body and mail.alternatives[0][1] == "text/html"
    token = link_in(mail)
    assert len(token) >= 43  # 32 random bytes in base64: 256 bits
    invitation = Invitation.objects.get()
    assert invitation.token_hash != token and token not in invitation.token_hash
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_invitation")
        rows = cursor.fetchall()
    assert rows and not any(token in str(value) for row in rows for value in row)
    assert invitation.expires_at - timezone.now() > timedelta(days=6, hours=23)
    # and the Teams page lists it as pending
    page = alice_client.get(reverse("accounts:teams")).content.decode()
    assert "dana@example.com" in page and "Revoke" in page


def test_a_viewer_cannot_invite_and_an_outsider_gets_404(bob_client, team, charlie, client):
    assert invite(bob_client, team).status_code == 403
    client.force_login(charlie)
    assert invite(client, team).status_code == 404
    assert not Invitation.objects.exists()


def test_a_bad_address_is_a_message_not_an_invitation(alice_client, team):
    response = alice_client.post(
        reverse("accounts:invitation-create", args=[team.code]),
        {"email": "not an address", "role": "editor"},
        follow=True,
    )
    assert "Enter a valid email address." in response.content.decode()
    assert not Invitation.objects.exists()


def test_the_invitee_creates_an_account_and_is_in_the_team(client, alice, team):
    # given
    invitation, token = services.invitation_create(team=team, email="dana@example.com", role="editor", invited_by=alice)
    url = reverse("accounts:invitation", args=[token])
    page = client.get(url).content.decode()
    assert "alice invites <strong>dana@example.com</strong>" in page

    # when: a weak password is refused by Django's validators, a good one accepted
    weak = client.post(url, {"username": "dana", "password1": "password", "password2": "password"})
    assert weak.status_code == 400 and "This password is too common." in weak.content.decode()
    response = client.post(url, {"username": "dana", "password1": "kite-harbour-91", "password2": "kite-harbour-91"})

    # then
    assert response.status_code == 302 and response["Location"] == reverse("accounts:teams")
    membership = Membership.objects.get(team=team, user__username="dana")
    assert membership.role == "editor" and membership.user.email == "dana@example.com"
    assert "alice&#x27;s team" in client.get(reverse("accounts:teams")).content.decode()


def test_an_invitation_used_twice_answers_410_and_makes_no_second_account(client, alice, team, django_user_model):
    _, token = services.invitation_create(team=team, email="dana@example.com", role="viewer", invited_by=alice)
    url = reverse("accounts:invitation", args=[token])
    client.post(url, {"username": "dana", "password1": "kite-harbour-91", "password2": "kite-harbour-91"})
    client.logout()

    second = client.post(url, {"username": "erin", "password1": "kite-harbour-91", "password2": "kite-harbour-91"})

    assert second.status_code == 410
    assert "already been used" in second.content.decode()
    assert not django_user_model.objects.filter(username="erin").exists()


def test_an_expired_invitation_answers_410(client, alice, team):
    _, token = services.invitation_create(team=team, email="dana@example.com", role="editor", invited_by=alice)
    with time_machine.travel(timezone.now() + timedelta(days=7, seconds=1)):
        response = client.get(reverse("accounts:invitation", args=[token]))
    assert response.status_code == 410 and "has expired" in response.content.decode()
    # a day before, it still worked
    with time_machine.travel(timezone.now() + timedelta(days=6)):
        assert client.get(reverse("accounts:invitation", args=[token])).status_code == 200


def test_a_revoked_invitation_answers_410_and_leaves_the_pending_list(alice_client, client, alice, team):
    invitation, token = services.invitation_create(team=team, email="dana@example.com", role="editor", invited_by=alice)
    alice_client.post(reverse("accounts:invitation-revoke", args=[team.code, invitation.pk]))
    page = alice_client.get(reverse("accounts:teams")).content.decode()
    assert "The invitation to dana@example.com is withdrawn" in page and "pending-invitations" not in page
    alice_client.logout()
    response = client.get(reverse("accounts:invitation", args=[token]))
    assert response.status_code == 410 and "withdrawn" in response.content.decode()


def test_a_viewer_cannot_revoke(bob_client, alice, team):
    invitation, _ = services.invitation_create(team=team, email="dana@example.com", role="editor", invited_by=alice)
    assert bob_client.post(reverse("accounts:invitation-revoke", args=[team.code, invitation.pk])).status_code == 403
    invitation.refresh_from_db()
    assert invitation.revoked_at is None


def test_a_logged_in_member_of_another_team_joins_and_keeps_his_own_team(client, alice, team, charlie):
    # given: charlie, logged in with the invited address, owner of his own team
    charlie.email = "charlie@example.com"
    charlie.save()
    _, token = services.invitation_create(team=team, email="charlie@example.com", role="viewer", invited_by=alice)
    client.force_login(charlie)
    url = reverse("accounts:invitation", args=[token])
    page = client.get(url).content.decode()
    assert "Join as charlie" in page and "Create your account" not in page

    # when
    client.post(url)

    # then: he is a viewer in alice's team and still owns his own
    roles = dict(Membership.objects.filter(user=charlie).values_list("team__name", "role"))
    assert roles == {"alice's team": "viewer", "charlie's team": "owner"}
    # and the link is used up for anyone else
    client.logout()
    assert client.get(url).status_code == 410


def test_an_unknown_token_is_404_and_says_nothing_of_any_team(client, alice, team):
    services.invitation_create(team=team, email="dana@example.com", role="editor", invited_by=alice)
    response = client.get(reverse("accounts:invitation", args=["x" * 43]))
    assert response.status_code == 404
    assert "alice" not in response.content.decode() and "not valid" in response.content.decode()


def test_signup_is_on_with_the_setting_and_off_without(client, settings, django_user_model):
    settings.PLIMSOLL_SIGNUP = True  # off by default unless DEBUG (issue 30; test_abuse_limits.py)
    page = client.get(reverse("login")).content.decode()
    assert "Create an account" in page
    response = client.post(
        reverse("accounts:signup"),
        {
            "username": "erin",
            "email": "erin@example.com",
            "password1": "kite-harbour-91",
            "password2": "kite-harbour-91",
        },
    )
    assert response.status_code == 302
    assert django_user_model.objects.get(username="erin").teams.get().name == "erin's team"

    client.logout()
    settings.PLIMSOLL_SIGNUP = False
    assert client.get(reverse("accounts:signup")).status_code == 404
    assert "Create an account" not in client.get(reverse("login")).content.decode()


def test_signup_applies_the_password_validators(client, settings):
    settings.PLIMSOLL_SIGNUP = True
    response = client.post(
        reverse("accounts:signup"),
        {"username": "erin", "email": "erin@example.com", "password1": "short", "password2": "short"},
    )
    assert response.status_code == 400 and "too short" in response.content.decode()


def test_a_mail_renders_a_subject_a_text_and_an_html_body():
    mail = mail_render(
        template="invitation",
        context={"team": "Ops", "role": "viewer", "invited_by": "alice", "url": "http://x/i/t/", "days": 7},
    )
    assert mail.subject == "alice invites you to Ops on Plimsoll"
    assert "http://x/i/t/" in mail.text and '<a href="http://x/i/t/">' in mail.html


def test_on_the_embedded_default_each_mail_is_a_readable_file_under_var_mail(settings, tmp_path):
    # given: the settings of a checkout without EMAIL_HOST (pytest-django swaps in locmem otherwise)
    from portal.mail import mail_send

    settings.EMAIL_BACKEND = "portal.notifications.backends.OneFilePerMailBackend"
    settings.EMAIL_FILE_PATH = tmp_path / "mail"

    # when: twenty mails within the same second or two (Django's own file backend, which names
    # its file after the second and id(connection), appended several of them to one file)
    for n in range(20):
        mail_send(
            template="password_reset", to=[f"u{n}@example.com"], context={"username": f"u{n}", "url": "http://h/r/"}
        )
    mail_send(template="password_reset", to=["dana@example.com"], context={"username": "dana", "url": "http://h/r/"})
    mail_send(template="password_reset", to=["erin@example.com"], context={"username": "erin", "url": "http://h/s/"})

    # then: one file per mail, with its headers and its text
    files = sorted((tmp_path / "mail").iterdir())
    assert len(files) == 22
    assert all(f.read_text().count("Subject: ") == 1 for f in files)
    text = "".join(f.read_text() for f in files)
    assert "Subject: Reset your Plimsoll password" in text and "To: dana@example.com" in text
    assert "Hello erin," in text


def test_the_teams_page_with_pending_invitations_costs_a_fixed_number_of_queries(
    alice_client, alice, team, django_assert_max_num_queries
):
    for n in range(15):
        services.invitation_create(team=team, email=f"p{n}@example.com", role="viewer", invited_by=alice)
    with django_assert_max_num_queries(8):
        page = alice_client.get(reverse("accounts:teams")).content.decode()
    assert page.count("@example.com</td>") == 15
