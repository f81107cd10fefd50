"""The Celery app: run with ``celery -A workers.celery worker`` / ``beat``.

Two queues (one per workload): ``engine`` for shards, which hold a worker slot for the
whole run, and ``default`` for short bookkeeping (starting a run, the watchdog), so a
long soak never delays the start of another run.
"""

import logging
import os
import threading

from celery import Celery
from celery.apps.worker import Worker as CeleryWorker
from celery.signals import worker_shutting_down
from kombu.utils.objects import cached_property

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

logger = logging.getLogger(__name__)


class Worker(CeleryWorker):
    """The worker of ``celery worker``: a cold shutdown asks its shards to hand over first.

    On a cold shutdown (SIGQUIT, a second Ctrl-C) Celery first waits out its soft shutdown
    (``worker_soft_shutdown_timeout``) and only then sends ``worker_shutting_down``, too late for
    a shard to hand over before its pool process is terminated. Celery has no signal for the
    start of that wait, so the worker asks here, as the wait begins.
    """

    def wait_for_soft_shutdown(self):
        _ask_to_hand_over(self.hostname, "cold shutdown")
        super().wait_for_soft_shutdown()


class Plimsoll(Celery):
    @cached_property
    def Worker(self):  # noqa: N802 (Celery's name)
        return self.subclass_with_self(Worker)


app = Plimsoll("plimsoll")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_default_queue="default",
    task_routes={"workers.tasks.run_shard_task": {"queue": "engine"}},
    # State lives in the database, not in a result backend.
    task_ignore_result=True,
    # One message at a time per process: a shard holds its slot for the whole run.
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # A cold shutdown (a second Ctrl-C, SIGQUIT) first waits this long, so a shard asked to hand
    # over (see below) can still flush and release itself; a warm one (SIGTERM) waits for it anyway.
    worker_soft_shutdown_timeout=10.0,
    beat_schedule={
        "watchdog": {
            "task": "workers.tasks.watchdog_task",
            "schedule": 10.0,
            # A beat that piles up while no worker runs is useless: expire it.
            "options": {"expires": 10.0},
        },
        # Issue 18: uploaded HAR files of abandoned import previews are deleted.
        "har-uploads-sweep": {
            "task": "workers.tasks.har_uploads_sweep_task",
            "schedule": 600.0,
            "options": {"expires": 600.0},
        },
        # i12-schedules: fires are read from Schedule rows on every tick, so edits need no restart.
        "schedules": {
            "task": "workers.tasks.schedules_tick_task",
            "schedule": 10.0,
            # A missed tick is harmless: the next one sees every fire still due (timing.plan_tick).
            "options": {"expires": 10.0},
        },
    },
    timezone="UTC",
)
app.autodiscover_tasks(["workers"], related_name="tasks")


@worker_shutting_down.connect
def _hand_shards_over(sender: str, **kwargs) -> None:
    """A worker told to stop asks its running shards to hand over, so that it exits within seconds.

    Celery sends this signal in the main process on a warm or cold shutdown (SIGTERM, SIGINT,
    SIGQUIT); the shards run in pool processes and learn of it at their next flush (about a
    second): they drain, flush, release themselves as continuations and re-queue their tasks,
    then the warm shutdown, which waits for running tasks, completes. (A cold shutdown has
    asked already, as its soft shutdown began: ``Worker.wait_for_soft_shutdown``.)
    """
    _ask_to_hand_over(sender, "shutting down")


def _ask_to_hand_over(node: str, why: str) -> None:
    """Marks the node's running shards for a handoff; in a thread, as it is called from a signal handler."""

    def ask() -> None:
        from django.db import connection

        from portal.runs.services import shards_hand_off

        try:
            asked = shards_hand_off(worker_node=node)
            logger.warning("%s: %d running shard(s) asked to hand over", why, asked)
        except Exception:
            logger.exception("%s: could not ask the running shards to hand over", why)
        finally:
            connection.close()

    threading.Thread(target=ask, name="plimsoll-handoff", daemon=True).start()
