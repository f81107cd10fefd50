"""A large HAR through the API (issue 30, item 4): 202, analysed by har_analysis_task, read back by polling.

The small recording's synchronous answer (201/200) is tested in test_imports_api.py.
"""

import datetime

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from portal.projects import har, services
from portal.projects.models import HarImport, TestCase
from tests.portal.api.conftest import PERSONAS, session
from tests.portal.api.test_imports_api import _status
from tests.portal.projects.test_har import entry, har_bytes, login_journey
from workers.tasks import har_analysis_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    return tmp_path


def uploads(var_dir) -> list:
    folder = var_dir / "har-uploads"
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def worker(settings, monkeypatch, var_dir):
    """Every HAR counts as large, and the web process may not analyse one (har.analyze fails there);
    ``worker()`` runs the analysis tasks queued so far, as the Celery worker would."""
    settings.PLIMSOLL_HAR_INLINE_MB = 0
    queued = []
    monkeypatch.setattr("portal.common.task", lambda name: type("T", (), {"delay": lambda *a: queued.append(a)}))
    monkeypatch.setattr(services.transaction, "on_commit", lambda enqueue: enqueue())  # the test's transaction

    def refuse(*args, **kwargs):
        raise AssertionError("a large HAR was analysed in the web request")

    real = har.analyze
    monkeypatch.setattr(har, "analyze", refuse)

    def run():
        monkeypatch.setattr(har, "analyze", real)
        try:
            while queued:
                har_analysis_task(*queued.pop(0))
        finally:
            monkeypatch.setattr(har, "analyze", refuse)

    run.queued = queued
    return run


def _har(client, project, content=None, **data):
    content = har_bytes(*login_journey()) if content is None else content
    return client.post(
        f"/api/v1/projects/{project.code}/har-import/",
        {"file": SimpleUploadedFile("login.har", content), **data},
        format="multipart",
    )


def test_a_large_har_is_analysed_by_the_task_and_its_test_case_read_back(alice, project, var_dir, worker):
    # when: a recording over PLIMSOLL_HAR_INLINE_MB is imported
    response = _har(session(alice), project, name="Login journey")

    # then: 202 with the status to poll; nothing analysed or created yet, the recording waits on disk
    assert response.status_code == 202, response.content
    queued = response.json()
    assert response["Location"] == queued["url"] and queued["url"].endswith(f"/api/v1/har-imports/{queued['code']}/")
    assert queued["status"] == "queued" and queued["preview"] is None and queued["created"] is False
    assert session(alice).get(queued["url"]).json()["status"] == "queued"
    assert not TestCase.objects.exists() and len(uploads(var_dir)) == 2  # the recording and its state

    # when: the worker has run the task
    worker()
    done = session(alice).get(queued["url"]).json()

    # then: the test case, with the correlation and no password; the preview; nothing of the recording left
    assert done["status"] == "done" and done["error"] == "" and done["created"] is True
    test_case = TestCase.objects.get(code=done["test_case"])
    assert test_case.name == "Login journey" and done["test_case_url"].endswith(f"/test-cases/{test_case.code}/")
    post = test_case.steps.order_by("position")[1]
    assert "{{csrfmiddlewaretoken}}" in post.body and "s3cret" not in post.body
    assert [c["name"] for c in done["preview"]["correlations"]] == ["csrfmiddlewaretoken"]
    assert done["preview"]["variables_needed"] == ["password"] and done["finished_at"]
    assert uploads(var_dir) == []

    # when: the task is delivered again (acks, retries): nothing changes, no second test case
    har_analysis_task(project.id, alice.id, HarImport.objects.get().token)
    assert TestCase.objects.count() == 1 and session(alice).get(queued["url"]).json() == done


def test_a_large_dry_run_gives_the_preview_with_its_rejections_and_creates_nothing(alice, project, var_dir, worker):
    queued = _har(session(alice), project, dry_run="true", reject=["csrfmiddlewaretoken"]).json()
    worker()

    done = session(alice).get(queued["url"]).json()
    assert done["status"] == "done" and done["dry_run"] is True and done["created"] is False
    assert done["test_case"] is None and done["test_case_url"] is None
    assert done["preview"]["correlations"][0]["accepted"] is False
    assert [s["method"] for s in done["preview"]["steps"]] == ["GET", "POST"]
    assert not TestCase.objects.exists() and uploads(var_dir) == []


