import pytest
from django.urls import reverse

from portal.accounts.models import Membership

pytestmark = pytest.mark.django_db


def test_every_new_user_owns_a_team(alice):
    membership = Membership.objects.get(user=alice)
    assert membership.role == Membership.Role.OWNER
    assert membership.team.name == "alice's team"


def test_login_and_logout(client, alice):
    response = client.post(reverse("login"), {"username": "alice", "password": "alice-password"})
    assert response.status_code == 302
    assert client.get(reverse("accounts:teams")).status_code == 200
    client.post(reverse("logout"))
    assert client.get(reverse("accounts:teams")).status_code == 302


def test_a_wrong_password_says_so(client, alice):
    response = client.post(reverse("login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()


def test_an_owner_adds_a_member_with_a_role(alice_client, team, charlie):
    alice_client.post(reverse("accounts:member-add", args=[team.code]), {"username": "charlie", "role": "viewer"})
    assert Membership.objects.get(team=team, user=charlie).role == "viewer"


def test_adding_an_unknown_user_says_so(alice_client, team):
    response = alice_client.post(
        reverse("accounts:member-add", args=[team.code]), {"username": "nobody", "role": "viewer"}, follow=True
    )
    assert "There is no user called “nobody”." in response.content.decode()


def test_an_owner_changes_a_role_and_removes_a_member(alice_client, team, bob):
    alice_client.post(reverse("accounts:member-role", args=[team.code, bob.id]), {"role": "editor"})
    assert Membership.objects.get(team=team, user=bob).role == "editor"
    alice_client.post(reverse("accounts:member-remove", args=[team.code, bob.id]))
    assert not Membership.objects.filter(team=team, user=bob).exists()


def test_the_last_owner_cannot_leave_or_be_demoted(alice_client, team, alice):
    alice_client.post(reverse("accounts:member-role", args=[team.code, alice.id]), {"role": "viewer"})
    alice_client.post(reverse("accounts:member-remove", args=[team.code, alice.id]))
    assert Membership.objects.get(team=team, user=alice).role == "owner"


def test_a_viewer_cannot_manage_members(bob_client, team, bob, charlie):
    assert (
        bob_client.post(
            reverse("accounts:member-add", args=[team.code]), {"username": "charlie", "role": "owner"}
        ).status_code
        == 403
    )
    assert (
        bob_client.post(reverse("accounts:member-role", args=[team.code, bob.id]), {"role": "owner"}).status_code == 403
    )
    assert not Membership.objects.filter(team=team, user=charlie).exists()
    assert Membership.objects.get(team=team, user=bob).role == "viewer"


def test_an_outsider_gets_404_for_another_team(charlie_client, team, bob):
    assert (
        charlie_client.post(
            reverse("accounts:member-add", args=[team.code]), {"username": "charlie", "role": "owner"}
        ).status_code
        == 404
    )
    assert charlie_client.post(reverse("accounts:member-remove", args=[team.code, bob.id])).status_code == 404
    assert "alice's team" not in charlie_client.get(reverse("accounts:teams")).content.decode()
