"""*Try it* on a test case: one user, one iteration through the engine, every request and response shown."""

import threading
import time
import uuid

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from portal import limits
from portal.projects import tryit
from portal.projects.models import Environment, Project, Step, TestCase
from tests.portal.tryit_fixtures import wait_for_two_tries
from tests.processes import free_port

pytestmark = pytest.mark.django_db


def test_one_iteration_shows_every_request_and_response(project, login_case, try_demo):
    # given
    try_demo.reset()
    env = Environment.objects.create(project=project, name="Demo", base_url=try_demo.base_url)
    # when
    started = time.monotonic()
    result = tryit.test_case_try(test_case=login_case, environment=env)
    took = time.monotonic() - started
    # then: one iteration of two pages, no think time (5 s each), answered by the target
    assert result.completed and result.errors == {} and result.refused == ""
    assert [(e.method, e.url) for e in result.exchanges] == [
        ("GET", f"{try_demo.base_url}/login"),
        ("GET", f"{try_demo.base_url}/"),
    ]
    assert [e.status for e in result.exchanges] == [200, 200]
    assert "csrfmiddlewaretoken" in result.exchanges[0].response_body
    assert "Plimsoll demo" in result.exchanges[1].response_body
    assert try_demo.counters()["requests"] == 2  # one iteration, not a second
    assert took < 5


def test_a_failed_check_is_named_and_the_response_still_shown(project, login_case, try_demo):
    env = Environment.objects.create(project=project, name="Demo", base_url=try_demo.base_url)
    Step.objects.filter(test_case=login_case, name="Home").update(text_present="Not on the page")
    result = tryit.test_case_try(test_case=login_case, environment=env)
    assert not result.completed
    assert "Not on the page" in next(iter(result.errors.values()))
    assert result.exchanges[-1].status == 200


def test_a_target_outside_the_allowlist_gets_nothing_sent(project, login_case, settings):
    settings.PLIMSOLL_ALLOWED_TARGETS = "127.0.0.0/8"
    env = Environment.objects.create(project=project, name="Elsewhere", base_url="http://10.1.2.3:8080")
    result = tryit.test_case_try(test_case=login_case, environment=env)
    assert result.refused and result.exchanges == [] and not result.completed


def test_the_bound_holds_against_a_target_that_never_answers(project, login_case):
    import socket

    # a listener that accepts and never answers
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        env = Environment.objects.create(
            project=project, name="Silent", base_url=f"http://127.0.0.1:{silent.getsockname()[1]}"
        )
        started = time.monotonic()
        result = tryit.test_case_try(test_case=login_case, environment=env)
        took = time.monotonic() - started
    finally:
        silent.close()
    assert not result.completed
    assert result.exchanges[0].error  # the request's timeout, shown
    assert took <= tryit.BOUND_S + 3


HTMX = {"HTTP_HX_REQUEST": "true"}


def test_the_page_tries_it_and_shows_the_exchanges(alice_client, project, login_case, try_demo):
    env = Environment.objects.create(project=project, name="Demo", base_url=try_demo.base_url)
    url = reverse("projects:testcase-try", args=[login_case.code])
    # the form is on the test case's page
    assert url in alice_client.get(login_case.get_absolute_url()).content.decode()
    # when
    response = alice_client.post(url, {"environment": str(env.code)}, **HTMX)
    # then: the section alone (HTMX), with both exchanges
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert 'data-outcome="passed"' in html
    assert html.count('class="card exchange"') == 2 and "/login" in html and "csrfmiddlewaretoken" in html


def test_try_it_needs_an_environment_of_the_project(alice_client, project, login_case, charlie):
    other = Environment.objects.create(
        project=type(project).objects.create(team=charlie.teams.get(), name="Theirs"),
        name="X",
        base_url="http://127.0.0.1:9",
    )
    url = reverse("projects:testcase-try", args=[login_case.code])
    for value in (str(other.code), "not-a-code", ""):
        # 400, in the panel (the fragment alone, which base.html's responseHandling swaps) and on the whole page
        response = alice_client.post(url, {"environment": value}, **HTMX)
        html = response.content.decode()
        assert response.status_code == 400 and 'id="try-error"' in html and "<html" not in html
        assert "Choose one of this project" in response.content.decode()
        response = alice_client.post(url, {"environment": value})
        assert response.status_code == 400 and "Choose one of this project" in response.content.decode()


def test_a_viewer_cannot_try(bob_client, login_case, environment):
    url = reverse("projects:testcase-try", args=[login_case.code])
    assert bob_client.post(url, {"environment": str(environment.code)}).status_code == 403


def test_an_outsider_gets_404(charlie_client, login_case, environment):
    url = reverse("projects:testcase-try", args=[login_case.code])
    assert charlie_client.post(url, {"environment": str(environment.code)}).status_code == 404


@pytest.fixture
def own_cache(settings):
    """The tests' own counts in the shared cache (a fresh key prefix): no slot left by another test."""
    settings.CACHES = {"default": {**settings.CACHES["default"], "KEY_PREFIX": f"tries-{uuid.uuid4().hex[:8]}"}}


