"""Share links through the views: who may create them, what the public page shows, and every way it stops.

Each refusal is checked on the body too: a link that does not work says nothing of what it opened.
"""

import re
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from portal.sharing import services
from portal.sharing.models import ShareLink
from tests.portal.history.test_comparison import make_run

pytestmark = pytest.mark.django_db

GONE = "This link has expired or was revoked"


def share(client, project, **params):
    """POSTs the Share form; returns the response and the link's token (None when refused)."""
    response = client.post(reverse("sharing:new", args=[project.code]), {"days": 30, "note": "", **params})
    match = re.search(r"/s/([A-Za-z0-9_-]{40,})/", response.content.decode())
    return response, match.group(1) if match else None


def public(token, suffix=""):
    """A request without any session, as a stakeholder's browser makes it."""
    return Client().get(f"/s/{token}/{suffix}")


def assert_gone(response, *secrets):
    body = response.content.decode()
    assert response.status_code == 410, response.status_code
    assert GONE in body
    for secret in secrets:
        assert secret not in body
    assert portal_links(body) == []  # not even a login link


def portal_links(html: str) -> list[str]:
    """Every link (<a href>) and form on the page: a shared page has none."""
    return re.findall(r'<a\b[^>]*href="([^"]*)"', html) + re.findall(r"<form\b[^>]*>", html)


# ------------------------------------------------------------------ creating


def test_an_editor_shares_a_run_and_the_token_is_shown_once_and_stored_only_hashed(alice_client, plan):
    run = make_run(plan, 40)

    response, token = share(alice_client, plan.project, kind="run", run=run.code, note="for the steering committee")

    assert response.status_code == 200 and token and len(token) >= 43
    link = ShareLink.objects.get()
    assert link.kind == "run" and link.run == run and link.note == "for the steering committee"
    assert token.startswith(link.prefix) and link.token_hash != token
    assert timedelta(days=29, hours=23) < link.expires_at - timezone.now() <= timedelta(days=30)
    assert list(link.events.values_list("action", flat=True)) == ["created"]
    # the plain token is nowhere in the database: every text column of every sharing row
    public(token)  # an opening is recorded too
    rows = []
    with connection.cursor() as cursor:
        for table in ("sharing_sharelink", "sharing_shareevent", "sharing_projectsharing"):
            cursor.execute(f"SELECT * FROM {table}")  # noqa: S608 (fixed names)
            rows += cursor.fetchall()
    assert rows and not any(token in str(value) for row in rows for value in row)


def test_a_viewer_cannot_share_and_an_outsider_gets_404(bob_client, plan, charlie):
    run = make_run(plan, 40)
    response, token = share(bob_client, plan.project, kind="run", run=run.code)
    assert response.status_code == 403 and token is None
    charlie_client = Client()
    charlie_client.force_login(charlie)
    response, token = share(charlie_client, plan.project, kind="run", run=run.code)
    assert response.status_code == 404 and token is None
    assert not ShareLink.objects.exists()


def test_an_expiry_outside_one_day_to_a_year_is_refused(alice_client, plan):
    run = make_run(plan, 40)
    response, token = share(alice_client, plan.project, kind="run", run=run.code, days=400)
    assert response.status_code == 400 and token is None
    assert "Select a valid choice" in response.content.decode()
    with pytest.raises(services.ShareError, match="from 1 day to 365 days"):
        services.share_create(project=plan.project, kind="run", title="x", user=None, days=0, run=run)


def test_a_run_of_another_project_cannot_be_shared_through_this_one(alice_client, plan, charlie):
    from portal.projects.models import Project

    other = Project.objects.create(team=plan.project.team, name="Other")
    run = make_run(plan, 40)
    response, token = share(alice_client, other, kind="run", run=run.code)
    assert response.status_code == 404 and token is None


# ------------------------------------------------------------------ the public page


