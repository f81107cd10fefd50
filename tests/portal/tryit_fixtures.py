"""Fixtures shared by Try it's page tests and its API tests (a pytest plugin: tests/conftest.py names it)."""

import pytest

from tests.processes import DemoTarget, wait_until


@pytest.fixture(scope="module")
def try_demo(tmp_path_factory):
    """A demo target of its own for the module (200 work items: Try it reads one page of each kind)."""
    target = DemoTarget(tmp_path_factory.mktemp("try-demo"), items=200)
    yield target
    target.close()


@pytest.fixture
def login_case(project):
    """The demo's authenticated path: the CSRF token extracted from the form and posted back."""
    from portal.projects.models import Step, TestCase  # a plugin loads before Django's apps

    tc = TestCase.objects.create(project=project, name="Log in")
    Step.objects.create(
        test_case=tc,
        position=0,
        name="Login form",
        path="/login",
        think_time=5,
        extract=[{"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"}],
    )
    Step.objects.create(test_case=tc, position=1, name="Home", path="/", think_time=5, text_present="Plimsoll demo")
    return tc


def wait_for_two_tries(try_demo, held: list) -> None:
    """Until the user's two tries (threads filling ``held`` with their answers) are both at the target; if they never
    are, say what the tries were answered meanwhile and what the target counted."""
    try:
        wait_until(lambda: try_demo.counters()["in_flight"] == 2, timeout=20, what="alice's two tries at the target")
    except TimeoutError as exc:
        answered = [(r.status_code, r.content[:300]) for r in held]
        raise AssertionError(f"{exc}: answered {answered}, target {try_demo.counters()}") from exc