def test_a_large_har_the_task_refuses_fails_with_the_reason_and_keeps_nothing(alice, project, var_dir, worker):
    # given: a recording of another site only (not an allowed target)
    queued = _har(session(alice), project, content=har_bytes(entry("http://192.0.2.10/login", t=0))).json()

    worker()

    failed = session(alice).get(queued["url"]).json()
    assert failed["status"] == "failed" and "None of the recorded hosts is an allowed target" in failed["error"]
    assert failed["preview"] is None and failed["created"] is False
    assert not TestCase.objects.exists() and uploads(var_dir) == []


def test_a_name_taken_is_refused_at_once_and_nothing_is_kept(alice, project, test_case, var_dir, worker):
    response = _har(session(alice), project, name=test_case.name)

    assert response.status_code == 400 and "already has a test case" in response.json()["fields"]["name"][0]
    assert not HarImport.objects.exists() and uploads(var_dir) == []


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_only_editors_queue_a_large_har(persona, request, project, var_dir, worker):
    response = _har(persona, project)

    name = request.node.callspec.params["persona"]
    assert response.status_code == _status(name, 202), response.content
    assert HarImport.objects.count() == (1 if name in ("owner", "editor") else 0)


def test_the_status_is_the_teams_only(alice, bob, charlie, project, var_dir, worker):
    url = _har(session(alice), project).json()["url"]

    assert session(bob).get(url).status_code == 200  # a viewer of the team may follow it
    assert session(charlie).get(url).status_code == 404
    assert session(charlie).get(url.replace("har-imports/", "har-imports/x")).status_code == 404


def test_the_outcome_is_swept_with_the_recordings(alice, project, var_dir, worker, settings):
    url = _har(session(alice), project).json()["url"]
    worker()
    assert session(alice).get(url).status_code == 200

    # when: older than PLIMSOLL_HAR_UPLOAD_TTL_S, the sweep deletes it
    HarImport.objects.update(
        created_at=timezone.now() - datetime.timedelta(seconds=settings.PLIMSOLL_HAR_UPLOAD_TTL_S + 1)
    )
    services.har_uploads_sweep()

    assert session(alice).get(url).status_code == 404 and not HarImport.objects.exists()


def test_an_analysis_that_crashes_fails_the_import_and_keeps_nothing(alice, project, var_dir, worker, monkeypatch):
    url = _har(session(alice), project).json()["url"]

    # when: the analysis stops on an unexpected error in the worker
    def crash(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(har, "analyze", crash)
    with pytest.raises(RecursionError):  # raised on, for the worker's log
        har_analysis_task(*worker.queued.pop())

    # then: the client is told, not left polling "analysing"; the recording is deleted
    failed = session(alice).get(url).json()
    assert failed["status"] == "failed" and "stopped on an error" in failed["error"]
    assert not TestCase.objects.exists() and uploads(var_dir) == []


def test_a_large_har_is_written_to_disk_in_chunks_not_read_whole(alice, project, var_dir, settings):
    """The 202 path streams the upload to its file: the web process never holds the recording whole."""
    import tracemalloc

    from rest_framework.test import APIRequestFactory, force_authenticate

    from portal.projects.api.har import ProjectHarImportViewSet

    # given: a 4 MB upload over a 1 MB inline limit (the request built before memory is traced)
    settings.PLIMSOLL_HAR_INLINE_MB = 1
    content = har_bytes(*login_journey())
    content = content[:-2] + b" " * (4 * 1024 * 1024) + content[-2:]
    upload = SimpleUploadedFile("big.har", content)
    request = APIRequestFactory().post(f"/api/v1/projects/{project.code}/har-import/", {"file": upload})
    force_authenticate(request, user=alice)
    view = ProjectHarImportViewSet.as_view({"post": "create"})

    # when
    tracemalloc.start()
    try:
        response = view(request, code=str(project.code))  # its task is sent on commit: never, in a test
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    # then: queued, the file on disk whole, and never whole in memory
    assert response.status_code == 202, response.data
    kept = [p for p in uploads(var_dir) if p.suffix == ".har"]
    assert len(kept) == 1 and kept[0].read_bytes() == content
    assert peak < 2 * 1024 * 1024, f"peak {peak / 1024 / 1024:.1f} MB"
