"""Celery tasks: thin adapters that take ids and call the services in portal.runs.

Each is safe to run twice: the services change a row only from the status they expect.
"""

from celery import shared_task


# A run is started by an admission pass once all its shards can start together (issue 25); the id is
# kept so that messages sent before admission existed are still understood.
@shared_task(ignore_result=True)
def start_run_task(run_id: int) -> None:
    from portal.runs.services import admit

    admit()


# One admission pass (a run created or stopped, a worker registered, the beat's tick); safe to run twice.
@shared_task(ignore_result=True)
def admit_task() -> None:
    from portal.runs.services import admit

    admit()


# acks_late: a shard whose worker died before it claimed the shard is delivered again;
# once claimed, the lease in the database (not the broker) decides, so a second delivery
# of a long run (past Redis's visibility timeout, celery#5935) does nothing.
@shared_task(bind=True, ignore_result=True, acks_late=True, reject_on_worker_lost=False)
def run_shard_task(self, run_id: int, shard_no: int) -> None:
    from portal.runs.services import shard_execute

    # The node's name: its warm shutdown asks the shards it runs to hand over (workers/celery.py).
    shard_execute(run_id, shard_no, worker_node=self.request.hostname or "")


# i24: stop criteria, every PLIMSOLL_STOP_CHECK_S seconds on the bookkeeping queue; safe twice (a conditional UPDATE).
@shared_task(ignore_result=True)
def stop_criteria_task() -> None:
    from portal.runs.services import criteria_check

    criteria_check()


# A finalize the watchdog retries (claimed there with a conditional UPDATE); safe twice.
@shared_task(ignore_result=True)
def finalize_retry_task(run_id: int) -> None:
    from portal.runs.services import finalize_retry

    finalize_retry(run_id)


@shared_task(ignore_result=True)
def collect_metrics_task(run_id: int, tick: int) -> None:
    from portal.metrics.services import collect_tick

    collect_tick(run_id=run_id, tick=tick)


@shared_task(ignore_result=True)
def watchdog_task() -> None:
    from portal.history.services import advance_all
    from portal.metrics.services import collection_watchdog
    from portal.runs.services import watchdog
    from portal.schedules.baselines import verdicts_catch_up

    watchdog()
    collection_watchdog()
    # Trial sets and experiments also advance when a run ends; this catches up after a restart.
    advance_all()
    # i24: a verdict lost on its way to the bookkeeping queue is enqueued again.
    verdicts_catch_up()


# Sending the same mail twice is the lesser harm than losing it, so a retry after a failed
# SMTP connection is fine; the message is rendered from its context in the worker.
@shared_task(ignore_result=True, autoretry_for=(OSError,), retry_backoff=30, max_retries=5)
def send_mail_task(template: str, to: list[str], context: dict) -> None:
    from portal.mail import mail_send

    mail_send(template=template, to=to, context=context)


@shared_task(ignore_result=True)
def har_uploads_sweep_task() -> None:
    """Deletes HAR recordings whose import preview was abandoned (older than PLIMSOLL_HAR_UPLOAD_TTL_S),
    and the uploads of result imports whose worker was lost."""
    from portal.projects.services import har_uploads_sweep
    from portal.runs.services import result_imports_sweep

    har_uploads_sweep()
    result_imports_sweep()


@shared_task(ignore_result=True)
def har_analysis_task(project_id: int, user_id: int, token: str) -> None:
    """Analyses a large uploaded HAR off the web request; its preview page waits for it (issue 30)."""
    from portal.projects.services import har_analysis_process

    har_analysis_process(project_id=project_id, user_id=user_id, token=token)


# i12-schedules: one tick asks the database what is due; safe with two beats (see portal.schedules.services).
@shared_task(ignore_result=True)
def schedules_tick_task() -> None:
    from portal.schedules.services import schedules_tick

    schedules_tick()


# A trial set advances after its run ended (the next trial, or the set's end and its experiment's
# step, with the change's hook), on the default queue: never inside the shard that finalized the run.
@shared_task(ignore_result=True)
def trialset_advance_task(trial_set_id: int) -> None:
    from portal.history.services import trialset_advance

    trialset_advance(trial_set_id)


# i24: every finished run of a plan judged against its baseline, on the default (bookkeeping) queue.
@shared_task(ignore_result=True)
def baseline_verdict_task(run_id: int) -> None:
    from portal.notifications.services import notify_run
    from portal.schedules.baselines import run_judge

    run_judge(run_id=run_id)
    # The notification waits for the verdict, so its mail says whether the run moved.
    notify_run(run_id=run_id)


# i12-schedules: notifications, each a task on the default queue after the run or fire committed.
@shared_task(ignore_result=True)
def run_notify_task(run_id: int) -> None:
    from portal.notifications.services import notify_run

    notify_run(run_id=run_id)


@shared_task(ignore_result=True)
def experiment_notify_task(experiment_id: int) -> None:
    from portal.notifications.services import notify_experiment

    notify_experiment(experiment_id=experiment_id)


@shared_task(ignore_result=True)
def change_notify_task(change_id: int) -> None:
    from portal.notifications.services import notify_change

    notify_change(change_id=change_id)


@shared_task(ignore_result=True)
def fire_notify_task(fire_id: int) -> None:
    from portal.notifications.services import notify_fire

    notify_fire(fire_id=fire_id)


# One try per message; a failed webhook schedules its next try (backoff) as a new message,
# so no worker slot waits for a slow receiver.
@shared_task(ignore_result=True)
def delivery_send_task(delivery_id: int) -> None:
    from portal.notifications.services import _enqueue, delivery_attempt

    delay = delivery_attempt(delivery_id=delivery_id)
    if delay:
        _enqueue(delivery_id, countdown=delay)


@shared_task(ignore_result=True)
def result_import_task(import_id: int) -> None:
    """An uploaded result file into an imported run (issue 18), on the default queue; safe to run twice."""
    from portal.runs.services import result_import_process

    result_import_process(import_id)


@shared_task(ignore_result=True)
def prometheus_backfill_task(run_id: int) -> None:
    from portal.metrics.services import prometheus_backfill

    prometheus_backfill(run_id=run_id)
