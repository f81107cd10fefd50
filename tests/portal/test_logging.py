"""Issue 28 item 19: a refused request logs one line, not a PermissionDenied traceback."""

import logging

import pytest

pytestmark = pytest.mark.django_db


def test_a_403_is_one_line_without_a_traceback(bob_client, project, caplog):
    # given: bob is a viewer in alice's team
    path = f"/projects/{project.code}/edit/"
    with caplog.at_level(logging.WARNING, logger="django.request"):
        # when
        response = bob_client.get(path)
    # then: refused, and logged as one line
    assert response.status_code == 403
    records = [r for r in caplog.records if r.name == "django.request"]
    assert len(records) == 1
    assert records[0].exc_info is None
    assert caplog.text.count("\n") == 1 and "Traceback" not in caplog.text
    assert f"Forbidden (Permission denied): {path}" in caplog.text


def test_a_500_still_carries_its_traceback(alice_client, caplog, monkeypatch):
    """Only refusals lose the stack: a crash keeps what it takes to find the bug."""
    from portal.projects import views

    def crash(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(views.ProjectForm, "__init__", crash)
    alice_client.raise_request_exception = False
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = alice_client.get("/projects/new/")
    assert response.status_code == 500
    assert "Traceback" in caplog.text and "RuntimeError: a bug" in caplog.text