def _try_in_thread(user, url: str, env_code: str, answers: list, **headers) -> threading.Thread:
    """A real concurrent request through the whole Django stack, as another browser of ``user`` would send it."""

    def run():
        try:
            client = Client()
            client.force_login(user)
            answers.append(client.post(url, {"environment": env_code}, **headers))
        finally:
            connection.close()  # this thread's own database connection

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _slow_case(project) -> TestCase:
    tc = TestCase.objects.create(project=project, name="Slow home")
    Step.objects.create(test_case=tc, position=0, name="Home", path="/", text_present="Plimsoll demo")
    return tc


@pytest.mark.django_db(transaction=True)  # the threads' requests read what this test wrote
def test_a_third_concurrent_try_of_one_account_is_refused_and_sends_nothing(
    own_cache, settings, alice, charlie, project, try_demo
):
    # given: a target that holds each request 6 s, and alice's two tries on it under way (two browsers);
    # 6 s, not 3: on CI's loaded parallel pass one thread's try reached the target so late that the
    # other's had ended (the two were never at the target together within 10 s)
    settings.PLIMSOLL_TRIES_PER_USER = 2
    try_demo.set_knobs(latency_ms=6000)
    try_demo.reset()
    try:
        tc = _slow_case(project)
        env = Environment.objects.create(project=project, name="Demo", base_url=try_demo.base_url)
        url = reverse("projects:testcase-try", args=[tc.code])
        held: list = []
        threads = [_try_in_thread(alice, url, str(env.code), held, **HTMX) for _ in range(2)]
        wait_for_two_tries(try_demo, held)

        # when: alice tries a third time, in the panel (HTMX) and as the page without JavaScript
        third = Client()
        third.force_login(alice)
        in_panel = third.post(url, {"environment": str(env.code)}, **HTMX)
        whole_page = third.post(url, {"environment": str(env.code)})

        # then: both refused at once with the reason, in the Try it panel, and nothing sent
        html = in_panel.content.decode()
        assert in_panel.status_code == 429 and "<html" not in html and 'id="try-error"' in html
        assert in_panel["Retry-After"] == str(tryit.RETRY_AFTER_S)
        assert "You already have 2 tries running" in html and "data-outcome" not in html
        assert whole_page.status_code == 429 and whole_page["Retry-After"] == str(tryit.RETRY_AFTER_S)
        assert "You already have 2 tries running" in whole_page.content.decode()
        assert try_demo.counters()["in_flight"] == 2

        # and another account is not held back by alice's tries
        theirs = Project.objects.create(team=charlie.teams.get(), name="Theirs")
        their_tc = _slow_case(theirs)
        their_env = Environment.objects.create(project=theirs, name="Demo", base_url=try_demo.base_url)
        charlie_client = Client()
        charlie_client.force_login(charlie)
        response = charlie_client.post(
            reverse("projects:testcase-try", args=[their_tc.code]), {"environment": str(their_env.code)}, **HTMX
        )
        assert response.status_code == 200 and 'data-outcome="passed"' in response.content.decode()

        for thread in threads:
            thread.join(timeout=tryit.BOUND_S + 5)
        assert [r.status_code for r in held] == [200, 200]
        assert all('data-outcome="passed"' in r.content.decode() for r in held)
        # the target served alice's two tries and charlie's one: nothing of the refused ones
        assert try_demo.counters()["requests"] == 3

        # and once alice's tries ended, her slots are back
        try_demo.set_knobs(latency_ms=0)
        again = [third.post(url, {"environment": str(env.code)}, **HTMX) for _ in range(3)]
        assert all('data-outcome="passed"' in r.content.decode() for r in again)
        assert try_demo.counters()["requests"] == 6
    finally:
        try_demo.set_knobs(latency_ms=0)


def test_a_failing_cache_refuses_the_try_and_keeps_no_slot(own_cache, settings, alice_client, login_case, try_demo):
    # given: the shared cache is down
    live = settings.CACHES
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        }
    }
    try_demo.reset()
    env = Environment.objects.create(project=login_case.project, name="Demo", base_url=try_demo.base_url)
    url = reverse("projects:testcase-try", args=[login_case.code])
    # when: tries are asked for
    refused = [alice_client.post(url, {"environment": str(env.code)}, **HTMX) for _ in range(3)]
    # then: each is refused, nothing sent (no thread held without a count) ...
    assert all('id="try-error"' in r.content.decode() for r in refused)
    assert try_demo.counters()["requests"] == 0
    # ... and once the cache is back, the account's tries run
    settings.CACHES = live
    response = alice_client.post(url, {"environment": str(env.code)}, **HTMX)
    assert 'data-outcome="passed"' in response.content.decode()


def test_a_slot_comes_back_when_the_try_fails(own_cache, settings, alice):
    settings.PLIMSOLL_TRIES_PER_USER = 2
    for _ in range(3):  # more failures than the cap: each gave its slot back
        with pytest.raises(RuntimeError), tryit.held(user_id=alice.pk):
            raise RuntimeError("the try broke")
    with (
        tryit.held(user_id=alice.pk),
        tryit.held(user_id=alice.pk),
        pytest.raises(limits.TooMany, match="You already have 2 tries running"),
        tryit.held(user_id=alice.pk),
    ):
        pass
