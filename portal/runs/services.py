"""The run lifecycle: create → start (shards) → execute shards → finalize; cancel; watchdog.

Every status change is a conditional UPDATE on the expected current status, so that a
task delivered twice, a watchdog racing a finishing shard, or a Stop pressed during the
finish, each change the row once and the loser does nothing.
"""

import hashlib
import logging
import math
import os
import socket
import traceback
from datetime import UTC, datetime, timedelta

import numpy as np
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Min, Q, Sum
from django.utils import timezone

from portal.common import task
from portal.projects.models import Plan
from workers.engine.histogram import Histogram
from workers.engine.plan import Plan as EnginePlan
from workers.engine.plan import PlanError
from workers.engine.runner import HANDOFF
from workers.engine.targets import BadTargetURL, TargetNotAllowed, check_url, parse_allowlist, parse_target_url

from . import analysis, columns, result_files, storage
from .batches import BatchSampler
from .models import (
    PageInterval,
    PageRollup,
    ResultImport,
    Run,
    RunFigures,
    RunShard,
    ShardInterval,
    WatchdogView,
    run_digest,
)
from .signals import run_finished

log = logging.getLogger(__name__)
Status = Run.Status

# A run whose start task no worker took within this time ends in error, with the likely cause.
QUEUED_TIMEOUT = timedelta(seconds=120)


class RunError(Exception):
    """A run cannot be created or started; the message is for the user."""


def allowlist():
    return parse_allowlist(settings.PLIMSOLL_ALLOWED_TARGETS)


class EnvironmentBusy(RunError):
    """Another run is on the environment: two runs never overlap on one system under test."""

    def __init__(self, run: Run):
        self.run = run
        super().__init__(
            f"Run #{run.number} ({run.plan_name}) is on the environment “{run.environment_name}” now: "
            "two runs never share a system under test, because each would measure the other's load. "
            "Wait for it to end, or stop it."
        )


def target_refusal(base_url: str) -> str | None:
    """Why a run against ``base_url`` would be refused at start (the allowlist), or None.

    The start task checks again (DNS may change in between); the API asks first, so that a
    pipeline gets the reason in its answer (422) instead of a run that ends in error.
    """
    try:
        check_url(base_url, allowlist())
    except TargetNotAllowed as exc:
        return f"Target refused, no request was sent: {exc}"
    except OSError as exc:
        return f"Cannot resolve the target {base_url}: {exc}"
    return None


def active_run_on(environment_id: int) -> Run | None:
    """The run that holds the environment now, if any (queued runs hold it too)."""
    return Run.objects.filter(environment_id=environment_id, status__in=Run.ACTIVE).order_by("id").first()


class TargetBusy(EnvironmentBusy):
    """Another run loads the same target (scheme, host, port) through another environment."""

    def __init__(self, run: Run, origin: str, *, visible: bool = True):
        self.run = run
        # Another team's run is not named (its project is a 404 to this user), only that it exists.
        holder = (
            f"Run #{run.number} ({run.plan_name}) of project “{run.project.name}”, through the environment "
            f"“{run.environment_name}”,"
            if visible
            else "A run of another team"
        )
        RunError.__init__(
            self,
            f"{holder} is loading {origin} now: two runs never share a system under test, "
            "because each would measure the other's load. Wait for it to end, or stop it.",
        )


def _target_origin(base_url: str) -> str | None:
    """``scheme://host:port`` of a base URL, the unit of one-run-at-a-time (None when it does not parse)."""
    try:
        return parse_target_url(base_url).origin
    except BadTargetURL:
        return None


def active_run_on_target(base_url: str) -> Run | None:
    """The active run, on any environment, whose snapshot loads the same scheme, host and port.

    Takes a transaction-scoped advisory lock on the target first, so two runs created at once
    on two environments pointing at one system cannot both pass the check.
    """
    origin = _target_origin(base_url)
    if origin is None:
        return None
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"plimsoll-target:{origin}"])
    # SQLite (the embedded default) needs no lock: its transactions are IMMEDIATE, so writers queue.
    # Active runs are few (one per target), so comparing their origins in Python is cheap.
    for run in Run.objects.filter(status__in=Run.ACTIVE).select_related("project__team").order_by("id"):
        if _target_origin(run.plan_snapshot.get("base_url", "")) == origin:
            return run
    return None


def token_label(token) -> str:
    """``name (plim_abcdefg…)``: enough to tell tokens apart, nothing that opens a door."""
    return f"{token.name} ({token.prefix}…)"[:120] if token is not None else ""


@transaction.atomic
def run_create(*, plan: Plan, user, trial_set=None, token=None) -> Run:
    """Snapshots ``plan`` and its environment's configuration into a new queued Run and enqueues it.

    The environment is locked for the check: a run starts only on an environment no other
    run is on (EnvironmentBusy), so trial sets, experiments, schedules and people pressing
    Run never overlap on one system. The run records the environment's last applied
    tuning change, the configuration it runs under. ``token``: the API token the caller
    used, recorded (name and prefix, never the secret) so the run says "via token …".
    """
    if problems := plan.problems():
        raise RunError(" ".join(problems))
    from portal.metrics.services import metric_sources_problems

    if problems := metric_sources_problems(plan.environment):
        raise RunError(" ".join(problems))
    snapshot = plan.to_engine_dict()
    try:
        EnginePlan.from_dict(snapshot)
    except PlanError as exc:
        raise RunError(f"The plan cannot run: {exc}") from None
    duration = plan.duration
    if duration > settings.PLIMSOLL_MAX_RUN_SECONDS:
        raise RunError(f"The plan lasts {duration:.0f} s, more than the {settings.PLIMSOLL_MAX_RUN_SECONDS} s allowed.")
    # Lock the environment, then the project row: one run per environment, and two runs
    # started at once get different numbers.
    environment = type(plan.environment).objects.select_for_update().get(pk=plan.environment_id)
    if busy := active_run_on(environment.id):
        raise EnvironmentBusy(busy)
    if busy := active_run_on_target(snapshot["base_url"]):
        visible = busy.project.team.memberships.filter(user=user).exists() if user is not None else False
        raise TargetBusy(busy, _target_origin(snapshot["base_url"]), visible=visible)
    project = type(plan.project).objects.select_for_update().get(pk=plan.project_id)
    number = (project.runs.aggregate(n=Max("number"))["n"] or 0) + 1
    last_change = environment.changes.filter(status="applied").order_by("-number").first()
    run = Run.objects.create(
        project=project,
        number=number,
        plan=plan,
        environment=environment,
        plan_name=plan.name,
        environment_name=environment.name,
        plan_snapshot=snapshot,
        analysis_settings=plan.analysis_settings(),
        config_snapshot=list(environment.configuration),
        tuning_change=last_change,
        trial_set=trial_set,
        created_by=user,
        api_token=token,
        api_token_label=token_label(token),
    )
    transaction.on_commit(lambda: _enqueue_start(run.id))
    return run


# Publishing to a dead broker is retried this briefly before the run ends in error.
ENQUEUE_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


