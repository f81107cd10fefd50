"""Fixtures shared by Try it's page tests and its API tests (a pytest plugin: tests/conftest.py names it)."""

import pytest

from tests.processes import DemoTarget


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
