"""JUnit XML: a test case per threshold per measured window, and one per figure judged against the baseline."""

from xml.etree import ElementTree as ET

from ..models import Run
from ..summary import RunSummary
from . import ExportFormat


def _number(value) -> str:
    return "" if value is None else f"{value:g}"


def threshold_text(t: dict) -> str:
    """ "APD ≤ 1000 ms" — a threshold as the report names it."""
    return f"{t['name']} {t['op']} {_number(t['limit'])} {t['unit']}"


NO_VERDICT = "The plan sets no thresholds, so the run finished with no pass/fail verdict."


class JUnit(ExportFormat):
    method = "junit"
    file_name = "junit.xml"
    media_type = "application/xml"
    content_type = "application/xml; charset=utf-8"
    summary = "JUnit XML: a test case per threshold per measured window"
    label = "Thresholds (JUnit XML)"
    position = 40

    def download_name(self, run: Run) -> str:
        return f"plimsoll-run-{run.number}.xml"

    def render(self, run: Run) -> str:
        return junit_xml(run)


def junit_xml(run: Run) -> str:
    """One test case per threshold per measured window; a failure carries the measured value and the limit.

    A run judged against its plan's baseline adds a suite with a test case per judged figure
    ("baseline: Search APD"), failing when that figure regressed (``_baseline_suite``).
    A run that did not end normally (error, partial, cancelled) adds a test case in error, so that
    a CI system never shows green for a run whose figures cannot be trusted. A run without
    thresholds (*finished*) has one test case, "run completed", skipped: nothing was judged.
    """
    root = ET.Element("testsuites", name=f"Plimsoll run #{run.number} of {run.plan_name}")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for window in RunSummary.of(run).windows:
        suite = ET.SubElement(root, "testsuite", name=f"{run.plan_name}: {window['label']}")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for t in window.get("thresholds") or []:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"plimsoll.{run.plan_name}.{window['label']}",
                name=threshold_text(t),
                time=str(window.get("seconds", 0)),
            )
            counts["tests"] += 1
            if t["passed"] is None:  # an imported run's file has no such figure (analysis.judge)
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{t['name']}: {t.get('not_judged') or 'not judged'}")
            elif not t["passed"]:
                counts["failures"] += 1
                measured = "nothing measured" if t["actual"] is None else f"{_number(t['actual'])} {t['unit']}"
                failure = ET.SubElement(
                    case, "failure", type="threshold", message=f"{t['name']} {measured}, limit {threshold_text(t)}"
                )
                failure.text = f"measured={_number(t['actual'])} limit={_number(t['limit'])} unit={t['unit']}"
        if window.get("note"):
            ET.SubElement(suite, "system-out").text = window["note"]
        if not counts["skipped"]:
            del counts["skipped"]
        suite.attrib.update({k: str(v) for k, v in counts.items()})
        for k, n in counts.items():
            totals[k] = totals.get(k, 0) + n
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
