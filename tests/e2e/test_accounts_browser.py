"""A colleague brought in without a shell, and a forgotten password, in Chromium.

The mail goes the real way: the web request enqueues it after commit on Redis, a real Celery
worker renders and sends it through Django's file-based backend, and the test reads the file
the worker wrote under its var/mail/, as a newcomer on the embedded default would.
"""

import email
import email.policy
import re

import pytest

from portal.accounts.models import Membership
from tests.processes import Worker, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def mail_worker(worker_env, tmp_path_factory):
    """A worker whose mail folder is this test's own (its broker is the test process's: on the embedded
    default a var/ of its own would be a broker folder nobody writes to)."""
    from workers.celery import app

    app.control.purge()
    var = tmp_path_factory.mktemp("var")
    worker = Worker(var / "worker.log", {**worker_env, "PLIMSOLL_MAIL_DIR": str(var / "mail")}, name="mail")
    worker.mail_dir = var / "mail"
    yield worker
    worker.close()


def mail_to(worker, address: str, *, not_in=()) -> str:
    """The plain-text body of the mail the worker wrote to ``address`` (waits for it)."""

    def find():
        if not worker.mail_dir.exists():
            return None
        for path in sorted(worker.mail_dir.iterdir()):
            if path in not_in:
                continue
            raw = path.read_bytes().rsplit(b"\n" + b"-" * 79, 1)[0]
            message = email.message_from_bytes(raw, policy=email.policy.default)
            if message["To"] == address:
                return message.get_body(preferencelist=("plain",)).get_content()
        return None

    return wait_until(find, timeout=30, what=f"a mail to {address} in {worker.mail_dir}")


@pytest.fixture
def contexts(browser):
    opened = []

    def new():
        context = browser.new_context(viewport={"width": 1100, "height": 850})
        opened.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        return page

    yield new
    for context in opened:
        context.close()


def test_an_owner_invites_a_colleague_who_joins_from_the_mail(contexts, live_server, settings, mail_worker, alice):
    settings.SITE_URL = live_server.url
    # given: alice on her Teams page
    owner = contexts()
    owner.goto(f"{live_server.url}/login/")
    owner.fill("#id_username", "alice")
    owner.fill("#id_password", "alice-password")
    owner.click("button[type=submit]")
    owner.goto(f"{live_server.url}/teams/")

    # when: she invites dana as an editor
    owner.fill("input[name=email]", "dana@example.com")
    owner.locator(".invite-form select[name=role]").select_option("editor")
    owner.get_by_role("button", name="Send invitation").click()
    assert "Invitation sent to dana@example.com" in owner.locator(".messages").inner_text()
    assert "dana@example.com" in owner.locator(".pending-invitations").inner_text()

    # then: dana's mail holds the link; she opens it, creates her account and is in the team
    body = mail_to(mail_worker, "dana@example.com")
    url = re.search(r"http://\S+/invitations/\S+/", body).group(0)
    assert "alice invites you" in body and "as editor" in body
    colleague = contexts()
    colleague.goto(url)
    colleague.fill("#id_username", "dana")
    colleague.fill("#id_password1", "kite-harbour-91")
    colleague.fill("#id_password2", "kite-harbour-91")
    colleague.get_by_role("button", name="Create account and join").click()
    assert "Welcome to alice's team: you are editor." in colleague.locator(".messages").inner_text()
    assert Membership.objects.get(team__name="alice's team", user__username="dana").role == "editor"

    # and the link is spent: a second use answers 410 with the reason
    response = colleague.goto(url)
    assert response.status == 410
    assert "already been used" in colleague.locator("#invitation-refused").inner_text()
    owner.reload()
    assert owner.locator(".pending-invitations").count() == 0


def test_a_forgotten_password_is_reset_from_the_mail(contexts, live_server, settings, mail_worker, alice):
    settings.SITE_URL = live_server.url
    alice.email = "alice@example.com"
    alice.save()
    earlier = set(mail_worker.mail_dir.iterdir()) if mail_worker.mail_dir.exists() else set()
    page = contexts()

    # when: alice asks for a reset from the login page
    page.goto(f"{live_server.url}/login/")
    page.get_by_role("link", name="Forgot your password?").click()
    page.fill("#id_email", "alice@example.com")
    page.get_by_role("button", name="Send the link").click()
    assert "Check your mail" in page.locator("h1").inner_text()

    # then: the mail's link lets her choose a new password, with Django's validators
    body = mail_to(mail_worker, "alice@example.com", not_in=earlier)
    url = re.search(r"http://\S+/password-reset/\S+/", body).group(0)
    page.goto(url)
    page.fill("#id_new_password1", "password")
    page.fill("#id_new_password2", "password")
    page.get_by_role("button", name="Set the password").click()
    assert "too common" in page.locator("form").inner_text()
    page.fill("#id_new_password1", "lantern-orchard-57")
    page.fill("#id_new_password2", "lantern-orchard-57")
    page.get_by_role("button", name="Set the password").click()
    assert page.locator("#reset-complete").is_visible()

    # and the new password logs in, the link works only once
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "lantern-orchard-57")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()
    page.goto(url)
    assert "used already or has expired" in page.locator("#reset-invalid").inner_text()


def test_an_unknown_address_gets_the_same_answer_and_no_mail(contexts, live_server, mail_worker, alice):
    page = contexts()
    page.goto(f"{live_server.url}/password-reset/")
    page.fill("#id_email", "nobody@example.com")
    page.get_by_role("button", name="Send the link").click()
    # no account enumeration: the same page as for a known address
    assert "If an account has this address" in page.locator("#reset-sent").inner_text()
    # and nothing is sent (the worker had 3 s, ten times what a mail takes it here)
    with pytest.raises(TimeoutError):
        wait_until(
            lambda: (
                mail_worker.mail_dir.exists()
                and any(b"nobody@example.com" in p.read_bytes() for p in mail_worker.mail_dir.iterdir())
            ),
            timeout=3,
            what="a mail to nobody",
        )
