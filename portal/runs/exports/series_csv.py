"""The charts' per-second (or per-bucket) figures as CSV, one row per point (the run page's series)."""

import io

from portal import csvsafe

from .. import selectors
from ..models import Run
from ..payloads import RunSeries
from . import ExportFormat

SERIES_COLUMNS = (
    "t",
    "users",
    "pages_per_s",
    "hits_per_s",
    "errors_per_s",
    "dropped_per_s",
    "apd_ms",
    "p95_ms",
    "bytes_per_s",
)


class SeriesCSV(ExportFormat):
    method = "series_csv"
    file_name = "series.csv"
    media_type = "text/csv"
    content_type = "text/csv; charset=utf-8"
    summary = "The per-second series as CSV"
    label = "Per-second series (CSV)"
    position = 20

    def render(self, run: Run) -> str:
        return series_csv(selectors.run_series(run))


def series_csv(series: RunSeries) -> str:
    out = io.StringIO()
    writer = csvsafe.writer(out, lineterminator="\n")
    writer.writerow(SERIES_COLUMNS)
    for i in range(len(series.get("t", []))):
        writer.writerow(["" if series[c][i] is None else series[c][i] for c in SERIES_COLUMNS])
    return out.getvalue()
