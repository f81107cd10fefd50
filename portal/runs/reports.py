"""A finished run's results as files for pipelines: JUnit XML, CSV, JSON.

Everything here reads the run's ``summary`` (and the chart series), the same figures as the
report page, so a build's test results never disagree with what people see.
"""

import io
import json
from xml.etree import ElementTree as ET

from portal import csvsafe

from .models import VERDICT_PENDING_HEADLINE, Run

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


def _number(value) -> str:
    return "" if value is None else f"{value:g}"


def threshold_text(t: dict) -> str:
    """ "APD ≤ 1000 ms" — a threshold as the report names it."""
    return f"{t['name']} {t['op']} {_number(t['limit'])} {t['unit']}"


NO_VERDICT = "The plan sets no thresholds, so the run finished with no pass/fail verdict."


def junit_xml(run: Run) -> str:
    """One test case per threshold per measured window; a failure carries the measured value and the limit.

    A run judged against its plan's baseline adds a suite with a test case per judged figure
    ("baseline: Search APD"), failing when that figure regressed (``_baseline_suite``).
    A run that did not end normally (error, partial, cancelled) adds a test case in error, so that
    a CI system never shows green for a run whose figures cannot be trusted. A run without
    thresholds (*finished*) has one test case, "run completed", skipped: nothing was judged.
    """
    summary = run.summary or {}
    root = ET.Element("testsuites", name=f"Plimsoll run #{run.number} of {run.plan_name}")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for window in summary.get("windows") or []:
        suite = ET.SubElement(root, "testsuite", name=f"{run.plan_name}: {window['label']}")
        counts = {"tests": 0, "failures": 0, "errors": 0}
        for t in window.get("thresholds") or []:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"plimsoll.{run.plan_name}.{window['label']}",
                name=threshold_text(t),
                time=str(window.get("seconds", 0)),
            )
            counts["tests"] += 1
            if not t["passed"]:
                counts["failures"] += 1
                measured = "nothing measured" if t["actual"] is None else f"{_number(t['actual'])} {t['unit']}"
                failure = ET.SubElement(
                    case, "failure", type="threshold", message=f"{t['name']} {measured}, limit {threshold_text(t)}"
                )
                failure.text = f"measured={_number(t['actual'])} limit={_number(t['limit'])} unit={t['unit']}"
        if window.get("note"):
            ET.SubElement(suite, "system-out").text = window["note"]
        suite.attrib.update({k: str(v) for k, v in counts.items()})
        for k in totals:
            totals[k] += counts[k]
    _baseline_suite(root, run, totals)
    _stop_criteria_suite(root, run, totals)
    outcome = None
    if run.status in (Run.Status.ERROR, Run.Status.PARTIAL, Run.Status.CANCELLED) or run.is_active:
        outcome = run.error_message or f"The run ended {run.get_status_display().lower()}."
    if outcome or totals["tests"] == 0:
        suite = ET.SubElement(root, "testsuite", name=f"{run.plan_name}: run", tests="1")
        case = ET.SubElement(suite, "testcase", classname=f"plimsoll.{run.plan_name}", name="run completed")
        totals["tests"] += 1
        suite.set("errors", "1" if outcome else "0")
        suite.set("failures", "0")
        if outcome:
            totals["errors"] += 1
            ET.SubElement(case, "error", type=run.status, message=outcome)
        elif run.status == Run.Status.FINISHED:
            suite.set("skipped", "1")
            totals["skipped"] = totals.get("skipped", 0) + 1
            ET.SubElement(case, "skipped", message=NO_VERDICT)
    root.attrib.update({k: str(v) for k, v in totals.items()})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _stop_criteria_suite(root, run: Run, totals: dict) -> None:
    """A run stopped by its criteria: a test case per rule of its plan, the one that stopped it failing."""
    if run.status != Run.Status.STOPPED or not run.stopped_by:
        return
    suite = ET.SubElement(root, "testsuite", name=f"{run.plan_name}: stop criteria")
    counts = {"tests": 0, "failures": 0, "errors": 0}
    broken = run.stopped_by.get("text")
    texts = [r.text for r in _snapshot_rules(run)] or [broken]
    for text in texts:
        case = ET.SubElement(
            suite, "testcase", classname=f"plimsoll.{run.plan_name}.stop", name=f"stop criteria: {text}"
        )
        counts["tests"] += 1
        if text == broken:
            counts["failures"] += 1
            failure = ET.SubElement(
                case, "failure", type="stop_criteria", message=f"stopped by its criteria: {run.stopped_by['sentence']}"
            )
            failure.text = " ".join(f"{k}={_number(v)}" for k, v in run.stopped_by["window"].items() if v is not None)
    suite.attrib.update({k: str(v) for k, v in counts.items()})
    for k in totals:
        totals[k] += counts[k]


