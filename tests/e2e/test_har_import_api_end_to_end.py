"""A large HAR through the API on a live server and a real Celery worker (issue 30, item 4).

The web process may not analyse it (its ``har.analyze`` fails, the worker's is the real one): the
import answers 202, the worker analyses it, and the client reads the test case back from the status.
"""

import json
import secrets
import urllib.request

import pytest

from portal.accounts.services import token_create
from portal.projects import har
from portal.projects.models import TestCase
from tests.portal.projects.test_har import har_bytes, login_journey
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def multipart(fields: dict, file_name: str, content: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body (the standard library has no encoder), and its Content-Type."""
    boundary = secrets.token_hex(16)
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{file_name}"\r\n'
        "Content-Type: application/json\r\n\r\n".encode()
        + content
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_a_large_har_is_analysed_by_the_worker_and_polled_to_its_test_case(
    live_server, alice, team, project, celery_worker, settings, monkeypatch
):
    # given: every HAR counts as large, and the web process cannot analyse one
    settings.PLIMSOLL_HAR_INLINE_MB = 0

    def refuse(*args, **kwargs):
        raise AssertionError("a large HAR was analysed in the web request")

    monkeypatch.setattr(har, "analyze", refuse)
    token = token_create(user=alice, team=team, name="CI", scope="write")[1]
    auth = {"Authorization": f"Bearer {token}"}

    # when: a pipeline imports a recording
    body, content_type = multipart({"name": "Login"}, "login.har", har_bytes(*login_journey()))
    request = urllib.request.Request(
        f"{live_server.url}/api/v1/projects/{project.code}/har-import/",
        data=body,
        headers={**auth, "Content-Type": content_type},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        status, url = response.status, response.headers["Location"]

    # then: 202 at once; the worker's answer is read back through the status
    assert status == 202

    def finished():
        with urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=30) as answer:
            body = json.load(answer)
        return body if body["status"] in ("done", "failed") else None

    done = wait_until(finished, timeout=60, what="the worker's analysis")
    assert done["status"] == "done", done
    assert TestCase.objects.get(code=done["test_case"]).name == "Login"
    assert [c["name"] for c in done["preview"]["correlations"]] == ["csrfmiddlewaretoken"]