def _enqueue_start(run_id: int) -> None:
    """Sends the start task; a broker that cannot be reached ends the run in error with the reason."""
    start_run_task = task("start_run_task")

    try:
        start_run_task.apply_async((run_id,), retry=True, retry_policy=ENQUEUE_RETRY)
    except Exception as exc:  # kombu's OperationalError, or a transport's own connection error
        log.exception("run %s: could not enqueue its start", run_id)
        _run_error(
            run_id,
            f"The run could not be queued: the task broker is unreachable ({exc}). "
            "Check that Redis (or the broker at CELERY_BROKER_URL) is running, then run the plan again.",
        )


def run_start(run_id: int) -> None:
    """Checks the target, splits the users into shards and enqueues them with a common start time."""
    if not Run.objects.filter(id=run_id, status=Status.QUEUED).update(status=Status.STARTING):
        return  # already started (a repeated message), cancelled, or gone
    run = Run.objects.get(id=run_id)
    if run.cancel_requested:
        _run_end(run_id, Status.CANCELLED, from_statuses=[Status.STARTING])
        return
    base_url = run.plan_snapshot["base_url"]
    try:
        check_url(base_url, allowlist())
    except TargetNotAllowed as exc:
        _run_error(run_id, f"Target refused, no request was sent: {exc}")
        return
    except OSError as exc:
        _run_error(run_id, f"Cannot resolve the target {base_url}: {exc}")
        return
    # The profile's peak users (the largest level of a steps profile, max_users of an arrival rate).
    users = run.engine_profile.users
    shard_count = math.ceil(users / settings.PLIMSOLL_SHARD_MAX_USERS)
    with transaction.atomic():
        RunShard.objects.bulk_create(
            [
                RunShard(run_id=run_id, shard_no=n, user_count=len(range(n, users, shard_count)))
                for n in range(shard_count)
            ],
            ignore_conflicts=True,
        )
        start_at = timezone.now() + timedelta(seconds=settings.PLIMSOLL_START_DELAY)
        Run.objects.filter(id=run_id).update(shard_count=shard_count, start_at=start_at)
        run_shard_task = task("run_shard_task")

        for n in range(shard_count):
            transaction.on_commit(lambda n=n: run_shard_task.delay(run_id, n))
    _metrics_start(run_id)


