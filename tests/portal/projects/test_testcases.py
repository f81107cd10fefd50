import pytest
from django.urls import reverse
from django.utils.html import escape

from portal.projects.models import Step, TestCase

from .data import HTMX, step_data

pytestmark = pytest.mark.django_db

TOPBAR = '<header class="topbar">'


def _names(test_case):
    return list(test_case.steps.order_by("position").values_list("name", "position"))


def test_create_test_case(alice_client, project):
    # when
    response = alice_client.post(reverse("projects:testcase-new", args=[project.code]), {"name": "Search"})
    # then
    test_case = TestCase.objects.get(name="Search")
    assert response.status_code == 302
    assert response.url == test_case.get_absolute_url()
    assert test_case.project == project


def test_test_case_name_taken(alice_client, project, test_case):
    # when
    response = alice_client.post(reverse("projects:testcase-new", args=[project.code]), {"name": "BROWSE"})
    # then
    assert response.status_code == 200
    assert escape("This project already has a test case called “BROWSE”.") in response.content.decode()
    assert project.test_cases.count() == 1


def test_edit_test_case_keeps_its_own_name(alice_client, test_case):
    # when
    response = alice_client.post(
        reverse("projects:testcase-edit", args=[test_case.code]), {"name": "Browse", "description": "Anonymous"}
    )
    # then
    assert response.status_code == 302
    test_case.refresh_from_db()
    assert test_case.description == "Anonymous"


def test_detail_lists_steps_in_order(alice_client, test_case, plan):
    # when
    page = alice_client.get(reverse("projects:testcase", args=[test_case.code])).content.decode()
    # then
    assert page.index("Home") < page.index("Articles")
    assert '<span class="method">GET</span> <code>/articles</code>' in page
    assert "must contain “Demo”" in page
    assert "think 0.5 s" in page
    assert plan.get_absolute_url() in page
    assert reverse("projects:step-new", args=[test_case.code]) in page


def test_viewer_sees_steps_but_no_step_buttons(bob_client, test_case, step):
    # when
    page = bob_client.get(reverse("projects:testcase", args=[test_case.code])).content.decode()
    # then
    assert "Articles" in page
    assert reverse("projects:step-new", args=[test_case.code]) not in page
    assert reverse("projects:step-edit", args=[step.code]) not in page


def test_htmx_get_of_the_detail_is_the_steps_fragment(alice_client, test_case):
    # when
    response = alice_client.get(reverse("projects:testcase", args=[test_case.code]), **HTMX)
    # then: only the fragment, and caches keep it apart from the page
    page = response.content.decode()
    assert TOPBAR not in page
    assert page.strip().startswith('<section id="steps">')
    assert "HX-Request" in response["Vary"]


def test_add_step_form_is_a_fragment_for_htmx(alice_client, test_case):
    # when
    response = alice_client.get(reverse("projects:step-new", args=[test_case.code]), **HTMX)
    # then
    page = response.content.decode()
    assert TOPBAR not in page
    assert 'class="step-form card"' in page
    assert 'name="path"' in page


def test_add_step_form_without_javascript_is_the_whole_page(alice_client, test_case):
    # when
    page = alice_client.get(reverse("projects:step-new", args=[test_case.code])).content.decode()
    # then
    assert TOPBAR in page
    assert 'class="step-form card"' in page


def test_add_step_with_htmx_returns_the_list(alice_client, test_case):
    # when
    response = alice_client.post(
        reverse("projects:step-new", args=[test_case.code]),
        step_data(headers_text="Accept: text/html\nX-Trace:  on ", expect_status="200"),
        **HTMX,
    )
    # then
    page = response.content.decode()
    assert response.status_code == 200
    assert TOPBAR not in page
    assert page.strip().startswith('<section id="steps">')
    assert "/search?q=report" in page
    step = test_case.steps.get(name="Search")
    assert step.position == 2
    assert step.headers == {"Accept": "text/html", "X-Trace": "on"}
    assert step.expect_status == 200


def test_add_step_without_javascript_redirects_back(alice_client, test_case):
    # when
    response = alice_client.post(reverse("projects:step-new", args=[test_case.code]), step_data())
    # then
    assert response.status_code == 302
    assert response.url == test_case.get_absolute_url() + "#steps"
    assert _names(test_case)[-1] == ("Search", 2)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"path": "search"}, "Start the path with /, it is relative to the environment's base URL"),
        ({"headers_text": "Accept: text/html\nno colon here"}, "line 2: expected Name: value"),
        ({"headers_text": "Bad Name: x"}, "line 1: “Bad Name” is not a valid header name"),
        ({"headers_text": "Accept: a\naccept: b"}, "line 2: header accept appears twice"),
        ({"think_time": "-1"}, "Ensure this value is greater than or equal to 0."),
        ({"expect_status": "99"}, "Ensure this value is greater than or equal to 100."),
    ],
)
def test_bad_step_is_shown_again_with_the_message(alice_client, test_case, fields, message):
    # when
    response = alice_client.post(reverse("projects:step-new", args=[test_case.code]), step_data(**fields))
    # then
    assert response.status_code == 200
    assert escape(message) in response.content.decode()
    assert test_case.steps.count() == 2


def test_bad_step_with_htmx_replaces_only_its_form(alice_client, test_case):
    # when
    response = alice_client.post(reverse("projects:step-new", args=[test_case.code]), step_data(path="search"), **HTMX)
    # then: htmx 2 swaps only 2xx responses, so errors come back as 200 with a new target
    page = response.content.decode()
    assert response.status_code == 200
    assert response["HX-Retarget"] == "#step-new-slot"
    assert response["HX-Reswap"] == "innerHTML"
    assert TOPBAR not in page
    assert escape("Start the path with /") in page
    assert test_case.steps.count() == 2


