"""The portal under a real gunicorn, as the Procfile starts it, on the test database (loopback only)."""

import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from django.db import connection

from tests.processes import ROOT, database_url, free_port, stop, wait_until


class Gunicorn:
    """``--workers`` processes of ``--threads`` threads each (the Procfile's 2 × 4 by default)."""

    def __init__(self, tmp_path: Path, *, workers: int = 2, threads: int = 4, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / "gunicorn.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115
        environ = {
            "PATH": "/usr/bin:/bin",
            "DATABASE_URL": database_url(connection.settings_dict),
            "PLIMSOLL_VAR_DIR": str(tmp_path / "var"),
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv/bin/gunicorn"), "portal.wsgi", "--config", "gunicorn.conf.py"]
            + ["--bind", f"127.0.0.1:{self.port}", "--workers", str(workers), "--threads", str(threads)],
            cwd=ROOT,
            env=environ,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._up, timeout=60, what="gunicorn")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(self.url + "/login/", timeout=2).close()
            return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def output(self) -> str:
        return self.log_path.read_text()

    def close(self):
        stop(self.proc, timeout=15)
        self.log.close()
