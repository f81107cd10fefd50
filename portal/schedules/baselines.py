"""Regression verdicts: a finished run of a scheduled plan judged against its plan's baseline.

The figures and their noise come from the existing comparison (portal/history/comparison.py):
the same samples (trials, or batch means of a single run), the same Welch intervals. On top
of it, a plan's tolerance: a figure *regressed* only when the comparison calls it worse
(beyond the noise) AND it is more than ``tolerance_pct`` worse; improved likewise. A noisy
night that is 4 % slower is not worth a morning mail.
"""

import base64
import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.common import task
from portal.history.comparison import (
    FIGURES,
    PROTOCOL_FIGURES,
    Report,
    Row,
    _summary_value,
    compare_sides,
    format_figure,
    run_batches,
    side_for_run,
    side_for_runs,
    side_for_trialset,
)
from portal.runs.models import VERDICT_PENDING_HEADLINE, Run
from portal.runs.results.batches import WINDOW
from portal.runs.summary import RunSummary
from portal.stats import analysis
from workers.engine.histogram import Histogram

from . import noise, selectors, soak
from .models import DEFAULT_LAST_N, Baseline, RunVerdict

log = logging.getLogger(__name__)
Verdict = RunVerdict.Verdict

DEFAULT_TOLERANCE_PCT = 10.0
# Looking back for the last N valid runs: at most this many earlier runs are read.
LOOKBACK = 60


def baseline_of(plan) -> Baseline:
    """The plan's baseline, or the default one (the last ``DEFAULT_LAST_N`` valid runs, 10 %) when none was pinned."""
    try:
        return plan.baseline
    except Baseline.DoesNotExist:
        return Baseline(
            plan=plan, kind=Baseline.Kind.LAST_N, last_n=DEFAULT_LAST_N, tolerance_pct=DEFAULT_TOLERANCE_PCT
        )


def _accepted_regression(run: Run) -> bool:
    try:
        verdict = run.baseline_verdict
    except RunVerdict.DoesNotExist:
        return False
    return verdict.verdict == Verdict.REGRESSED and verdict.is_accepted


def since_accepted_level(runs: list[Run]) -> list[Run]:
    """The rolling baseline's runs (newest first) from the newest accepted level on: a regression someone accepted
    as the new normal is the level the next runs are judged against, so the runs before its streak (the old
    level) are left out; with a week of baseline runs (``DEFAULT_LAST_N``) they would otherwise outnumber it."""
    start = next((i for i, r in enumerate(runs) if _accepted_regression(r)), None)
    if start is None:
        return runs
    end = start
    while end + 1 < len(runs) and _accepted_regression(runs[end + 1]):
        end += 1
    return runs[: end + 1]


def baseline_side(*, run: Run, baseline: Baseline):
    """The comparison side the run is judged against, or None with the reason."""
    if baseline.kind == Baseline.Kind.RUN:
        if baseline.run is None:
            return None, "The pinned baseline run was deleted."
        side = side_for_run(baseline.run)
        side.label = f"Baseline run #{baseline.run.number}"
        return side, ""
    if baseline.kind == Baseline.Kind.TRIAL_SET:
        if baseline.trial_set is None:
            return None, "The pinned baseline trial set was deleted."
        side = side_for_trialset(baseline.trial_set)
        side.label = f"Baseline: {side.label}"
        return side, ""
    earlier = selectors.baseline_candidates(plan_id=run.plan_id, before_number=run.number).select_related(
        "baseline_verdict"
    )[:LOOKBACK]
    valid = since_accepted_level([r for r in earlier if r.counts][: baseline.last_n])
    if not valid:
        return None, f"No earlier valid run of the plan “{run.plan_name}” to compare with."
    numbers = ", ".join(f"#{r.number}" for r in sorted(valid, key=lambda r: r.number))
    last = "the last valid run" if len(valid) == 1 else f"the last {len(valid)} valid runs"
    return side_for_runs(f"Baseline: {last} ({numbers})", valid), ""