def _metrics_start(run_id: int) -> None:
    """Starts scraping the environment's servers (portal.metrics); a failure there never stops the run."""
    from portal.metrics.services import collection_start

    try:
        collection_start(run_id=run_id)
    except Exception:
        log.exception("run %s: server metrics could not start; the run goes on without them", run_id)


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def shard_execute(run_id: int, shard_no: int, *, worker_node: str = "") -> None:
    """Runs one shard to its end, or until its worker hands it on; safe to call twice (the second finds it claimed).

    ``worker_node`` is the Celery node's name: its warm shutdown asks the shards it runs for a
    handoff (``shards_hand_off``). A shard released as a continuation (``resume_second`` > 0)
    resumes the plan's schedule at that second.
    """
    from workers.engine import run_sync

    now = timezone.now()
    me = _worker_name()
    claimed = RunShard.objects.filter(run_id=run_id, shard_no=shard_no, status=RunShard.Status.PENDING).update(
        status=RunShard.Status.RUNNING,
        worker=me,
        worker_node=worker_node,
        claimed_at=now,
        heartbeat_at=now,
        handoff_requested=False,
        released_at=None,
    )
    if not claimed:
        log.info("run %s shard %s: already claimed or gone; nothing to do", run_id, shard_no)
        return
    run = Run.objects.get(id=run_id)
    shard = run.shards.get(shard_no=shard_no)
    if run.cancel_requested or run.status not in (Status.STARTING, Status.RUNNING):
        _shard_end(shard, RunShard.Status.DONE)
        run_finalize(run_id)
        return
    if shard.handoffs and "resumed_on" not in shard.handoffs[-1]:
        if now >= run.start_at + timedelta(seconds=run.planned_duration):
            _continuation_end(shard, "the plan's end came first")  # too late: nothing of the schedule is left
            run_finalize(run_id)
            return
        _note_resumed(shard, me, now, run.start_at)
    plan = EnginePlan.from_dict(run.plan_snapshot)
    sink = ShardSink(run_id, shard_no, worker=me)
    # This thread's connection would sit idle for the whole run (the sink has its own), and a
    # database outage meanwhile would leave it broken for the end: connect afresh then.
    connection.close()
    try:
        totals = run_sync(
            plan,
            sink=sink,
            # Users k % shard_count == shard_no (and so many arrivals, and unique data-set rows).
            shard=(shard_no, run.shard_count),
            start_at=run.start_at.timestamp(),
            allowlist=allowlist(),
            resume_at=shard.resume_second,
            data_taken=(shard.totals or {}).get("data_taken"),
        )
    except TargetNotAllowed as exc:
        _shard_end(shard, RunShard.Status.FAILED, error=f"Target refused at connect time: {exc}")
    except Exception as exc:  # the run must end with the reason, whatever broke
        log.exception("run %s shard %s failed", run_id, shard_no)
        _shard_end(shard, RunShard.Status.FAILED, error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
    else:
        merged = _merge_totals(shard.totals, _totals_dict(totals))
        resume = sink.last_second + 1 if sink.last_second is not None else shard.resume_second
        handing_off = totals.handed_off and resume < run.planned_duration and not run.cancel_requested
        released = handing_off and _shard_release(
            shard, worker=me, resume_second=resume, kind="stopped", totals=merged, stopped_at=sink.handoff_at
        )
        if released:
            return  # another worker takes it from here
        _shard_end(shard, RunShard.Status.DONE, totals=merged)
    run_finalize(run_id)


def _merge_totals(before: dict | None, now: dict) -> dict:
    """A shard's totals over all the workers that ran a part of it."""
    if not before:
        return now
    merged = dict(now)
    for key in ("requests", "errors", "aborted", "bytes_in"):
        merged[key] = before.get(key, 0) + now.get(key, 0)
    merged["duration_s"] = max(before.get("duration_s", 0), now.get("duration_s", 0))
    merged["start_late_ms"] = before.get("start_late_ms", now.get("start_late_ms"))  # the first start's
    return merged


def _shard_release(
    shard: RunShard, *, worker: str, resume_second: int, kind: str, totals: dict | None, stopped_at=None
) -> bool:
    """Offers the rest of the shard's schedule to any worker: pending again, resuming at ``resume_second``.

    Its task is queued again; the watchdog re-sends it while nobody claims it, and after
    PLIMSOLL_HANDOFF_GRACE seconds ends the shard interrupted (or lost).
    """
    now = timezone.now()
    handoff = {
        "kind": kind,
        "worker": shard.worker,
        "stopped_at_s": resume_second,
        # When the worker began to stop (its drain), so the gap counts the drain and the flush too.
        "stopped_at": (stopped_at or now).isoformat(),
        "released_at": now.isoformat(),
    }
    with transaction.atomic():
        released = RunShard.objects.filter(
            id=shard.id, status__in=[RunShard.Status.RUNNING, RunShard.Status.LOST], worker=worker
        ).update(
            status=RunShard.Status.PENDING,
            resume_second=resume_second,
            released_at=now,
            handoff_requested=False,
            handoffs=[*RunShard.objects.get(id=shard.id).handoffs, handoff],
            totals=totals,
        )
        if released:
            run_id, shard_no = shard.run_id, shard.shard_no
            transaction.on_commit(lambda: _send_shard(run_id, shard_no))
    if released:
        log.warning("run %s shard %s released at second %s (%s)", shard.run_id, shard.shard_no, resume_second, kind)
    return bool(released)


def _send_shard(run_id: int, shard_no: int) -> None:
    """Queues a shard's task; a broker that cannot be reached now is retried by the watchdog."""
    run_shard_task = task("run_shard_task")

    try:
        run_shard_task.apply_async((run_id, shard_no), retry=True, retry_policy=ENQUEUE_RETRY)
    except Exception:
        log.exception("run %s shard %s: could not queue its task; the watchdog sends it again", run_id, shard_no)


def _note_resumed(shard: RunShard, worker: str, now, start_at) -> None:
    """Completes the shard's last handoff on the timeline: where, when and after how long it resumed."""
    handoffs = list(shard.handoffs)
    last = dict(handoffs[-1])
    released = datetime.fromisoformat(last.get("stopped_at") or last["released_at"])
    last.update(
        resumed_on=worker,
        resumed_at_s=max(shard.resume_second, math.floor((now - start_at).total_seconds())),
        gap_s=round((now - released).total_seconds(), 1),
    )
    handoffs[-1] = last
    RunShard.objects.filter(id=shard.id).update(handoffs=handoffs, error_message="")
    shard.handoffs = handoffs


def shards_hand_off(*, worker_node: str) -> int:
    """Asks the shards a Celery node runs to hand over (its warm shutdown); they see it at their next flush."""
    return RunShard.objects.filter(status=RunShard.Status.RUNNING, worker_node=worker_node).update(
        handoff_requested=True
    )


def _totals_dict(totals) -> dict:
    return {
        "requests": totals.requests,
        "errors": totals.errors,
        "aborted": totals.aborted,
        "bytes_in": totals.bytes_in,
        "duration_s": round(totals.duration_s, 3),
        # How long after the run's common start this shard began: shards must start together.
        "start_late_ms": round(totals.start_late_s * 1000, 2),
        # Unique data-set rows taken (rows the shard's continuation must not use again).
        "data_taken": dict(totals.data_taken),
    }


def _shard_end(shard: RunShard, status: str, *, error: str = "", totals: dict | None = None) -> None:
    # Only a running (or pending) shard ends here: one the watchdog declared lost stays lost.
    RunShard.objects.filter(id=shard.id, status__in=[RunShard.Status.RUNNING, RunShard.Status.PENDING]).update(
        status=status, finished_at=timezone.now(), error_message=error, totals=totals
    )


SHARD_INTERVAL_FIELDS = [
    "active_users",
    "iterations_started",
    "iterations_completed",
    "iterations_dropped",
    "loop_lag_p99_ms",
    "loop_lag_max_ms",
    "cpu_pct",
]
PAGE_INTERVAL_FIELDS = [
    "pages",
    "hits",
    "errors",
    "errors_by_kind",
    "error_samples",
    "bytes_in",
    "bytes_out",
    "hist_bin",
    "ttfb_bin",
    "connect_count",
    "connect_sum_us",
]
SHARD_TOTAL_FIELDS = [
    "pages",
    "errors",
    "latency_sum_us",
    "latency_count",
    "pages_total",
    "errors_total",
    "latency_sum_total",
    "latency_count_total",
    "dropped_total",
    "hits",
    "bytes_in",
    "hist_bin",
]


def _page_row(run_id: int, shard_no: int, second: int, label: str, stats: dict) -> PageInterval:
    connect = stats.get("connect_hist") or {}
    return PageInterval(
        run_id=run_id,
        shard_no=shard_no,
        second=second,
        label=label[:210],
        pages=stats.get("pages", 0),
        hits=stats.get("hits", 0),
        errors=stats.get("errors", 0),
        errors_by_kind=stats.get("errors_by_kind", {}),
        error_samples=stats.get("error_samples", {}),
        bytes_in=stats.get("bytes_in", 0),
        bytes_out=stats.get("bytes_out", 0),
        hist_bin=storage.encode(stats.get("hist")),
        ttfb_bin=storage.encode(stats.get("ttfb_hist")),
        connect_count=connect.get("n", 0),
        connect_sum_us=connect.get("sum", 0),
    )


def _shard_totals(run_id: int, shard_no: int, second: int, labels: dict, dropped: int) -> dict:
    """This second's totals over all labels, and the running totals up to it.

    The running totals of latency and dropped iterations stay null after a row that lacks them
    (written before they existed): a sum that starts from an unknown is unknown.
    """
    merged = Histogram()
    for stats in labels.values():
        if stats.get("hist"):
            merged.merge(Histogram.from_dict(stats["hist"]))
    this = {
        "pages": sum(stats.get("pages", 0) for stats in labels.values()),
        "errors": sum(stats.get("errors", 0) for stats in labels.values()),
        "latency_sum_us": sum((stats.get("hist") or {}).get("sum", 0) for stats in labels.values()),
        "latency_count": sum((stats.get("hist") or {}).get("n", 0) for stats in labels.values()),
    }
    extra = {
        "hits": sum(stats.get("hits", 0) for stats in labels.values()),
        "bytes_in": sum(stats.get("bytes_in", 0) for stats in labels.values()),
        "hist_bin": merged.to_bytes(),  # empty, not null, when no page ended: null marks an older row
    }
    before = ShardInterval.objects.filter(run_id=run_id, shard_no=shard_no, second__lt=second).order_by("-second")
    totals = before.values_list(
        "pages_total", "errors_total", "latency_sum_total", "latency_count_total", "dropped_total"
    ).first() or (0, 0, 0, 0, 0)
    adds = (this["pages"], this["errors"], this["latency_sum_us"], this["latency_count"], dropped)
    keys = ("pages_total", "errors_total", "latency_sum_total", "latency_count_total", "dropped_total")
    return this | extra | {k: None if t is None else t + a for k, t, a in zip(keys, totals, adds, strict=True)}


def interval_write(run_id: int, shard_no: int, report: dict) -> None:
    """Stores one second of a shard (an engine interval report): the one way interval rows are written.

    The engine's sink calls it every second; an imported run's file is stored through it too
    (issue 18), so both kinds of run have the same rows. Upserts on the natural keys, so a
    report written twice replaces itself. Call it inside a transaction.
    """
    second = report["second"]
    lag = report.get("loop_lag_ms") or {}
    labels = report.get("labels", {})
    ShardInterval.objects.bulk_create(
        [
            ShardInterval(
                run_id=run_id,
                shard_no=shard_no,
                second=second,
                active_users=report.get("active_users", 0),
                iterations_started=report.get("iterations_started", 0),
                iterations_completed=report.get("iterations_completed", 0),
                iterations_dropped=report.get("iterations_dropped", 0),
                loop_lag_p99_ms=lag.get("p99"),
                loop_lag_max_ms=lag.get("max"),
                cpu_pct=report.get("cpu_pct"),
                **_shard_totals(run_id, shard_no, second, labels, report.get("iterations_dropped", 0)),
            )
        ],
        update_conflicts=True,
        unique_fields=["run", "second", "shard_no"],
        update_fields=SHARD_INTERVAL_FIELDS + SHARD_TOTAL_FIELDS,
    )
    rows = [_page_row(run_id, shard_no, second, label, stats) for label, stats in labels.items()]
    if rows:
        PageInterval.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["run", "second", "shard_no", "label"],
            update_fields=PAGE_INTERVAL_FIELDS,
        )


