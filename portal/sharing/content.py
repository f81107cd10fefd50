"""What a share page shows for each kind of link, built from the same selectors as the portal pages.

Each builder returns the template context of the public page: a headline sentence first
(the comparisons' own headline where one exists), the figures with verdicts, the
configuration differences in words. ``allowed_runs`` names the runs whose series the page's
charts may fetch: a link never opens data outside its object.
"""

from django.db import models
from django.urls import reverse

from portal.history import comparison, journey
from portal.history.choices import experiment_report as comparison_report
from portal.history.models import TrialSet, TuningChange
from portal.history.selectors import experiment_steps
from portal.runs.models import Run
from portal.runs.summary import RunSummary
from portal.runs.templatetags.plimsoll import ms, pct, rate

from .models import ShareLink


def _config_dict(items) -> dict[str, str]:
    return {item["key"]: str(item["value"]) for item in items or []}


def config_differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Each key that differs, as a sentence: "tempdb.files went from 1 to 8"."""
    sentences = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if old is None:
            sentences.append(f"{key} was added as {new}")
        elif new is None:
            sentences.append(f"{key} was removed (it was {old})")
        else:
            sentences.append(f"{key} went from {old} to {new}")
    return sentences


# --------------------------------------------------------------------------------------
# A run
# --------------------------------------------------------------------------------------


def _top_level(s: RunSummary) -> tuple[int, dict] | None:
    """(users, figures) of a run's highest level when it has several windows (a steps run), else None.

    Its totals add every level up (the mean pages/s over the 5-, 10- and 20-user windows), which
    is no figure of any load: a sentence that names the top level's users quotes that level's own.
    """
    windows = s.windows
    if len(windows) < 2:
        return None
    levels = [lv for lv in s.capacity.get("levels") or [] if lv.get("users")]
    if levels:  # the plan's users of each level, as the report's levels table shows them
        top = max(levels, key=lambda lv: lv["users"])
        return top["users"], top
    top = max(windows, key=lambda w: (w.get("totals") or {}).get("users") or 0)
    figures = top.get("totals") or {}
    return (figures.get("users") or 0, figures) if figures.get("users") else None


def run_headline(run: Run) -> str:
    """One sentence for a stakeholder: the load, APD and throughput, and the verdict."""
    s = RunSummary.of(run)
    totals = s.totals
    if not totals:
        return f"Run #{run.number} of {run.plan_name} has no results: it ended {run.get_status_display().lower()}."
    if top := _top_level(s):
        users, figures = top
        load = f"at its top level, {users} users, "
    else:
        figures = totals
        users = max((w.get("totals", {}).get("users") or 0 for w in s.windows), default=0)
        load = f"with {users} users " if users else ""
    sentence = (
        f"{run.plan_name} on {run.environment_name} {load}served {rate(figures.get('pages_per_s'))} pages/s "
        f"at an average page duration of {ms(figures.get('apd_ms'))} (p95 {ms(figures.get('p95_ms'))}), "
        f"{pct(figures.get('error_rate_pct'))} errors"
    )
    if clause := run.verdict_clause:  # passed, failed, or finished with no verdict (and why)
        sentence += f": {clause}."
    elif run.status == Run.Status.CANCELLED:
        sentence += ": it was cancelled before its end, so its thresholds were not judged."
    elif run.status == Run.Status.STOPPED:
        sentence += f": it was stopped by its criteria ({run.stop_sentence}), so its thresholds were not judged."
    else:
        sentence += "."
    capacity = s.capacity
    if capacity.get("analysed") and capacity.get("sentence"):
        sentence += " " + capacity["sentence"]
    degradation = s.degradation
    if degradation.get("degraded") and degradation.get("sentence"):
        sentence += " " + degradation["sentence"]
    return sentence


def run_content(link: ShareLink) -> dict:
    run = link.run
    change = run.tuning_change
    return {
        "run": run,
        "headline": run_headline(run),
        "ran_under": f"#{change.number} {change.title}" if change else "the initial configuration",
        "configuration": run.config_snapshot or [],
        "series_url": reverse("sharing:series", args=[link.token_for_urls, run.code]),
        "protocol_series_url": reverse("sharing:protocol-series", args=[link.token_for_urls, run.code]),
        "detail_url": reverse("sharing:detail", args=[link.token_for_urls, run.code]),
    }


# --------------------------------------------------------------------------------------
# A comparison, an experiment
# --------------------------------------------------------------------------------------


def _side(link: ShareLink, code) -> comparison.Side | None:
    run = Run.objects.filter(project=link.project, code=code).select_related("tuning_change").first()
    if run is not None:
        return comparison.side_for_run(run)
    trial_set = TrialSet.objects.filter(project=link.project, code=code).first()
    return comparison.side_for_trialset(trial_set) if trial_set else None


def _representative(side: comparison.Side) -> Run | None:
    """The side's last run that counts (else its last run): its configuration is the side's, in the differences."""
    runs = side.runs or side.all_runs
    return runs[-1] if runs else None


def _compare_parts(link: ShareLink, report: comparison.Report) -> dict:
    before, after = _representative(report.before), _representative(report.after)
    differences = []
    if before and after:
        differences = config_differences(_config_dict(before.config_snapshot), _config_dict(after.config_snapshot))
    # Every run of each side on the chart (a trial set's trials as thin lines, its mean bold), as the
    # portal's comparison draws them: one run would stand for a trial set the verdicts weigh as three.
    chart_runs = [
        {
            "role": role,
            "label": side.label,
            "runs": [
                {"number": run.number, "url": reverse("sharing:series", args=[link.token_for_urls, run.code])}
                for run in (side.runs or side.all_runs)
            ],
        }
        for role, side in (("before", report.before), ("after", report.after))
        if side.runs or side.all_runs
    ]
    return {
        "report": report,
        "headline": report.headline,
        "differences": differences,
        "chart_runs": chart_runs,
    }


def comparison_content(link: ShareLink) -> dict | None:
    before, after = _side(link, link.before_code), _side(link, link.after_code)
    if before is None or after is None:
        return None  # a side was deleted since: the link has nothing left to show
    return _compare_parts(link, comparison.compare_sides(before, after))


def experiment_content(link: ShareLink) -> dict:
    experiment = link.experiment
    report = comparison_report(experiment)
    steps = experiment_steps(experiment)
    change = experiment.change
    diff = change.diff
    differences = config_differences(
        {d["key"]: str(d["before"]) for d in diff if d["before"] is not None},
        {d["key"]: str(d["after"]) for d in diff if d["after"] is not None},
    )
    context = {
        "experiment": experiment,
        "change": change,
        "steps": steps,
        "report": None,
        "headline": f"{experiment.title}: {experiment.get_status_display().lower()}, no comparison yet.",
        "differences": differences,
        "chart_runs": [],
    }
    if report is not None:
        context.update(_compare_parts(link, report))
        context["differences"] = differences
    return context


# --------------------------------------------------------------------------------------
# A journey
# --------------------------------------------------------------------------------------


def journey_headline(data: dict) -> str:
    """ "From 4 to 45 pages/s over 7 changes: the largest gains were -T1118 (2.1×) and the web garden (1.6×)"."""
    counting = [p for p in data.get("points") or [] if p.get("counts")]
    changes = data.get("changes") or []
    n = len(changes)
    over = f"over {n} change{'' if n == 1 else 's'}"
    if len(counting) < 2:
        runs = f"{len(counting)} counting run{'' if len(counting) == 1 else 's'}"
        return f"{runs} so far {over}: not enough to tell a story yet."
    first, last = counting[0], counting[-1]
    f_rate, l_rate = first.get("pages_per_s") or 0, last.get("pages_per_s") or 0
    if f_rate and abs(l_rate - f_rate) / f_rate > 0.05:
        lead = f"From {rate(f_rate)} to {rate(l_rate)} pages/s {over}"
    else:
        lead = f"Average page duration from {ms(first.get('apd_ms'))} to {ms(last.get('apd_ms'))} {over}"
    gains = sorted(
        (e for e in data.get("effects") or [] if e.get("apd") and e["apd"].get("verdict") == "better"),
        key=lambda e: e["apd"].get("speedup") or 0,
        reverse=True,
    )[:2]
    if not gains:
        return lead + "."
    named = [f"{e['title']} ({e['apd']['speedup_text']})" for e in gains]
    if len(named) == 1:
        return f"{lead}: the largest gain was {named[0]}."
    return f"{lead}: the largest gains were {named[0]} and {named[1]}."


def _without_links(value):
    """The journey's data without any address or code of a portal object (the public page must not lead there)."""
    if isinstance(value, dict):
        return {k: _without_links(v) for k, v in value.items() if k not in ("url", "code") and not k.endswith("_url")}
    if isinstance(value, list):
        return [_without_links(v) for v in value]
    return value


