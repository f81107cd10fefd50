"""Imports through the API (issue 18): result files become runs in the background; a HAR becomes a test case."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from portal.projects import services
from portal.projects.models import TestCase
from portal.runs.models import ResultImport, Run
from tests.portal.api.conftest import PERSONAS, UNAUTHENTICATED, session
from tests.portal.projects.test_har import har_bytes, login_journey

pytestmark = pytest.mark.django_db

WRITERS = ("owner", "editor")
JTL = (
    b"timeStamp,elapsed,label,responseCode,success,bytes,allThreads\n"
    b"1795543128000,120,Home,200,true,5000,2\n"
    b"1795543128500,80,Search,200,true,3000,2\n"
    b"1795543129200,40,Home,500,false,200,2\n"
)


def _status(name: str, ok: int) -> int:
    if name in WRITERS:
        return ok
    if name == "outsider":
        return 404
    if name in UNAUTHENTICATED:
        return 401
    return 403  # viewers, read and run tokens: an import writes to the history


@pytest.fixture
def tasks_at_commit(django_capture_on_commit_callbacks):
    from workers.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield lambda: django_capture_on_commit_callbacks(execute=True)
    app.conf.task_always_eager = before


def _upload(client, environment, content=JTL, name="results.jtl", **data):
    return client.post(
        f"/api/v1/environments/{environment.code}/result-imports/",
        {"file": SimpleUploadedFile(name, content), **data},
        format="multipart",
    )


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_upload_result_files(persona, request, environment):
    response = _upload(persona, environment)

    name = request.node.callspec.params["persona"]
    assert response.status_code == _status(name, 202), response.content
    assert ResultImport.objects.count() == (1 if name in WRITERS else 0)


def test_an_upload_is_imported_in_the_background_and_polled_to_its_run(alice, environment, tasks_at_commit):
    client = session(alice)

    # when: a write token uploads, and the import task runs after the commit
    with tasks_at_commit():
        response = _upload(client, environment)

    # then: 202 with the import to poll; polling finds it done, with its run
    assert response.status_code == 202 and response["Location"] == response.json()["url"]
    polled = client.get(response.json()["url"]).json()
    assert (polled["status"], polled["percent"], polled["bytes_read"]) == ("done", 100, len(JTL))
    run = client.get(polled["run_url"]).json()
    assert run["kind"] == "imported" and run["source"]["tool"] == "JMeter"
    assert run["source"]["file_name"] == "results.jtl" and run["status"] == "finished"
    assert Run.objects.get().summary["whole_run"]["hits"] == 3


def test_a_bad_file_fails_with_its_line_and_imports_nothing(alice, environment, tasks_at_commit):
    with tasks_at_commit():
        response = _upload(session(alice), environment, JTL + b"1795543130000,five,Home,200,true,1,2\n")
    polled = session(alice).get(response.json()["url"]).json()
    assert polled["status"] == "failed" and polled["error"].startswith("Line 5 is not a JMeter JTL line")
    assert polled["run"] is None and not Run.objects.exists()


def test_a_bad_format_or_plan_or_size_is_refused_at_once(alice, environment, settings):
    client = session(alice)
    assert _upload(client, environment, format="jtl").status_code == 400
    response = _upload(client, environment, plan="6f1c0d52-0000-4000-8000-000000000000")
    assert response.status_code == 400 and "No such plan" in response.content.decode()
    settings.PLIMSOLL_RESULT_UPLOAD_MAX_MB = 1
    response = _upload(client, environment, JTL + b" " * (1024 * 1024))
    assert response.status_code == 400 and "Over the 1 MB limit" in response.content.decode()
    assert not ResultImport.objects.exists()


def test_the_import_list_and_detail_hold_only_the_callers_teams(alice, charlie, environment):
    created = _upload(session(alice), environment).json()
    assert [i["code"] for i in session(alice).get("/api/v1/result-imports/").json()["results"]] == [created["code"]]
    assert session(charlie).get("/api/v1/result-imports/").json()["results"] == []
    assert session(charlie).get(created["url"]).status_code == 404


def test_a_write_token_uploads_and_a_run_token_cannot(environment, token_secret):
    from tests.portal.api.conftest import bearer

    assert _upload(bearer(token_secret("write")), environment).status_code == 202
    response = _upload(bearer(token_secret("run")), environment)
    assert response.status_code == 403 and "needs a write token" in response.content.decode()


def _har(client, project, content=None, **data):
    content = har_bytes(*login_journey()) if content is None else content
    return client.post(
        f"/api/v1/projects/{project.code}/har-import/",
        {"file": SimpleUploadedFile("login.har", content), **data},
        format="multipart",
    )


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_import_a_har(persona, request, project):
    response = _har(persona, project)
    name = request.node.callspec.params["persona"]
    assert response.status_code == _status(name, 201), response.content
    assert TestCase.objects.filter(name="login").count() == (1 if name in WRITERS else 0)


def test_a_har_becomes_a_test_case_with_its_correlation_and_no_password(alice, project):
    # when: a dry run, then the import
    dry = _har(session(alice), project, dry_run="true")
    response = _har(session(alice), project, name="Login journey")

    # then: the preview both times; the test case only the second
    assert dry.status_code == 200 and dry.json()["created"] is False and dry.json()["test_case"] is None
    body = response.json()
    assert response.status_code == 201 and body["created"] is True
    assert body["correlations"] == [
        {
            "name": "csrfmiddlewaretoken",
            "kind": body["correlations"][0]["kind"],
            "step": 1,
            "uses": [2],
            "accepted": True,
        }
    ]
    assert body["variables_needed"] == ["password"]
    test_case = TestCase.objects.get(code=body["test_case"])
    assert test_case.name == "Login journey" and body["test_case_url"].endswith(f"/test-cases/{test_case.code}/")
    post = test_case.steps.order_by("position")[1]
    assert "{{csrfmiddlewaretoken}}" in post.body and "s3cret" not in post.body


def test_a_rejected_correlation_and_bad_files_are_honoured(alice, project):
    rejected = _har(session(alice), project, reject=["csrfmiddlewaretoken"], dry_run="true").json()
    assert rejected["correlations"][0]["accepted"] is False
    response = _har(session(alice), project, content=b"not json")
    assert response.status_code == 400 and "file" in response.json().get("fields", response.json())
    assert not TestCase.objects.filter(name="login").exists()


def test_a_har_over_the_limit_is_refused_before_its_body_is_read(alice, project, settings):
    """Issue 30, item 4: the API read the whole upload before its size check (60 MB: 180 MB peak); the form did not.

    A body whose Content-Length is over the limit is refused before any of it is received (413), not even
    spooled to a temporary file; a file just over the limit, within the multipart overhead, is refused by
    its own size (400) without being read into memory.
    """
    import tracemalloc

    from rest_framework.test import APIRequestFactory, force_authenticate

    from portal.projects.api.har import ProjectHarImportViewSet

    settings.PLIMSOLL_HAR_MAX_MB = 3
    url = f"/api/v1/projects/{project.code}/har-import/"
    view = ProjectHarImportViewSet.as_view({"post": "create"})

    # given: a body that says it is 60 MB, of which the server would have to receive every byte to parse it
    claimed = APIRequestFactory().post(
        url, {"file": SimpleUploadedFile("big.har", b"{}")}, CONTENT_LENGTH=str(60 << 20)
    )
    force_authenticate(claimed, user=alice)

    # when / then: 413 naming the limit, and nothing read (reading past the two bytes sent would raise)
    response = view(claimed, code=str(project.code))
    assert response.status_code == 413 and response.data["code"] == "too_large"
    assert (
        response.data["detail"]
        == "The upload is 60.0 MB; the limit is 3 MB (PLIMSOLL_HAR_MAX_MB). Nothing was read or kept."
    )

    # given: a file just over the limit (the request built before memory is traced: a server gets it from a socket)
    upload = SimpleUploadedFile("big.har", b'{"log": {"entries": [' + b" " * (3 * 1024 * 1024 + 4096) + b"]}}")
    request = APIRequestFactory().post(url, {"file": upload})
    force_authenticate(request, user=alice)

    # when
    tracemalloc.start()
    try:
        response = view(request, code=str(project.code))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    # then: refused with the limit named, and the file never read into memory (it waits in a temporary file)
    assert response.status_code == 400
    assert response.data["fields"]["file"] == [services.har_too_large(upload.size)]
    assert "the limit is 3 MB" in response.data["fields"]["file"][0]
    assert peak < 2 * 1024 * 1024, f"peak {peak / 1024 / 1024:.1f} MB"
    assert not TestCase.objects.exists()


def test_a_result_file_over_the_limit_is_refused_before_its_body_is_read(alice, environment, settings):
    from rest_framework.test import APIRequestFactory, force_authenticate

    from portal.runs.api.imports import EnvironmentResultImportViewSet

    settings.PLIMSOLL_RESULT_UPLOAD_MAX_MB = 1
    request = APIRequestFactory().post(
        f"/api/v1/environments/{environment.code}/result-imports/",
        {"file": SimpleUploadedFile("results.jtl", JTL)},
        CONTENT_LENGTH=str(3 << 30),
    )
    force_authenticate(request, user=alice)
    response = EnvironmentResultImportViewSet.as_view({"post": "create"})(request, code=str(environment.code))
    assert response.status_code == 413
    assert response.data["detail"].startswith("The upload is 3,072.0 MB; the limit is 1 MB")
    assert not ResultImport.objects.exists()
