"""Issue 30 item 7: abuse limits on accounts, and invitations bound to the invited address.

Before: 20 of 20 password-reset mails to one address went out, sign-ups from one client and
invitations were unlimited, an invitation worked for any logged-in account, and sign-up was on
by default in a deployment.
"""

import os
import subprocess

import pytest
from django.urls import reverse

from portal import limits
from portal.accounts import services
from portal.accounts.models import Invitation, Membership
from tests.processes import PYTHON, ROOT

from .test_invitations import invite

pytestmark = pytest.mark.django_db
PASSWORD = "kite-harbour-91"


def test_reset_mails_to_one_address_stop_at_the_limit(client, alice, settings, mail_sent_at_commit, mailoutbox):
    settings.PLIMSOLL_RESET_MAILS_PER_ADDRESS_HOUR = 3
    alice.email = "alice@example.com"
    alice.save()
    # when: twenty requests for her address, each from another client (the limit per client is another test's)
    for n in range(20):
        with mail_sent_at_commit():
            response = client.post(
                reverse("password_reset"), {"email": "Alice@Example.com"}, REMOTE_ADDR=f"198.51.100.{n + 1}"
            )
        # then: the page never tells whether a mail went
        assert response.status_code == 302 and response["Location"].endswith("/password-reset/sent/")
    assert len(mailoutbox) == 3


def test_reset_requests_from_one_client_stop_at_the_limit(client, alice, settings, mail_sent_at_commit, mailoutbox):
    """Issue 30 item 7: one client could ask for resets without end (to one address, or to many in turn)."""
    settings.PLIMSOLL_RESET_REQUESTS_PER_CLIENT_HOUR = 4
    alice.email = "alice@example.com"
    alice.save()
    # when: one client asks for addresses without an account, then for alice's
    statuses = []
    for email in ["x1@example.com", "x2@example.com", "x3@example.com", "alice@example.com", "alice@example.com"]:
        with mail_sent_at_commit():
            response = client.post(reverse("password_reset"), {"email": email}, REMOTE_ADDR="203.0.113.7")
        statuses.append(response.status_code)
    # then: four requests count, whether their address has an account or not; the fifth is refused, with the wait
    assert statuses == [302, 302, 302, 302, 429]
    assert "4 password resets were asked from your address in the last hour" in response.content.decode()
    assert int(response["Retry-After"]) > 0
    assert [m.to for m in mailoutbox] == [["alice@example.com"]]
    # another client is not held back
    with mail_sent_at_commit():
        other = client.post(reverse("password_reset"), {"email": "alice@example.com"}, REMOTE_ADDR="203.0.113.8")
    assert other.status_code == 302 and len(mailoutbox) == 2


def test_sign_ups_from_one_client_stop_at_the_limit(client, settings, django_user_model):
    settings.PLIMSOLL_SIGNUP = True
    settings.PLIMSOLL_SIGNUPS_PER_CLIENT_HOUR = 2
    statuses = []
    for n in range(4):
        client.logout()
        response = client.post(
            reverse("accounts:signup"),
            {
                "username": f"erin{n}",
                "email": f"e{n}@example.com",
                "password1": "kite-harbour-91",
                "password2": "kite-harbour-91",
            },
            REMOTE_ADDR="203.0.113.9",
        )
        statuses.append(response.status_code)
    assert statuses == [302, 302, 429, 429]
    assert "accounts were created from your address in the last hour" in response.content.decode()
    assert int(response["Retry-After"]) > 0
    assert sorted(django_user_model.objects.filter(username__startswith="erin").values_list("username", flat=True)) == [
        "erin0",
        "erin1",
    ]
    # another client is not held back
    client.logout()
    other = client.post(
        reverse("accounts:signup"),
        {"username": "fay", "email": "f@example.com", "password1": PASSWORD, "password2": PASSWORD},
        REMOTE_ADDR="203.0.113.10",
    )
    assert other.status_code == 302


def test_invitations_per_team_stop_at_the_limit_on_the_page_and_the_api(alice_client, team, settings):
    settings.PLIMSOLL_INVITATIONS_PER_TEAM_DAY = 3
    for n in range(3):
        assert invite(alice_client, team, email=f"guest{n}@example.com").status_code == 302
    # the page says why
    page = alice_client.post(
        reverse("accounts:invitation-create", args=[team.code]),
        {"email": "more@example.com", "role": "viewer"},
        follow=True,
    )
    assert "has sent 3 invitations in the last 24 hours" in page.content.decode()
    # the API answers 429 in its error shape
    response = alice_client.post(
        f"/api/v1/teams/{team.code}/invitations/",
        {"email": "api@example.com", "role": "viewer"},
        content_type="application/json",
    )
    assert response.status_code == 429
    assert response.json()["code"] == "throttled" and int(response["Retry-After"]) > 0
    assert Invitation.objects.count() == 3


