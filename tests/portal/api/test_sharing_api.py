"""Share links and invitations through the API × personas (issue 13, item 6)."""

import hashlib
import re

import pytest
from django.core import mail
from django.urls import reverse

from portal.accounts.models import Invitation, Membership
from portal.accounts.services import invitation_accept, team_create
from portal.runs.models import Run
from portal.sharing.models import ShareEvent, ShareLink
from portal.sharing.services import share_create, sharing_set
from tests.portal.accounts.conftest import limits_of_this_test  # noqa: F401 (autouse: invitations per address a day)
from tests.portal.runs.factories import project_run

from .conftest import PERSONAS, READERS, bearer, expected, session

pytestmark = pytest.mark.django_db

EDITORS = ("owner", "editor")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_token_is_shown_once_and_stored_only_as_its_hash(client, finished_run, alice):
    # when
    response = session(alice).post(
        "/api/v1/share-links/",
        {"kind": "run", "run": str(finished_run.code), "days": 7, "note": "for the steering committee"},
        format="json",
    )

    # then: 201 with the token and the page's URL; the row holds its hash, nothing holds the token
    assert response.status_code == 201, response.content
    body = response.json()
    token = body["token"]
    assert len(token) >= 22  # ≥ 128 bits, URL-safe
    assert body["url"].endswith(f"/s/{token}/")
    link = ShareLink.objects.get()
    assert link.token_hash == sha256(token)
    assert token not in str(ShareLink.objects.values().get())
    assert (body["kind"], body["title"], body["note"]) == ("run", f"Run #{finished_run.number} · Smoke", link.note)
    assert body["target"] == {"run": str(finished_run.code)}
    assert body["state"] == "open"
    assert (link.expires_at - link.created_at).days in (6, 7)
    assert ShareEvent.objects.filter(link=link, action="created", user=alice).exists()
    # the token opens the stakeholder's page; it never appears again in the API
    assert client.get(f"/s/{token}/").status_code == 200
    again = session(alice).get(f"/api/v1/share-links/{link.code}/").json()
    listed = session(alice).get("/api/v1/share-links/").json()["results"]
    assert "token" not in again and token not in str(again) and token not in str(listed)


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_and_owners_create_links(persona, request, finished_run):
    response = persona.post("/api/v1/share-links/", {"kind": "run", "run": str(finished_run.code)}, format="json")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=EDITORS)
    assert ShareLink.objects.exists() is (response.status_code == 201)
    if name == "outsider":
        assert str(finished_run.code) not in response.content.decode()


def test_a_write_token_creates_a_link(finished_run, token_secret):
    response = bearer(token_secret("write")).post(
        "/api/v1/share-links/", {"kind": "run", "run": str(finished_run.code)}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["created_by"] == "alice"


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_every_member_lists_the_links_of_their_teams_only(persona, request, finished_run, alice, charlie):
    # given: a link of alice's team and one of charlie's own team
    mine, _ = share_create(project=finished_run.project, kind="run", title="A", user=alice, run=finished_run)
    other = team_create(name="Charlie's", owner=charlie)
    other_run = project_run(other.projects.create(name="Other"), status=Run.Status.PASSED)
    theirs, _ = share_create(project=other_run.project, kind="run", title="B", user=charlie, run=other_run)

    # when
    response = persona.get("/api/v1/share-links/")

    # then
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=200, allowed=(*READERS, "outsider"))
    if response.status_code == 200:
        codes = {r["code"] for r in response.json()["results"]}
        assert codes == ({str(theirs.code)} if name == "outsider" else {str(mine.code)})


