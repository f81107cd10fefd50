"""The target: one nginx worker pinned to its own core, on 127.0.0.1 and a free port.

Everything it writes (pid, error log, temp folders) lives in a temporary
folder that is removed afterwards. It serves:

- ``/2k``: a 2,048-byte file (throughput, scale);
- ``/sleep50``: answers after exactly 50 ms (``echo_sleep`` from
  libnginx-mod-http-echo), for the accuracy benchmark.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .procs import REGISTRY, capture, free_port

FILE_SIZE = 2048
START_TIMEOUT_S = 10.0

CONF = """\
load_module {module};
daemon off;
master_process on;
worker_processes 1;
{affinity}
worker_rlimit_nofile 65536;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
{user}

events {{
    worker_connections 32768;
}}

http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 120s;
    keepalive_requests 1000000;
{temp_paths}
    server {{
        listen 127.0.0.1:{port} backlog=65535;
        root {tmp}/www;
        location = /2k {{ }}
        location = /sleep50 {{
            default_type text/plain;
            echo_sleep 0.05;
            echo ok;
        }}
    }}
}}
"""


def nginx_temp_kinds() -> list[str]:
    """The temp-path directives this nginx build knows: client_body always, the others unless compiled out."""
    v = capture(["nginx", "-V"])
    return ["client_body"] + [k for k in ("proxy", "fastcgi", "uwsgi", "scgi") if f"--without-http_{k}_module" not in v]


class Nginx:
    """``with Nginx(core=1, module=...) as ng: ng.url("/2k")``."""

    def __init__(self, *, core: int | None, module: str) -> None:
        self.core = core
        self.module = module
        self.tmp = Path(tempfile.mkdtemp(prefix="plimsoll-bench-nginx-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def config(self) -> str:
        temp_paths = "".join(f"    {kind}_temp_path {self.tmp}/{kind};\n" for kind in nginx_temp_kinds())
        return CONF.format(
            module=self.module,
            affinity=f"worker_cpu_affinity {1 << self.core:b};" if self.core is not None else "",
            tmp=self.tmp,
            # As root, the worker would switch to nobody and lose access to a 0700 temp folder.
            user="user root;" if os.geteuid() == 0 else "",
            temp_paths=temp_paths,
            port=self.port,
        )

    def __enter__(self) -> Nginx:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        (self.tmp / "www").mkdir()
        body = (b"plimsoll-bench-2k\n" * (FILE_SIZE // 18 + 1))[:FILE_SIZE]
        (self.tmp / "www" / "2k").write_bytes(body)
        conf = self.tmp / "nginx.conf"
        conf.write_text(self.config())
        test = subprocess.run(
            ["nginx", "-t", "-q", "-c", str(conf), "-p", str(self.tmp), "-e", str(self.tmp / "error.log")],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if test.returncode != 0:
            raise RuntimeError(f"nginx refused the generated config:\n{test.stderr}\n{conf.read_text()}")
        argv = ["nginx", "-c", str(conf), "-p", str(self.tmp), "-e", str(self.tmp / "error.log")]
        if self.core is not None:
            argv = ["taskset", "-c", str(self.core), *argv]
        with open(self.tmp / "stderr.log", "wb") as log:  # the child keeps its own descriptor
            self.proc = REGISTRY.start(argv, stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited at start (code {self.proc.returncode}): {self.error_log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"nginx did not listen on port {self.port} within {START_TIMEOUT_S:g} s"
                    ) from None
                time.sleep(0.05)
        self._check(b"/2k", FILE_SIZE)

    def _check(self, path: bytes, size: int) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or len(body) != size:
            raise RuntimeError(f"nginx answered {path!r} unexpectedly: {head[:200]!r}, {len(body)} bytes")

    def error_log(self) -> str:
        try:
            return (self.tmp / "error.log").read_text()[-2000:]
        except OSError:
            return ""

    def worker_pids(self) -> list[int]:
        """The master and its workers (for their CPU time)."""
        if self.proc is None:
            return []
        pids = [self.proc.pid]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                fields = stat.rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid:
                    pids.append(int(entry))
        return pids

    def version(self) -> str:
        m = re.search(r"nginx/(\S+)", capture(["nginx", "-v"]))
        return m.group(1) if m else "?"

    def stop(self) -> None:
        if self.proc is not None:
            REGISTRY.stop(self.proc, first=signal.SIGTERM, grace_s=3.0)  # SIGTERM: nginx's fast shutdown
            self.proc = None
        shutil.rmtree(self.tmp, ignore_errors=True)
