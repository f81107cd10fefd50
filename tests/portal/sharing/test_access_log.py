"""gunicorn's access log, from a real gunicorn serving the portal: no token of a share link in it."""

import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from django.db import connection

from portal.gunicorn_logging import redact
from tests.processes import ROOT, database_url, stop, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_redact_keeps_the_path_and_drops_the_token():
    assert redact("GET /s/AbC-12_x/runs/5f/series.json HTTP/1.1") == "GET /s/[token]/runs/5f/series.json HTTP/1.1"
    assert redact("/invitations/Zy9/") == "/invitations/[token]/"
    assert redact("/password-reset/MQ/cb4-1a2b/") == "/password-reset/MQ/[token]/"
    assert redact("/password-reset/sent/") == "/password-reset/sent/"
    assert redact("/runs/5f/") == "/runs/5f/"


def test_a_real_gunicorn_logs_the_request_without_the_token(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "access.log"
    env = {"DATABASE_URL": database_url(connection.settings_dict), "PATH": "/usr/bin:/bin"}
    env["PLIMSOLL_VAR_DIR"] = str(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi", "--bind", f"127.0.0.1:{port}", "--access-logfile", str(log)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    token = "SecretToken_ThatMustNotBeLogged_0123456789abc"
    try:

        def answered():
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/s/{token}/", timeout=2)
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:
                return None

        assert wait_until(answered, timeout=30, what="gunicorn") == 410
        wait_until(lambda: log.exists() and "/s/" in log.read_text(), timeout=10, what="the access log line")
    finally:
        stop(proc)
    text = log.read_text()
    assert "GET /s/[token]/ HTTP/1.1" in text and " 410 " in text
    assert token not in text