def _row_verdict(row: Row, tolerance_pct: float) -> str:
    """A row outside the noise model's family (capacity): Welch on its samples, then the tolerance."""
    c = row.comparison
    if c is None:
        return "none"
    if c.verdict == analysis.WITHIN_NOISE:
        return "within_noise"
    # reduction_pct is None when the baseline was 0 (e.g. no error at all): any real move is beyond tolerance.
    pct = abs(c.reduction_pct) if c.reduction_pct is not None else float("inf")
    if pct <= tolerance_pct:
        return "within_noise"
    return "regressed" if c.verdict == analysis.WORSE else "improved"


def _row_dict(row: Row, tolerance_pct: float, judged: noise.Judged | None = None) -> dict:
    out = {
        "page": row.page,
        "figure": row.figure,
        "verdict": _row_verdict(row, tolerance_pct),
        "before": row.before_text,
        "after": row.after_text,
        "change": row.change_text,
        "noise": row.noise_text,
        "basis": row.basis,
    }
    if judged is not None:
        out["verdict"] = judged.verdict
        if judged.noise_pct is not None:
            unit = "pp" if row.unit == "%" else "%"
            out["noise"] = f"±{judged.noise_pct:.3g} {unit} a night"
        if judged.p is not None:
            out["basis"] = f"p = {judged.p:.2g} against the spread between the baseline runs (Holm over all rows)"
            out["basis"] += net_of_drift(judged) + from_samples(judged)
        if judged.note:
            out["basis"] = judged.note
            out["note"] = judged.note
    return out


def net_of_drift(judged: noise.Judged) -> str:
    """The page's change net of the night's drift, which the test and the tolerance read (noise.judge_cells)."""
    if judged.net_change_pct is None:
        return ""
    return f"; {judged.net_change_pct:+.3g} % net of the night's drift"


def from_samples(judged: noise.Judged) -> str:
    """Where the row's noise within a run came from its pages' durations rather than its batch means."""
    if judged.factor is None:
        return ""
    return (
        f"; noise within a run from the page durations (s² / n × {judged.factor:.2f}, the batch means' autocorrelation)"
    )


def _move(r: dict) -> str:
    if r.get("soak"):  # "degradation onset 2 h → 40 min (1 h 20 min earlier)"
        return f"{r['figure'].lower()} {r['before']} → {r['after']} ({r['change']})"
    return f"{r['page'] or 'all pages'} {r['figure']} {r['before']} → {r['after']} ({r['change']})"


def judge(
    report: Report,
    *,
    run: Run,
    tolerance_pct: float,
    extra_rows: list[dict] = (),
    family: dict[tuple[str | None, str], noise.Judged] | None = None,
) -> tuple[str, str, list[dict]]:
    """(verdict, headline, rows) of a comparison of the run (after) with its baseline (before).

    ``family``: the rows judged together by the noise model (``noise.judge_cells``), by (page,
    figure); rows not in it (capacity) keep the comparison's own verdict and the tolerance.
    ``extra_rows``: the soak rows (portal/schedules/soak.py), judged already; they count
    for the verdict and the headline like the figures.
    """
    family = family or {}
    rows = [_row_dict(r, tolerance_pct, family.get((r.page, r.figure))) for r in report.total]
    rows += [
        _row_dict(r, tolerance_pct, family.get((r.page, r.figure))) for _, page_rows in report.pages for r in page_rows
    ]
    rows += list(extra_rows)
    # Pages first: "Search regressed" says where to look; the total only follows its pages.
    by_page_first = sorted(rows, key=lambda r: r["page"] is None)
    regressed = [r for r in by_page_first if r["verdict"] == "regressed"]
    improved = [r for r in by_page_first if r["verdict"] == "improved"]
    verdict = Verdict.REGRESSED if regressed else Verdict.IMPROVED if improved else Verdict.WITHIN_NOISE

    def moves(items):
        return "; ".join(_move(r) for r in items[:3]) + (f"; and {len(items) - 3} more" if len(items) > 3 else "")

    against = report.before.label
    if regressed:
        headline = f"Run #{run.number} regressed against {against}: {moves(regressed)}."
    elif improved:
        headline = f"Run #{run.number} improved on {against}: {moves(improved)}."
    else:
        apd = next((r for r in rows if r["page"] is None and r["figure"] == "APD"), None)
        apd_text = f" (APD {apd['before']} → {apd['after']})" if apd and apd["before"] != "—" else ""
        headline = (
            f"Run #{run.number} is within noise of {against}{apd_text}: "
            f"no figure moved by more than the noise and {tolerance_pct:g} %."
        )
    return verdict, headline, rows