def test_the_shared_run_page_has_the_headline_the_figures_and_no_way_into_the_portal(alice_client, plan):
    run = make_run(plan, 40)
    _, token = share(alice_client, plan.project, kind="run", run=run.code)

    response = public(token)

    html = response.content.decode()
    assert response.status_code == 200
    assert response["X-Robots-Tag"] == "noindex, nofollow" and response["Referrer-Policy"] == "no-referrer"
    assert '<meta name="robots" content="noindex, nofollow">' in html
    headline = re.search(r'<p class="share-headline" id="share-headline">(.*?)</p>', html, re.S).group(1)
    assert headline.startswith("Smoke on Staging") and "40 ms" in headline
    assert 'data-figure="apd">40 ms<' in html
    assert portal_links(html) == []
    assert "csrfmiddlewaretoken" not in html and "<form" not in html
    link = ShareLink.objects.get()
    assert link.open_count == 1 and link.last_opened_at is not None
    assert link.events.filter(action="opened").count() == 1


def test_a_shared_run_shows_its_handoffs_as_the_run_page_does(alice_client, plan):
    # given: a shared run whose shard was handed from one worker to another (issue 17)
    run = make_run(plan, 40)
    text = "worker h:9 stopped at 2 s; shard 0 resumed on g:4 after 1.5 s"
    run.summary["handoffs"] = [
        {"kind": "stopped", "stopped_at_s": 2, "resumed_at_s": 4, "shard": 0, "text": text, "window": "Hold"}
    ]
    run.save(update_fields=["summary"])
    _, token = share(alice_client, plan.project, kind="run", run=run.code)

    # when
    html = public(token).content.decode()

    # then: the sentence, the window it fell in, and the markers' data and script, as on the run page
    assert f"{text} — during “Hold”" in html
    assert 'id="handoff-data"' in html and "handoff-markers.js" in html
    # a run without handoffs has neither
    other = make_run(plan, 41)
    _, token = share(alice_client, plan.project, kind="run", run=other.code)
    assert "handoff" not in public(token).content.decode()


def test_the_run_series_answers_for_the_shared_run_only(alice_client, plan):
    a, b = make_run(plan, 40), make_run(plan, 20)
    _, token_a = share(alice_client, plan.project, kind="run", run=a.code)
    _, token_b = share(alice_client, plan.project, kind="run", run=b.code)

    own = public(token_a, f"runs/{a.code}/series.json")
    other = public(token_a, f"runs/{b.code}/series.json")

    assert own.status_code == 200 and len(own.json()["t"]) > 0
    assert other.status_code == 404 and other.content == b"Not found.\n"
    assert public(token_b, f"runs/{b.code}/series.json").status_code == 200
    # the chart data does not count as an opening
    assert ShareLink.objects.get(run=a).open_count == 0


def test_the_drill_down_data_answers_for_the_shared_run_only(alice_client, plan):
    a, b = make_run(plan, 40), make_run(plan, 20)
    _, token = share(alice_client, plan.project, kind="run", run=a.code)
    page = a.summary["pages"][0]

    own = public(token, f"runs/{a.code}/detail.json?page={page['label']}")
    ranged = public(token, f"runs/{a.code}/detail.json?from=0&to=2")
    other = public(token, f"runs/{b.code}/detail.json")

    assert own.status_code == 200
    assert (own.json()["figures"]["apd_ms"], own.json()["figures"]["pages"]) == (page["apd_ms"], page["pages"])
    assert ranged.status_code == 200 and ranged.json()["range"] == {"from": 0, "to": 2, "of": "range"}
    assert other.status_code == 404 and other.content == b"Not found.\n"
    assert public(token, f"runs/{a.code}/detail.json?from=x").status_code == 400
    assert ShareLink.objects.get(run=a).open_count == 0


