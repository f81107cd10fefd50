"""A panel's request (HTMX) without a session: HX-Redirect to the login page, whose next is the page."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_an_htmx_request_without_a_session_is_sent_to_the_login_page_of_the_page_it_came_from(client, test_case):
    page = test_case.get_absolute_url()
    response = client.post(
        reverse("projects:testcase-try", args=[test_case.code]),
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL=f"http://testserver{page}",
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/login/?next={page.replace('/', '%2F')}"


def test_a_current_url_of_another_origin_is_not_followed(client, test_case):
    response = client.post(
        reverse("projects:testcase-try", args=[test_case.code]),
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="https://elsewhere.example/phish/",
    )
    assert response["HX-Redirect"] == "/login/?next=%2F"


def test_a_plain_request_keeps_django_s_redirect(client, test_case):
    url = reverse("projects:testcase-try", args=[test_case.code])
    response = client.post(url)
    assert response.status_code == 302 and response["Location"] == f"/login/?next={url}"
    assert "HX-Redirect" not in response


def test_an_htmx_request_with_a_session_is_answered_as_before(client, alice, test_case):
    client.force_login(alice)
    response = client.post(reverse("projects:testcase-try", args=[test_case.code]), HTTP_HX_REQUEST="true")
    assert "HX-Redirect" not in response and response.status_code == 400  # no environment chosen