def _pages(run: Run, page: str | None) -> int:
    value = _summary_value(run, page, "pages")
    return int(value or 0)


def noise_cells(report: Report, baseline_runs: list[Run], run: Run) -> list[noise.Cell]:
    """The rows of the figures (total and per page) as the noise model reads them: each run's own figure."""
    batches = {r.id: run_batches(r) for r in [*baseline_runs, run]}
    cells = []
    rows = [*report.total, *(r for _, page_rows in report.pages for r in page_rows)]
    for row in rows:
        fig = next((f for f in FIGURES if f.name == row.figure), None)
        if fig is None:
            continue
        before = [_summary_value(r, row.page, fig.key) for r in baseline_runs]
        after = _summary_value(run, row.page, fig.key)
        if after is None or any(v is None for v in before):
            continue

        def figure_batches(r, key=fig.key, page=row.page):
            return [v for v in (batches[r.id].get(page) or {}).get(key, []) if v is not None]

        def sample_v(r, key=fig.key, page=row.page):
            return _sample_v(batches[r.id].get(page), key)

        cells.append(
            noise.Cell(
                page=row.page,
                key=fig.key,
                lower_is_better=fig.lower_is_better,
                baseline=[float(v) for v in before],
                value=float(after),
                baseline_batches=[figure_batches(r) for r in baseline_runs],
                batches=figure_batches(run),
                baseline_pages=[_pages(r, row.page) for r in baseline_runs],
                pages=_pages(run, row.page),
                shown_change_pct=row.change_pct,
                figure=row.figure,
                baseline_sample_v=[sample_v(r) for r in baseline_runs],
                sample_v=sample_v(run),
            )
        )
    return cells


def _sample_v(figures: dict | None, key: str) -> float | None:
    """The squared relative standard error of a run's APD were its pages independent: the variance of its page
    durations / pages / APD², from the window's merged histogram kept with the batches (``noise.SAMPLE_NOISE``).
    None for another figure, or a run whose stored batches have no window (finalized before it was kept)."""
    if key not in noise.SAMPLE_NOISE or not figures or not (window := figures.get(WINDOW)) or not window.get("hist"):
        return None
    hist = Histogram.from_bytes(base64.b64decode(window["hist"]))
    if hist.count < 2 or hist.mean <= 0:
        return None
    return hist.variance() / hist.count / hist.mean**2


# The protocol figures the verdict judges (noise.PROTOCOL_KEYS): where each is in a page's (and the total's)
# ``summary["protocols"]`` section, and what its samples are.
_PROTOCOL_PLACES = {
    "ttfe_p95_ms": ("stream", "ttfe_ms", "streams"),
    "gap_p95_ms": ("stream", "gap_ms", "streams"),
    "rtt_p95_ms": ("websocket", "rtt_ms", "round trips"),
}


def _protocol_figure(run: Run, page: str | None, key: str) -> tuple[dict, int] | None:
    """A run's percentiles ({p90, p95, p99 …} in ms) of a protocol figure of a page (or of all pages) and
    the streams or round trips behind them; None when the run has none."""
    summary = RunSummary.of(run)
    part, field, _ = _PROTOCOL_PLACES[key]
    if page is None:
        totals = summary.protocol_totals
        n = (totals.get("streams") or 0) if part == "stream" else summary.ws_round_trips
        figures = totals.get(field)
    else:
        found = (summary.protocol_page(page) or {}).get(part) or {}
        n = found.get("responses" if part == "stream" else "round_trips") or 0
        figures = found.get(field)
    if not figures or figures.get("p95") is None:
        return None
    return figures, int(n)