def test_links_are_listed_per_object_and_state(story, alice):
    experiment = story["experiment"]
    finished_run = story["before"][0]
    run_link, _ = share_create(project=finished_run.project, kind="run", title="R", user=alice, run=finished_run)
    exp_link, _ = share_create(
        project=experiment.project, kind="experiment", title="E", user=alice, experiment=experiment
    )
    client = session(alice)

    def codes(query):
        response = client.get(f"/api/v1/share-links/?{query}")
        assert response.status_code == 200, response.content
        return {r["code"] for r in response.json()["results"]}

    assert codes(f"run={finished_run.code}") == {str(run_link.code)}
    assert codes(f"experiment={experiment.code}") == {str(exp_link.code)}
    assert codes("kind=experiment") == {str(exp_link.code)}
    client.delete(f"/api/v1/share-links/{run_link.code}/")
    assert codes("state=revoked") == {str(run_link.code)}
    assert codes("state=open") == {str(exp_link.code)}
    assert client.get("/api/v1/share-links/?run=not-a-code").status_code == 400


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_and_owners_revoke_and_the_link_stops_at_once(persona, request, client, finished_run, alice):
    link, token = share_create(project=finished_run.project, kind="run", title="R", user=alice, run=finished_run)

    response = persona.delete(f"/api/v1/share-links/{link.code}/")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=204, allowed=EDITORS)
    link.refresh_from_db()
    page = client.get(f"/s/{token}/")
    if response.status_code == 204:
        assert link.revoked_at is not None
        assert page.status_code == 410 and "Run #" not in page.content.decode()
        assert session(alice).get(f"/api/v1/share-links/{link.code}/").json()["state"] == "revoked"
    else:
        assert link.revoked_at is None and page.status_code == 200


def test_a_comparison_an_experiment_and_a_journey_are_shared(story, alice, client):
    before, after = story["before"][0], story["after_set"]
    experiment = story["experiment"]
    plan = experiment.plan
    documents = {
        "comparison": {"a": str(before.code), "b": str(after.code)},
        "experiment": {"experiment": str(experiment.code)},
        "journey": {"environment": str(plan.environment.code), "plan": str(plan.code)},
    }
    for kind, target in documents.items():
        response = session(alice).post("/api/v1/share-links/", {"kind": kind, **target}, format="json")
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["target"] == target
        assert client.get(f"/s/{body['token']}/").status_code == 200
    titles = set(ShareLink.objects.values_list("title", flat=True))
    assert f"Comparison: run #{before.number} → after trials" in titles
    assert "Experiment: Index on work_items.area" in titles
    assert f"Journey · {plan.environment.name} · {plan.name}" in titles


def test_bad_requests_say_what_is_wrong_and_create_nothing(finished_run, alice, charlie, plan):
    client = session(alice)
    other = team_create(name="Charlie's", owner=charlie)
    foreign = project_run(other.projects.create(name="Other"), status=Run.Status.PASSED)
    cases = [
        ({"kind": "run"}, 400, "run"),
        ({"kind": "run", "run": str(finished_run.code), "days": 0}, 400, "days"),
        ({"kind": "run", "run": str(finished_run.code), "days": 366}, 400, "days"),
        ({"kind": "run", "run": str(finished_run.code), "experiment": str(finished_run.code)}, 400, "experiment"),
        ({"kind": "run", "run": str(finished_run.code), "token": "mine"}, 400, "token"),
        ({"kind": "journey", "environment": str(plan.environment.code)}, 400, "plan"),
        ({"kind": "run", "run": str(foreign.code)}, 404, None),
    ]
    for document, code, field in cases:
        response = client.post("/api/v1/share-links/", document, format="json")
        assert response.status_code == code, (document, response.content)
        if field:
            assert field in response.json()["fields"], response.json()
    # a run still running is shared once it has ended
    Run.objects.filter(pk=finished_run.pk).update(status=Run.Status.RUNNING)
    response = client.post("/api/v1/share-links/", {"kind": "run", "run": str(finished_run.code)}, format="json")
    assert response.status_code == 400 and "once it has ended" in str(response.json()["fields"]["run"])
    # sharing turned off by an owner: no new link
    Run.objects.filter(pk=finished_run.pk).update(status=Run.Status.PASSED)
    sharing_set(project=finished_run.project, enabled=False, user=alice)
    response = client.post("/api/v1/share-links/", {"kind": "run", "run": str(finished_run.code)}, format="json")
    assert response.status_code == 400 and "turned off" in response.json()["fields"]["non_field_errors"][0]
    assert not ShareLink.objects.exists()


# ---------------------------------------------------------------------------- invitations

