"""The HAR import pages and command: upload, preview, create or discard; bad files; who may do what."""

import io
import json
import os
import time

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.accounts.models import Membership
from portal.projects.models import Step, TestCase
from tests.portal.projects.test_har import SITE, entry, har_bytes, login_journey
from workers.celery import app
from workers.tasks import har_uploads_sweep_task

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    return tmp_path


def uploads(var_dir) -> list:
    folder = var_dir / "har-uploads"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def upload(client, project, raw: bytes, name="journey.har"):
    f = io.BytesIO(raw)
    f.name = name
    return client.post(reverse("projects:har-import", args=[project.code]), {"file": f})


def journey() -> bytes:
    return har_bytes(*login_journey())


def preview_url(response) -> str:
    assert response.status_code == 302, response.content.decode()[:1500]
    return response["Location"]


def test_upload_preview_then_create_with_a_rejected_correlation(alice_client, project, var_dir):
    url = preview_url(upload(alice_client, project, journey()))
    page = alice_client.get(url)
    assert page.status_code == 200
    assert page.context["name"] == "journey"
    assert [c.name for c in page.context["preview"].correlations] == ["csrfmiddlewaretoken"]
    assert "keep_header:cookie" in page.content.decode()

    response = alice_client.post(
        url, {"action": "create", "name": "Login", "correlation:csrfmiddlewaretoken": "reject"}
    )

    test_case = TestCase.objects.get(project=project, name="Login")
    assert response["Location"] == test_case.get_absolute_url()
    steps = list(test_case.steps.all())
    assert [s.extract for s in steps] == [[], []]
    assert "csrfmiddlewaretoken=tok3nABCDEF123456" in steps[1].body  # rejected: the recorded value stays
    assert uploads(var_dir) == []


def test_keeping_a_cookie_and_the_password_is_explicit(alice_client, project):
    url = preview_url(upload(alice_client, project, journey()))
    alice_client.post(
        url,
        {
            "action": "create",
            "name": "Kept",
            "correlation:csrfmiddlewaretoken": "accept",
            "keep_header:cookie": "on",
            "keep_field:password": "on",
        },
    )
    post = TestCase.objects.get(name="Kept").steps.get(position=1)
    assert post.headers["Cookie"] == "sid=abc"
    assert post.body.endswith("password=s3cret")


def test_update_shows_the_choices_and_saves_nothing(alice_client, project, var_dir):
    url = preview_url(upload(alice_client, project, journey()))
    page = alice_client.post(
        url, {"action": "update", "name": "X", "variable:password": "pwd", "vary_field:username": "on"}
    )
    assert page.status_code == 200
    assert "username={{username}}&password={{pwd}}" in page.context["preview"].steps[1].body
    assert 'name="vary_field:username" checked' in page.content.decode()
    assert not TestCase.objects.filter(name="X").exists() and len(uploads(var_dir)) == 1
    assert uploads(var_dir)[0].stat().st_mode & 0o777 == 0o600  # it holds cookies and passwords


def test_discard_deletes_the_file_and_creates_nothing(alice_client, project, var_dir):
    url = preview_url(upload(alice_client, project, journey()))
    response = alice_client.post(url, {"action": "discard"})
    assert response["Location"] == project.get_absolute_url()
    assert uploads(var_dir) == []
    assert alice_client.get(url)["Location"] == reverse("projects:har-import", args=[project.code])
    assert not TestCase.objects.exists()


def test_an_abandoned_preview_expires_and_the_sweep_deletes_it(alice_client, project, var_dir, settings):
    url = preview_url(upload(alice_client, project, journey()))
    (path,) = uploads(var_dir)
    old = time.time() - settings.PLIMSOLL_HAR_UPLOAD_TTL_S - 1
    os.utime(path, (old, old))
    response = alice_client.get(url, follow=True)
    assert "no longer here" in response.content.decode()
    assert uploads(var_dir) == []
    preview_url(upload(alice_client, project, journey()))
    (path,) = uploads(var_dir)
    os.utime(path, (old, old))
    fresh = preview_url(upload(alice_client, project, journey()))
    har_uploads_sweep_task()  # what Celery beat runs every 10 minutes
    assert len(uploads(var_dir)) == 1 and alice_client.get(fresh).status_code == 200  # the fresh one stays
    assert app.conf.beat_schedule["har-uploads-sweep"]["task"] == "workers.tasks.har_uploads_sweep_task"


def test_a_name_taken_is_a_message_not_a_500(alice_client, project, test_case):
    url = preview_url(upload(alice_client, project, journey()))
    page = alice_client.post(url, {"action": "create", "name": test_case.name})
    assert page.status_code == 200
    assert "already has a test case called" in page.context["error"]


