"""The configured password validators refuse the weak passwords issue 10 found accepted."""

import pytest
from django.contrib.auth.forms import SetPasswordForm
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("victim123", "too similar to the username"),
        ("20242024", "entirely numeric"),
        ("Plimsoll", "too close to “plimsoll”"),
        ("plimsoll2024", "too close to “plimsoll”"),
        ("password", "too common"),
        ("v1ct", "too short"),
        # Issue 30 item 8: a repeated username passed the similarity ratio (0.67 < 0.7).
        ("victimvictim", "mostly your username"),
        ("VICTIM-victim-1", "mostly your username"),
        ("victim.victim@", "mostly your username"),
    ],
)
def test_weak_passwords_are_refused(password, message):
    # given
    user = User(username="victim", email="victim@example.test")
    # when
    with pytest.raises(ValidationError) as refused:
        validate_password(password, user)
    # then
    assert any(message in m for m in refused.value.messages), refused.value.messages


def test_a_strong_password_passes():
    validate_password("correct horse battery staple", User(username="victim"))


def test_the_set_password_form_shows_the_reason():
    # given
    user = User.objects.create_user("victim", password="an old long passphrase")
    # when
    form = SetPasswordForm(user, {"new_password1": "victim123", "new_password2": "victim123"})
    # then
    assert not form.is_valid()
    assert "The password is too similar to the username." in form.errors["new_password2"]


def test_the_sign_up_page_refuses_the_username_twice(client, settings):
    settings.PLIMSOLL_SIGNUP = True
    # when: victim signs up with their name twice as the password
    response = client.post(
        "/signup/",
        {"username": "victim", "email": "v@example.test", "password1": "victimvictim", "password2": "victimvictim"},
    )
    # then: the form says why, and no account exists
    assert response.status_code == 400
    assert "The password is mostly your username" in response.content.decode()
    assert not User.objects.filter(username="victim").exists()


def test_a_password_that_contains_the_username_among_words_of_its_own_passes():
    validate_password("victim of a strong passphrase", User(username="victim"))
