"""Readers must not slow the writer: a live run polled by several clients while its shard writes.

The readers are separate processes (as browsers hit separate web workers), so the test
measures the database, not Python's GIL. Loose limits, the machine being shared: the
benchmark (python -m bench store) measures precisely.
"""

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from django.urls import reverse

from portal.runs import services
from tests.portal.runs.test_store import PROFILES, _record, _report

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]

POLLER = """
import json, os, sys, time
import django
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
user_id, series, detail, stop_file = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
client = Client(SERVER_NAME="127.0.0.1")
client.force_login(get_user_model().objects.get(id=user_id))
times = []
print("ready", flush=True)
while not os.path.exists(stop_file):
    t = time.perf_counter()
    assert client.get(series, {"since": 590}).status_code == 200
    assert client.get(detail, headers={"HX-Request": "true"}).status_code == 200
    times.append(time.perf_counter() - t)
print(json.dumps(times), flush=True)
"""


def _database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def test_polling_clients_do_not_slow_the_shards_writes(run, alice, tmp_path):
    run = _record(run, {**PROFILES["constant"], "hold": 600}, shards=1)
    rng = random.Random(5)
    sink = services.ShardSink(run.id, 0)

    def write(seconds):
        times = []
        for second in seconds:
            t = time.perf_counter()
            sink(_report(rng, second))
            times.append(time.perf_counter() - t)
        return times

    alone = write(range(600, 630))
    stop = tmp_path / "stop"
    env = {**os.environ, "DATABASE_URL": _database_url(), "DJANGO_SETTINGS_MODULE": "portal.settings"}
    args = [str(alice.id), reverse("runs:series", args=[run.code]), reverse("runs:detail", args=[run.code]), str(stop)]
    readers = [
        subprocess.Popen([sys.executable, "-c", POLLER, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    try:
        for r in readers:
            assert r.stdout.readline().strip() == "ready"
        # At least 60 writes, and for at least 5 s, so the readers' first requests (their
        # processes warming up) are not all they did meanwhile; at most 300 writes.
        polled, second, until = [], 630, time.monotonic() + 5
        while len(polled) < 60 or (time.monotonic() < until and len(polled) < 300):
            polled += write([second])
            second += 1
    finally:
        stop.touch()
        outputs = [r.communicate(timeout=60)[0] for r in readers]
    polls = [t for out in outputs for t in json.loads(out.strip().splitlines()[-1])]

    assert len(polls) >= 10  # the readers really read meanwhile
    # Loose: the median write at most 3× (+20 ms) its median alone, and none near the 2 s poll interval.
    assert statistics.median(polled) <= 3 * statistics.median(alone) + 0.020, (alone, polled)
    assert max(polled) < 1.0
    assert statistics.median(polls) < 0.5