BAD_FILES = [
    (b"not json at all", "The file is not JSON"),
    (json.dumps({"nodes": []}).encode(), "This JSON is not a HAR"),
    (json.dumps({"log": {"entries": []}}).encode(), "The HAR has no requests"),
    (har_bytes(entry("https://shop.example.com/")), "None of the recorded hosts is an allowed target"),
    (b"", "The file is empty"),
]


@pytest.mark.parametrize(("raw", "message"), BAD_FILES)
def test_bad_files_get_their_message_and_leave_nothing(alice_client, project, var_dir, raw, message):
    response = upload(alice_client, project, raw)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert uploads(var_dir) == []
    assert not TestCase.objects.exists() and not Step.objects.exists()


def test_a_file_over_the_limit_is_refused_before_it_is_read(alice_client, project, var_dir, settings):
    settings.PLIMSOLL_HAR_MAX_MB = 1
    response = upload(alice_client, project, b" " * (1024 * 1024 + 10) + journey())
    assert "the limit is 1 MB" in response.content.decode()
    assert uploads(var_dir) == []


def test_a_file_of_too_many_json_values_is_refused_with_the_limit_named(alice_client, project, var_dir, settings):
    settings.PLIMSOLL_HAR_MAX_JSON_VALUES = 10_000
    response = upload(alice_client, project, journey()[:-1] + b', "x": [' + b"0," * 20_000 + b"0]}")
    assert "JSON values, more than 10,000, the limit" in response.content.decode()
    assert uploads(var_dir) == [] and not TestCase.objects.exists()


def test_outsider_gets_404_and_viewer_403(client, charlie, bob, project):
    page = reverse("projects:har-import", args=[project.code])
    preview = reverse("projects:har-import-preview", args=[project.code, "x" * 32])
    client.force_login(charlie)
    assert client.get(page).status_code == 404
    assert client.post(preview, {"action": "create"}).status_code == 404
    client.force_login(bob)
    assert client.get(page).status_code == 403
    assert upload(client, project, journey()).status_code == 403
    assert client.post(preview, {"action": "create"}).status_code == 403


def test_another_editor_cannot_open_alices_preview(alice_client, project, django_user_model, client, var_dir):
    url = preview_url(upload(alice_client, project, journey()))
    dave = django_user_model.objects.create_user("dave", password="x")
    Membership.objects.create(team=project.team, user=dave, role=Membership.Role.EDITOR)
    client.force_login(dave)
    response = client.post(url, {"action": "create", "name": "Stolen"})
    assert response.status_code == 302 and not TestCase.objects.filter(name="Stolen").exists()
    assert len(uploads(var_dir)) == 1  # still alice's


def test_the_project_page_offers_the_import_to_editors_only(client, alice, bob, project):
    link = reverse("projects:har-import", args=[project.code])
    client.force_login(alice)
    assert link in client.get(project.get_absolute_url()).content.decode()
    client.force_login(bob)
    assert link not in client.get(project.get_absolute_url()).content.decode()


def test_the_command_prints_the_preview_and_the_test_case_url(project, tmp_path):
    path = tmp_path / "login.har"
    path.write_bytes(journey())
    out = io.StringIO()
    call_command("import_har", str(path), "--project", project.name, stdout=out)
    test_case = TestCase.objects.get(project=project, name="login")
    text = out.getvalue()
    assert "Correlation csrfmiddlewaretoken (hidden form field, accepted): set by step 1, sent by step 2" in text
    assert "Secret field password of step 2: posts {{password}}" in text
    assert "Login user field username of step 2: posts the recorded value" in text
    assert text.strip().splitlines()[-1] == test_case.get_absolute_url()
    assert test_case.steps.get(position=1).body.startswith("csrfmiddlewaretoken={{csrfmiddlewaretoken}}")


def test_the_command_refuses_bad_input_and_creates_nothing(project, tmp_path):
    path = tmp_path / "bad.har"
    path.write_bytes(b"{}")
    with pytest.raises(CommandError, match="This JSON is not a HAR"):
        call_command("import_har", str(path), "--project", project.name)
    with pytest.raises(CommandError, match="No project is called “Nope”"):
        call_command("import_har", str(path), "--project", "Nope")
    path.write_bytes(journey())
    call_command("import_har", str(path), "--project", project.name, "--dry-run", stdout=io.StringIO())
    assert not TestCase.objects.exists()
    assert SITE  # the recording's site is loopback, allowed by default


def test_long_paths_and_names_are_saved_within_the_fields_limits(alice_client, project):
    long = "/" + "a" * 300 + "?q=" + "b" * 1900
    raw = har_bytes(*[entry(f"{SITE}{long}", t=i, method="OPTIONS") for i in range(3)])
    url = preview_url(upload(alice_client, project, raw))
    response = alice_client.post(url, {"action": "create", "name": "n" * 150})
    test_case = TestCase.objects.get(project=project)
    assert response.status_code == 302 and test_case.name == "n" * 100
    assert [len(s.path) for s in test_case.steps.all()] == [2000] * 3


