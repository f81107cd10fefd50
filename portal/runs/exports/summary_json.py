"""Status, verdict, the verdict against the baseline and the whole summary as one JSON file."""

import json

from drf_spectacular.types import OpenApiTypes

from ..models import VERDICT_PENDING_HEADLINE, Run
from ..summary import RunSummary
from . import ExportFormat


class SummaryJSON(ExportFormat):
    method = "summary_json"
    file_name = "summary.json"
    media_type = "application/json"
    content_type = "application/json"
    summary = "Status, verdict and the whole summary as one JSON file"
    label = "Summary (JSON)"
    position = 30
    schema_type = OpenApiTypes.OBJECT

    def render(self, run: Run) -> str:
        return summary_json(run)


def _baseline_verdict(run: Run) -> dict | None:
    """The run against its plan's baseline, as the API shows it (pending until judged); None without a plan."""
    verdict = getattr(run, "baseline_verdict", None)
    if verdict is None:
        if run.plan_id is None or run.status not in Run.FINISHED:
            return None
        # The row is written when the run ends (portal.schedules.baselines); a reader in between sees pending.
        return {
            "verdict": "pending",
            "headline": VERDICT_PENDING_HEADLINE,
            "provisional": False,
            "provisional_reason": "",
            "method": "",
            "basis": "",
            "baseline": "",
            "tolerance_pct": None,
            "computed_at": None,
            "rows": [],
        }
    return {
        "verdict": verdict.verdict,
        "headline": verdict.headline,
        "provisional": verdict.provisional,
        "provisional_reason": verdict.provisional_reason,
        "method": verdict.method,
        "basis": verdict.basis,
        "baseline": verdict.baseline_label,
        "tolerance_pct": verdict.tolerance_pct,
        "computed_at": verdict.computed_at.isoformat(),
        "rows": verdict.rows,
    }


def _sentence(clause: str) -> str | None:
    return clause[:1].upper() + clause[1:] + "." if clause else None


def summary_json(run: Run) -> str:
    return json.dumps(
        {
            "run": str(run.code),
            "number": run.number,
            "plan": run.plan_name,
            "environment": run.environment_name,
            "status": run.status,
            "verdict": run.verdict,
            # What the thresholds claim in words, as the share page says it: held, failed (which), or why there is
            # no verdict (no threshold, or an import's thresholds on figures its file cannot carry); None otherwise.
            "verdict_sentence": _sentence(run.verdict_clause),
            "error": run.error_message,
            "started_by": run.started_by,
            "labels": run.labels,
            "note": run.note,
            "stopped_by": run.stopped_by,
            # The target's own configuration as the run started, against the one it names (None: not read).
            "config_verification": run.config_verification,
            "baseline_verdict": _baseline_verdict(run),
            "summary": RunSummary.of(run).to_json(),
        },
        indent=2,
    )
