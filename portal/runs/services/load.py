"""Planned against achieved load: a run is judged only on load that ran.

A shard's *planned* load is what the plan's schedule gives its users: user-seconds (the
length of each of its users' windows) for closed models, iterations (its share of the
arrivals) for arrival rates. Its *achieved* load is the same schedule counted only over the
seconds the shard was there, which are the seconds it wrote an interval row for (every
shard writes one per second, its heartbeat). A shard that started late misses the seconds
before its first row, a lost one those after its last, a continuation the gap of its
handoff, and a shard that never started all of them.

The rule (``PLIMSOLL_INCOMPLETE_BELOW_PCT``, default 95): a run whose total, or any one of
whose shards, achieved less than that share of its planned load is *incomplete*.
"""

import math

from django.conf import settings

from workers.engine.schedule import arrival_count, arrival_time, arrivals_until, shard_user_ids, user_windows

from ..models import GeneratorWorker, RunShard
from ..results.read import Spans, covered_spans


def _overlap(a: float, b: float, spans: Spans) -> float:
    return sum(max(0.0, min(b, end) - max(a, start)) for start, end in spans)


def _first_arrival_at(t: float, profile) -> int:
    """The index of the first arrival due at or after ``t``."""
    j = max(0, math.ceil(arrivals_until(t, profile)) - 1)
    while arrival_time(j, profile) < t:
        j += 1
    while j > 0 and arrival_time(j - 1, profile) >= t:
        j -= 1
    return j


def shard_load(profile, shard_no: int, shard_count: int, spans: Spans | None) -> tuple[float, float]:
    """(planned, achieved) load of one shard; ``spans`` None counts the whole schedule as achieved."""
    if profile.open_model:
        total = arrival_count(profile)
        planned = float(len(range(shard_no, total, shard_count)))
        if spans is None:
            return planned, planned
        achieved = 0
        for start, end in spans:
            first = _first_arrival_at(start, profile)
            stop = min(total, _first_arrival_at(end, profile))
            achieved += len(range(first + (shard_no - first) % shard_count, stop, shard_count))
        return planned, float(achieved)
    planned = achieved = 0.0
    for k in shard_user_ids(profile.users, shard_count, shard_no):
        for a, b in user_windows(k, profile):
            planned += b - a
            achieved += (b - a) if spans is None else _overlap(a, b, spans)
    return planned, achieved


def _pct(achieved: float, planned: float) -> float:
    return round(100.0 * achieved / planned, 1) if planned > 0 else 100.0


def run_load(run, shards: list[RunShard]) -> dict:
    """The run's planned and achieved load, per shard and in total, and whether it is complete (see the module)."""
    profile = run.engine_profile
    unit = "iterations" if profile.open_model else "user-seconds"
    below = settings.PLIMSOLL_INCOMPLETE_BELOW_PCT
    spans = covered_spans(run.id)
    # Which worker (Celery node), pool and labels ran each shard, for the report (issue 25): the labels
    # it claimed the shard with; the registry's for shards claimed before those were kept.
    nodes = {s.worker_node for s in shards if s.worker_node and not s.worker_labels}
    labels = dict(GeneratorWorker.objects.filter(node__in=nodes).values_list("node", "labels")) if nodes else {}
    rows, notes = [], []
    for shard in shards:
        mine = spans.get(shard.shard_no, [])
        planned, achieved = shard_load(profile, shard.shard_no, run.shard_count or len(shards), mine)
        # A shard handed on (stopped or lost) carries the lateness of whichever piece wrote its totals
        # last: a lost worker's totals die with it, so its first written second is the honest figure.
        late_ms = None if shard.handoffs else (shard.totals or {}).get("start_late_ms")
        late_s = round(late_ms / 1000, 1) if late_ms is not None else (float(mine[0][0]) if mine else None)
        ran_s = sum(end - start for start, end in mine)
        rows.append(
            {
                "shard_no": shard.shard_no,
                "users": shard.user_count,
                "planned": round(planned, 1),
                "achieved": round(achieved, 1),
                "pct": _pct(achieved, planned),
                "late_s": late_s,
                "ran_s": ran_s,
                "status": shard.status,
                "worker": shard.worker,
                "node": shard.worker_node,
                "pool": run.pool,
                "labels": shard.worker_labels or labels.get(shard.worker_node, {}),
                "spans": [list(s) for s in mine[:20]],
            }
        )
        if not mine:
            notes.append(f"shard {shard.shard_no} ({shard.user_count} users) never started")
            continue
        if late_s is not None and late_s >= 1:
            notes.append(f"shard {shard.shard_no} started {late_s:g} s late")
        for (_, gap_from), (gap_to, _) in zip(mine, mine[1:], strict=False):
            notes.append(f"shard {shard.shard_no} missed {gap_from}–{gap_to} s")
        if shard.status in (RunShard.Status.LOST, RunShard.Status.INTERRUPTED):
            notes.append(f"shard {shard.shard_no} {shard.status} at {mine[-1][1]} s")
    planned = sum(r["planned"] for r in rows)
    achieved = sum(r["achieved"] for r in rows)
    complete = _pct(achieved, planned) >= below and all(r["pct"] >= below for r in rows)
    ran = [r for r in rows if r["ran_s"] > 0]
    users_ran = sum(r["users"] for r in ran)
    for_s = max((r["ran_s"] for r in ran), default=0)
    sentence = (
        f"ran {users_ran} of {sum(r['users'] for r in rows)} users for {for_s} s: "
        f"{achieved:,.0f} of {planned:,.0f} planned {unit} ({_pct(achieved, planned):g} %)"
    )
    if notes:
        sentence += "; " + ", ".join(notes)
    return {
        "unit": unit,
        "planned": round(planned, 1),
        "achieved": round(achieved, 1),
        "pct": _pct(achieved, planned),
        "complete": complete,
        "rule_pct": below,
        "users_planned": sum(r["users"] for r in rows),
        "users_ran": users_ran,
        "sentence": sentence,
        "shards": rows,
    }