class ShardSink:
    """The engine's sink for one shard: writes each interval report and answers "stop?".

    Each call is the shard's heartbeat. Rows are upserted on their natural key, so a report
    written twice (a retry after a database hiccup) replaces itself and never counts twice;
    the shard's running totals are the previous second's plus this one's, so a rewrite
    recomputes the same values.
    """

    def __init__(self, run_id: int, shard_no: int, *, worker: str = ""):
        self.run_id = run_id
        self.shard_no = shard_no
        self.worker = worker
        self.last_second: int | None = None  # the last second written: a continuation resumes after it
        self.handoff_at = None  # when it first answered HANDOFF (the worker began to stop)

    def __call__(self, report: dict) -> bool:
        try:
            answer = self._write(report)
            self.last_second = report["second"]
            return answer
        except Exception:
            # A connection broken by a database outage stays broken outside a request cycle:
            # drop it, so the retry a second later connects afresh.
            connection.close_if_unusable_or_obsolete()
            raise
        finally:
            # The engine calls us from a thread of its own; don't leave its connection behind.
            if report.get("final"):
                connection.close()

    def _write(self, report: dict) -> bool:
        with transaction.atomic():
            interval_write(self.run_id, self.shard_no, report)
            shard = self._heartbeat()
            Run.objects.filter(id=self.run_id, status=Status.STARTING).update(status=Status.RUNNING)
        run = Run.objects.only("cancel_requested", "status").get(id=self.run_id)
        # Stop when the user asked to, or when another worker holds this shard now (or nobody may).
        if run.cancel_requested or shard is None or shard.status != RunShard.Status.RUNNING:
            return True
        if shard.handoff_requested:
            self.handoff_at = self.handoff_at or timezone.now()
            return HANDOFF
        return False

    def _heartbeat(self) -> RunShard | None:
        """Beats the shard's heart if this worker still holds it; takes back a shard declared lost too early.

        A shard the watchdog declared lost while its worker was alive (a database outage hid
        its heartbeats) becomes running again at its next flush, as long as no other worker
        took it over (claiming it changes its worker) and its run has not ended; the handoff
        the watchdog offered is withdrawn.
        """
        shards = RunShard.objects.filter(run_id=self.run_id, shard_no=self.shard_no)
        if self.worker:
            shards = shards.filter(worker=self.worker)
            taken_back = shards.filter(
                status__in=[RunShard.Status.LOST, RunShard.Status.PENDING],
                run__status__in=[Status.STARTING, Status.RUNNING],
            ).update(status=RunShard.Status.RUNNING, finished_at=None, released_at=None, error_message="")
            if taken_back:
                log.warning("run %s shard %s: alive after all, taken back", self.run_id, self.shard_no)
                handoffs = shards.values_list("handoffs", flat=True).first() or []
                if handoffs and handoffs[-1].get("kind") == "lost" and "resumed_on" not in handoffs[-1]:
                    shards.update(handoffs=handoffs[:-1])
        shards.filter(status=RunShard.Status.RUNNING).update(heartbeat_at=timezone.now())
        return shards.only("status", "handoff_requested").first()


def run_cancel(*, run: Run) -> Run:
    """Asks a run to stop: shards see the request at their next flush (within about a second)."""
    Run.objects.filter(id=run.id).update(cancel_requested=True)
    Run.objects.filter(id=run.id, status__in=[Status.STARTING, Status.RUNNING]).update(status=Status.CANCELLING)
    # A run no worker has started yet ends at once.
    _run_end(run.id, Status.CANCELLED, from_statuses=[Status.QUEUED])
    run_finalize(run.id)
    run.refresh_from_db()
    return run


def _announce(run_id: int) -> None:
    """Tells the other apps (trial sets, experiments) that a run ended, once that is committed."""
    transaction.on_commit(lambda: run_finished.send(sender=Run, run_id=run_id))


def _run_error(run_id: int, message: str) -> None:
    if Run.objects.filter(id=run_id, status__in=Run.ACTIVE).update(
        status=Status.ERROR, error_message=message, finished_at=timezone.now()
    ):
        _announce(run_id)


def _run_end(run_id: int, status: str, *, from_statuses) -> int:
    changed = Run.objects.filter(id=run_id, status__in=from_statuses).update(status=status, finished_at=timezone.now())
    if changed:
        _announce(run_id)
    return changed


def run_finalize(run_id: int) -> None:
    """Once every shard has ended, computes the run's figures and its final status; runs once per run."""
    if RunShard.objects.filter(run_id=run_id).exclude(status__in=RunShard.TERMINAL).exists():
        return
    if not RunShard.objects.filter(run_id=run_id).exists():
        return
    if not Run.objects.filter(id=run_id, status__in=[Status.STARTING, Status.RUNNING, Status.CANCELLING]).update(
        status=Status.FINISHING, finishing_at=timezone.now(), finalize_attempts=1
    ):
        return
    _finalize(run_id)


def _finalize(run_id: int) -> None:
    """Computes and stores the figures; a failure leaves the run *finishing*, with the reason, for a retry.

    Safe to repeat: the figures row is replaced, and only a run still finishing changes status.
    A finalize killed outright (out of memory) leaves the same state, and ``finalize_stuck``
    retries both.
    """
    try:
        _finalize_compute(run_id)
    except Exception as exc:  # the watchdog retries, then ends the run in error with this reason
        log.exception("run %s: finalize failed", run_id)
        Run.objects.filter(id=run_id, status=Status.FINISHING).update(
            error_message=f"Computing the results failed: {type(exc).__name__}: {exc}"
        )


def _finalize_compute(run_id: int) -> None:
    """One pass over the run's rows in order of seconds feeds the summary, the chart series and
    the comparison batches; then, in one transaction, the figures are stored and the status set.
    The per-second label rows stay until ``rollup_due`` rolls them up (PLIMSOLL_ROLLUP_AFTER).
    """
    run = Run.objects.get(id=run_id)
    if run.status != Status.FINISHING:
        return  # finished meanwhile (another attempt won): its rows may already be rolled up
    shards = list(run.shards.all())
    sampler = BatchSampler(run)
    summary, series = analysis.summarize_with_series(run, sampler=sampler)
    batches = sampler.result()
    problems = [f"Shard {s.shard_no} {s.status}: {s.error_message.splitlines()[0]}" for s in shards if s.error_message]
    ended_early = (RunShard.Status.LOST, RunShard.Status.FAILED, RunShard.Status.INTERRUPTED)
    lost = [s for s in shards if s.status in ended_early]
    has_data = summary["whole_run"]["pages"] > 0
    if run.cancel_requested:
        status = Status.CANCELLED
    elif lost and not has_data:
        status = Status.ERROR
    elif lost:
        status = Status.PARTIAL
    elif (capacity := summary.get("capacity") or {}).get("search") and capacity.get("analysed"):
        # A capacity search's upper levels break by design: it has its answer unless the first level broke.
        status = Status.FAILED if capacity["capacity_users"] is None else Status.DONE
    elif summary["verdict"] == "failed":
        status = Status.FAILED
    else:
        status = Status.PASSED
    with transaction.atomic():
        if not Run.objects.select_for_update().filter(id=run_id, status=Status.FINISHING).exists():
            return
        RunFigures.objects.update_or_create(
            run_id=run_id, defaults={"series": series, "batches": [[key, figures] for key, figures in batches.items()]}
        )
        Run.objects.filter(id=run_id, status=Status.FINISHING).update(
            status=status,
            summary=summary,
            digest=run_digest(summary, run.plan_snapshot),
            error_message="\n".join(problems),
            finished_at=timezone.now(),
        )
        _announce(run_id)


