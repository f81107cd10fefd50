"""Issue 28 item 16: a deeply nested JSON body is a 400 in the API's error shape, not an HTML 500."""

import pytest
from rest_framework.test import APIClient

from portal.projects.models import Plan, TestCase

pytestmark = pytest.mark.django_db

DEEP_OBJECT = '{"a":' * 1200 + "1" + "}" * 1200
DEEP_ARRAY = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("path", ["/api/v1/plans/", "/api/v1/test-cases/"])
@pytest.mark.parametrize("body", [DEEP_OBJECT, DEEP_ARRAY], ids=["object-1200", "array-5000"])
def test_a_deeply_nested_body_is_400_in_the_error_shape(alice, project, path, body):
    client = APIClient(raise_request_exception=False)  # a crash answers 500 here, as it would in production
    client.force_login(alice)

    response = client.post(path, body, content_type="application/json")

    assert response.status_code == 400, response.content[:200]
    assert response["Content-Type"].startswith("application/json")
    error = response.json()
    assert error["status"] == 400
    assert error["code"] == "parse_error"
    assert "nested" in error["detail"]
    assert not Plan.objects.exists() and not TestCase.objects.exists()


def test_a_modestly_nested_body_still_reaches_validation(alice, project):
    """The limit is on nesting the parser cannot follow, not on ordinary documents."""
    client = APIClient(raise_request_exception=False)
    client.force_login(alice)
    body = '{"name": "x", "project": "' + str(project.code) + '", "steps": ' + "[" * 50 + "]" * 50 + "}"

    response = client.post("/api/v1/test-cases/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
