"""A malformed setting stops the process at start with a message that names the variable."""

import os
import subprocess

import pytest

from tests.processes import PYTHON, ROOT


def check_with(tmp_path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    environ.update(PLIMSOLL_VAR_DIR=str(tmp_path), **env)
    return subprocess.run([PYTHON, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("DEBUG", "maybe", "DEBUG='maybe': expected true or false"),
        ("PLIMSOLL_SHARD_MAX_USERS", "lots", "PLIMSOLL_SHARD_MAX_USERS='lots': expected a whole number"),
        ("PLIMSOLL_SHARD_TIMEOUT", "1", "PLIMSOLL_SHARD_TIMEOUT=1: must be at least 5"),
        ("DATABASE_URL", "mysql://root@127.0.0.1/x", "DATABASE_URL: expected postgres://"),
        ("CELERY_BROKER_URL", "amqp://guest@127.0.0.1//", "CELERY_BROKER_URL='amqp://guest@127.0.0.1//': expected"),
        ("PLIMSOLL_ALLOWED_TARGETS", "127.0.0.0/8,300.1.2.3/8", "PLIMSOLL_ALLOWED_TARGETS:"),
        ("PLIMSOLL_WORKER_LABELS", "zone=eu,private", "PLIMSOLL_WORKER_LABELS: 'private' is not key=value"),
        ("PLIMSOLL_WORKER_LABELS", "pool=eu west", "PLIMSOLL_WORKER_LABELS: pool='eu west': a pool's name has"),
        ("SECRET_KEY_FILE", "/nonexistent/secret", "SECRET_KEY_FILE='/nonexistent/secret'"),
    ],
)
def test_a_bad_value_names_the_variable(tmp_path, name, value, message):
    result = check_with(tmp_path, **{name: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_the_embedded_default_needs_no_variable(tmp_path):
    result = check_with(tmp_path)
    assert result.returncode == 0, result.stderr
    # a key of its own, readable only by its owner, and the broker folders under var/
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "broker" / "queue").is_dir()


def test_the_embedded_broker_connects_without_the_no_hostname_warning(tmp_path):
    # given: the embedded default broker (no CELERY_BROKER_URL), as `make run` and manage.py use it
    environ = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    environ.update(PLIMSOLL_VAR_DIR=str(tmp_path))
    # (the worker's start banner names the broker by app.connection().as_uri(), where kombu warned)
    connect = (
        "from workers.celery import app\nwith app.connection() as c: c.ensure_connection(max_retries=1); c.as_uri()"
    )

    # when: a manage.py command connects to it and names it, as a worker start does
    result = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", connect], cwd=ROOT, env=environ, capture_output=True, text=True
    )

    # then: kombu has a host name and says nothing (issue 17: "No hostname was supplied" was on every start)
    assert result.returncode == 0, result.stderr
    assert "No hostname" not in result.stdout + result.stderr
