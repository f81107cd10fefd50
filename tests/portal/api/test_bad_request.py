"""A request Django refuses before any view answers in the API's JSON shape under /api/ (handler400)."""

import pytest

pytestmark = pytest.mark.django_db


def test_an_empty_host_header_gets_the_api_s_json_400(client):
    # schemathesis sent "Host:" (empty) to POST /api/v1/plans/{code}/runs/ and got Django's HTML page
    response = client.post("/api/v1/plans/x/runs/", {}, HTTP_HOST="")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "bad_request" and response.json()["status"] == 400


def test_a_foreign_host_header_gets_the_api_s_json_400(client):
    response = client.get("/api/v1/plans/", HTTP_HOST="evil.example")
    assert response.status_code == 400 and response.json()["code"] == "bad_request"


def test_the_site_s_pages_keep_django_s_400_page(client):
    response = client.get("/login/", HTTP_HOST="evil.example")
    assert response.status_code == 400 and response["Content-Type"].startswith("text/html")
