"""The per-page table of the measured window(s) as CSV, one row per page label."""

import io

from portal import csvsafe

from ..models import Run
from ..summary import RunSummary
from . import ExportFormat

PAGE_COLUMNS = (
    "label",
    "pages",
    "errors",
    "error_rate_pct",
    "pages_per_s",
    "apd_ms",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "ttfb_ms",
    "connect_ms",
    "bytes_in",
)


class PagesCSV(ExportFormat):
    method = "pages_csv"
    file_name = "pages.csv"
    media_type = "text/csv"
    content_type = "text/csv; charset=utf-8"
    summary = "The per-page table as CSV"
    label = "Pages table (CSV)"
    position = 10

    def render(self, run: Run) -> str:
        return pages_csv(run)


def pages_csv(run: Run) -> str:
    out = io.StringIO()
    # Labels come from people and imported files: a formula-like one is written so that no spreadsheet runs it.
    writer = csvsafe.dict_writer(out, PAGE_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in RunSummary.of(run).pages:
        writer.writerow(row)
    return out.getvalue()
