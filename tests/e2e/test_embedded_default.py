"""The embedded default that `make run` uses: SQLite (WAL) and the file-system broker under var/.

Everything runs in subprocesses with DATABASE_URL and CELERY_BROKER_URL removed, so this test
checks the newcomer's path even when the rest of the suite runs on PostgreSQL and Redis.
"""

import json
import os
import shutil
import sqlite3
import subprocess

import pytest

from tests.processes import PYTHON, ROOT, Worker

pytestmark = pytest.mark.e2e

PLAN = "Smoke: 20 users, 30 s"


def manage(env, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def embedded(var) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(PLIMSOLL_VAR_DIR=str(var), PLIMSOLL_START_DELAY="1", PYTHONUNBUFFERED="1")
    return env


@pytest.fixture(scope="module")
def migrated_database(tmp_path_factory):
    """A fresh var/ migrated once for the module (each test gets a copy: migrating takes a while)."""
    var = tmp_path_factory.mktemp("migrated") / "var"
    result = manage(embedded(var), "migrate", "--noinput")
    assert result.returncode == 0, result.stderr
    return var


@pytest.fixture
def embedded_env(tmp_path, migrated_database):
    shutil.copytree(migrated_database, tmp_path / "var")  # the database with its WAL, if any, and the key
    return embedded(tmp_path / "var")


def counts(env) -> str:
    code = (
        "from portal.projects.models import *; from django.contrib.auth.models import User; "
        "print(User.objects.count(), Project.objects.count(), Environment.objects.count(), "
        "TestCase.objects.count(), Step.objects.count(), Plan.objects.count(), MixEntry.objects.count())"
    )
    return manage(env, "shell", "--no-imports", "-c", code).stdout.strip()


def test_make_run_path_on_sqlite_and_the_file_system_broker(embedded_env, demo_target, tmp_path):
    # given: a fresh var/ migrated (by the fixture; migrating again changes nothing) and seeded twice
    # (the seed is idempotent)
    again = manage(embedded_env, "migrate", "--noinput")
    assert again.returncode == 0 and "No migrations to apply" in again.stdout, again.stdout + again.stderr
    first = manage(embedded_env, "seed_demo", "--base-url", demo_target.base_url)
    assert first.returncode == 0, first.stderr
    before = counts(embedded_env)
    assert manage(embedded_env, "seed_demo", "--base-url", demo_target.base_url).returncode == 0
    assert counts(embedded_env) == before == "1 1 1 5 10 5 8"
    # a short version of the seeded plan, so the test takes seconds
    shorten = (
        "from portal.projects.models import Plan; "
        f"Plan.objects.filter(name={PLAN!r}).update(users=5, ramp_up=0, hold=3)"
    )
    assert manage(embedded_env, "shell", "-c", shorten).returncode == 0
    database = tmp_path / "var" / "plimsoll.sqlite3"
    assert sqlite3.connect(database).execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    worker = Worker(tmp_path / "worker.log", embedded_env, name="embedded", concurrency=1)
    try:
        demo_target.reset()
        # when: the plan runs through the file-system broker
        result = manage(embedded_env, "run_plan", "Demo intranet", PLAN, "--user", "demo", "--wait", "--timeout", "60")
    finally:
        worker.close()

    # then: it passed, and recorded what the target served
    assert result.returncode == 0, (result.stdout, result.stderr, worker.output()[-3000:])
    report = json.loads(result.stdout)
    assert report["status"] == "passed"
    assert report["summary"]["whole_run"]["hits"] == demo_target.counters()["requests"] > 0
    assert any((tmp_path / "var" / "broker").rglob("*")), "the file-system broker folder was used"


def test_a_dead_broker_ends_the_run_in_error_with_the_reason(embedded_env, demo_target):
    # given: a working (migrated) database, but a broker that is not there (a closed port on loopback)
    assert manage(embedded_env, "seed_demo", "--base-url", demo_target.base_url).returncode == 0
    env = dict(embedded_env, CELERY_BROKER_URL="redis://127.0.0.1:1/0")

    # when
    result = manage(env, "run_plan", "Demo intranet", PLAN, "--user", "demo", timeout=60)

    # then: a clear message, and the run is recorded in error rather than left queued
    assert result.returncode != 0
    assert "could not start" in result.stderr and "broker is unreachable" in result.stderr
    status = manage(
        embedded_env,
        "shell",
        "--no-imports",
        "-c",
        "from portal.runs.models import Run; r = Run.objects.get(); print(r.status)",
    )
    assert status.stdout.strip() == "error"
