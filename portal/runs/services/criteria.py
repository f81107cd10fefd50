"""Stop criteria: a running run whose target is plainly broken stops itself (issue 24 item 7).

A periodic task on the bookkeeping queue (beat, every PLIMSOLL_STOP_CHECK_S seconds) checks every
running run whose plan has stop criteria. Why there and not in the interval writer: a shard's sink
sees only its own rows, while a rule is about the whole run; evaluating in every sink would read all
shards' rows once per shard per second, and a sink cannot know whether the other shards have flushed
the same second yet. One evaluator reads, every few seconds, only the window's rows of each run
(``window_s`` × shards ShardInterval rows, on the (run, second, shard) index: the cost does not grow
with the run's length), up to the last second that *every* shard has written, so the figures are
exact, whatever the number of shards.

The window is the last ``window_s`` complete seconds, and it must lie inside a measured part of the
profile (the hold; each level's hold for steps): ramp-up, ramp-down and a steps profile's quiet time
are never judged. While a shard is not running (a handoff waiting for its next worker, a lost
shard) nothing is judged, so a missing shard's load never looks like a dead target.

A broken rule stops the run through the mechanism a user's Stop uses (``cancel_requested``, which
the shards see at their next flush), in one conditional UPDATE that also records the rule and the
window's figures (``Run.stopped_by``); finalize then ends the run *stopped* (lifecycle._finalize_compute).
"""

import logging
import math

from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from workers.engine.histogram import Histogram
from workers.engine.plan import PlanError, profile_from_dict
from workers.engine.schedule import measurement_windows
from workers.engine.stop_criteria import CriteriaError, Rule, evaluable, first_broken, parse_rules, stop_sentence

from ..models import Run, RunShard
from ..results import read
from ..summary import StoppedBy, StopWindow

log = logging.getLogger(__name__)
Status = Run.Status

# How far behind "now" the evaluator looks for each shard's last second: a shard silent for longer is the
# watchdog's business (lost, or handed on), and its run is not judged meanwhile.
RECENT_S = 30


def criteria_check(now=None) -> list[int]:
    """Checks every running run that has stop criteria; returns the ids of the runs it stopped."""
    now = now or timezone.now()
    runs = (
        Run.objects.filter(status=Status.RUNNING, cancel_requested=False, plan_snapshot__has_key="stop_criteria")
        .annotate(
            rules=KeyTransform("stop_criteria", "plan_snapshot"), profile=KeyTransform("profile", "plan_snapshot")
        )
        .values_list("id", "start_at", "rules", "profile")
    )
    stopped = []
    for run_id, start_at, rules, profile in runs:
        try:
            if run_criteria_check(run_id, start_at=start_at, rules=rules, profile=profile, now=now):
                stopped.append(run_id)
        except Exception:  # one run's bad data must not keep the others from being checked
            log.exception("run %s: its stop criteria could not be checked", run_id)
    return stopped


def run_criteria_check(run_id: int, *, start_at, rules, profile, now) -> bool:
    """Evaluates one run's rules over their windows; stops the run when one is broken. True: stopped."""
    if start_at is None:
        return False
    try:
        parsed = parse_rules(rules or [])
        windows = measurement_windows(profile_from_dict(profile))
    except (CriteriaError, PlanError):
        log.warning("run %s: malformed stop criteria or profile in its snapshot; not checked", run_id)
        return False
    if not parsed:
        return False
    last, shards = last_complete_second(run_id, now=now, start_at=start_at)
    if last is None:
        return False
    figures = window_figures(run_id, parsed, last=last, windows=windows, shards=shards)
    rule = first_broken(parsed, figures)
    if rule is None:
        return False
    window = figures[rule.window_s]
    if window["timed_pages"] is None:
        # The stop's record shows the window's page durations too, whatever the rule: read them once, now.
        window = window_figures(run_id, [rule], last=last, windows=windows, shards=shards, all_durations=True)[
            rule.window_s
        ]
    return run_stop(run_id, rule, window, now=now)


def last_complete_second(run_id: int, *, now, start_at) -> tuple[int | None, int]:
    """(the last second every shard of the run has written, or None when the run cannot be judged now; its shards).

    Every shard must be running (not waiting for a worker, lost or ended) and have written a second
    within the last RECENT_S seconds; the rows are looked up in that range only.
    """
    shards = list(RunShard.objects.filter(run_id=run_id).values_list("shard_no", "status"))
    if not shards or any(status != RunShard.Status.RUNNING for _no, status in shards):
        return None, len(shards)
    now_s = math.floor((now - start_at).total_seconds())
    latest = read.shards_latest(run_id, since=now_s - RECENT_S)
    if len(latest) < len(shards) or any(no not in latest for no, _status in shards):
        return None, len(shards)
    return min(latest.values()), len(shards)


