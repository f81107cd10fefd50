"""Prerequisites, installed the project's way when missing.

- Debian packages ``nginx-light libnginx-mod-http-echo wrk`` (and ``util-linux``
  for ``taskset``; ``tshark`` with ``--wire`` or ``phase``) through
  ``apt-get install -y`` (noninteractive: tshark's debconf question about
  capturing as non-root keeps its default, no; the bench captures as root).
- Locust in its own virtualenv, ``bench/.venv-locust``, from
  ``bench/requirements.txt``: Locust pulls gevent, which has no place in the
  app's venv. The venv is rebuilt when requirements.txt changes.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .procs import capture

BENCH_DIR = Path(__file__).resolve().parent
LOCUST_VENV = BENCH_DIR / ".venv-locust"
REQUIREMENTS = BENCH_DIR / "requirements.txt"
APT_PACKAGES = ("nginx-light", "libnginx-mod-http-echo", "wrk")
ECHO_MODULE_DEFAULT = "/usr/lib/nginx/modules/ngx_http_echo_module.so"
APT_TIMEOUT_S = 900
PIP_TIMEOUT_S = 900


class PrereqError(RuntimeError):
    pass


def echo_module_path() -> str | None:
    """Where Debian's libnginx-mod-http-echo put its module (``dpkg -L``), if it is installed."""
    if shutil.which("dpkg"):
        for line in capture(["dpkg", "-L", "libnginx-mod-http-echo"]).splitlines():
            if line.endswith("ngx_http_echo_module.so") and os.path.isfile(line):
                return line
    return ECHO_MODULE_DEFAULT if os.path.isfile(ECHO_MODULE_DEFAULT) else None


def missing_system(*, wire: bool = False) -> list[str]:
    missing = []
    if wire and not (shutil.which("dumpcap") or shutil.which("tshark")):
        missing.append("tshark")
    if not shutil.which("nginx"):
        missing.append("nginx-light")
    if echo_module_path() is None:
        missing.append("libnginx-mod-http-echo")
    if not shutil.which("wrk"):
        missing.append("wrk")
    if not shutil.which("taskset"):
        missing.append("util-linux")
    return missing


def ensure_system(*, install: bool = True, wire: bool = False) -> None:
    """Install what is missing; ``wire``: also tshark (its dumpcap captures for ``--wire`` and ``phase``)."""
    missing = missing_system(wire=wire)
    if not missing:
        return
    if not install:
        raise PrereqError(
            f"missing Debian packages: {' '.join(missing)} (run without --no-install, or apt-get install them)"
        )
    apt = shutil.which("apt-get")
    if apt is None:
        raise PrereqError(f"missing {' '.join(missing)} and there is no apt-get here: install them by hand")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise PrereqError(f"missing {' '.join(missing)}: run `apt-get install -y {' '.join(missing)}` as root")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in ([*prefix, apt, "update"], [*prefix, apt, "install", "-y", *missing]):
        print(f"bench: installing prerequisites: {' '.join(argv)}", flush=True)
        try:
            r = subprocess.run(argv, env=env, timeout=APT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise PrereqError(f"`{' '.join(argv)}` took more than {APT_TIMEOUT_S} s; stopped") from None
        if r.returncode != 0:
            raise PrereqError(
                f"`{' '.join(argv)}` failed (exit {r.returncode}); install {' '.join(missing)} by hand and run again"
            )
    still = missing_system(wire=wire)
    if still:
        raise PrereqError(f"still missing after apt-get: {' '.join(still)}")


def locust_bin() -> Path:
    return LOCUST_VENV / "bin" / "locust"


def ensure_locust(*, install: bool = True) -> Path:
    """``bench/.venv-locust/bin/locust``, creating or refreshing the venv when needed.

    Under an exclusive lock (``bench/.venv-locust.lock``): ``make test`` installs while its lanes run, and a test
    that asks meanwhile waits for that install instead of starting a second one into the same folder."""
    LOCUST_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCUST_VENV.parent / ".venv-locust.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_locust(install=install)


def _ensure_locust(*, install: bool) -> Path:
    stamp = LOCUST_VENV / ".installed"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if locust_bin().exists() and stamp.exists() and stamp.read_text().strip() == want:
        return locust_bin()
    if not install:
        raise PrereqError(f"Locust is not installed in {LOCUST_VENV} (run without --no-install)")
    steps = []
    if not (LOCUST_VENV / "bin" / "python").exists():
        # The app's interpreter (3.11); venv builds on its base interpreter, not on the app's venv.
        steps.append([sys.executable, "-m", "venv", str(LOCUST_VENV)])
    py = str(LOCUST_VENV / "bin" / "python")
    steps.append(
        [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile", "-r", str(REQUIREMENTS)]
    )
    for argv in steps:
        print(f"bench: installing Locust: {' '.join(argv)}", flush=True)
        try:
            r = subprocess.run(argv, timeout=PIP_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise PrereqError(f"`{' '.join(argv)}` took more than {PIP_TIMEOUT_S} s; stopped") from None
        if r.returncode != 0:
            raise PrereqError(f"`{' '.join(argv)}` failed (exit {r.returncode})")
    if not locust_bin().exists():
        raise PrereqError(f"{locust_bin()} is missing after the install")
    stamp.write_text(want + "\n")
    return locust_bin()