def _snapshot_rules(run: Run) -> list:
    from workers.engine.stop_criteria import CriteriaError, parse_rules

    try:
        return parse_rules((run.plan_snapshot or {}).get("stop_criteria") or [])
    except CriteriaError:
        return []


def _baseline_suite(root, run: Run, totals: dict) -> None:
    """One test case per figure the verdict judged (a row without a verdict is no test); a regression fails."""
    verdict = getattr(run, "baseline_verdict", None)
    if verdict is None or verdict.verdict == "pending":
        return
    rows = [r for r in verdict.rows if r["verdict"] != "none"]
    if not rows:
        return
    suite = ET.SubElement(root, "testsuite", name=f"{run.plan_name}: against the baseline")
    counts = {"tests": 0, "failures": 0, "errors": 0}
    for r in rows:
        where = "Soak" if r.get("soak") else (r["page"] or "All pages")
        case = ET.SubElement(
            suite, "testcase", classname=f"plimsoll.{run.plan_name}.baseline", name=f"baseline: {where} {r['figure']}"
        )
        counts["tests"] += 1
        if r["verdict"] == "regressed":
            counts["failures"] += 1
            text = f"{r['before']} → {r['after']} ({r['change']})"
            failure = ET.SubElement(case, "failure", type="regression", message=f"regressed: {text}")
            failure.text = f"{text}; noise {r['noise']}; {r['basis']}; against {verdict.baseline_label}"
        else:
            ET.SubElement(case, "system-out").text = f"{r['verdict'].replace('_', ' ')}: {r['before']} → {r['after']}"
    ET.SubElement(suite, "system-out").text = f"{verdict.headline} {verdict.method}".strip()
    suite.attrib.update({k: str(v) for k, v in counts.items()})
    for k in totals:
        totals[k] += counts[k]


def pages_csv(run: Run) -> str:
    """The per-page table of the measured window(s), one row per page label."""
    out = io.StringIO()
    # Labels come from people and imported files: a formula-like one is written so that no spreadsheet runs it.
    writer = csvsafe.dict_writer(out, PAGE_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in (run.summary or {}).get("pages") or []:
        writer.writerow(row)
    return out.getvalue()


def protocols_csv(run: Run) -> str:
    """Streams, WebSocket sessions and protocols per page label of the measured window(s) (issue 26): one row per
    label that has any (portal/runs/results/protocols.py); only the header for a run without."""
    from .results import protocols

    out = io.StringIO()
    writer = csvsafe.dict_writer(out, protocols.CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for p in ((run.summary or {}).get("protocols") or {}).get("pages") or []:
        writer.writerow(protocols.csv_row(p))
    return out.getvalue()


def series_csv(series: dict) -> str:
    """The charts' per-second (or per-bucket) figures, one row per point."""
    out = io.StringIO()
    writer = csvsafe.writer(out, lineterminator="\n")
    writer.writerow(SERIES_COLUMNS)
    for i in range(len(series.get("t", []))):
        writer.writerow(["" if series[c][i] is None else series[c][i] for c in SERIES_COLUMNS])
    return out.getvalue()


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


def summary_json(run: Run) -> str:
    return json.dumps(
        {
            "run": str(run.code),
            "number": run.number,
            "plan": run.plan_name,
            "environment": run.environment_name,
            "status": run.status,
            "verdict": run.verdict,
            "error": run.error_message,
            "started_by": run.started_by,
            "labels": run.labels,
            "note": run.note,
            "stopped_by": run.stopped_by,
            "baseline_verdict": _baseline_verdict(run),
            "summary": run.summary,
        },
        indent=2,
    )
