"""API tokens: hashed at rest, scoped, expiring, revocable; the Tokens page and create_token."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.accounts.services import token_create, token_hash

from .conftest import bearer, session

pytestmark = pytest.mark.django_db


def all_text_in_database() -> str:
    """Every text and JSON column of every table, concatenated: to prove a secret is nowhere in it."""
    parts = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 (our own table names)
            for row in cursor.fetchall():
                parts.extend(str(v) for v in row if v is not None)
    return "\n".join(parts)


def test_only_the_tokens_hash_is_stored(alice, team, finished_run):
    # given
    token, secret = token_create(user=alice, team=team, name="CI", scope="read")

    # when: it is used, so last-use and the API's records are written too
    assert bearer(secret).get("/api/v1/runs/").status_code == 200

    # then: the database holds the hash and the visible prefix, never the secret
    token.refresh_from_db()
    assert token.secret_hash == token_hash(secret) != secret
    assert secret.startswith(token.prefix) and len(token.prefix) < len(secret) // 3
    assert secret not in all_text_in_database()
    assert token.last_used_at is not None


def test_a_token_expires_after_90_days_by_default(alice, team):
    token, _ = token_create(user=alice, team=team, name="CI", scope="read")
    assert abs((token.expires_at - timezone.now()) - timedelta(days=90)) < timedelta(seconds=5)


@pytest.mark.parametrize("header", ["Bearer", "Bearer a b", "Bearer plim_wrong", "Bearer nottoken"])
def test_bad_bearer_headers_are_401_in_the_error_shape(header, finished_run):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/runs/")
    assert response.status_code == 401
    assert response.json()["status"] == 401 and response.json()["detail"]
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_viewer_cannot_create_a_token_above_read(bob, team):
    with pytest.raises(ValueError, match="viewer"):
        token_create(user=bob, team=team, name="x", scope="run")
    assert token_create(user=bob, team=team, name="x", scope="read")[0].scope == "read"


def test_an_outsider_cannot_create_a_token_for_a_team(charlie, team):
    with pytest.raises(ValueError, match="not a member"):
        token_create(user=charlie, team=team, name="x", scope="read")
    assert not ApiToken.objects.exists()


def test_create_token_prints_the_secret_on_its_last_line(alice, team):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "create_token", "alice", "--team", team.name, "--scope", "run", "--name", "deploy", stdout=out, stderr=err
    )

    secret = out.getvalue().strip().splitlines()[-1]
    token = ApiToken.objects.get()
    assert (token.name, token.scope, token.secret_hash) == ("deploy", "run", token_hash(secret))
    assert bearer(secret).get("/api/v1/teams/").json()["results"][0]["name"] == team.name


def test_create_token_never_expires_with_zero_days_and_refuses_strangers(alice, charlie, team):
    call_command(
        "create_token",
        "alice",
        "--team",
        str(team.code),
        "--scope",
        "read",
        "--expires-days",
        "0",
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert ApiToken.objects.get().expires_at is None
    with pytest.raises(CommandError, match="not a member"):
        call_command("create_token", "charlie", "--team", team.name, "--scope", "read", stdout=io.StringIO())


def test_the_tokens_page_shows_the_secret_once_and_revokes(alice_client, team):
    # when: alice creates a token
    response = alice_client.post("/tokens/", {"name": "GitLab", "team": team.pk, "scope": "run", "expires_days": 30})

    # then: the page shows the secret, which works as a bearer token
    token = ApiToken.objects.get()
    secret = response.context["secret"]
    assert secret in response.content.decode() and token.secret_hash == token_hash(secret)
    assert bearer(secret).get("/api/v1/runs/").status_code == 200

    # and the list shows it without the secret on the next visit
    page = alice_client.get("/tokens/").content.decode()
    assert "GitLab" in page and token.prefix in page and secret not in page

    # when: it is revoked
    alice_client.post(f"/tokens/{token.pk}/revoke/")

    # then
    assert bearer(secret).get("/api/v1/runs/").status_code == 401


def test_the_tokens_page_shows_the_rules_message_for_a_viewer(bob_client, team):
    response = bob_client.post("/tokens/", {"name": "x", "team": team.pk, "scope": "write", "expires_days": 30})
    assert "a viewer&#x27;s token can only read" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_nobody_revokes_another_users_token(alice, team, charlie_client, bob_client, bob):
    token, secret = token_create(user=alice, team=team, name="CI", scope="read")
    assert charlie_client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    assert bob_client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_tokens_api_lists_own_tokens_without_secrets_and_revokes(alice, team, token_secret):
    secret = token_secret("write")
    client = bearer(secret)
    listed = client.get("/api/v1/tokens/").json()["results"]
    assert [t["name"] for t in listed] == ["write token"]
    assert "secret_hash" not in listed[0] and secret not in str(listed)
    assert client.delete(f"/api/v1/tokens/{listed[0]['id']}/").status_code == 204
    assert client.get("/api/v1/tokens/").status_code == 401


def test_a_read_token_cannot_revoke(alice, team, token_secret):
    client = bearer(token_secret("read"))
    token = ApiToken.objects.get()
    assert client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_throttling_is_per_token_with_retry_after(alice, team, token_secret):
    # given: a tiny rate (the throttle reads its rates when the class is created)
    from portal.api.throttling import TokenRateThrottle

    rates = {"token": "2/min"}
    original = TokenRateThrottle.THROTTLE_RATES
    TokenRateThrottle.THROTTLE_RATES = rates
    try:
        first, second = bearer(token_secret("read")), bearer(token_secret("read"))
        from django.core.cache import cache

        # Token ids come back after each test's rollback: counts left by earlier tests' tokens are not these.
        cache.delete_many([f"throttle_token_token-{pk}" for pk in ApiToken.objects.values_list("pk", flat=True)])
        # when / then
        assert [first.get("/api/v1/teams/").status_code for _ in range(3)] == [200, 200, 429]
        limited = first.get("/api/v1/teams/")
        assert limited.status_code == 429 and int(limited["Retry-After"]) > 0
        assert limited.json()["code"] == "throttled"
        assert second.get("/api/v1/teams/").status_code == 200  # another token has its own budget
    finally:
        TokenRateThrottle.THROTTLE_RATES = original
        from django.core.cache import cache

        # Only this test's counts: the cache is shared (on the real stack, with the broker's Redis).
        cache.delete_many([f"throttle_token_token-{pk}" for pk in ApiToken.objects.values_list("pk", flat=True)])


# Members through the API (teams): owners manage, everybody else is refused and nothing changes.
from portal.accounts.models import Membership  # noqa: E402

from .conftest import PERSONAS, READERS, expected  # noqa: E402


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_owners_manage_members(persona, request, team, django_user_model):
    erin = django_user_model.objects.create_user("erin")
    added = persona.post(f"/api/v1/teams/{team.code}/members/", {"username": "erin", "role": "viewer"}, format="json")
    name = request.node.callspec.params["persona"]
    owner_ok = ("owner",)
    assert added.status_code == expected(name, ok=200, allowed=owner_ok)
    assert Membership.objects.filter(team=team, user=erin).exists() is (name == "owner")
    removed = persona.delete(f"/api/v1/teams/{team.code}/members/bob/")
    assert removed.status_code == expected(name, ok=204, allowed=owner_ok)
    assert Membership.objects.filter(team=team, user__username="bob").exists() is (name != "owner")
    assert persona.get(f"/api/v1/teams/{team.code}/").status_code == expected(name, ok=200, allowed=READERS)


def test_the_last_owner_stays_and_unknown_users_get_the_forms_message(alice, team):
    from .conftest import session

    client = session(alice)
    demote = client.post(f"/api/v1/teams/{team.code}/members/", {"username": "alice", "role": "editor"}, format="json")
    assert demote.status_code == 400 and demote.json()["fields"]["role"] == ["A team needs at least one owner."]
    assert client.delete(f"/api/v1/teams/{team.code}/members/alice/").status_code == 400
    unknown = client.post(f"/api/v1/teams/{team.code}/members/", {"username": "zoe"}, format="json")
    assert unknown.json()["fields"]["username"] == ["There is no user called “zoe”."]
    assert Membership.objects.get(user=alice).role == "owner"


def test_a_member_name_with_a_nul_byte_is_a_404_not_a_500(alice, bob, team):
    # PostgreSQL refuses NUL in a text comparison; the malformed-request walk found the 500.
    response = session(alice).delete(f"/api/v1/teams/{team.code}/members/bob%00/")
    assert response.status_code == 404
    assert Membership.objects.filter(team=team, user__username="bob").exists()


def test_the_secret_appears_in_no_log(alice, team, plan, caplog, token_secret):
    import logging

    # given: everything logged, at every level
    caplog.set_level(logging.DEBUG)
    secret = token_secret("run")

    # when: the token is used for a read, a write, a refused call and a broken header
    client = bearer(secret)
    client.get("/api/v1/runs/")
    client.post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")
    client.post("/api/v1/test-cases/", {}, format="json")
    bearer(secret + "x").get("/api/v1/runs/")

    # then
    assert caplog.records  # the refused calls were logged
    assert secret not in caplog.text


def test_an_accept_header_the_api_cannot_serve_still_gets_json(alice):
    # given: a pipeline tool that asks for HTML, and one whose header is garbage
    client = session(alice)
    for accept in ("text/html", "dWe$sl"):
        # when
        response = client.get("/api/v1/teams/", HTTP_ACCEPT=accept)
        # then: JSON, as its Content-Type says, rather than 406
        assert response.status_code == 200, accept
        assert response["Content-Type"] == "application/json"
        assert response.json()["results"][0]["name"] == "alice's team"


def test_an_owner_signed_in_creates_a_token_and_sees_its_secret_once(alice, team, finished_run):
    # when
    response = session(alice).post(
        "/api/v1/tokens/", {"team": str(team.code), "name": "onboarding", "scope": "write"}, format="json"
    )

    # then: 201 with the secret; the row holds its hash; the secret works, and is never listed
    assert response.status_code == 201, response.content
    body = response.json()
    token = ApiToken.objects.get()
    assert body["secret"].startswith("plim_") and token.secret_hash == token_hash(body["secret"])
    assert (body["id"], body["name"], body["scope"], body["team"]) == (token.id, "onboarding", "write", str(team.code))
    assert abs(token.expires_at - token.created_at - timedelta(days=90)) < timedelta(seconds=1)
    assert bearer(body["secret"]).get(f"/api/v1/runs/{finished_run.code}/").status_code == 200
    listed = session(alice).get("/api/v1/tokens/").json()
    assert body["secret"] not in str(listed)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "admin"}, "scope"),
        ({"expires_days": 0}, "expires_days"),
        ({"expires_days": 3651}, "expires_days"),
        ({"name": ""}, "name"),
        ({"owner": "me"}, "owner"),
    ],
)
def test_bad_token_requests_are_400s_and_create_nothing(alice, team, body, field):
    response = session(alice).post("/api/v1/tokens/", {"team": str(team.code), "name": "x", **body}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]
    assert not ApiToken.objects.exists()


def test_a_token_that_never_expires(alice, team):
    response = session(alice).post(
        "/api/v1/tokens/", {"team": str(team.code), "name": "forever", "expires_days": None}, format="json"
    )

    assert response.status_code == 201, response.content
    assert response.json()["expires_at"] is None and ApiToken.objects.get().expires_at is None


@pytest.mark.parametrize("persona", ["owner", "editor", "viewer", "outsider", "anonymous", "write_token"])
def test_only_an_owner_signed_in_creates_tokens_through_the_api(persona, alice, bob, charlie, dave, team, token_secret):
    clients = {
        "owner": lambda: session(alice),
        "editor": lambda: session(dave),
        "viewer": lambda: session(bob),
        "outsider": lambda: session(charlie),
        "anonymous": APIClient,
        "write_token": lambda: bearer(token_secret("write")),
    }
    client = clients[persona]()
    before = ApiToken.objects.count()

    response = client.post("/api/v1/tokens/", {"team": str(team.code), "name": "new", "scope": "read"}, format="json")

    statuses = {"owner": 201, "outsider": 404, "anonymous": 401}
    assert response.status_code == statuses.get(persona, 403), (persona, response.content)
    assert ApiToken.objects.count() == before + (persona == "owner")
    if persona == "write_token":
        assert "signed in" in response.json()["detail"]