def test_edit_step_form_in_place(alice_client, step):
    # given
    step.headers = {"Accept": "text/html"}
    step.save()
    # when
    page = alice_client.get(reverse("projects:step-edit", args=[step.code]), **HTMX).content.decode()
    # then
    assert TOPBAR not in page
    assert "Accept: text/html" in page
    assert reverse("projects:step-edit", args=[step.code]) in page


def test_edit_step_without_javascript_shows_the_form_in_the_list(alice_client, step):
    # when
    page = alice_client.get(reverse("projects:step-edit", args=[step.code])).content.decode()
    # then
    assert TOPBAR in page
    assert f'id="id_step_{step.code}_path"' in page
    assert "Articles" in page


def test_edit_step(alice_client, step, test_case):
    # when
    response = alice_client.post(
        reverse("projects:step-edit", args=[step.code]),
        step_data(name="Front page", method="POST", path="/", body="a=1", text_absent="Error"),
        **HTMX,
    )
    # then
    assert response.status_code == 200
    assert "Front page" in response.content.decode()
    step.refresh_from_db()
    assert (step.name, step.method, step.body, step.text_absent, step.position) == (
        "Front page",
        "POST",
        "a=1",
        "Error",
        0,
    )


def test_bad_edit_keeps_the_step(alice_client, step):
    # when
    response = alice_client.post(
        reverse("projects:step-edit", args=[step.code]), step_data(name="Changed", path="nope"), **HTMX
    )
    # then
    assert response["HX-Retarget"] == f"#step-{step.code}"
    step.refresh_from_db()
    assert (step.name, step.path) == ("Home", "/")


def test_delete_step_renumbers_the_rest(alice_client, test_case, step):
    # given
    Step.objects.create(test_case=test_case, position=2, name="Search", path="/search")
    # when
    response = alice_client.post(reverse("projects:step-delete", args=[step.code]), **HTMX)
    # then
    assert response.status_code == 200
    assert TOPBAR not in response.content.decode()
    assert _names(test_case) == [("Articles", 0), ("Search", 1)]


def test_delete_step_asks_first_without_javascript(alice_client, step):
    # when
    response = alice_client.get(reverse("projects:step-delete", args=[step.code]))
    # then
    assert "Delete the step" in response.content.decode()
    assert Step.objects.filter(pk=step.pk).exists()


@pytest.mark.parametrize(
    ("name", "direction", "order"),
    [
        ("Search", "up", ["Home", "Search", "Articles"]),
        ("Home", "down", ["Articles", "Home", "Search"]),
        ("Home", "up", ["Home", "Articles", "Search"]),
        ("Search", "down", ["Home", "Articles", "Search"]),
    ],
)
def test_move_step(alice_client, test_case, name, direction, order):
    # given: positions with gaps, as older data may have
    Step.objects.create(test_case=test_case, position=7, name="Search", path="/search")
    step = test_case.steps.get(name=name)
    # when
    response = alice_client.post(reverse("projects:step-move", args=[step.code, direction]), **HTMX)
    # then
    assert response.status_code == 200
    assert TOPBAR not in response.content.decode()
    assert _names(test_case) == [(n, i) for i, n in enumerate(order)]


def test_move_step_without_javascript_redirects_back(alice_client, test_case, step):
    # when
    response = alice_client.post(reverse("projects:step-move", args=[step.code, "down"]))
    # then
    assert response.status_code == 302
    assert _names(test_case) == [("Articles", 0), ("Home", 1)]


def test_move_step_sideways_is_404(alice_client, step):
    # when
    response = alice_client.post(reverse("projects:step-move", args=[step.code, "left"]))
    # then
    assert response.status_code == 404


def test_move_step_needs_post(alice_client, step):
    # when
    response = alice_client.get(reverse("projects:step-move", args=[step.code, "up"]))
    # then
    assert response.status_code == 405


def test_delete_test_case(alice_client, project):
    # given
    test_case = TestCase.objects.create(project=project, name="Unused")
    Step.objects.create(test_case=test_case, name="Home", path="/")
    # when
    response = alice_client.post(reverse("projects:testcase-delete", args=[test_case.code]))
    # then
    assert response.status_code == 302
    assert response.url == project.get_absolute_url()
    assert not TestCase.objects.filter(pk=test_case.pk).exists()
    assert not Step.objects.filter(test_case_id=test_case.pk).exists()


def test_delete_test_case_used_by_a_plan_is_refused(alice_client, test_case, plan):
    # given
    confirm = alice_client.get(reverse("projects:testcase-delete", args=[test_case.code])).content.decode()
    # when
    response = alice_client.post(reverse("projects:testcase-delete", args=[test_case.code]), follow=True)
    # then
    assert escape("It is in the mix of the plans “Smoke”") in confirm
    assert escape("Not deleted: “Browse” is in the mix of the plans “Smoke”") in response.content.decode()
    assert TestCase.objects.filter(pk=test_case.pk).exists()


def test_a_name_taken_by_a_concurrent_request_is_a_form_error(alice_client, project, test_case, monkeypatch):
    # given: the name check passes, as when another request saves the same name just after it
    from portal.projects.forms import TestCaseForm

    monkeypatch.setattr(TestCaseForm, "clean_name", lambda form: form.cleaned_data["name"])
    # when
    response = alice_client.post(reverse("projects:testcase-new", args=[project.code]), {"name": "Browse"})
    # then: the database constraint refuses it, and the page says so instead of failing
    assert response.status_code == 200
    assert "That name was taken a moment ago; choose another." in response.content.decode()
    assert project.test_cases.count() == 1
