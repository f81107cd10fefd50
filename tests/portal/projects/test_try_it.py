"""*Try it* on a test case: one user, one iteration through the engine, every request and response shown."""

import time

import pytest
from django.urls import reverse

from portal.projects import tryit
from portal.projects.models import Environment, Step, TestCase
from tests.processes import DemoTarget

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    target = DemoTarget(tmp_path_factory.mktemp("try-demo"), items=200)
    yield target
    target.close()


@pytest.fixture
def login_case(project):
    """The demo's authenticated path: the CSRF token extracted from the form and posted back."""
    tc = TestCase.objects.create(project=project, name="Log in")
    Step.objects.create(
        test_case=tc,
        position=0,
        name="Login form",
        path="/login",
        think_time=5,
        extract=[{"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"}],
    )
    Step.objects.create(
        test_case=tc,
        position=1,
        name="Home",
        path="/",
        think_time=5,
        text_present="Plimsoll demo",
    )
    return tc


def test_one_iteration_shows_every_request_and_response(project, login_case, demo):
    # given
    demo.reset()
    env = Environment.objects.create(project=project, name="Demo", base_url=demo.base_url)
    # when
    started = time.monotonic()
    result = tryit.test_case_try(test_case=login_case, environment=env)
    took = time.monotonic() - started
    # then: one iteration of two pages, no think time (5 s each), answered by the target
    assert result.completed and result.errors == {} and result.refused == ""
    assert [(e.method, e.url) for e in result.exchanges] == [
        ("GET", f"{demo.base_url}/login"),
        ("GET", f"{demo.base_url}/"),
    ]
    assert [e.status for e in result.exchanges] == [200, 200]
    assert "csrfmiddlewaretoken" in result.exchanges[0].response_body
    assert "Plimsoll demo" in result.exchanges[1].response_body
    assert demo.counters()["requests"] == 2  # one iteration, not a second
    assert took < 5


def test_a_failed_check_is_named_and_the_response_still_shown(project, login_case, demo):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo.base_url)
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


def test_the_page_tries_it_and_shows_the_exchanges(alice_client, project, login_case, demo):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo.base_url)
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
        response = alice_client.post(url, {"environment": value}, **HTMX)
        assert response.status_code == 400 and "Choose one of this project" in response.content.decode()


def test_a_viewer_cannot_try(bob_client, login_case, environment):
    url = reverse("projects:testcase-try", args=[login_case.code])
    assert bob_client.post(url, {"environment": str(environment.code)}).status_code == 403


def test_an_outsider_gets_404(charlie_client, login_case, environment):
    url = reverse("projects:testcase-try", args=[login_case.code])
    assert charlie_client.post(url, {"environment": str(environment.code)}).status_code == 404