def test_revoked_expired_tampered_and_sharing_off_all_answer_the_same_plain_410(alice_client, plan, alice):
    run = make_run(plan, 40)
    _, token = share(alice_client, plan.project, kind="run", run=run.code)
    link = ShareLink.objects.get()
    secrets = ("Smoke", "Staging", "40 ms", str(run.code))

    # tampered: one character changed
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert_gone(public(tampered), *secrets)
    assert_gone(public(tampered, f"runs/{run.code}/series.json"), *secrets)

    # expired: a controlled clock past its 30 days, and still fine a day before
    with time_machine.travel(link.expires_at - timedelta(days=1)):
        assert public(token).status_code == 200
    with time_machine.travel(link.expires_at + timedelta(seconds=1)):
        assert_gone(public(token), *secrets)
        assert_gone(public(token, f"runs/{run.code}/series.json"), *secrets)

    # sharing turned off by the owner: gone; on again: back
    alice_client.post(reverse("sharing:toggle", args=[plan.project.code]), {"enabled": "0"})
    assert_gone(public(token), *secrets)
    alice_client.post(reverse("sharing:toggle", args=[plan.project.code]), {"enabled": "1"})
    assert public(token).status_code == 200

    # revoked from the Shared links page: gone at once
    alice_client.post(reverse("sharing:revoke", args=[link.code]))
    assert_gone(public(token), *secrets)
    assert_gone(public(token, f"runs/{run.code}/series.json"), *secrets)
    assert list(link.events.order_by("id").values_list("action", flat=True)) == [
        "created",
        "opened",
        "opened",
        "revoked",
    ]


def test_sharing_off_refuses_new_links_and_only_an_owner_switches_it(alice_client, plan, alice, bob):
    run = make_run(plan, 40)
    bob_client = Client()
    bob_client.force_login(bob)
    assert bob_client.post(reverse("sharing:toggle", args=[plan.project.code]), {"enabled": "0"}).status_code == 403
    services.sharing_set(project=plan.project, enabled=False, user=alice)
    response, token = share(alice_client, plan.project, kind="run", run=run.code)
    assert response.status_code == 400 and token is None
    assert "Sharing is turned off for this project" in response.content.decode()


def test_the_shared_links_page_lists_creator_object_expiry_and_opens(alice_client, plan, bob, charlie):
    run = make_run(plan, 40)
    _, token = share(alice_client, plan.project, kind="run", run=run.code, note="for the board")
    public(token)
    public(token)
    bob_client = Client()
    bob_client.force_login(bob)

    page = bob_client.get(reverse("sharing:list", args=[plan.project.code])).content.decode()

    row = re.search(r"<tr data-link.*?</tr>", page, re.S).group(0)
    assert "Run #1 · Smoke" in row and "for the board" in row and "alice" in row
    assert '<td class="num" data-opens>2</td>' in row and "works" in row
    assert f"/s/{token[:6]}…" in row and token not in page
    assert "Revoke" not in row  # bob is a viewer
    assert bob_client.post(reverse("sharing:revoke", args=[ShareLink.objects.get().code])).status_code == 403
    charlie_client = Client()
    charlie_client.force_login(charlie)
    assert charlie_client.get(reverse("sharing:list", args=[plan.project.code])).status_code == 404


def test_a_shared_comparison_has_the_portal_headline_and_the_configuration_in_words(alice_client, story):
    before, after = story["baseline"], story["after_set"]
    project = before.project
    portal = alice_client.get(reverse("history:compare", args=[project.code]) + f"?a={before.code}&b={after.code}")
    portal_headline = re.search(r'id="headline">(.*?)</p>', portal.content.decode(), re.S).group(1)

    _, token = share(alice_client, project, kind="comparison", a=before.code, b=after.code)
    html = public(token).content.decode()

    assert re.search(r'id="share-headline">(.*?)</p>', html, re.S).group(1) == portal_headline
    assert "faster" in portal_headline
    assert "search.index went from off to on" in html
    assert portal_links(html) == []
    # the chart may fetch the runs of both sides, and no other run of the project
    stranger = make_run(before.plan, 30)
    assert public(token, f"runs/{story['before'][0].code}/series.json").status_code == 200
    assert public(token, f"runs/{story['after'][2].code}/series.json").status_code == 200
    assert public(token, f"runs/{stranger.code}/series.json").status_code == 404