OWNERS = ("owner",)


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_owners_invite_and_the_mail_holds_the_link_returned_once(
    persona,
    request,
    team,
    mail_sent_at_commit,
):
    # when
    with mail_sent_at_commit():
        response = persona.post(
            f"/api/v1/teams/{team.code}/invitations/", {"email": "erin@example.com", "role": "viewer"}, format="json"
        )

    # then: the owner's session (read and run tokens are refused by scope); one mail with the same link
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=OWNERS)
    if response.status_code != 201:
        assert not Invitation.objects.exists() and not mail.outbox
        return
    body = response.json()
    token = re.search(r"/invitations/([^/]+)/$", body["url"]).group(1)
    invitation = Invitation.objects.get()
    assert invitation.token_hash == sha256(token)
    assert token not in str(Invitation.objects.values().get())
    assert (body["email"], body["role"], body["state"], body["invited_by"]) == (
        "erin@example.com", "viewer", "pending", "alice",
    )  # fmt: skip
    assert len(mail.outbox) == 1 and reverse("accounts:invitation", args=[token]) in mail.outbox[0].body


def test_a_write_token_of_an_owner_invites(team, token_secret, mail_sent_at_commit):
    with mail_sent_at_commit():
        response = bearer(token_secret("write")).post(
            f"/api/v1/teams/{team.code}/invitations/", {"email": "erin@example.com"}, format="json"
        )

    assert response.status_code == 201
    assert response.json()["role"] == "editor"


def test_a_bad_address_is_a_400_with_the_forms_message(team, alice):
    response = session(alice).post(f"/api/v1/teams/{team.code}/invitations/", {"email": "nope"}, format="json")

    assert response.status_code == 400
    assert response.json()["fields"]["email"] == ["Enter a valid email address."]
    assert not Invitation.objects.exists()


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_owners_list_invitations_and_their_states(persona, request, team, alice, django_user_model):
    from portal.accounts.services import invitation_create

    pending, _ = invitation_create(team=team, email="p@example.com", role="editor", invited_by=alice)
    used, _ = invitation_create(team=team, email="u@example.com", role="viewer", invited_by=alice)
    invitation_accept(invitation=used, user=django_user_model.objects.create_user("erin", email="u@example.com"))

    response = persona.get(f"/api/v1/teams/{team.code}/invitations/")

    name = request.node.callspec.params["persona"]
    allowed = ("owner", "read_token", "run_token")  # alice's tokens: any scope reads, the role still applies
    assert response.status_code == expected(name, ok=200, allowed=allowed)
    if response.status_code == 200:
        states = {r["email"]: r["state"] for r in response.json()}
        assert states == {"p@example.com": "pending", "u@example.com": "accepted"}
        assert [r["email"] for r in persona.get(f"/api/v1/teams/{team.code}/invitations/?state=pending").json()] == [
            "p@example.com"
        ]
    else:
        assert "p@example.com" not in response.content.decode()


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_owners_revoke_invitations(persona, request, client, team, alice):
    from portal.accounts.services import invitation_create

    invitation, token = invitation_create(team=team, email="p@example.com", role="editor", invited_by=alice)

    response = persona.delete(f"/api/v1/teams/{team.code}/invitations/{invitation.pk}/")

    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=204, allowed=OWNERS)
    invitation.refresh_from_db()
    assert (invitation.revoked_at is not None) is (response.status_code == 204)
    page = client.get(reverse("accounts:invitation", args=[token]))
    assert page.status_code == (410 if response.status_code == 204 else 200)


def test_revoking_a_used_invitation_is_a_409_and_unknown_ids_are_404(team, alice, django_user_model):
    from portal.accounts.services import invitation_create

    invitation, _ = invitation_create(team=team, email="p@example.com", role="editor", invited_by=alice)
    invitation_accept(invitation=invitation, user=django_user_model.objects.create_user("erin", email="p@example.com"))
    client = session(alice)

    assert client.delete(f"/api/v1/teams/{team.code}/invitations/{invitation.pk}/").status_code == 409
    assert Membership.objects.filter(user__username="erin").exists()
    for bad in ("999999", "x", "9" * 40):
        assert client.delete(f"/api/v1/teams/{team.code}/invitations/{bad}/").status_code == 404


def test_the_list_says_when_sharing_is_off_and_costs_no_query_per_link(
    finished_run, alice, django_assert_max_num_queries
):
    for n in range(5):
        share_create(project=finished_run.project, kind="run", title=f"R{n}", user=alice, run=finished_run)
    sharing_set(project=finished_run.project, enabled=False, user=alice)
    client = session(alice)

    with django_assert_max_num_queries(12):
        rows = client.get("/api/v1/share-links/").json()["results"]

    assert [r["state"] for r in rows] == ["sharing_off"] * 5
