"""Issue 28 item 16: a deeply nested JSON body is a 400 in the API's error shape, not an HTML 500."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from portal.projects.models import Plan, TestCase
from tests.portal.api.test_imports_api import tasks_at_commit  # noqa: F401 (a fixture)

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


# JSON inside the body's strings and in uploads is parsed where it is read: the same guard applies there.


@pytest.mark.parametrize("body", [DEEP_OBJECT, DEEP_ARRAY], ids=["object-1200", "array-5000"])
def test_a_step_whose_json_body_nests_too_deep_is_400_on_its_field(alice, project, body):
    client = APIClient(raise_request_exception=False)
    client.force_login(alice)
    step = {"name": "Post", "method": "POST", "path": "/items", "body_type": "json", "body": body}
    document = {"project": str(project.code), "name": "Deep", "steps": [step]}

    response = client.post("/api/v1/test-cases/", document, format="json")

    assert response.status_code == 400, response.content[:200]
    error = response.json()
    assert error["code"] == "invalid"
    assert "nested too deep" in str(error["fields"]["steps"][0]["body"])
    assert not TestCase.objects.exists()


def test_a_step_added_to_a_test_case_with_a_too_deep_json_body_is_400(alice, test_case):
    client = APIClient(raise_request_exception=False)
    client.force_login(alice)
    step = {"name": "Post", "method": "POST", "path": "/items", "body_type": "json", "body": DEEP_ARRAY}

    response = client.post(f"/api/v1/test-cases/{test_case.code}/steps/", step, format="json")

    assert response.status_code == 400, response.content[:200]
    assert "nested too deep" in str(response.json()["fields"]["body"])


def test_a_tuning_change_whose_json_hook_body_nests_too_deep_is_400(alice, environment):
    client = APIClient(raise_request_exception=False)
    client.force_login(alice)
    document = {
        "environment": str(environment.code),
        "title": "Index the custom field",
        "hook_url": "http://127.0.0.1:8001/admin/config",
        "hook_body": DEEP_OBJECT,
        "configuration": [{"key": "search.index", "value": "on"}],
        "apply": False,
    }

    response = client.post("/api/v1/tuning-changes/", document, format="json")

    assert response.status_code == 400, response.content[:200]
    assert "nested too deep" in str(response.json()["fields"]["hook_body"])


def test_a_result_file_whose_first_line_nests_too_deep_fails_as_unknown(alice, environment, tasks_at_commit):  # noqa: F811
    """Result files are read in the background: the import fails with its reason, the task does not crash."""
    client = APIClient()
    client.force_login(alice)
    upload = SimpleUploadedFile("results.json", (DEEP_ARRAY + "\n").encode())

    with tasks_at_commit():
        response = client.post(
            f"/api/v1/environments/{environment.code}/result-imports/", {"file": upload}, format="multipart"
        )

    polled = client.get(response.json()["url"]).json()
    # the refusal of a file it does not recognise, not "The import failed (RecursionError)"
    assert polled["status"] == "failed" and "RecursionError" not in polled["error"], polled
    assert polled["error"].startswith("This is not a result file Plimsoll reads."), polled["error"]
    assert polled["run"] is None
