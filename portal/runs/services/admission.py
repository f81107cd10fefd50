"""Admission: generator slots are a shared, managed resource (issue 25, docs/capacity.md).

Workers register their engine slots, labels and queues with a heartbeat (``GeneratorWorker``).
A run waits *queued* (waiting for capacity) until all of its shards can start together; an
admission pass then starts it (``run_start``: shards, and the common start time, set now).

The order between waiting runs is round-robin between teams: the team with the fewest runs
admitted and still active goes first, ties to the team admitted least recently, then to the
oldest run; within a team, runs go in the order they were created. A run that does not fit the
free slots holds its pool's queue (no run behind it overtakes it, so a large run is never
starved by small ones); a run larger than the pool's whole capacity waits without holding it.

A pass runs on the bookkeeping queue after a run is created or stopped, when a shard ends, on
each beat tick (PLIMSOLL_ADMISSION_TICK) and when a worker registers; each pass locks one row
(``AdmissionPass``), so two passes never hand out the same free slots.
"""

import heapq
import itertools
import logging
import math
from collections import defaultdict, deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max
from django.utils import timezone

from portal.common import task

from ..models import AdmissionPass, GeneratorWorker, Run, RunShard, TeamQuota

log = logging.getLogger(__name__)
Status = Run.Status
ADMITTED = (Status.STARTING, Status.RUNNING, Status.CANCELLING, Status.FINISHING)


def shards_needed(users: int) -> int:
    return max(1, math.ceil(users / settings.PLIMSOLL_SHARD_MAX_USERS))


def engine_queue(pool: str) -> str:
    """The Celery queue of a pool's shards: ``engine`` for the default pool, ``engine.<pool>`` otherwise."""
    return f"engine.{pool}" if pool else "engine"


def pool_name(pool: str) -> str:
    return f"pool “{pool}”" if pool else "the default pool"


# ------------------------------------------------------------------------ the registry


def worker_heartbeat(*, node: str, host: str, slots: int, labels: dict, queues: list[str]) -> bool:
    """Registers (or refreshes) a worker; True when it is new, or came back with other slots, labels or queues."""
    now = timezone.now()
    fresh = now - timedelta(seconds=settings.PLIMSOLL_WORKER_TTL)
    values = {"host": host, "slots": slots, "labels": labels, "queues": sorted(queues)}
    before = GeneratorWorker.objects.filter(node=node).values("slots", "labels", "queues", "heartbeat_at").first()
    GeneratorWorker.objects.update_or_create(
        node=node,
        defaults={**values, "heartbeat_at": now},
        create_defaults={**values, "heartbeat_at": now, "started_at": now},
    )
    changed = before is None or before["heartbeat_at"] < fresh
    changed = changed or any(before[k] != values[k] for k in ("slots", "labels", "queues"))
    if changed:
        log.warning("worker %s registered: %s slots, labels %s, queues %s", node, slots, labels, queues)
    return changed


def worker_gone(*, node: str) -> None:
    GeneratorWorker.objects.filter(node=node).delete()


def live_workers(now: datetime | None = None):
    now = now or timezone.now()
    return GeneratorWorker.objects.filter(heartbeat_at__gte=now - timedelta(seconds=settings.PLIMSOLL_WORKER_TTL))


def pool_capacity(now: datetime | None = None) -> dict[str, int]:
    """Slots per pool over the live workers (a worker on two pools' queues counts in both)."""
    capacity: dict[str, int] = defaultdict(int)
    for worker in live_workers(now):
        for pool in worker.pools:
            capacity[pool] += worker.slots
    return dict(capacity)


def pool_used() -> dict[str, int]:
    """Slots held per pool: the pending and running shards of admitted runs."""
    rows = (
        RunShard.objects.filter(run__status__in=ADMITTED, status__in=[RunShard.Status.PENDING, RunShard.Status.RUNNING])
        .values("run__pool")
        .annotate(n=Count("id"))
    )
    return {row["run__pool"]: row["n"] for row in rows}


# ------------------------------------------------------------------------ quotas


@dataclass(frozen=True)
class Limits:
    max_runs: int  # 0: no limit
    max_users: int
    max_user_hours: int


