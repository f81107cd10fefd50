"""A run's lifecycle: create → start (shards) → finalize; cancel; the finalize retried when stuck.

Every status change is a conditional UPDATE on the expected current status, so that a
task delivered twice, a watchdog racing a finishing shard, or a Stop pressed during the
finish, each change the row once and the loser does nothing.
"""

import logging
import math
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from portal.common import task
from portal.projects import drift
from portal.projects.metric_sources import metric_sources_problems
from portal.projects.models import Plan
from workers.engine.plan import Plan as EnginePlan
from workers.engine.plan import PlanError
from workers.engine.targets import TargetNotAllowed

from .. import analysis
from ..models import (
    Run,
    RunFigures,
    RunShard,
    run_digest,
)
from ..results.batches import BatchSampler
from ..signals import run_admitted, run_finished
from ..summary import RunSummary
from .admission import admission_refusal, engine_queue
from .load import run_load
from .targets import (
    EnvironmentBusy,
    RunError,
    TargetBusy,
    _target_origin,
    active_run_on,
    active_run_on_target,
    check_targets,
)

log = logging.getLogger(__name__)
Status = Run.Status


# A run whose start task no worker took within this time ends in error, with the likely cause.
QUEUED_TIMEOUT = timedelta(seconds=120)


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
    # Admission (issue 25): a run that can never fit the pool, or is over its team's limits, is refused at once.
    pool = environment.generator_pool
    if refusal := admission_refusal(snapshot=snapshot, pool=pool, team_id=plan.project.team_id):
        raise RunError(refusal)
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
        pool=pool,
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
    """Checks the target, splits the users into shards and enqueues them with a common start time.

    Called by an admission pass (``admission.admit``) once all the run's shards can start together.
    """
    if not Run.objects.filter(id=run_id, status=Status.QUEUED).update(status=Status.STARTING):
        return  # already started (a repeated message), cancelled, or gone
    run = Run.objects.get(id=run_id)
    if run.cancel_requested:
        _run_end(run_id, Status.CANCELLED, from_statuses=[Status.STARTING])
        return
    base_url = run.plan_snapshot["base_url"]
    try:
        check_targets(base_url, run.plan_snapshot)  # and every WebSocket step's own ws:// or wss:// origin
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
        now = timezone.now()
        start_at = now + timedelta(seconds=settings.PLIMSOLL_START_DELAY)
        Run.objects.filter(id=run_id).update(shard_count=shard_count, start_at=start_at, admitted_at=now)
        run_shard_task = task("run_shard_task")
        queue = engine_queue(run.pool)

        for n in range(shard_count):
            transaction.on_commit(lambda n=n: run_shard_task.apply_async((run_id, n), queue=queue))
    _metrics_start(run_id)
    _verify_configuration(run)


def _verify_configuration(run: Run) -> None:
    """Reads the target's own configuration as the run starts, where the environment names where it
    reports it, and records how it compares with the configuration the run names (its snapshot).

    A target restarted with its settings reset, or changed through another environment, would
    otherwise be measured under a configuration it did not have: the run then carries the doubt.
    Bounded (drift.TIMEOUT_S) and never stops the run: its shards are already on their way.
    """
    environment = run.environment
    if environment is None or not environment.config_url:
        return
    try:
        result = drift.configuration_drift(environment, ledger=run.config_snapshot)
    except Exception:  # a bug here must not cost the run
        log.exception("run %s: could not verify the target's configuration", run.id)
        return
    Run.objects.filter(id=run.id).update(config_verification=result.record(timezone.now()))


def _metrics_start(run_id: int) -> None:
    """Tells the apps that follow runs (portal.metrics starts scraping the environment's servers) that
    the run is admitted; a failure there is logged and never stops the run."""
    for receiver, result in run_admitted.send_robust(sender=Run, run_id=run_id):
        if isinstance(result, Exception):
            log.error(
                "run %s: %s failed; the run goes on without it",
                run_id,
                getattr(receiver, "__qualname__", receiver),
                exc_info=(type(result), result, result.__traceback__),
            )


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
    # A shard no worker ever claimed was not lost: it never ran, and the run is incomplete.
    lost = [s for s in shards if s.status in ended_early and (s.claimed_at or s.handoffs)]
    typed = RunSummary.from_json(summary)  # read typed; the writes below are the stored form's
    has_data = typed.whole_run["pages"] > 0
    load = run_load(run, shards)
    if run.cancel_requested:
        # Stopped by its criteria (the target was plainly broken: services.criteria), or by a person.
        status = Status.STOPPED if run.stopped_by else Status.CANCELLED
        # Stopped before its window ended: the thresholds were measured over the part that ran, and the
        # run claims no verdict from them (no "thresholds held" on a cancelled run).
        summary["verdict"] = None
        if run.stopped_by:
            summary["stopped_by"] = run.stopped_by
    elif lost and not has_data:
        status = Status.ERROR
    elif lost:
        status = Status.PARTIAL
    elif not load["complete"]:
        # Never a verdict on load that did not run: thresholds held by 20 of 100 users say nothing.
        status = Status.INCOMPLETE
    elif (capacity := typed.capacity).get("search") and capacity.get("analysed"):
        # A capacity search's upper levels break by design: it has its answer unless the first level broke.
        status = Status.FAILED if capacity["capacity_users"] is None else Status.DONE
    elif typed.verdict == "failed":
        status = Status.FAILED
    elif typed.verdict is None:
        # No threshold applied: nothing to pass. A default error-rate rule would invent a limit the
        # plan's author never set (and fail runs that test error pages on purpose), so the run is
        # *finished*: its figures stand, with no pass/fail verdict claimed.
        status = Status.FINISHED
    else:
        status = Status.PASSED
    if not load["complete"] and status in (Status.INCOMPLETE, Status.PARTIAL):
        problems.insert(0, f"Incomplete: it {load['sentence']}.")
    with transaction.atomic():
        if not Run.objects.select_for_update().filter(id=run_id, status=Status.FINISHING).exists():
            return
        RunFigures.objects.update_or_create(
            run_id=run_id, defaults={"series": series, "batches": [[key, figures] for key, figures in batches.items()]}
        )
        Run.objects.filter(id=run_id, status=Status.FINISHING).update(
            status=status,
            summary=summary,
            digest=run_digest(
                RunSummary.from_json(summary), run.plan_snapshot
            ),  # read again: its verdict may be cleared
            load=load,
            error_message="\n".join(problems),
            finished_at=timezone.now(),
        )
        _announce(run_id)


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
