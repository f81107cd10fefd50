"""Issue 28 item 19: migrate against a PostgreSQL database that does not exist says what to run."""

import os
import socket
import subprocess
import uuid

import pytest

from tests.processes import PYTHON, ROOT, free_port


def _migrate(tmp_path, database_url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DATABASE_URL=database_url, PLIMSOLL_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings")
    return subprocess.run(
        [PYTHON, "manage.py", "migrate"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def _postgres_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _postgres_up(), reason="no PostgreSQL on 127.0.0.1:5432")
def test_a_missing_database_names_the_createdb_command(tmp_path):
    name = f"plimsoll_missing_{uuid.uuid4().hex[:8]}"
    # when
    result = _migrate(tmp_path, f"postgres://postgres@127.0.0.1:5432/{name}")
    # then: no traceback, the command to run
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f'The PostgreSQL database "{name}" does not exist on 127.0.0.1:5432' in result.stderr
    assert f"createdb -h 127.0.0.1 -p 5432 -U postgres {name}" in result.stderr


def test_no_server_at_the_address_says_so(tmp_path):
    port = free_port()  # nothing listens there
    result = _migrate(tmp_path, f"postgres://postgres@127.0.0.1:{port}/plimsoll")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f'Cannot connect to the database "plimsoll" on 127.0.0.1:{port}' in result.stderr
    assert "Is PostgreSQL running there, and is DATABASE_URL right" in result.stderr
