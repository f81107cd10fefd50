"""Celery tasks: thin adapters that take ids and call the services in portal.runs.

Each is safe to run twice: the services change a row only from the status they expect.
"""

from celery import shared_task


@shared_task(ignore_result=True)
def start_run_task(run_id: int) -> None:
    from portal.runs.services import run_start

    run_start(run_id)


# acks_late: a shard whose worker died before it claimed the shard is delivered again;
# once claimed, the lease in the database (not the broker) decides, so a second delivery
# of a long run (past Redis's visibility timeout, celery#5935) does nothing.
@shared_task(ignore_result=True, acks_late=True, reject_on_worker_lost=False)
def run_shard_task(run_id: int, shard_no: int) -> None:
    from portal.runs.services import shard_execute

    shard_execute(run_id, shard_no)


@shared_task(ignore_result=True)
def watchdog_task() -> None:
    from portal.history.services import advance_all
    from portal.runs.services import watchdog

    watchdog()
    # Trial sets and experiments also advance when a run ends; this catches up after a restart.
    advance_all()