def test_a_shared_experiment_and_a_shared_journey(alice_client, story):
    experiment, project = story["experiment"], story["experiment"].project
    _, token = share(alice_client, project, kind="experiment", experiment=experiment.code)
    html = public(token).content.decode()
    assert "Add index ix_work_items_area" in html and "search.index went from off to on" in html
    assert portal_links(html) == []

    env, plan = experiment.environment, experiment.plan
    _, token = share(alice_client, project, kind="journey", environment=env.code, plan=plan.code)
    html = public(token).content.decode()
    headline = re.search(r'id="share-headline">(.*?)</p>', html, re.S).group(1)
    assert headline.startswith("Average page duration from") and "over 1 change" in headline
    assert "the largest gain was Add index ix_work_items_area (" in headline
    assert portal_links(html) == []
    data = public(token, "journey.json").json()
    assert len(data["points"]) == 6
    assert "url" not in str(data.keys()) and "/runs/" not in str(data)
    # a journey link opens no run series, a run link no journey
    assert public(token, f"runs/{story['before'][0].code}/series.json").status_code == 404


def test_share_buttons_show_for_editors_only_and_the_form_opens(alice_client, plan, bob, story):
    run = story["before"][0]
    experiment = story["experiment"]
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert f"/projects/{plan.project.code}/shared-links/new/?kind=run&amp;run={run.code}" in page
    assert 'id="share-link"' in alice_client.get(experiment.get_absolute_url()).content.decode()
    journey = reverse("history:environment-journey", args=[plan.environment.code]) + f"?plan={plan.code}"
    assert 'id="share-link"' in alice_client.get(journey).content.decode()
    form = alice_client.get(reverse("sharing:new", args=[plan.project.code]) + f"?kind=run&run={run.code}")
    assert form.status_code == 200 and "Share: Run #1 · Smoke" in form.content.decode()
    # an unknown kind or a malformed code is a 404, not an error
    assert alice_client.get(reverse("sharing:new", args=[plan.project.code]) + "?kind=plan").status_code == 404
    assert alice_client.get(reverse("sharing:new", args=[plan.project.code]) + "?kind=run&run=x").status_code == 404

    bob_client = Client()
    bob_client.force_login(bob)
    assert 'id="share-link"' not in bob_client.get(run.get_absolute_url()).content.decode()


def test_the_shared_links_page_costs_a_fixed_number_of_queries(
    alice_client, plan, alice, django_assert_max_num_queries
):
    run = make_run(plan, 40)
    for _ in range(20):
        services.share_create(project=plan.project, kind="run", title="Run #1", user=alice, run=run)
    with django_assert_max_num_queries(8):
        response = alice_client.get(reverse("sharing:list", args=[plan.project.code]))
    assert response.content.decode().count("<tr data-link") == 20


def test_the_project_journey_shares_each_environments_story(alice_client, bob, story):
    # given: the project-level journey of the story's plan (one section per environment)
    experiment = story["experiment"]
    project, env, plan = experiment.project, experiment.environment, experiment.plan
    url = reverse("history:project-journey", args=[project.code]) + f"?plan={plan.code}"

    # when: alice follows its Share button and creates the link
    html = alice_client.get(url).content.decode()
    button = re.search(rf'id="share-link-{env.code}" href="([^"]+)"', html)
    assert button, "no Share button on the project journey"
    href = button.group(1).replace("&amp;", "&")
    assert alice_client.get(href).status_code == 200
    path, _, query = href.partition("?")
    hidden = dict(pair.split("=") for pair in query.split("&"))  # the form's hidden fields
    created = alice_client.post(path, {**hidden, "days": 7, "note": "for the steering committee"})

    # then: a journey link of that environment and plan, whose page tells the story
    assert created.status_code == 200
    link = ShareLink.objects.get()
    assert (link.kind, link.environment, link.plan) == ("journey", env, plan)
    token = re.search(r"/s/([A-Za-z0-9_-]{20,})/", created.content.decode()).group(1)
    headline = re.search(r'id="share-headline">(.*?)</p>', public(token).content.decode(), re.S).group(1)
    assert "the largest gain was Add index ix_work_items_area" in headline
    # a viewer reads the journey without the button
    bob_client = Client()
    bob_client.force_login(bob)
    page = bob_client.get(url)
    assert page.status_code == 200 and "share-link-" not in page.content.decode()
