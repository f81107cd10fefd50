"""Streams, WebSocket sessions and protocols per page label of the measured window(s) as CSV (issue 26)."""

import io

from portal import csvsafe

from ..models import Run
from ..results import protocols
from ..summary import RunSummary
from . import ExportFormat


class ProtocolsCSV(ExportFormat):
    method = "protocols_csv"
    file_name = "protocols.csv"
    media_type = "text/csv"
    content_type = "text/csv; charset=utf-8"
    summary = "Streams, WebSocket sessions and protocols per page as CSV (only the header without any)"
    label = "Streams and WebSocket (CSV)"
    position = 25

    def offered_for(self, run: Run) -> bool:
        return bool(RunSummary.of(run).protocols)

    def render(self, run: Run) -> str:
        return protocols_csv(run)


def protocols_csv(run: Run) -> str:
    """One row per label that has any (portal/runs/results/protocols.py); only the header for a run without."""
    out = io.StringIO()
    writer = csvsafe.dict_writer(out, protocols.CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for p in RunSummary.of(run).protocol_pages:
        writer.writerow(protocols.csv_row(p))
    return out.getvalue()
