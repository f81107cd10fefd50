"""Every export format in the registry (portal/runs/exports/) is served by the API with its schema entry,
linked from the run page and listed in the API docs: a new format that one of them misses fails here."""

from pathlib import Path

import pytest
from django.core.management import call_command

from portal.runs import exports
from tests.portal.runs.test_store import PROFILES, _finish, _record

pytestmark = pytest.mark.django_db

FORMATS = exports.ordered()
API_DOCS = Path(__file__).resolve().parents[3] / "docs" / "automation" / "api.md"


@pytest.fixture
def finished(run):
    return _finish(_record(run, PROFILES["constant"]))


def test_the_registry_holds_the_six_formats_of_the_run_page():
    assert [fmt.file_name for fmt in FORMATS] == [
        "pages.csv",
        "levels.csv",
        "series.csv",
        "protocols.csv",
        "summary.json",
        "junit.xml",
    ]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.method)
def test_each_format_is_served_linked_and_documented(fmt, alice_client, finished):
    # the API serves it as the format renders it
    response = alice_client.get(f"/api/v1/runs/{finished.code}/{fmt.file_name}")
    assert response.status_code == 200
    assert response["Content-Type"] == fmt.content_type
    assert response["Content-Disposition"] == f'inline; filename="{fmt.download_name(finished)}"'
    assert response.content.decode() == fmt.render(finished)
    # the run page links it with its label where it has something for the run (protocols.csv: streams only)
    page = alice_client.get(finished.get_absolute_url()).content.decode()
    link = f'href="/api/v1/runs/{finished.code}/{fmt.file_name}">{fmt.label}</a>'
    assert (link in page) == fmt.offered_for(finished)
    # this run has no stream and one window
    assert fmt.offered_for(finished) == (fmt.file_name not in ("protocols.csv", "levels.csv"))
    # the API's docs name it
    assert f"`{fmt.file_name}`" in API_DOCS.read_text() or f"/{fmt.file_name}`" in API_DOCS.read_text()


def test_the_schema_has_each_format_with_its_media_type(tmp_path):
    call_command("spectacular", "--file", str(tmp_path / "schema.yaml"))
    schema = (tmp_path / "schema.yaml").read_text()
    for fmt in FORMATS:
        path = f"/api/v1/runs/{{code}}/{fmt.file_name}:"
        assert path in schema, fmt.file_name
        assert fmt.media_type in schema.split(path, 1)[1].split("\n  /api/", 1)[0], fmt.file_name
