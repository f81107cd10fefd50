"""The run lifecycle: create → start (shards) → execute shards → finalize; cancel; watchdog.

Every status change is a conditional UPDATE on the expected current status, so that a
task delivered twice, a watchdog racing a finishing shard, or a Stop pressed during the
finish, each change the row once and the loser does nothing.
"""

import logging
import math
import os
import socket
import traceback
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from portal.projects.models import Plan
from workers.engine.plan import Plan as EnginePlan
from workers.engine.plan import PlanError
from workers.engine.targets import TargetNotAllowed, check_url, parse_allowlist

from . import analysis
from .models import PageInterval, Run, RunShard, ShardInterval
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


def active_run_on(environment_id: int) -> Run | None:
    """The run that holds the environment now, if any (queued runs hold it too)."""
    return Run.objects.filter(environment_id=environment_id, status__in=Run.ACTIVE).order_by("id").first()


@transaction.atomic
def run_create(*, plan: Plan, user, trial_set=None) -> Run:
    """Snapshots ``plan`` and its environment's configuration into a new queued Run and enqueues it.

    The environment is locked for the check: a run starts only on an environment no other
    run is on (EnvironmentBusy), so trial sets, experiments, schedules and people pressing
    Run never overlap on one system. The run records the environment's last applied
    tuning change, the configuration it runs under.
    """
    if problems := plan.problems():
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
    )
    transaction.on_commit(lambda: _enqueue_start(run.id))
    return run


# Publishing to a dead broker is retried this briefly before the run ends in error.
ENQUEUE_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