class _RollupCell:
    """One label's sums over one roll-up span, all shards merged."""

    __slots__ = ("pages", "hits", "errors", "by_kind", "samples", "bytes_in", "bytes_out", "hist", "ttfb", "connect")

    def __init__(self):
        self.pages = self.hits = self.errors = self.bytes_in = self.bytes_out = 0
        self.by_kind: dict[str, int] = {}
        self.samples: dict[str, str] = {}
        self.hist, self.ttfb, self.connect = Histogram(), Histogram(), storage.Mean()

    def add(self, row) -> None:
        self.pages += row.pages
        self.hits += row.hits
        self.errors += row.errors
        self.bytes_in += row.bytes_in
        self.bytes_out += row.bytes_out
        for kind, n in row.by_kind.items():
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n
        for kind, sample in row.samples.items():
            self.samples.setdefault(kind, sample)
        self.hist.merge(row.hist)
        self.ttfb.merge(row.ttfb)
        self.connect.merge(row.connect)

    def row(self, run_id: int, second: int, label: str) -> PageRollup:
        return PageRollup(
            run_id=run_id,
            second=second,
            span_s=PageRollup.ROLLUP_S,
            label=label,
            pages=self.pages,
            hits=self.hits,
            errors=self.errors,
            errors_by_kind=self.by_kind,
            error_samples=self.samples,
            bytes_in=self.bytes_in,
            bytes_out=self.bytes_out,
            hist_bin=self.hist.to_bytes() if self.hist.count else None,
            ttfb_bin=self.ttfb.to_bytes() if self.ttfb.count else None,
            connect_count=self.connect.count,
            connect_sum_us=self.connect.sum,
        )