def _inside_measured(first: int, last: int, windows) -> bool:
    """Seconds first..last (each [s, s+1)) lie inside one measured part of the profile."""
    return any(first >= math.ceil(start - 1e-9) and last + 1 <= end + 1e-9 for start, end, _label in windows)


def window_figures(
    run_id: int, rules: list[Rule], *, last: int, windows, shards: int, all_durations: bool = False
) -> dict[int, dict]:
    """{window_s: figures} of each rule's window ending at second ``last`` that lies inside a measured part.

    Reads the run's ShardInterval rows of the longest such window once (its seconds × shards rows):
    pages, errors and the second's merged page durations, summed over the shards. A window missing a
    shard's second (a handoff's gap, a shard that started late) is not judged: its load was not all there.
    """
    sizes = sorted({r.window_s for r in rules if _inside_measured(last + 1 - r.window_s, last, windows)})
    if not sizes:
        return {}
    first = last + 1 - sizes[-1]
    rows = read.shard_window(run_id, first=first, last=last)
    # Page durations are merged only for the windows a duration rule reads (decoding histograms is the
    # check's main cost); a pages/s or error-rate window needs only the counts.
    timed = {r.window_s for r in rules if all_durations or r.metric not in ("error_rate_pct", "pages_per_s")}
    figures = {}
    for size in sizes:
        inside = [r for r in rows if r[0] > last - size]
        if len(inside) == size * shards:  # one row per shard and second: (run, second, shard) is unique
            figures[size] = figures_of(inside, first=last + 1 - size, last=last, durations=size in timed)
    return figures


def figures_of(rows, *, first: int, last: int, durations: bool = True) -> dict:
    """The figures of (second, pages, errors, hist_bin) rows covering seconds first..last, as the summary names them.

    ``durations``: merge the page durations too (APD, percentiles); without, they are None.
    """
    seconds = last - first + 1
    pages = sum(r[1] for r in rows)
    errors = sum(r[2] for r in rows)
    merged = Histogram()
    for row in rows if durations else ():
        if row[3]:
            merged.merge(Histogram.from_bytes(row[3]))
    figures = {
        "from_s": first,
        "to_s": last + 1,
        "seconds": seconds,
        "pages": pages,
        "errors": errors,
        "error_rate_pct": round(100.0 * errors / pages, 3) if pages else 0.0,
        "pages_per_s": round(pages / seconds, 3),
        "timed_pages": merged.count if durations else None,
    }
    for key, q in (("apd_ms", None), ("p50_ms", 50), ("p90_ms", 90), ("p95_ms", 95), ("p99_ms", 99)):
        if not merged.count:
            figures[key] = None
        else:
            figures[key] = round((merged.mean if q is None else merged.percentile(q)) / 1000, 2)
    return figures


def run_stop(run_id: int, rule: Rule, window: StopWindow, *, now) -> bool:
    """Stops the run as a user's Stop does, recording the rule and its window; once (a conditional UPDATE)."""
    stopped_by: StoppedBy = {
        "rule": rule.to_dict(),
        "text": rule.text,
        "value": window.get(rule.metric),
        "window": window,
        "sentence": stop_sentence(rule, window),
        "at": now.isoformat(),
    }
    changed = Run.objects.filter(id=run_id, status=Status.RUNNING, cancel_requested=False).update(
        cancel_requested=True, status=Status.CANCELLING, stopped_by=stopped_by
    )
    if changed:
        log.warning("run %s stopped by its criteria: %s", run_id, stopped_by["sentence"])
    return bool(changed)


def criteria_state(run: Run, now=None) -> list[dict]:
    """Each rule of a running run with its window's figure now (the run page's live view), or why it waits."""
    rules = (run.plan_snapshot or {}).get("stop_criteria") or []
    try:
        parsed = parse_rules(rules)
        windows = measurement_windows(profile_from_dict(run.plan_snapshot["profile"]))
    except (CriteriaError, PlanError, KeyError):
        return []
    if not parsed:
        return []
    now = now or timezone.now()
    last, shards = last_complete_second(run.id, now=now, start_at=run.start_at) if run.start_at else (None, 0)
    figures = window_figures(run.id, parsed, last=last, windows=windows, shards=shards) if last is not None else {}
    state = []
    for rule in parsed:
        window = figures.get(rule.window_s)
        if window is None:
            state.append(
                {
                    "text": rule.text,
                    "value": None,
                    "note": "waits for a full window of the measured part, every shard in it",
                }
            )
            continue
        ok, why = evaluable(rule, window)
        state.append({"text": rule.text, "value": window.get(rule.metric) if ok else None, "note": why})
    return state
