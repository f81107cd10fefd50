"""The Celery app: run with ``celery -A workers.celery worker`` / ``beat``.

Two queues (one per workload): ``engine`` for shards, which hold a worker slot for the
whole run, and ``default`` for short bookkeeping (starting a run, the watchdog), so a
long soak never delays the start of another run.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("plimsoll")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_default_queue="default",
    task_routes={"workers.tasks.run_shard_task": {"queue": "engine"}},
    # State lives in the database, not in a result backend.
    task_ignore_result=True,
    # One message at a time per process: a shard holds its slot for the whole run.
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    beat_schedule={
        "watchdog": {
            "task": "workers.tasks.watchdog_task",
            "schedule": 10.0,
            # A beat that piles up while no worker runs is useless: expire it.
            "options": {"expires": 10.0},
        },
    },
    timezone="UTC",
)
app.autodiscover_tasks(["workers"], related_name="tasks")