def team_limits(team_id: int) -> Limits:
    quota = TeamQuota.objects.filter(team_id=team_id).first()

    def pick(field: str, default: int) -> int:
        value = getattr(quota, field, None) if quota is not None else None
        return default if value is None else value

    return Limits(
        max_runs=pick("max_runs", settings.PLIMSOLL_TEAM_MAX_RUNS),
        max_users=pick("max_users", settings.PLIMSOLL_TEAM_MAX_USERS),
        max_user_hours=pick("max_user_hours", settings.PLIMSOLL_TEAM_MAX_USER_HOURS),
    )


def planned_user_seconds(snapshot: dict) -> float:
    """The plan's user-seconds (for an arrival rate: its user pool over its duration, the most it can hold)."""
    from workers.engine.plan import Plan as EnginePlan
    from workers.engine.schedule import total_duration, user_windows

    profile = EnginePlan.from_dict(snapshot).profile
    if profile.open_model:
        return profile.users * total_duration(profile)
    return sum(b - a for k in range(profile.users) for a, b in user_windows(k, profile))


def team_usage(team_id: int, now: datetime | None = None) -> dict:
    """What counts against a team's limits: active runs (waiting included), user-hours this month (UTC)."""
    now = now or timezone.now()
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    runs = Run.objects.filter(project__team_id=team_id, kind=Run.Kind.NATIVE)
    active = runs.filter(status__in=Run.ACTIVE).count()
    user_seconds = 0.0
    for load, snapshot, status in runs.filter(created_at__gte=month).values_list("load", "plan_snapshot", "status"):
        if load:  # finished: what it achieved
            user_seconds += load["achieved"] if load.get("unit") == "user-seconds" else 0.0
        elif status in Run.ACTIVE:  # running or waiting: what it plans
            user_seconds += planned_user_seconds(snapshot)
    return {"active_runs": active, "user_hours": round(user_seconds / 3600, 2)}


def quota_problem(team_id: int, *, users: int, user_seconds: float, counting_itself: bool) -> str:
    """Why a run of ``users`` and ``user_seconds`` is over its team's limits (the limit and the usage); "" if not."""
    limits = team_limits(team_id)
    usage = team_usage(team_id)
    active = usage["active_runs"] - (1 if counting_itself else 0)
    if limits.max_users and users > limits.max_users:
        return f"The run needs {users} users; your team's limit is {limits.max_users} users per run."
    if limits.max_runs and active >= limits.max_runs:
        return (
            f"Your team has {active} run{'s' if active != 1 else ''} active or waiting; its limit is "
            f"{limits.max_runs} at once. Stop one, or wait until one ends."
        )
    hours = usage["user_hours"] - (user_seconds / 3600 if counting_itself else 0.0)
    if limits.max_user_hours and hours + user_seconds / 3600 > limits.max_user_hours:
        return (
            f"The run needs {user_seconds / 3600:.1f} user-hours; your team has used {hours:.1f} of its "
            f"{limits.max_user_hours} user-hours this month."
        )
    return ""


# ------------------------------------------------------------------------ refusal at once


def admission_refusal(*, snapshot: dict, pool: str, team_id: int) -> str:
    """Why a run can never be admitted, in words a tenant can act on; "" when it can wait its turn."""
    from workers.engine.plan import Plan as EnginePlan

    users = EnginePlan.from_dict(snapshot).profile.users
    need = shards_needed(users)
    if problem := quota_problem(
        team_id, users=users, user_seconds=planned_user_seconds(snapshot), counting_itself=False
    ):
        return problem
    capacity = pool_capacity().get(pool, 0)
    workers = live_workers().count()
    if pool and capacity == 0:
        return f"No worker of {pool_name(pool)} is running, so the run cannot start: ask an operator to start one."
    if capacity and need > capacity:
        return (
            f"The run needs {need} shards of {settings.PLIMSOLL_SHARD_MAX_USERS} users ({users} users) to start "
            f"together, but {pool_name(pool)} has {capacity} slot{'s' if capacity != 1 else ''} on {workers} "
            f"worker{'s' if workers != 1 else ''}: lower the plan's users to "
            f"{capacity * settings.PLIMSOLL_SHARD_MAX_USERS} or fewer, or ask an operator to add workers."
        )
    return ""


# ------------------------------------------------------------------------ the fair order


@dataclass
class Waiting:
    run_id: int
    team_id: int
    created_at: float  # epoch seconds
    shards: int
    pool: str = ""
    duration: float = 0.0
    users: int = 0