def _enqueue_start(run_id: int) -> None:
    """Sends the start task; a broker that cannot be reached ends the run in error with the reason."""
    from workers.tasks import start_run_task

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
        from workers.tasks import run_shard_task

        for n in range(shard_count):
            transaction.on_commit(lambda n=n: run_shard_task.delay(run_id, n))


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def shard_execute(run_id: int, shard_no: int) -> None:
    """Runs one shard to its end; safe to call twice (the second call finds the shard claimed)."""
    from workers.engine import run_sync

    now = timezone.now()
    claimed = RunShard.objects.filter(run_id=run_id, shard_no=shard_no, status=RunShard.Status.PENDING).update(
        status=RunShard.Status.RUNNING, worker=_worker_name(), claimed_at=now, heartbeat_at=now
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
    plan = EnginePlan.from_dict(run.plan_snapshot)
    sink = ShardSink(run_id, shard_no)
    try:
        totals = run_sync(
            plan,
            sink=sink,
            # Users k % shard_count == shard_no (and so many arrivals, and unique data-set rows).
            shard=(shard_no, run.shard_count),
            start_at=run.start_at.timestamp(),
            allowlist=allowlist(),
        )
    except TargetNotAllowed as exc:
        _shard_end(shard, RunShard.Status.FAILED, error=f"Target refused at connect time: {exc}")
    except Exception as exc:  # the run must end with the reason, whatever broke
        log.exception("run %s shard %s failed", run_id, shard_no)
        _shard_end(shard, RunShard.Status.FAILED, error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
    else:
        _shard_end(shard, RunShard.Status.DONE, totals=_totals_dict(totals))
    run_finalize(run_id)


def _totals_dict(totals) -> dict:
    return {
        "requests": totals.requests,
        "errors": totals.errors,
        "aborted": totals.aborted,
        "bytes_in": totals.bytes_in,
        "duration_s": round(totals.duration_s, 3),
        # How long after the run's common start this shard began: shards must start together.
        "start_late_ms": round(totals.start_late_s * 1000, 2),
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
    "hist",
    "connect_hist",
    "ttfb_hist",
]


class ShardSink:
    """The engine's sink for one shard: writes each interval report and answers "stop?".

    Each call is the shard's heartbeat. Rows are upserted on their natural key, so a report
    written twice (a retry after a database hiccup) replaces itself and never counts twice.
    """

    def __init__(self, run_id: int, shard_no: int):
        self.run_id = run_id
        self.shard_no = shard_no

    def __call__(self, report: dict) -> bool:
        try:
            return self._write(report)
        finally:
            # The engine calls us from a thread of its own; don't leave its connection behind.
            from django.db import connection

            if report.get("final"):
                connection.close()

    def _write(self, report: dict) -> bool:
        second = report["second"]
        lag = report.get("loop_lag_ms") or {}
        with transaction.atomic():
            ShardInterval.objects.bulk_create(
                [
                    ShardInterval(
                        run_id=self.run_id,
                        shard_no=self.shard_no,
                        second=second,
                        active_users=report.get("active_users", 0),
                        iterations_started=report.get("iterations_started", 0),
                        iterations_completed=report.get("iterations_completed", 0),
                        iterations_dropped=report.get("iterations_dropped", 0),
                        loop_lag_p99_ms=lag.get("p99"),
                        loop_lag_max_ms=lag.get("max"),
                        cpu_pct=report.get("cpu_pct"),
                    )
                ],
                update_conflicts=True,
                unique_fields=["run", "shard_no", "second"],
                update_fields=SHARD_INTERVAL_FIELDS,
            )
            rows = [
                PageInterval(
                    run_id=self.run_id,
                    shard_no=self.shard_no,
                    second=second,
                    label=label[:210],
                    pages=stats.get("pages", 0),
                    hits=stats.get("hits", 0),
                    errors=stats.get("errors", 0),
                    errors_by_kind=stats.get("errors_by_kind", {}),
                    error_samples=stats.get("error_samples", {}),
                    bytes_in=stats.get("bytes_in", 0),
                    bytes_out=stats.get("bytes_out", 0),
                    hist=stats.get("hist", {}),
                    connect_hist=stats.get("connect_hist", {}),
                    ttfb_hist=stats.get("ttfb_hist", {}),
                )
                for label, stats in report.get("labels", {}).items()
            ]
            if rows:
                PageInterval.objects.bulk_create(
                    rows,
                    update_conflicts=True,
                    unique_fields=["run", "shard_no", "second", "label"],
                    update_fields=PAGE_INTERVAL_FIELDS,
                )
            shard_status = (
                RunShard.objects.filter(run_id=self.run_id, shard_no=self.shard_no)
                .values_list("status", flat=True)
                .first()
            )
            RunShard.objects.filter(run_id=self.run_id, shard_no=self.shard_no, status=RunShard.Status.RUNNING).update(
                heartbeat_at=timezone.now()
            )
            Run.objects.filter(id=self.run_id, status=Status.STARTING).update(status=Status.RUNNING)
        run = Run.objects.only("cancel_requested", "status").get(id=self.run_id)
        # Stop when the user asked to, or when the watchdog gave this shard up for lost.
        return run.cancel_requested or shard_status != RunShard.Status.RUNNING


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
    """Once every shard has ended, computes the summary and the final status; runs once per run."""
    if RunShard.objects.filter(run_id=run_id).exclude(status__in=RunShard.TERMINAL).exists():
        return
    if not RunShard.objects.filter(run_id=run_id).exists():
        return
    if not Run.objects.filter(id=run_id, status__in=[Status.STARTING, Status.RUNNING, Status.CANCELLING]).update(
        status=Status.FINISHING
    ):
        return
    run = Run.objects.get(id=run_id)
    shards = list(run.shards.all())
    summary = analysis.summarize(run)
    problems = [f"Shard {s.shard_no} {s.status}: {s.error_message.splitlines()[0]}" for s in shards if s.error_message]
    lost = [s for s in shards if s.status in (RunShard.Status.LOST, RunShard.Status.FAILED)]
    has_data = summary["whole_run"]["pages"] > 0
    if run.cancel_requested:
        status = Status.CANCELLED
    elif lost and not has_data:
        status = Status.ERROR
    elif lost:
        status = Status.PARTIAL
    elif summary["verdict"] == "failed":
        status = Status.FAILED
    else:
        status = Status.PASSED
    if Run.objects.filter(id=run_id, status=Status.FINISHING).update(
        status=status, summary=summary, error_message="\n".join(problems), finished_at=timezone.now()
    ):
        _announce(run_id)


def watchdog() -> None:
    """Declares silent shards lost, ends runs no worker took, and finalizes what is complete."""
    now = timezone.now()
    timeout = timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT)
    silent = RunShard.objects.filter(status=RunShard.Status.RUNNING, heartbeat_at__lt=now - timeout)
    for shard in silent.select_related("run"):
        if RunShard.objects.filter(id=shard.id, status=RunShard.Status.RUNNING, heartbeat_at__lt=now - timeout).update(
            status=RunShard.Status.LOST,
            finished_at=now,
            error_message=f"no heartbeat for {settings.PLIMSOLL_SHARD_TIMEOUT} s (its worker {shard.worker} "
            "probably died); every interval it recorded before is kept",
        ):
            log.warning("run %s shard %s lost", shard.run_id, shard.shard_no)
    unclaimed = RunShard.objects.filter(status=RunShard.Status.PENDING, run__start_at__lt=now - timeout).select_related(
        "run"
    )
    for shard in unclaimed:
        RunShard.objects.filter(id=shard.id, status=RunShard.Status.PENDING).update(
            status=RunShard.Status.LOST,
            finished_at=now,
            error_message=f"no worker was free to start this shard within {settings.PLIMSOLL_SHARD_TIMEOUT} s "
            "of the run's start; add workers or raise PLIMSOLL_SHARD_MAX_USERS",
        )
    for run_id in Run.objects.filter(status=Status.QUEUED, created_at__lt=now - QUEUED_TIMEOUT).values_list(
        "id", flat=True
    ):
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
