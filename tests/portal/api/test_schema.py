"""The OpenAPI schema validates without warnings, and the docs are served from our own files."""

import re

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_the_schema_validates_with_no_warnings(tmp_path):
    # --fail-on-warn turns any warning into an error: the command raises instead of exiting 0
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    schema = (tmp_path / "schema.yaml").read_text()
    assert "/api/v1/plans/{code}/runs/" in schema and "/api/v1/runs/{code}/junit.xml" in schema


def test_every_operation_has_a_summary_and_error_responses(client):
    schema = client.get("/api/v1/schema/?format=json").json()
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            assert op.get("summary"), f"{method.upper()} {path} has no summary"
            assert "401" in op["responses"] and "429" in op["responses"], f"{method.upper()} {path}"


def test_the_docs_load_vendored_files_only(client):
    # when
    page = "/api/v1/docs/"
    html = client.get(page).content.decode()

    # then: every script and stylesheet comes from this server, and is there
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources
    for source in sources:
        assert not source.startswith(("http:", "https:", "//")), f"{page} loads {source} from elsewhere"
        assert client.get(source).status_code == 200, source
    # and no inline script, for the coming Content-Security-Policy
    inline = re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    assert not inline, inline
