"""The Celery app: run with ``celery -A workers.celery worker`` / ``beat``.

Two kinds of queue, served by separate worker processes (Procfile, docker/compose.yml):
``engine`` (and ``engine.<pool>`` for a generator pool) for shards, which hold a worker slot
for the whole run, and ``default``, the bookkeeping queue (admission, the watchdog, schedule
ticks, verdicts, notifications, imports), which shards can never occupy: a 72 h soak never
delays a watchdog pass or another run's start. A worker on an engine queue registers its
slots and labels with a heartbeat (``portal.runs.services.admission``), and admission starts a
run only when all its shards have a slot.
"""

import logging
import os
import threading

from celery import Celery
from celery.apps.worker import Worker as CeleryWorker
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down
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
            # A beat that piles up while no worker runs is useless: expire it. Shards never occupy
            # the bookkeeping queue's workers, so a tick expires only when no such worker runs at all.
            "options": {"expires": 10.0},
        },
        # Issue 25: waiting runs are admitted on this tick too (and at once when a slot frees or a run is created).
        "admission": {
            "task": "workers.tasks.admit_task",
            "schedule": float(os.environ.get("PLIMSOLL_ADMISSION_TICK", "2")),
            "options": {"expires": 10.0},
        },
        # Issue 24: running runs with stop criteria are checked over their sliding windows.
        "stop-criteria": {
            "task": "workers.tasks.stop_criteria_task",
            "schedule": float(os.environ.get("PLIMSOLL_STOP_CHECK_S", "5")),
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


# -- the generator registry (issue 25) ------------------------------------------------------------

_registry_stop = threading.Event()
_registry_thread: threading.Thread | None = None


@worker_ready.connect
def _register(sender, **kwargs) -> None:
    """A worker on an engine queue registers its slots, labels and queues, then refreshes them every
    PLIMSOLL_WORKER_HEARTBEAT seconds from a thread of its main process (busy pool processes cannot)."""
    queues = [q.name for q in sender.task_consumer.queues] if sender.task_consumer else []
    if not any(q.startswith("engine") for q in queues):
        return  # a bookkeeping worker runs no shards
    from django.conf import settings

    from workers.labels import parse_labels

    labels = parse_labels(settings.PLIMSOLL_WORKER_LABELS)  # checked by the settings at start
    pool = labels.get("pool")
    if pool and f"engine.{pool}" not in queues:
        logger.warning("labels say pool=%s but the worker does not consume engine.%s: -Q engine.%s", pool, pool, pool)
    slots = settings.PLIMSOLL_WORKER_SLOTS or sender.controller.concurrency
    node = sender.hostname
    global _registry_thread
    _registry_thread = threading.Thread(
        target=_heartbeat, args=(node, slots, labels, queues), name="plimsoll-registry", daemon=True
    )
    _registry_thread.start()


def _heartbeat(node: str, slots: int, labels: dict, queues: list[str]) -> None:
    import platform

    from django.conf import settings
    from django.db import connection

    from portal.runs.services.admission import admit, worker_heartbeat

    while not _registry_stop.is_set():
        try:
            if worker_heartbeat(node=node, host=platform.node(), slots=slots, labels=labels, queues=queues):
                admit()  # new slots: waiting runs may start now
        except Exception:
            logger.exception("could not register this worker's slots; retrying")
            connection.close()
        _registry_stop.wait(settings.PLIMSOLL_WORKER_HEARTBEAT)
    connection.close()


@worker_shutdown.connect
def _unregister(sender, **kwargs) -> None:
    """Its slots stop counting at once (a worker killed outright stops counting after PLIMSOLL_WORKER_TTL)."""
    _registry_stop.set()
    if _registry_thread is not None:
        # A heartbeat under way would register the worker again after the delete below.
        _registry_thread.join(10)
    try:
        from portal.runs.services.admission import worker_gone

        worker_gone(node=sender.hostname)
    except Exception:
        logger.exception("could not unregister this worker")