def protocol_cells(baseline_runs: list[Run], run: Run) -> list[noise.Cell]:
    """The stream and WebSocket rows (per page and in total) of the figures the judged run and every baseline
    run have: none for a run without streams or WebSocket sessions. Their noise within a run is the standard
    error of a percentile (``noise.percentile_var``): the runs keep no batch figures of them."""
    summary = RunSummary.of(run)
    if not summary.protocols or not baseline_runs:
        return []
    pages = [None, *sorted(p["label"] for p in summary.protocol_pages if p.get("label") is not None)]
    cells = []
    for page in pages:
        for fig in PROTOCOL_FIGURES:
            if fig.key not in _PROTOCOL_PLACES:
                continue
            after = _protocol_figure(run, page, fig.key)
            before = [_protocol_figure(r, page, fig.key) for r in baseline_runs]
            if after is None or any(b is None for b in before):
                continue

            def v(found):
                figures, n = found
                return noise.percentile_var(figures.get("p90"), figures.get("p95"), figures.get("p99"), n)

            cells.append(
                noise.Cell(
                    page=page,
                    key=fig.key,
                    lower_is_better=fig.lower_is_better,
                    baseline=[float(b[0]["p95"]) for b in before],
                    value=float(after[0]["p95"]),
                    baseline_batches=[[] for _ in before],
                    batches=[],
                    baseline_pages=[b[1] for b in before],
                    pages=after[1],
                    figure=fig.name,
                    baseline_v=[v(b) for b in before],
                    v=v(after),
                    samples=_PROTOCOL_PLACES[fig.key][2],
                )
            )
    return cells


def protocol_row(cell: noise.Cell, judged: noise.Judged) -> dict:
    """A stream or WebSocket row of the verdict (the comparison has no per-page rows of them)."""
    before = sum(cell.baseline) / len(cell.baseline)
    change = judged.change_pct
    if change is None:
        change_text = "—"
    elif change == 0:
        change_text = "no change"
    else:
        change_text = f"{abs(change):.3g} % {'more' if change > 0 else 'less'}"
    row = {
        "page": cell.page,
        "figure": cell.figure,
        "verdict": judged.verdict,
        "before": format_figure(before, "ms"),
        "after": format_figure(cell.value, "ms"),
        "change": change_text,
        "noise": f"±{judged.noise_pct:.3g} % a night" if judged.noise_pct is not None else "",
        "basis": (
            f"p = {judged.p:.2g} against the spread between the baseline runs (Holm over all rows); the noise "
            f"within a run from the p95's order statistic over its {cell.pages} {cell.samples}" + net_of_drift(judged)
            if judged.p is not None
            else ""
        ),
    }
    if judged.note:
        row["basis"] = row["note"] = judged.note
    return row


def run_judge(*, run_id: int) -> RunVerdict | None:
    """Compares a finished run with its plan's baseline and stores the verdict on the run (idempotent)."""
    run = Run.objects.select_related("plan", "project").filter(id=run_id, status__in=Run.FINISHED).first()
    if run is None or run.plan is None:
        return None
    baseline = baseline_of(run.plan)
    tolerance = baseline.tolerance_pct
    side, why_not = baseline_side(run=run, baseline=baseline)
    if side is None or not run.counts:
        if side is not None:
            why_not = f"Run #{run.number} does not count: {', '.join(run.doubts)}."
        return _store(run, Verdict.NO_BASELINE, why_not, "", "", tolerance, [])
    report = compare_sides(side, side_for_run(run), title=f"Run #{run.number} vs {side.label}")
    if not report.samples:
        return _store(run, Verdict.NO_BASELINE, " ".join(report.problems), report.basis, side.label, tolerance, [])
    extra = soak.soak_rows(RunSummary.of(run), [RunSummary.of(r) for r in side.runs], tolerance)
    cells = noise_cells(report, side.runs, run)
    page_cells = len(cells)
    cells += protocol_cells(side.runs, run)  # one family with the page figures (none for a run without streams)
    family = noise.judge_cells(cells, tolerance_pct=tolerance)
    judged = {(c.page, c.figure): j for c, j in zip(cells[:page_cells], family.rows, strict=False)}
    extra = [
        *extra,
        *(protocol_row(c, j) for c, j in zip(cells[page_cells:], family.rows[page_cells:], strict=True)),
    ]
    verdict, headline, rows = judge(report, run=run, tolerance_pct=tolerance, extra_rows=extra, family=judged)
    basis = report.basis
    if report.problems:
        basis = " ".join(report.problems) + " " + basis
    return _store(
        run,
        verdict,
        headline,
        basis,
        side.label,
        tolerance,
        rows,
        provisional=family.provisional,
        provisional_reason=family.provisional_reason,
        method=family.method,
    )