def fair_order(waiting: list[Waiting], team_active: dict[int, int], team_last: dict[int, float]) -> list[Waiting]:
    """Round-robin between teams (see the module): each team's oldest run first, teams by their active runs,
    then by their last admission (never admitted first), then by their oldest waiting run."""
    by_team: dict[int, deque[Waiting]] = defaultdict(deque)
    for w in sorted(waiting, key=lambda w: (w.created_at, w.run_id)):
        by_team[w.team_id].append(w)
    seq = itertools.count()
    heap = [
        (team_active.get(team, 0), team_last.get(team, float("-inf")), runs[0].created_at, next(seq), team)
        for team, runs in by_team.items()
    ]
    heapq.heapify(heap)
    order = []
    turn = itertools.count(1)
    while heap:
        active, _, _, _, team = heapq.heappop(heap)
        runs = by_team[team]
        order.append(runs.popleft())
        if runs:
            # Its next run counts this one as admitted: one more active, admitted last.
            heapq.heappush(heap, (active + 1, 1e18 + next(turn), runs[0].created_at, next(seq), team))
    return order


def plan_admissions(order: list[Waiting], free: dict[str, int], capacity: dict[str, int]) -> list[Waiting]:
    """The runs of ``order`` that start now; a run that does not fit the free slots holds its pool's queue."""
    free = dict(free)
    held: set[str] = set()
    admitted = []
    for w in order:
        if w.pool in held or w.shards > capacity.get(w.pool, 0):
            continue
        if free.get(w.pool, 0) >= w.shards:
            free[w.pool] = free.get(w.pool, 0) - w.shards
            admitted.append(w)
        else:
            held.add(w.pool)
    return admitted


# ------------------------------------------------------------------------ the pass


def _waiting_runs() -> list[Waiting]:
    rows = Run.objects.filter(status=Status.QUEUED, cancel_requested=False, kind=Run.Kind.NATIVE).values_list(
        "id", "project__team_id", "created_at", "plan_snapshot", "pool"
    )
    waiting = []
    for run_id, team_id, created_at, snapshot, pool in rows:
        from workers.engine.plan import Plan as EnginePlan
        from workers.engine.plan import PlanError
        from workers.engine.schedule import total_duration

        try:
            profile = EnginePlan.from_dict(snapshot).profile
        except PlanError:  # a snapshot the engine cannot read can never start: run_start ends it in error
            log.warning("run %s: its plan snapshot cannot be read; left out of the queue", run_id)
            continue
        waiting.append(
            Waiting(
                run_id,
                team_id,
                created_at.timestamp(),
                shards_needed(profile.users),
                pool,
                total_duration(profile),
                profile.users,
            )
        )
    return waiting


def _team_state(now: datetime) -> tuple[dict[int, int], dict[int, float]]:
    active = dict(
        Run.objects.filter(status__in=ADMITTED)
        .values_list("project__team_id")
        .annotate(n=Count("id"))
        .values_list("project__team_id", "n")
    )
    last = {
        team: at.timestamp()
        for team, at in Run.objects.filter(admitted_at__gte=now - timedelta(days=1))
        .values_list("project__team_id")
        .annotate(at=Max("admitted_at"))
        .values_list("project__team_id", "at")
    }
    return active, last


def admit() -> list[int]:
    """One admission pass: starts every waiting run whose shards can all start now, in the fair order."""
    from .lifecycle import _run_error, run_start

    with transaction.atomic():
        # The lock: an UPDATE holds the row (PostgreSQL) or the database (SQLite) until the commit.
        now = timezone.now()
        if not AdmissionPass.objects.filter(id=1).update(last_pass_at=now):
            AdmissionPass.objects.get_or_create(id=1, defaults={"last_pass_at": now})
            AdmissionPass.objects.select_for_update().get(id=1)
        waiting = _waiting_runs()
        if not waiting:
            return []
        capacity = pool_capacity(now)
        used = pool_used()
        free = {pool: slots - used.get(pool, 0) for pool, slots in capacity.items()}
        active, last = _team_state(now)
        admitted = []
        for w in plan_admissions(fair_order(waiting, active, last), free, capacity):
            # A limit lowered while the run waited: it is refused now, with the limit and the usage.
            planned = planned_user_seconds(Run.objects.values_list("plan_snapshot", flat=True).get(id=w.run_id))
            if problem := quota_problem(w.team_id, users=w.users, user_seconds=planned, counting_itself=True):
                _run_error(w.run_id, f"Refused while waiting for capacity: {problem}")
                continue
            run_start(w.run_id)
            admitted.append(w.run_id)
    if admitted:
        log.info("admitted runs %s", admitted)
    return admitted