# Issue 30, item 4: a large recording is analysed by a task, never in the web request.


@pytest.fixture
def large(settings, monkeypatch):
    """Every HAR counts as large; the web process may not analyse one (har.analyze fails there); ``run()``
    runs the analysis tasks queued so far, as the worker would."""
    from portal.projects import services, views

    settings.PLIMSOLL_HAR_INLINE_MB = 0
    queued = []
    monkeypatch.setattr("portal.common.task", lambda name: type("T", (), {"delay": lambda *a: queued.append(a)}))
    monkeypatch.setattr(services.transaction, "on_commit", lambda enqueue: enqueue())  # the test's transaction

    def refuse(*args, **kwargs):
        raise AssertionError("a large HAR was analysed in the web request")

    real = services.har.analyze
    monkeypatch.setattr(views.har, "analyze", refuse)

    def run():
        monkeypatch.setattr(views.har, "analyze", real)
        try:
            while queued:
                project_id, user_id, token = queued.pop(0)
                services.har_analysis_process(project_id=project_id, user_id=user_id, token=token)
        finally:
            monkeypatch.setattr(views.har, "analyze", refuse)

    return run


def test_a_large_recording_is_analysed_by_a_task_while_its_page_waits(alice_client, project, var_dir, large):
    # given: an upload over PLIMSOLL_HAR_INLINE_MB (the web side runs no analysis: see ``large``)
    url = preview_url(upload(alice_client, project, journey()))

    # when: the page is opened before the task ran
    waiting = alice_client.get(url)

    # then: it waits (and refreshes itself); nothing was analysed in the request
    assert waiting.status_code == 200 and "Analysing the recording" in waiting.content.decode()
    assert '<meta http-equiv="refresh" content="2">' in waiting.content.decode()

    # when: the task has run
    large()
    page = alice_client.get(url)

    # then: the preview, as for a small recording
    assert [c.name for c in page.context["preview"].correlations] == ["csrfmiddlewaretoken"]

    # when: a choice changes, the task analyses again; creating with the same choices uses its preview
    choices = {"name": "Login", "correlation:csrfmiddlewaretoken": "reject"}
    again = alice_client.post(url, {"action": "update", **choices})
    assert again.status_code == 302 and "Analysing" in alice_client.get(again["Location"]).content.decode()
    large()
    assert alice_client.get(url).context["preview"].correlations[0].accepted is False
    created = alice_client.post(url, {"action": "create", **choices})

    # then: the test case, with the choice applied, and nothing of the recording left
    test_case = TestCase.objects.get(project=project, name="Login")
    assert created["Location"] == test_case.get_absolute_url()
    assert "csrfmiddlewaretoken=tok3nABCDEF123456" in list(test_case.steps.all())[1].body
    assert uploads(var_dir) == []


def test_a_large_recording_the_task_refuses_says_why_and_keeps_nothing(alice_client, project, var_dir, large):
    # given: a recording of another site only (not an allowed target)
    raw = har_bytes(entry("http://192.0.2.10/login", t=0))
    url = preview_url(upload(alice_client, project, raw))

    # when: the task has refused it
    large()
    response = alice_client.get(url, follow=True)

    # then: back on the upload page with the reason; the recording is gone, no test case
    assert response.redirect_chain[-1][0] == reverse("projects:har-import", args=[project.code])
    assert "Not imported: None of the recorded hosts is an allowed target" in response.content.decode()
    assert uploads(var_dir) == [] and not TestCase.objects.exists()


def test_a_large_recording_is_kept_in_chunks_never_whole_in_memory(alice, project, var_dir, large):
    """The page read a large recording whole (50 MB in the web process) before writing it for the task."""
    import tracemalloc

    from django.contrib.messages.storage.fallback import FallbackStorage
    from django.test import RequestFactory

    from portal.projects import views

    # given: a 6 MB recording (the request built before memory is traced: a server gets it from a socket)
    raw = journey()[:-2] + b"," + b" " * (6 * 1024 * 1024) + b"}}"
    f = io.BytesIO(raw)
    f.name = "big.har"
    request = RequestFactory().post(reverse("projects:har-import", args=[project.code]), {"file": f})
    request.user, request.session = alice, {}
    request._messages = FallbackStorage(request)

    # when
    tracemalloc.start()
    try:
        response = views.har_import(request, project.code)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    # then: kept for the task as uploaded, and at most a few chunks of it in memory at once
    assert response.status_code == 302
    assert [p.read_bytes() for p in uploads(var_dir) if p.suffix == ".har"] == [raw]
    assert peak < 2 * 1024 * 1024, f"peak {peak / 1024 / 1024:.1f} MB"
