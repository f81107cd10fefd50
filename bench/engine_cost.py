"""The engine's own cost per HTTP request or WebSocket message, alone (no other tool), two ways.

    .venv/bin/python -m bench.engine_cost [h1 h2 h2c ws] [--callgrind] [--engine-root DIR] [--reps 2]

The targets are those of ``bench/protocols.py`` (nginx serving 2 KB over HTTP/1.1 in clear, HTTP/2 over TLS,
and here also h2c; the bench's WebSocket echo server, sessions of 50 ping-pongs), the engine pinned to
``--gen-core``, the servers to ``--server-core``. Results are printed, one line per measurement.

* **CPU per unit** (default): ``python -m workers.engine run`` for ``--short`` and ``--long`` seconds (50 users,
  closed loop); the difference of the two runs' CPU time over the difference of their requests (messages), so
  start-up cancels out. Close to what the engine costs per request, but it moves with the machine's load
  (caches, frequency, hyperthread siblings): ±20 % between repetitions on a shared VM.
* **Instructions per unit** (``--callgrind``): the same engine under ``valgrind --tool=callgrind
  --toggle-collect=uv_run`` (the event loop's run: imports and plan loading left out), with a fixed amount of
  work: an ``arrival_rate`` profile on one user (one connection: with more, how many connections are
  opened would depend on the timing), ``--rate`` requests a second (``--ws-sessions`` sessions of 100
  messages for ``ws``) for ``--long`` seconds, so two versions of the engine do the same requests and the
  same per-second work (reports, garbage collection ticks) and their instruction counts compare within a
  fraction of a percent, whatever the machine's load (check that no arrival was dropped). User space only
  (the kernel's work is not counted).
  Compare versions with ``--engine-root`` (a checkout, or a copy of its ``workers/`` folder).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import procs
from .protocols import NGINX, NGINX_CONF, PER_SESSION
from .tools import REPO, _last_json, pin

KINDS = ("h1", "h2", "h2c", "ws")
# The bench's nginx configuration with one more server: h2c with prior knowledge.
_H2C_SERVER = "    server {{ listen 127.0.0.1:{port_h2c} http2; root {d}/www; }}\n"


def _count(data: dict[str, Any], kind: str) -> int:
    if kind == "ws":
        m = (data.get("labels") or {}).get("WS: echo", {}).get("ws_messages", {})
        return m.get("sent", 0) + m.get("received", 0)
    return data.get("requests") or 0


def _callgrind_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise ValueError(f"no totals in {path}")


def _run(args: argparse.Namespace, plan: dict, hold: float, work: Path, cg_out: Path | None = None):
    plan = {**plan, "profile": {**plan["profile"], "hold": hold}}
    path = work / "plan.json"
    path.write_text(json.dumps(plan))
    argv = [sys.executable, "-m", "workers.engine", "run", "--plan", str(path), "--json"]
    if cg_out is not None:
        argv = ["valgrind", "--tool=callgrind", "--toggle-collect=uv_run", f"--callgrind-out-file={cg_out}", *argv]
    r = procs.run(pin(args.gen_core, argv), timeout_s=hold + 300, cwd=args.engine_root or str(REPO))
    return _last_json(r.stdout) or {}, r


def _targets(args: argparse.Namespace, work: Path) -> dict[str, str]:
    """Start nginx and the echo server; the base URL of each kind."""
    import trustme

    d = work / "nginx"
    (d / "www").mkdir(parents=True)
    for p in (work, d, d / "www"):
        p.chmod(0o755)
    (d / "www" / "2k").write_bytes(b"x" * 2047 + b"\n")
    (d / "www" / "2k").chmod(0o644)
    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(d / "cert.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    port, port_h1, port_h2c, port_ws = (procs.free_port() for _ in range(4))
    conf = NGINX_CONF.replace(
        "    server {{\n        listen 127.0.0.1:{port_h1};",
        _H2C_SERVER + "    server {{\n        listen 127.0.0.1:{port_h1};",
    )
    affinity = f"worker_cpu_affinity {1 << args.server_core:b};" if args.server_core is not None else ""
    (d / "nginx.conf").write_text(conf.format(d=d, port=port, port_h1=port_h1, port_h2c=port_h2c, affinity=affinity))
    procs.REGISTRY.start([NGINX, "-c", str(d / "nginx.conf"), "-p", str(d)])
    echo = [sys.executable, "-m", "bench.protocols", "_ws_echo", str(port_ws)]
    procs.REGISTRY.start(pin(args.server_core, echo), cwd=str(REPO))
    for p in (port, port_h1, port_h2c, port_ws):
        procs.wait_port(p)
    return {
        "h1": f"http://127.0.0.1:{port_h1}",
        "h2": f"https://127.0.0.1:{port}",
        "h2c": f"http://127.0.0.1:{port_h2c}",
        "ws": f"http://127.0.0.1:{port_ws}",
    }


def _plan(kind: str, base_url: str) -> dict[str, Any]:
    if kind == "ws":
        actions = [a for _ in range(PER_SESSION // 2) for a in ({"send": "ping"}, {"expect": {"contains": "ping"}})]
        steps = [{"name": "echo", "path": "/", "websocket": {"actions": actions}}]
        return {"base_url": base_url, "test_cases": [{"name": "WS", "steps": steps}]}
    plan: dict[str, Any] = {
        "base_url": base_url,
        "protocol": "h2c" if kind == "h2c" else "auto",
        "test_cases": [{"name": "H", "steps": [{"name": "2k", "path": "/2k"}]}],
    }
    if kind == "h2":
        plan["tls_verify"] = False
    return plan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine_cost", description=__doc__.split("\n", 1)[0])
    p.add_argument("kinds", nargs="*", choices=KINDS, default=list(KINDS))
    p.add_argument("--callgrind", action="store_true", help="instructions per unit, fixed work (see above)")
    p.add_argument("--engine-root", default=None, help="run the engine of this checkout (or copy of workers/)")
    p.add_argument("--short", type=float, default=2.0, help="CPU mode: the short run, s (default 2)")
    p.add_argument("--long", type=float, default=8.0, help="the long run (CPU) or the run (callgrind), s (default 8)")
    p.add_argument("--users", type=int, default=None, help="default 50 (CPU), 1 (callgrind)")
    p.add_argument("--rate", type=float, default=60.0, help="callgrind: requests per s (default 60)")
    p.add_argument("--ws-sessions", type=float, default=2.0, help="callgrind: WebSocket sessions per s (default 2)")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--gen-core", type=int, default=0)
    p.add_argument("--server-core", type=int, default=1)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plimsoll-engine-cost-") as tmp:
        work = Path(tmp)
        try:
            urls = _targets(args, work)
            for kind in args.kinds:
                plan = _plan(kind, urls[kind])
                for _ in range(args.reps):
                    if args.callgrind:
                        rate = args.ws_sessions if kind == "ws" else args.rate
                        users = args.users or 1
                        plan["profile"] = {"kind": "arrival_rate", "rate": rate, "hold": 1, "max_users": users}
                        out = work / f"callgrind-{kind}.out"
                        data, _ = _run(args, plan, args.long, work, out)
                        n, total = _count(data, kind), _callgrind_total(out)
                        print(
                            f"{kind}: {total:,} instructions for {n:,} units ({data.get('iterations_dropped', 0)} "
                            f"arrivals dropped, {data.get('errors')} errors): {total / max(1, n):,.0f} per unit",
                            flush=True,
                        )
                        continue
                    plan["profile"] = {"kind": "constant", "users": args.users or 50, "hold": 1}
                    d1, r1 = _run(args, plan, args.short, work)
                    d2, r2 = _run(args, plan, args.long, work)
                    n1, n2 = _count(d1, kind), _count(d2, kind)
                    us = (r2.cpu_s - r1.cpu_s) / max(1, n2 - n1) * 1e6
                    print(
                        f"{kind}: {n1:,} / {n2:,} units in {r1.cpu_s:.2f} / {r2.cpu_s:.2f} s of CPU: {us:.1f} µs per "
                        f"unit ({d2.get('errors')} errors; load average {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
        finally:
            procs.REGISTRY.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