def admit_soon() -> None:
    """Asks for an admission pass on the bookkeeping queue (after the caller's commit); never raises."""

    def send() -> None:
        try:
            task("admit_task").apply_async(retry=True, retry_policy={"max_retries": 1, "interval_start": 0})
        except Exception:  # no broker now: the beat's tick runs the pass
            log.exception("could not ask for an admission pass; the next tick runs it")

    transaction.on_commit(send)


# ------------------------------------------------------------------------ what a waiting run sees


def run_queue(run: Run, now: datetime | None = None) -> dict | None:
    """A waiting run's place: position in its pool's queue, runs ahead, the estimated start, and why it waits."""
    if run.status != Status.QUEUED or run.kind != Run.Kind.NATIVE:
        return None
    now = now or timezone.now()
    capacity = pool_capacity(now)
    total = capacity.get(run.pool, 0)
    waiting = [w for w in _waiting_runs() if w.pool == run.pool]
    active, last = _team_state(now)
    order = fair_order(waiting, active, last)
    mine = next((i for i, w in enumerate(order) if w.run_id == run.id), None)
    if mine is None:
        return None
    me = order[mine]
    free = total - pool_used().get(run.pool, 0)
    if total == 0:
        reason = f"No worker of {pool_name(run.pool)} is registered: start a worker (make run, or docker compose)."
        return {
            "position": mine + 1,
            "waiting": len(order),
            "estimate_s": None,
            "reason": reason,
            "free": 0,
            "slots": 0,
        }
    if me.shards > total:
        reason = f"It needs {me.shards} slots; {pool_name(run.pool)} has {total} now (a worker left): it waits for one."
        return {
            "position": mine + 1,
            "waiting": len(order),
            "estimate_s": None,
            "reason": reason,
            "free": free,
            "slots": total,
        }
    # Estimate: the admitted runs end on their plans' schedules; the runs ahead start as slots free up.
    ends = []
    for start_at, snapshot, shards in Run.objects.filter(status__in=ADMITTED, pool=run.pool).values_list(
        "start_at", "plan_snapshot", "shard_count"
    ):
        from workers.engine.plan import Plan as EnginePlan
        from workers.engine.schedule import total_duration

        end = (start_at or now).timestamp() + total_duration(EnginePlan.from_dict(snapshot).profile)
        heapq.heappush(ends, (max(end, now.timestamp()), shards))
    t, left = now.timestamp(), free
    delay = settings.PLIMSOLL_START_DELAY
    estimate = None
    for w in order[: mine + 1]:
        if w.shards > total:
            continue
        while left < w.shards and ends:
            t, n = heapq.heappop(ends)
            left += n
        if left < w.shards:
            break
        left -= w.shards
        heapq.heappush(ends, (t + delay + w.duration, w.shards))
        if w.run_id == run.id:
            estimate = round(max(0.0, t - now.timestamp()))
    reason = (
        f"Waiting for capacity: it needs {me.shards} slot{'s' if me.shards != 1 else ''} of {pool_name(run.pool)}, "
        f"{max(free, 0)} of {total} free; {mine} run{'s' if mine != 1 else ''} ahead."
    )
    return {
        "position": mine + 1,
        "waiting": len(order),
        "estimate_s": estimate,
        "reason": reason,
        "free": max(free, 0),
        "slots": total,
    }


def pool_overview(team_id: int | None = None) -> dict:
    """The pools' slots and use, the registered workers, and (for a team) its usage, limits and waiting runs."""
    now = timezone.now()
    capacity, used = pool_capacity(now), pool_used()
    overview = {
        "pools": [
            {"pool": pool, "slots": slots, "used": used.get(pool, 0), "free": max(0, slots - used.get(pool, 0))}
            for pool, slots in sorted(capacity.items())
        ],
        "workers": list(live_workers(now).values("node", "host", "slots", "labels", "queues", "heartbeat_at")),
    }
    if team_id is not None:
        limits = team_limits(team_id)
        overview["usage"] = team_usage(team_id, now)
        overview["limits"] = {
            "max_runs": limits.max_runs or None,
            "max_users": limits.max_users or None,
            "max_user_hours": limits.max_user_hours or None,
        }
        overview["waiting"] = [
            {"run": run, "queue": run_queue(run, now)}
            for run in Run.objects.filter(project__team_id=team_id, status=Status.QUEUED).select_related("project")
        ]
    return overview