def _store(run, verdict, headline, basis, label, tolerance, rows, **extra) -> RunVerdict:
    stored, _ = RunVerdict.objects.update_or_create(
        run=run,
        defaults={
            "verdict": verdict,
            "headline": headline,
            "basis": basis,
            "baseline_label": label,
            "tolerance_pct": tolerance,
            "rows": rows,
            "provisional": False,
            "provisional_reason": "",
            "method": "",
            **extra,
        },
    )
    log.info("run %s: %s against its baseline", run.id, verdict)
    return stored


PENDING_HEADLINE = VERDICT_PENDING_HEADLINE
# A verdict still pending this long after its run ended was lost on the way (a broker hiccup, a
# worker killed mid-task): the watchdog enqueues it again. Judging is idempotent.
PENDING_RETRY_S = 300


def verdict_pending(run: Run) -> RunVerdict:
    """The run's verdict row, *pending* until judged; an existing verdict is left as it is."""
    verdict, _ = RunVerdict.objects.get_or_create(
        run=run, defaults={"verdict": Verdict.PENDING, "headline": PENDING_HEADLINE}
    )
    return verdict


def pending_for(run: Run) -> RunVerdict | None:
    """What a reader shows for a finished run of a plan whose verdict row is not written yet: pending."""
    if run.plan_id is None or run.status not in Run.FINISHED:
        return None
    return RunVerdict(
        run=run, verdict=Verdict.PENDING, headline=PENDING_HEADLINE, computed_at=run.finished_at or timezone.now()
    )


def _enqueue_verdict(run_id: int) -> None:
    follow_up = task("baseline_verdict_task")
    # On commit: the pending row (and the run's final status) are visible to the worker.
    transaction.on_commit(lambda: follow_up.delay(run_id))


def on_run_finished(sender, run_id: int, **kwargs) -> None:
    """Marks the verdict of a finished run of a plan *pending* and enqueues its judging on the bookkeeping
    queue (every run of a plan, whoever started it); a run without a plan is only notified.

    Never computed here: the signal is sent by the shard that finalized the run.
    """
    run = Run.objects.filter(id=run_id, status__in=Run.FINISHED).only("id", "plan_id", "status").first()
    if run is None:
        return
    try:
        if run.plan_id is None:
            name = "run_notify_task"
            follow_up = task(name)
            transaction.on_commit(lambda: follow_up.delay(run_id))
        else:
            name = "baseline_verdict_task"
            verdict_pending(run)
            # Judged first, and notified by the same task with its verdict.
            _enqueue_verdict(run_id)
    except Exception:  # a broker hiccup must not break the run's finish; the watchdog catches up
        log.exception("run %s: could not enqueue %s", run_id, name)


def verdicts_catch_up(*, now=None) -> int:
    """Enqueues again the verdicts still pending PENDING_RETRY_S after they were last touched (watchdog)."""
    now = now or timezone.now()
    stale = list(
        RunVerdict.objects.filter(
            verdict=Verdict.PENDING, computed_at__lt=now - timedelta(seconds=PENDING_RETRY_S)
        ).values_list("id", "run_id")[:100]
    )
    for verdict_id, run_id in stale:
        # Touch it first, so the next watchdog tick does not enqueue it again while it waits in the queue.
        RunVerdict.objects.filter(id=verdict_id, verdict=Verdict.PENDING).update(computed_at=now)
        try:
            _enqueue_verdict(run_id)
        except Exception:
            log.exception("run %s: could not enqueue its verdict again", run_id)
    return len(stale)


class BaselineError(ValueError):
    """The baseline cannot be pinned; the message is for the user."""


