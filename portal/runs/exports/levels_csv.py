"""The levels table of a run with several measured windows (a steps run, a capacity search) as CSV.

One row per level, in the report's order (by users for a run whose capacity was analysed, else the
windows' order), with the report's columns; a plan with stream or WebSocket steps adds the stream,
WebSocket and protocol figures its levels have (``summary.LEVEL_FIGURE_COLUMNS``: time to first event p95,
gap p95, round trip p95, messages/s, HTTP/2 share), a plain HTTP plan none. Only the header for a run of
one window.
"""

import io

from portal import csvsafe

from ..models import Run
from ..summary import RunSummary
from . import ExportFormat

LEVEL_COLUMNS = (
    "window",
    "users",
    "start_s",
    "end_s",
    "apd_ms",
    "p95_ms",
    "pages_per_s",
    "error_rate_pct",
)
AFTER = ("predicted_pages_per_s", "verdict", "broken", "capacity", "knee", "note")


class LevelsCSV(ExportFormat):
    method = "levels_csv"
    file_name = "levels.csv"
    media_type = "text/csv"
    content_type = "text/csv; charset=utf-8"
    summary = (
        "The levels table of a steps run as CSV, with its stream and WebSocket figures where the plan has them "
        "(only the header for a run of one window)"
    )
    label = "Levels table (CSV)"
    position = 15

    def offered_for(self, run: Run) -> bool:
        return len(RunSummary.of(run).windows) > 1

    def render(self, run: Run) -> str:
        return levels_csv(run)


def levels_csv(run: Run) -> str:
    s = RunSummary.of(run)
    protocol = s.level_columns
    out = io.StringIO()
    # Window labels are the plan's, but a level's note may be anything: every cell goes through csvsafe.
    writer = csvsafe.dict_writer(
        out, (*LEVEL_COLUMNS, *(c.key for c in protocol), *AFTER), extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    for row in s.level_rows:
        level = row["level"]
        figures = level.get("totals") or level  # a window holds its figures in totals, a capacity level in itself
        if "totals" in level:  # a window of a run whose capacity was not analysed
            users, verdict, broken = figures.get("users"), level.get("verdict"), _failed(level)
        else:
            users, verdict, broken = level.get("users"), "held" if level.get("held") else "broken", level.get("broken")
        writer.writerow(
            {
                "window": level.get("label"),
                "users": users,
                "start_s": level.get("start"),
                "end_s": level.get("end"),
                **{key: figures.get(key) for key in LEVEL_COLUMNS[4:]},
                **{f["column"].key: f["value"] for f in row["figures"]},
                "predicted_pages_per_s": level.get("predicted_pages_per_s"),
                "verdict": verdict,
                "broken": "; ".join(broken or []),
                "capacity": _flag(level.get("capacity")),
                "knee": _flag(level.get("knee")),
                "note": level.get("note") or "",
            }
        )
    return out.getvalue()


def _failed(window: dict) -> list[str]:
    return [t["name"] for t in window.get("thresholds") or [] if t.get("passed") is False]


def _flag(value) -> str:
    return "" if value is None else ("yes" if value else "no")