def _rollup_columns(run: Run, lo: int, hi: int) -> int:
    """Writes the PageRollup rows of seconds [lo, hi) (whole spans); returns the per-second rows read.

    The rows are read as numpy columns (``columns``): each span's histograms per label are merged
    in bulk, like finalize's; the errors' kinds and samples come from the few rows with errors.
    """
    span = PageRollup.ROLLUP_S
    labels: dict[str, int] = {}
    names: list[str] = []
    cells: dict[tuple[int, int], _RollupCell] = {}
    hists, ttfbs = columns.Groups(), columns.Groups()
    read = 0
    for _, _, c in columns.chunks(run, labels, since=lo, until=hi, align=span):
        if not c.size:
            continue
        read += c.size
        names.extend(list(labels)[len(names) :])
        key = (c.second // span) * len(names) + c.label  # each label id < len(names)
        keys, local = columns.local_keys(key)
        cell_keys = [(k // len(names) * span, k % len(names)) for k in keys]
        sel = local >= 0
        sums = {
            name: np.bincount(local[sel], weights=getattr(c, name)[sel], minlength=len(keys)).astype(np.int64).tolist()
            for name in ("pages", "hits", "errors", "bytes_in", "bytes_out", "connect_count", "connect_sum")
        }
        hists.add(cell_keys, local, c.hist)
        ttfbs.add(cell_keys, local, c.ttfb)
        for i, cell_key in enumerate(cell_keys):
            cell = cells.setdefault(cell_key, _RollupCell())
            cell.pages += sums["pages"][i]
            cell.hits += sums["hits"][i]
            cell.errors += sums["errors"][i]
            cell.bytes_in += sums["bytes_in"][i]
            cell.bytes_out += sums["bytes_out"][i]
            cell.connect.merge(storage.Mean(sums["connect_count"][i], sums["connect_sum"][i]))
    errors = (
        PageInterval.objects.filter(run=run, second__gte=lo, second__lt=hi, errors__gt=0)
        .order_by("second", "shard_no", "label")
        .values_list("second", "label", "errors_by_kind", "error_samples")
    )
    for second, label, by_kind, samples in errors:
        cell = cells[(second // span * span, labels[label])]
        for kind, n in (by_kind or {}).items():
            cell.by_kind[kind] = cell.by_kind.get(kind, 0) + n
        for kind, sample in (samples or {}).items():
            cell.samples.setdefault(kind, sample)
    rows = []
    for (start, label_id), cell in sorted(cells.items()):
        cell.hist, cell.ttfb = hists.close((start, label_id)), ttfbs.close((start, label_id))
        rows.append(cell.row(run.id, start, names[label_id]))
    if rows:
        PageRollup.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["run", "second", "label"], update_fields=ROLLUP_FIELDS
        )
    return read


# A roll-up row holds what a per-second page row holds, over a span.
ROLLUP_FIELDS = ["span_s", *PAGE_INTERVAL_FIELDS]


# Spans rolled up per transaction: short enough that SQLite's other writers (live shards) wait
# well under a second, long enough that PostgreSQL does few round trips.
ROLLUP_SPANS_PER_TRANSACTION = 5


def run_rollup(run_id: int) -> int:
    """Rolls a finished run's per-second PageInterval rows up into per-minute PageRollup rows; returns
    the rows rolled up.

    Only a run whose figures are stored (RunFigures) is rolled up: its pages never read the
    per-second label rows again, and the per-second run totals stay on ShardInterval. Each
    chunk of spans is written and its per-second rows deleted in one short transaction, so a
    roll-up that stops halfway leaves every second either rolled up or intact; a repeated one
    goes on where it stopped.
    """
    figures = RunFigures.objects.filter(run_id=run_id, rolled_up_at=None, run__status__in=Run.FINISHED)
    if not figures.exists():
        return 0
    run = Run(id=run_id)
    bounds = PageInterval.objects.filter(run_id=run_id).aggregate(lo=Min("second"), hi=Max("second"))
    rolled = 0
    if bounds["lo"] is not None:
        span = PageRollup.ROLLUP_S
        step = span * ROLLUP_SPANS_PER_TRANSACTION
        for lo in range(bounds["lo"] // span * span, bounds["hi"] + 1, step):
            with transaction.atomic():
                rolled += _rollup_columns(run, lo, lo + step)
                PageInterval.objects.filter(run_id=run_id, second__gte=lo, second__lt=lo + step).delete()
                _drop_merged(run_id, lo, lo + step)
    _drop_merged(run_id)  # the shards' seconds without label rows
    figures.update(rolled_up_at=timezone.now())
    return rolled


def _drop_merged(run_id: int, lo: int | None = None, hi: int | None = None) -> None:
    """Clears the shards' merged page durations (only a live chart reads them): about 90 bytes per
    label-second of a 20-page run that a finished run's pages never read again."""
    rows = ShardInterval.objects.filter(run_id=run_id, hist_bin__isnull=False)
    if lo is not None:
        rows = rows.filter(second__gte=lo, second__lt=hi)
    rows.update(hist_bin=None)


def rollup_due(limit: int = 1) -> None:
    """Rolls up runs finished more than PLIMSOLL_ROLLUP_AFTER seconds ago, ``limit`` per call.

    Called by the watchdog: a few runs a tick keeps each tick short, and the backlog after
    an upgrade drains over the following minutes.
    """
    cutoff = timezone.now() - timedelta(seconds=settings.PLIMSOLL_ROLLUP_AFTER)
    due = RunFigures.objects.filter(rolled_up_at=None, run__finished_at__lt=cutoff).order_by("run_id")
    for run_id in list(due.values_list("run_id", flat=True)[:limit]):
        try:
            run_rollup(run_id)
        except Exception:  # the figures are stored; the per-second rows just stay until the next tick
            log.exception("run %s: roll-up failed; its per-second rows are kept", run_id)


def run_figures_store(*, run: Run) -> bool:
    """Stores the chart series and comparison batches of a finished run recorded before they were
    stored at finalize (issue 9); its summary is left as it is. Returns whether it stored them.

    Afterwards the run's pages read only stored figures, and the roll-up may take its rows.
    """
    if run.is_active or RunFigures.objects.filter(run=run).exists():
        return False
    sampler = BatchSampler(run)
    _, series = analysis.summarize_with_series(run, sampler=sampler)
    batches = sampler.result()
    _, created = RunFigures.objects.get_or_create(
        run=run, defaults={"series": series, "batches": [[key, figures] for key, figures in batches.items()]}
    )
    return created


def finalize_stuck() -> None:
    """Retries the finalize of runs left *finishing* (a crash, or a worker killed for its memory).

    A run is stuck when its finalize began PLIMSOLL_FINALIZE_TIMEOUT seconds ago and it is
    still finishing. Each retry is claimed by a conditional UPDATE (two watchdogs never
    retry one run twice at once); after PLIMSOLL_FINALIZE_ATTEMPTS attempts the run ends in
    *error* with the last failure's reason, keeping its interval rows.
    """
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.PLIMSOLL_FINALIZE_TIMEOUT)
    stuck = Run.objects.filter(status=Status.FINISHING).filter(Q(finishing_at__lt=cutoff) | Q(finishing_at=None))
    for run_id, attempts, reason in stuck.values_list("id", "finalize_attempts", "error_message"):
        if attempts >= settings.PLIMSOLL_FINALIZE_ATTEMPTS:
            _run_error(
                run_id,
                f"The results could not be computed after {attempts} attempts: "
                f"{reason or 'the finalizing worker stopped without a word (killed, or out of memory)'}. "
                "The interval rows are kept.",
            )
            continue
        claimed = (
            Run.objects.filter(id=run_id, status=Status.FINISHING, finalize_attempts=attempts)
            .filter(Q(finishing_at__lt=cutoff) | Q(finishing_at=None))
            .update(finishing_at=now, finalize_attempts=attempts + 1)
        )
        if claimed:
            log.warning("run %s: finalize retried (attempt %s)", run_id, attempts + 1)
            # A task of its own: a 48 h run's finalize takes a while, and the watchdog's tick
            # must not wait for it (nor die with it, if it runs out of memory again).
            try:
                task("finalize_retry_task").apply_async((run_id,), retry=True, retry_policy=ENQUEUE_RETRY)
            except Exception:  # no broker: the claim times out and the next tick tries again
                log.exception("run %s: the finalize retry could not be sent", run_id)


def finalize_retry(run_id: int) -> None:
    """The retry ``finalize_stuck`` claimed: computes the figures of a run still *finishing*.

    Idempotent: a run that finished meanwhile (another delivery of the task won) is left alone,
    and only a run still finishing changes status.
    """
    if Run.objects.filter(id=run_id, status=Status.FINISHING).exists():
        _finalize(run_id)


def watchdog() -> None:
    """Declares silent shards lost, ends runs no worker took, and finalizes what is complete.

    It judges silence only over time it watched itself (``_watching_since``): after its own
    outage (no database, no broker, no beat) it waits a whole timeout before declaring anything.
    A silent shard's schedule is offered as a continuation (``_offer_silent_shards``).
    """
    now = timezone.now()
    timeout = timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT)
    watched = now - _watching_since(now)
    _offer_silent_shards(now, watched)
    _end_unclaimed_continuations(now)
    _resend_waiting_tasks(now)
    unclaimed = RunShard.objects.filter(
        status=RunShard.Status.PENDING, released_at__isnull=True, run__start_at__lt=now - timeout
    ).select_related("run")
    for shard in unclaimed if watched >= timeout else []:
        RunShard.objects.filter(id=shard.id, status=RunShard.Status.PENDING).update(
            status=RunShard.Status.LOST,
            finished_at=now,
            error_message=f"no worker was free to start this shard within {settings.PLIMSOLL_SHARD_TIMEOUT} s "
            "of the run's start; add workers or raise PLIMSOLL_SHARD_MAX_USERS",
        )
    queued_long = Run.objects.filter(status=Status.QUEUED, created_at__lt=now - QUEUED_TIMEOUT)
    for run_id in (queued_long if watched >= QUEUED_TIMEOUT else Run.objects.none()).values_list("id", flat=True):
        _run_error(
            run_id,
            f"No Celery worker took this run within {QUEUED_TIMEOUT.seconds} s. Is a worker running "
            "(make run starts one) and does it reach the same broker?",
        )
    active = Run.objects.filter(status__in=[Status.STARTING, Status.RUNNING, Status.CANCELLING]).filter(
        ~Q(shards__status__in=[RunShard.Status.PENDING, RunShard.Status.RUNNING])
    )
    for run_id in active.values_list("id", flat=True).distinct():
        run_finalize(run_id)
    finalize_stuck()
    rollup_due()


# --------------------------------------------------------------------------------------
# Imported runs (issue 18): another tool's result file becomes a run in the history
# --------------------------------------------------------------------------------------


def _file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _configuration_at(environment, change) -> list[dict]:
    """The environment's configuration under ``change`` (None: the initial one, before any change)."""
    if change is not None:
        return list(change.config_after)
    first = environment.changes.filter(status="applied").order_by("number").first()
    return list(first.config_before) if first else list(environment.configuration)


def _imported_snapshot(results: result_files.ImportedResults, environment, plan: Plan | None) -> dict:
    """The run's plan snapshot: what the file shows, in the engine's plan shape so every report reads it.

    Its profile is *constant* at the file's most active users for the file's duration (the whole
    file is the measurement window); its one test case, named after the tool, has a step per label
    with the path the label requested. Thresholds: those of the plan the import stands for, if one
    was picked; else none, and the run passes unless it has no data.
    """
    steps = [{"name": label[:200], "path": results.paths.get(label, "/")} for label in results.labels]
    snapshot = {
        "base_url": environment.base_url.rstrip("/"),
        "test_cases": [{"name": results.tool, "steps": steps}],
        "profile": {"kind": "constant", "users": max(results.max_users, 1), "hold": float(results.duration_s)},
    }
    if plan is not None:  # judged by the thresholds of the plan it stands for
        snapshot["thresholds"] = plan.to_engine_dict()["thresholds"]
    EnginePlan.from_dict(snapshot)  # the shape every reader of a run relies on
    return snapshot


def run_import(
    *,
    environment,
    user,
    path,
    file_name: str,
    format: str | None = None,
    plan: Plan | None = None,
    progress=None,
) -> tuple[Run, bool]:
    """An imported run of ``environment`` from a result file, and whether it is new.

    With ``plan`` (one of the environment's project), the run stands for a run of that plan: it
    joins the plan's journey and comparisons, and the plan's thresholds judge it.

    The same file (by SHA-256) imported again into the environment finds the first run. The
    file is read whole before anything is written (result_files.ResultFileError names a bad
    line), then the run, its shard and its rows are written in one transaction, through the
    same ``interval_write`` as a native run's, and finalized like one.

    ``progress(bytes_read, bytes_total)`` is called while the file is read (result_files.read).
    """
    if plan is not None and plan.project_id != environment.project_id:
        raise result_files.ResultFileError(f"The plan “{plan}” is not of this environment's project.")
    sha256 = _file_sha256(path)
    imported = Run.objects.filter(environment=environment, kind=Run.Kind.IMPORTED, source_sha256=sha256)
    if existing := imported.first():
        return existing, False
    results = result_files.read(path, format=format, progress=progress)
    try:
        return _store_import(results, environment, user, file_name, sha256, plan, imported)
    finally:
        results.discard()


def _store_import(results, environment, user, file_name, sha256, plan, imported) -> tuple[Run, bool]:

    start = datetime.fromtimestamp(results.first_second, UTC)
    change = environment.change_in_effect(start)
    snapshot = _imported_snapshot(results, environment, plan)
    source = {
        "tool": results.tool,
        "version": results.version,
        "format": results.format,
        "file_name": file_name[:255],
        "sha256": sha256,
        "lines": results.lines,
        "approximate": results.approximate,
        "late_samples": results.late_samples,
    }
    try:
        with transaction.atomic():
            project = type(environment.project).objects.select_for_update().get(pk=environment.project_id)
            run = Run.objects.create(
                project=project,
                number=(project.runs.aggregate(n=Max("number"))["n"] or 0) + 1,
                environment=environment,
                plan=plan,
                plan_name=plan.name if plan is not None else f"{results.tool} import: {file_name}"[:100],
                environment_name=environment.name,
                plan_snapshot=snapshot,
                config_snapshot=_configuration_at(environment, change),
                tuning_change=change,
                created_by=user,
                # Finishing from the start: it never runs, and the watchdog's finalize_stuck computes
                # its figures should this process die before finalize below.
                status=Status.FINISHING,
                finishing_at=timezone.now(),
                finalize_attempts=1,
                shard_count=1,
                start_at=start,
                kind=Run.Kind.IMPORTED,
                source=source,
                source_sha256=sha256,
            )
            RunShard.objects.create(
                run=run,
                shard_no=0,
                user_count=results.max_users,
                status=RunShard.Status.DONE,
                worker=f"import of {file_name}"[:200],
                finished_at=timezone.now(),
            )
            for report in results.reports():
                interval_write(run.id, 0, report)
    except IntegrityError:  # the same file, imported by a concurrent request
        return imported.get(), False
    _finalize(run.id)
    run.refresh_from_db()
    return run, True


# Watchdog passes further apart than this (beat sends one every 10 s) mean it was out in between
# (no database, broker or beat), so it saw no heartbeats then.
WATCHDOG_GAP = timedelta(seconds=15)
# A queued run, or a released shard, whose task no worker took for this long has its task sent
# again (a broker restarted without persistence loses its messages); a repeat does no harm.
RESEND_AFTER = timedelta(seconds=15)


def _watching_since(now) -> datetime:
    """Records this pass; returns since when the watchdog has watched the database without a gap."""
    with transaction.atomic():
        view = WatchdogView.objects.select_for_update().first()
        if view is None:  # the first pass ever has seen nothing yet
            WatchdogView.objects.create(last_pass_at=now, watching_since=now)
            return now
        if now - view.last_pass_at > WATCHDOG_GAP:
            log.warning("watchdog: no pass since %s; judging silence again from now", view.last_pass_at)
            view.watching_since = now
        view.last_pass_at = now
        view.save(update_fields=["last_pass_at", "watching_since"])
        return view.watching_since


def _offer_silent_shards(now, watched: timedelta) -> None:
    """A shard silent for a whole timeout that the watchdog watched: its worker died; offer the rest.

    The shard is released as a continuation from the second after its last flush (the
    seconds between that flush and the crash are missing, not zero); if no worker claims it
    within the grace period, it ends lost.
    """
    timeout = timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT)
    if watched < timeout:
        return
    silent = RunShard.objects.filter(status=RunShard.Status.RUNNING, heartbeat_at__lt=now - timeout)
    for shard in silent.select_related("run"):
        last = ShardInterval.objects.filter(run_id=shard.run_id, shard_no=shard.shard_no).aggregate(s=Max("second"))
        resume = last["s"] + 1 if last["s"] is not None else shard.resume_second
        totals = dict(shard.totals or {})
        if unique := _unique_cases(shard.run.plan_snapshot):
            # Rows a crashed shard took are unknown: the iterations it started since it was claimed
            # bound them (each took at most one row), so no row is used twice; a few may be skipped.
            started = ShardInterval.objects.filter(
                run_id=shard.run_id, shard_no=shard.shard_no, second__gte=shard.resume_second
            ).aggregate(n=Sum("iterations_started"))["n"]
            before = totals.get("data_taken") or {}
            totals["data_taken"] = {case: before.get(case, 0) + (started or 0) for case in unique}
        # Its gap counts from its last heartbeat, when it went silent, not from this verdict.
        released = _shard_release(
            shard,
            worker=shard.worker,
            resume_second=resume,
            kind="lost",
            totals=totals or None,
            stopped_at=shard.heartbeat_at,
        )
        if released:
            RunShard.objects.filter(id=shard.id).update(
                error_message=f"no heartbeat for {settings.PLIMSOLL_SHARD_TIMEOUT} s (its worker {shard.worker} "
                "probably died); every interval it recorded before is kept"
            )


def _unique_cases(plan_snapshot: dict) -> list[str]:
    """The test cases whose data set hands each row out once (``unique``)."""
    return [
        tc["name"] for tc in plan_snapshot.get("test_cases", []) if (tc.get("data_set") or {}).get("mode") == "unique"
    ]


def _end_unclaimed_continuations(now) -> None:
    """A released shard no worker claimed within the grace period (or before the plan's end) ends."""
    grace = timedelta(seconds=settings.PLIMSOLL_HANDOFF_GRACE)
    waiting = RunShard.objects.filter(status=RunShard.Status.PENDING, released_at__isnull=False).select_related("run")
    for shard in waiting:
        run_end = shard.run.start_at + timedelta(seconds=shard.run.planned_duration)
        if shard.run.cancel_requested:
            _continuation_end(shard, "the run was stopped before a worker took over")
        elif shard.released_at < now - grace:
            _continuation_end(shard, f"no worker took over within {settings.PLIMSOLL_HANDOFF_GRACE} s")
        elif run_end < now:
            _continuation_end(shard, "no worker took over before the plan's end")


def _continuation_end(shard: RunShard, why: str) -> None:
    """Ends a released shard nobody resumed: interrupted (its worker stopped) or lost (it went silent)."""
    last = shard.handoffs[-1] if shard.handoffs else {}
    if last.get("kind") == "lost":
        status = RunShard.Status.LOST
        message = f"{shard.error_message or 'its worker went silent'}; {why}"
    else:
        status = RunShard.Status.INTERRUPTED
        message = f"worker {last.get('worker', '?')} stopped at {last.get('stopped_at_s', '?')} s, {why}"
    if RunShard.objects.filter(id=shard.id, status__in=[RunShard.Status.PENDING, RunShard.Status.RUNNING]).update(
        status=status, finished_at=timezone.now(), error_message=message, released_at=None
    ):
        log.warning("run %s shard %s %s: %s", shard.run_id, shard.shard_no, status, message)


def _resend_waiting_tasks(now) -> None:
    """Sends again the tasks of queued runs and pending shards that no worker took (lost with the broker)."""
    run_shard_task, start_run_task = task("run_shard_task"), task("start_run_task")

    old = now - RESEND_AFTER
    try:
        for run_id in Run.objects.filter(status=Status.QUEUED, created_at__lt=old).values_list("id", flat=True):
            start_run_task.apply_async((run_id,), retry=True, retry_policy=ENQUEUE_RETRY)
        waiting = RunShard.objects.filter(
            Q(released_at__lt=old) | Q(released_at__isnull=True, run__start_at__lt=old), status=RunShard.Status.PENDING
        )
        for run_id, shard_no in waiting.values_list("run_id", "shard_no"):
            run_shard_task.apply_async((run_id, shard_no), retry=True, retry_policy=ENQUEUE_RETRY)
    except Exception:
        log.exception("watchdog: could not send waiting tasks again; next pass retries")


# -- Result files imported in the background (issue 18) ------------------------------------------

# The progress row is written at most this often while a file is read.
IMPORT_PROGRESS_EVERY_S = 0.5


def _result_uploads_dir():
    from pathlib import Path

    return Path(settings.VAR_DIR) / "result-uploads"


def result_upload_path(result_import: ResultImport):
    return _result_uploads_dir() / f"{result_import.code}.upload"


def result_import_create(*, environment, user, chunks, file_name: str, format: str = "", plan=None) -> ResultImport:  # noqa: A002
    """Keeps an uploaded result file (owner-only, under VAR_DIR/result-uploads) and queues its import.

    ``chunks`` is an iterable of bytes (an UploadedFile's ``chunks()``). The task that reads it,
    ``result_import_task``, deletes the file when it is done, whatever the outcome.
    """
    if plan is not None and plan.project_id != environment.project_id:
        raise result_files.ResultFileError(f"The plan “{plan}” is not of this environment's project.")
    if format and format not in result_files.FORMATS:
        raise result_files.ResultFileError(f"Unknown format {format!r}: use one of {', '.join(result_files.FORMATS)}.")
    result_import = ResultImport(
        environment=environment, plan=plan, created_by=user, file_name=file_name[:255], format=format or ""
    )
    path = result_upload_path(result_import)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only: a result file can hold URLs, user names and messages of the system under test.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    size = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                size += len(chunk)
        result_import.bytes_total = size
        result_import.save()
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    transaction.on_commit(lambda: _enqueue_result_import(result_import.id))
    return result_import


def _enqueue_result_import(import_id: int) -> None:
    task("result_import_task").delay(import_id)


def result_import_process(import_id: int) -> None:
    """Imports a queued upload into a run: the plain function behind result_import_task.

    Safe to run twice: only the call that moves the row from *queued* to *reading* works on it.
    The upload is deleted at the end whether the import succeeded or not; a file that cannot be
    read leaves the reader's message (with the bad line's number) on the row and no run.
    """
    import time

    with transaction.atomic():
        result_import = (
            ResultImport.objects.select_for_update(of=("self",))
            .select_related("environment__project", "plan", "created_by")
            .filter(id=import_id, status=ResultImport.Status.QUEUED)
            .first()
        )
        if result_import is None:
            return
        result_import.status = ResultImport.Status.READING
        result_import.save(update_fields=["status", "updated_at"])
    path = result_upload_path(result_import)
    rows = ResultImport.objects.filter(id=import_id)
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total:
            rows.update(
                bytes_read=done, bytes_total=total, status=ResultImport.Status.STORING, updated_at=timezone.now()
            )
        elif now - last[0] >= IMPORT_PROGRESS_EVERY_S:
            last[0] = now
            rows.update(bytes_read=done, bytes_total=total, updated_at=timezone.now())

    outcome = {"status": ResultImport.Status.FAILED, "finished_at": timezone.now()}
    try:
        run, created = run_import(
            environment=result_import.environment,
            user=result_import.created_by,
            path=path,
            file_name=result_import.file_name,
            format=result_import.format or None,
            plan=result_import.plan,
            progress=progress,
        )
        outcome.update(status=ResultImport.Status.DONE, run=run, already_imported=not created)
    except FileNotFoundError:
        outcome["error"] = "The uploaded file is no longer on the server (it was already processed): upload it again."
    except result_files.ResultFileError as exc:
        outcome["error"] = str(exc)
    except Exception as exc:
        log.exception("result import %s failed", import_id)
        outcome["error"] = f"The import failed ({type(exc).__name__}); nothing was imported. Try again, or report it."
        raise
    finally:
        path.unlink(missing_ok=True)
        outcome["finished_at"] = outcome["updated_at"] = timezone.now()
        rows.update(**outcome)


# An import whose row has not moved for this long lost its worker (reading updates it twice a second;
# storing a very long file may take minutes, hence the margin).
IMPORT_STALE_AFTER = timedelta(minutes=30)


def result_imports_sweep() -> int:
    """Fails imports whose worker was lost and deletes their uploads; returns how many. Run by beat."""
    stale = ResultImport.objects.filter(
        status__in=ResultImport.ACTIVE, updated_at__lt=timezone.now() - IMPORT_STALE_AFTER
    )
    count = 0
    for result_import in stale:
        result_upload_path(result_import).unlink(missing_ok=True)
        count += ResultImport.objects.filter(id=result_import.id, status__in=ResultImport.ACTIVE).update(
            status=ResultImport.Status.FAILED,
            error="The import stopped: the worker reading it was lost. Nothing was imported; upload the file again.",
            finished_at=timezone.now(),
        )
    return count