def baseline_save(*, plan, kind: str, last_n: int, run=None, trial_set=None, tolerance_pct: float) -> Baseline:
    """Pins what the plan's runs are judged against; the run or trial set must be of the same plan and count."""
    if kind == Baseline.Kind.RUN:
        if run is None or run.plan_id != plan.id:
            raise BaselineError("Choose a finished run of this plan.")
        if not selectors.baseline_eligible(Run.objects.filter(id=run.id)).exists() or not run.counts:
            doubts = ", ".join(run.doubts) or run.get_status_display().lower()
            raise BaselineError(f"Run #{run.number} cannot be a baseline ({doubts}): choose a run that counts.")
    if kind == Baseline.Kind.TRIAL_SET:
        if trial_set is None or trial_set.plan_id != plan.id:
            raise BaselineError("Choose a trial set of this plan.")
        if not any(r.counts for r in trial_set.runs.all()):
            raise BaselineError(f"The trial set “{trial_set}” has no run that counts: choose another.")
    if not 1 <= last_n <= 20:
        raise BaselineError("N is between 1 and 20.")
    if not 0 <= tolerance_pct <= 1000:
        raise BaselineError("The tolerance is between 0 and 1000 %.")
    baseline, _ = Baseline.objects.update_or_create(
        plan=plan,
        defaults={
            "kind": kind,
            "last_n": last_n,
            "run": run if kind == Baseline.Kind.RUN else None,
            "trial_set": trial_set if kind == Baseline.Kind.TRIAL_SET else None,
            "tolerance_pct": tolerance_pct,
        },
    )
    return baseline


def _ledger_event(*, run: Run, user, title: str, reason: str):
    """Writes an accepted baseline into the environment's ledger (an entry that touches no key)."""
    from portal.history.models import TuningChange
    from portal.history.services import EnvironmentBusyForChange, change_apply

    change = TuningChange.objects.create(
        environment=run.environment,
        made_by=user,
        category=TuningChange.Category.BASELINE,
        title=title[:200],
        reason=reason,
        edits=[],
    )
    try:
        return change_apply(change, user=user, call_hook_first=False)
    except EnvironmentBusyForChange as exc:
        raise BaselineError(str(exc)) from None


def regression_accept(*, run: Run, user, reason: str = "", change=None) -> list[RunVerdict]:
    """Accepts a regressed run's level as the plan's new normal, with who and why; or links the tuning change
    that explains it. The later runs of the same regression are accepted with it, so the rolling baseline
    takes them all in. Returns the verdicts accepted.

    Refused (nothing changes) without a regression to accept, without a reason, or with a change that is
    not applied on the run's environment.
    """
    reason = (reason or "").strip()
    verdict = RunVerdict.objects.filter(run=run).first()
    if verdict is None or not verdict.can_be_accepted:
        state = "not judged yet" if verdict is None else verdict.get_verdict_display().lower()
        if verdict is not None and verdict.is_accepted:
            state = "accepted already"
        raise BaselineError(f"Run #{run.number} has no regression to accept: its verdict is {state}.")
    if change is not None:
        if change.environment_id != run.environment_id or not change.is_applied:
            raise BaselineError("Link a tuning change applied on the run's environment.")
    elif not reason:
        raise BaselineError("Say why the new level is normal (a reason is recorded in the ledger).")
    if run.environment_id is None:
        raise BaselineError("The run's environment was deleted: there is no ledger to record the acceptance in.")
    with transaction.atomic():
        streak = list(
            RunVerdict.objects.select_for_update()
            .filter(run__plan_id=run.plan_id, run__number__gte=run.number, verdict=Verdict.REGRESSED)
            .filter(accepted_at__isnull=True, accepted_change__isnull=True)
            .select_related("run")
            .order_by("run__number")
        )
        if change is None:
            numbers = ", ".join(f"#{v.run.number}" for v in streak)
            title = f"Baseline accepted: the level of run{'s' if len(streak) > 1 else ''} {numbers} is the new normal"
            change = _ledger_event(run=run, user=user, title=title, reason=reason)
        now = timezone.now()
        for v in streak:
            v.accepted_at, v.accepted_by, v.accept_reason, v.accepted_change = now, user, reason, change
            v.save(update_fields=["accepted_at", "accepted_by", "accept_reason", "accepted_change"])
    log.info("run %s: regression accepted by %s (%s runs)", run.id, user, len(streak))
    return streak
