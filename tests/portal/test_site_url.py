"""Links in mail and webhooks carry the address people open: SITE_URL follows `make run PORT=…`,
and gunicorn warns at start when SITE_URL names another address than the one it serves (issue 28, item 8)."""

import os
import subprocess
import sys
import time

import pytest

from portal.site_url import default_site_url, mismatch
from tests.processes import ROOT, free_port, stop


def _settings_site_url(**env) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("SITE_URL", "PLIMSOLL_PORT", "PLIMSOLL_HOST")}
    environ.update(env, DJANGO_SETTINGS_MODULE="portal.settings")
    out = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.SITE_URL)"],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


def test_site_url_follows_the_port_make_run_serves_on():
    assert _settings_site_url(PLIMSOLL_PORT="8610") == "http://127.0.0.1:8610"
    assert _settings_site_url() == "http://127.0.0.1:8000"
    # an explicit SITE_URL wins (a proxy's public name)
    assert _settings_site_url(PLIMSOLL_PORT="8610", SITE_URL="https://perf.example.com/") == "https://perf.example.com"


def test_make_run_passes_its_port_to_every_process():
    out = subprocess.run(
        ["make", "-n", "run", "PORT=8610"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    honcho = [line for line in out.splitlines() if "honcho start" in line]
    assert honcho and "PLIMSOLL_PORT=8610" in honcho[0]


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        (None, None, "http://127.0.0.1:8000"),
        ("0.0.0.0", "8610", "http://127.0.0.1:8610"),
        ("::1", "9", "http://[::1]:9"),
    ],
)
def test_default_site_url(host, port, expected):
    assert default_site_url(host, port) == expected


def test_mismatch_names_both_addresses_and_trusts_public_names():
    problem = mismatch("http://127.0.0.1:8000", [("127.0.0.1", 8610)])
    assert "http://127.0.0.1:8000" in problem and "http://127.0.0.1:8610" in problem
    assert mismatch("http://localhost:8610", [("127.0.0.1", 8610)]) is None
    assert mismatch("http://127.0.0.1:8610", [("0.0.0.0", 8610)]) is None
    assert mismatch("https://perf.example.com", [("0.0.0.0", 8610)]) is None


def _gunicorn_start_log(port: int, **env) -> str:
    """gunicorn as the Procfile starts it, until its worker booted; what it logged."""
    environ = {k: v for k, v in os.environ.items() if k not in ("SITE_URL", "PLIMSOLL_PORT")}
    environ.update(env)
    proc = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/gunicorn"),
            "portal.wsgi",
            "--config",
            "gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--log-level",
            "info",
        ],
        cwd=ROOT,
        env=environ,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "Booting worker" in line:
                break
    finally:
        stop(proc)
    return "".join(lines)


def test_gunicorn_warns_at_start_when_site_url_names_another_port():
    port = free_port()
    log = _gunicorn_start_log(port, SITE_URL="http://127.0.0.1:8000")
    assert "Booting worker" in log, log
    assert f"SITE_URL is http://127.0.0.1:8000 but this server answers on http://127.0.0.1:{port}" in log

    # a port of its own: the first server's may still be held while it shuts down
    other = free_port()
    quiet = _gunicorn_start_log(other, PLIMSOLL_PORT=str(other))
    assert "Booting worker" in quiet, quiet
    assert "SITE_URL" not in quiet