def test_invitations_by_one_owner_of_several_teams_stop_at_the_limit(alice_client, alice, team, charlie, settings):
    """Issue 30 item 7: the limit per team let an owner of several teams send that many from each."""
    settings.PLIMSOLL_INVITATIONS_PER_TEAM_DAY = 10
    settings.PLIMSOLL_INVITATIONS_PER_USER_DAY = 3
    second = charlie.teams.get()
    Membership.objects.create(team=second, user=alice, role=Membership.Role.OWNER)
    # when: alice invites from both her teams
    statuses = [
        invite(alice_client, t, email=f"guest{n}@example.com").status_code for n, t in enumerate([team, second])
    ]
    statuses.append(invite(alice_client, team, email="guest2@example.com").status_code)
    page = alice_client.post(
        reverse("accounts:invitation-create", args=[second.code]),
        {"email": "more@example.com", "role": "viewer"},
        follow=True,
    )
    # then: three in all, whichever team they came from
    assert statuses == [302, 302, 302]
    assert "You have sent 3 invitations in the last 24 hours" in page.content.decode()
    response = alice_client.post(
        f"/api/v1/teams/{team.code}/invitations/",
        {"email": "api@example.com", "role": "viewer"},
        content_type="application/json",
    )
    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert Invitation.objects.filter(invited_by=alice).count() == 3
    # another owner is not held back
    assert services.invitation_create(team=second, email="c@example.com", role="viewer", invited_by=charlie)


def test_invitations_to_one_address_stop_at_the_limit_whichever_team_sends_them(alice, team, charlie, settings):
    """Issue 30 item 7: many fresh teams' owners could each mail one inbox their team's name and their own."""
    settings.PLIMSOLL_INVITATIONS_PER_ADDRESS_DAY = 2
    services.invitation_create(team=team, email="dana@example.com", role="viewer", invited_by=alice)
    services.invitation_create(team=charlie.teams.get(), email="Dana@Example.com", role="viewer", invited_by=charlie)
    # when: a third team's owner
    with pytest.raises(limits.TooMany) as refused:
        services.invitation_create(team=team, email="DANA@example.com", role="editor", invited_by=alice)
    # then
    assert "DANA@example.com has been sent 2 invitations in the last 24 hours: try again in" in str(refused.value)
    assert refused.value.retry_after > 0
    assert Invitation.objects.count() == 2
    # another address is not held back
    assert services.invitation_create(team=team, email="erin@example.com", role="viewer", invited_by=alice)


def test_an_invitation_cannot_be_accepted_by_an_account_of_another_address(
    client, alice, team, charlie, mail_sent_at_commit, mailoutbox
):
    # given: an owner invitation mailed to dana, and charlie (another address) holding the link
    charlie.email = "charlie@example.com"
    charlie.save()
    _, token = services.invitation_create(team=team, email="dana@example.com", role="owner", invited_by=alice)
    client.force_login(charlie)
    url = reverse("accounts:invitation", args=[token])
    assert "This invitation is for dana@example.com" in client.get(url).content.decode()
    # when
    response = client.post(url)
    # then: refused, nothing changed, and the link still works for dana
    assert response.status_code == 403
    assert not Membership.objects.filter(team=team, user=charlie).exists()
    assert Invitation.objects.get().accepted_at is None


def test_the_invited_address_accepts_whatever_its_case(client, alice, team, charlie):
    charlie.email = "Charlie@Example.com"
    charlie.save()
    _, token = services.invitation_create(team=team, email="charlie@example.com", role="viewer", invited_by=alice)
    client.force_login(charlie)
    assert client.post(reverse("accounts:invitation", args=[token])).status_code == 302
    assert Membership.objects.get(team=team, user=charlie).role == "viewer"


@pytest.mark.parametrize(("debug", "expected"), [("false", "False"), ("true", "True")])
def test_sign_up_is_off_by_default_unless_debug(tmp_path, debug, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("PLIMSOLL_SIGNUP", "DEBUG")}
    env.update(DEBUG=debug, PLIMSOLL_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings")
    code = "import django; django.setup(); from django.conf import settings; print(settings.PLIMSOLL_SIGNUP)"
    result = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == expected, result.stderr
