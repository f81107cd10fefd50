"""Login throttling (issue 10, item 3): forty wrong passwords then the right one no longer logs in.

Real requests through the real middleware and authentication backends; the record of a
lockout is the one owners see on their Teams page.
"""

import re

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

LOGIN = "/login/"
ADMIN_LOGIN = "/admin/login/"


@pytest.fixture(autouse=True)
def limits(settings):
    settings.AXES_FAILURE_LIMIT = 5
    settings.PLIMSOLL_LOGIN_ADDRESS_FAILURE_LIMIT = 8


def _guess(client, url, username, password, address="203.0.113.7", **extra):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address, **extra)


def test_the_right_password_after_many_wrong_ones_is_refused(client, alice):
    # given
    for n in range(40):
        _guess(client, LOGIN, "alice", f"wrong-{n}")
    # when
    response = _guess(client, LOGIN, "alice", "alice-password")
    # then
    assert response.status_code == 429
    assert "Too many failed logins for this account or from your address" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_an_unknown_user_gets_the_same_answer(client, alice):
    # given
    known = [_guess(client, LOGIN, "alice", f"wrong-{n}", address="203.0.113.1") for n in range(6)][-1]
    unknown = [_guess(client, LOGIN, "nobody", f"wrong-{n}", address="203.0.113.2") for n in range(6)][-1]
    # then: a guesser cannot tell which accounts exist
    assert known.status_code == unknown.status_code == 429
    assert _page(known, "alice") == _page(unknown, "nobody")


def _page(response, username: str) -> str:
    """The page without what differs by design: CSRF tokens and the username typed."""
    return re.sub(r"[A-Za-z0-9]{64}", "TOKEN", response.content.decode()).replace(username, "USERNAME")


def test_failures_below_the_limit_keep_the_usual_message(client, alice):
    response = _guess(client, LOGIN, "alice", "wrong")
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert _guess(client, LOGIN, "alice", "alice-password").status_code == 302


def test_one_address_guessing_many_accounts_is_paused(client, alice):
    # given: seven failures on different accounts from one address: not yet paused
    for n in range(7):
        _guess(client, LOGIN, f"user{n}", "wrong", address="198.51.100.9")
    assert _guess(client, LOGIN, "alice", "alice-password", address="198.51.100.9").status_code == 302
    client.logout()
    # and the eighth reaches the address's limit
    _guess(client, LOGIN, "user7", "wrong", address="198.51.100.9")
    # when: the right password of a sixth account, from that address
    response = _guess(client, LOGIN, "alice", "alice-password", address="198.51.100.9")
    # then
    assert response.status_code == 429
    # and alice from elsewhere is not affected
    assert _guess(client, LOGIN, "alice", "alice-password", address="192.0.2.50").status_code == 302


def test_the_admin_login_is_throttled_too(client, django_user_model):
    django_user_model.objects.create_superuser("root", password="a long root passphrase")
    for n in range(5):
        _guess(client, ADMIN_LOGIN, "root", f"wrong-{n}")
    response = _guess(client, ADMIN_LOGIN, "root", "a long root passphrase")
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_behind_trusted_proxies_the_forwarded_address_counts(client, settings, alice):
    # given: one proxy in front; the client wrote a fake address further left
    settings.PLIMSOLL_TRUSTED_PROXIES = 1
    for n in range(8):
        _guess(client, LOGIN, f"user{n}", "wrong", address="10.0.0.2", HTTP_X_FORWARDED_FOR=f"1.2.3.{n}, 198.51.100.9")
    # then: that client is paused, another behind the same proxy is not
    paused = _guess(client, LOGIN, "alice", "alice-password", address="10.0.0.2", HTTP_X_FORWARDED_FOR="198.51.100.9")
    other = _guess(client, LOGIN, "alice", "alice-password", address="10.0.0.2", HTTP_X_FORWARDED_FOR="198.51.100.10")
    assert (paused.status_code, other.status_code) == (429, 302)


def test_owners_see_their_members_lockouts_viewers_and_outsiders_do_not(client, alice, bob, charlie):
    # given: bob's account is locked out
    for n in range(5):
        _guess(client, LOGIN, "bob", f"wrong-{n}", address="203.0.113.99")
    # when
    pages = {}
    for user in (alice, bob, charlie):
        client.force_login(user)
        pages[user.username] = client.get(reverse("accounts:teams")).content.decode()
    # then
    assert "Login lockouts in the last 30 days" in pages["alice"] and "203.0.113.99" in pages["alice"]
    # bob owns a team of his own (where he sees it) but only views alice's (where he does not)
    assert pages["bob"].count("203.0.113.99") == 1
    assert "203.0.113.99" not in pages["charlie"]


def test_a_login_form_of_its_own_is_throttled_when_it_passes_the_request(rf, alice):
    # given: how any other login form (sign-up, password reset) authenticates
    from django.contrib.auth import authenticate

    def attempt(password):
        request = rf.post("/somewhere/", REMOTE_ADDR="203.0.113.40")
        return authenticate(request=request, username="alice", password=password)

    for n in range(5):
        assert attempt(f"wrong-{n}") is None
    # then: the right password is refused too
    assert attempt("alice-password") is None
    # while code without a request (the test client's login) is not counted
    assert authenticate(username="alice", password="alice-password") == alice