def journey_data(link: ShareLink) -> dict:
    return _without_links(journey.environment_journey(link.environment, link.plan))


def journey_content(link: ShareLink) -> dict:
    data = journey.environment_journey(link.environment, link.plan)
    changes = link.environment.changes.filter(status=TuningChange.Status.APPLIED).order_by("number")
    in_words = [
        f"#{c.number} {c.title}: "
        + (
            "; ".join(config_differences(_config_dict(c.config_before), _config_dict(c.config_after)))
            or "no key changed"
        )
        for c in changes
    ]
    return {
        "changes_in_words": in_words,
        "environment": link.environment,
        "plan": link.plan,
        "section": data,
        "headline": journey_headline(data),
        "data_url": reverse("sharing:journey-data", args=[link.token_for_urls]),
    }


def allowed_runs(link: ShareLink) -> set:
    """The codes of the runs whose series a link's page may fetch: those of its object, no other.

    Computed from the rows alone (not by building the page), so a chart's data request stays cheap.
    """
    if link.kind == ShareLink.Kind.RUN:
        return {link.run.code}
    if link.kind == ShareLink.Kind.COMPARISON:
        codes = [link.before_code, link.after_code]
        runs = Run.objects.filter(project=link.project).filter(
            models.Q(code__in=codes) | models.Q(trial_set__code__in=codes, trial_set__project=link.project)
        )
        return set(runs.values_list("code", flat=True))
    if link.kind == ShareLink.Kind.EXPERIMENT:
        runs = Run.objects.filter(project=link.project, trial_set__experiment=link.experiment)
        return set(runs.values_list("code", flat=True))
    return set()


BUILDERS = {
    ShareLink.Kind.RUN: run_content,
    ShareLink.Kind.COMPARISON: comparison_content,
    ShareLink.Kind.EXPERIMENT: experiment_content,
    ShareLink.Kind.JOURNEY: journey_content,
}


def share_content(link: ShareLink) -> dict | None:
    return BUILDERS[link.kind](link)
