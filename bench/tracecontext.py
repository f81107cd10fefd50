"""The cost of W3C trace context (issue 29, item 4): the engine's requests/s with and without ``traceparent``.

    .venv/bin/python -m bench.tracecontext [--reps 5] [--duration 8] [--users 50] [--gen-core 0] [--server-core 1]

The throughput benchmark's set-up (``bench/README.md``, section 1): one nginx
worker pinned to the server's core serving a 2,048-byte file with keep-alive,
the engine pinned to the generator's core, 50 users in a closed loop without
think time (``Plan.single_page``, as ``python -m workers.engine run --url``).
One engine process runs ``--rounds`` pairs of runs, **with** trace context (the
default: a new ``traceparent`` on every request) and **without**
(``trace_context: false``), alternating which goes first, each bounded by its
``--duration``. In one process, so imports and start-up are paid once and the
engine's own CPU time per request (``time.process_time()`` over the run's
requests) is measured beside requests/s: on a shared machine requests/s moves
with the neighbours, CPU per request much less. The cost is ``1 - with/without``
within a round; the headline is the median over rounds. Goal: under 5 %.

Needs Debian's nginx (``nginx-light``) and ``taskset``; prints a table and
writes ``bench/results/tracecontext-<time>.json``.

``--otlp``: the cost of the OTLP export of spans instead (issue 29 item 4). Both runs of a
pair send trace context (sample rate 1.0: every request is a span, the worst case); one
exports the spans (``otlp_endpoint``) to an OTLP/HTTP receiver in its own process on the
server's core (it reads each post and answers 200, as a collector would), the other does not.
The exporter's background thread is in the engine's process, so its CPU is in the CPU per
request. Also prints the spans exported and dropped per run. Writes ``otlp-<time>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import procs
from .nginx import FILE_SIZE, free_port
from .sysinfo import machine
from .tools import REPO, _last_json

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

CONF = """
daemon off;
master_process on;
worker_processes 1;
{affinity}
worker_rlimit_nofile 65536;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
{user}
events {{ worker_connections 32768; }}
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 120s;
    keepalive_requests 1000000;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=65535;
        root {d}/www;
        location = /2k {{ }}
    }}
}}
"""


def _start_nginx(d: Path, port: int, core: int | None) -> int:
    (d / "www").mkdir()
    (d / "www" / "2k").write_bytes((b"plimsoll-bench-2k\n" * (FILE_SIZE // 18 + 1))[:FILE_SIZE])
    user = "user root;" if os.geteuid() == 0 else ""  # as root, the worker would lose its 0700 folder
    affinity = f"worker_cpu_affinity {1 << core:b};" if core is not None else ""
    (d / "nginx.conf").write_text(CONF.format(d=d, port=port, affinity=affinity, user=user))
    argv = [NGINX, "-c", str(d / "nginx.conf"), "-p", str(d), "-e", str(d / "error.log")]
    if core is not None:
        argv = ["taskset", "-c", str(core), *argv]
    proc = procs.REGISTRY.start(argv)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited at start: {(d / 'error.log').read_text(errors='replace')[-500:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc.pid
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("nginx did not start listening within 10 s")


def _receiver(port: int) -> None:
    """An OTLP/HTTP receiver for the bench: reads each post whole, answers 200 ``{}`` (keep-alive)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    with contextlib.suppress(KeyboardInterrupt):  # the bench stops it with SIGINT when it is done
        ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def _child(url: str, users: int, duration: float, rounds: int, otlp: str = "") -> None:
    """In the generator's process: ``rounds`` × (with, without), alternating which goes first; one JSON line out.

    With ``otlp`` (a receiver's URL): "with" exports spans there, "without" does not; both send trace context.
    """
    from workers.engine.plan import Plan
    from workers.engine.runner import run_sync

    on = Plan.single_page(url, users=users, hold=duration)
    off = Plan.from_dict({**on.to_dict(), "trace_context": False})
    if otlp:
        on, off = Plan.from_dict({**on.to_dict(), "otlp_endpoint": otlp}), on
        assert on.otlp_endpoint and off.trace_context and not off.otlp_endpoint
    else:
        assert on.trace_context and not off.trace_context
    rounds_out = []
    for i in range(rounds):
        got = {}
        for with_trace in (True, False) if i % 2 == 0 else (False, True):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            totals = run_sync(on if with_trace else off, sink=None, allowlist="127.0.0.0/8")
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            w = totals.windows[0] if totals.windows else None
            got["with" if with_trace else "without"] = {
                "rps": round(w.pages / w.seconds, 1) if w and w.seconds else round(totals.rps, 1),
                "requests": totals.requests,
                "errors": totals.errors,
                "cpu_us_per_request": round(cpu / totals.requests * 1e6, 2) if totals.requests else None,
                "cpu_pct": round(100 * cpu / wall, 1),
                **({"otlp": totals.otlp} if totals.otlp else {}),
            }
        rounds_out.append(got)
    print(json.dumps({"rounds": rounds_out}), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tracecontext", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=8, help="(with, without) pairs (default 8)")
    p.add_argument("--duration", type=float, default=4.0, help="seconds of hold per run (default 4)")
    p.add_argument("--users", type=int, default=50)
    p.add_argument("--gen-core", type=int, default=0)
    p.add_argument("--server-core", type=int, default=1)
    p.add_argument("--otlp", action="store_true", help="measure the OTLP export of spans instead (on vs off)")
    p.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--child-otlp", metavar="URL", default="", help=argparse.SUPPRESS)
    p.add_argument("--receiver", metavar="PORT", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.receiver:
        _receiver(args.receiver)
        return 0
    if args.child:
        _child(args.child, args.users, args.duration, args.rounds, args.child_otlp)
        return 0
    what = "OTLP export" if args.otlp else "trace context"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    d = Path(tempfile.mkdtemp(prefix="plimsoll-bench-trace-"))
    port = free_port()
    try:
        master = _start_nginx(d, port, args.server_core)
        url = f"http://127.0.0.1:{port}/2k"
        print(
            f"bench.tracecontext: {what}, {args.rounds} × (with, without) × {args.duration:g} s, "
            f"{args.users} users, {url}"
        )
        child = [sys.executable, "-m", "bench.tracecontext", "--child", url, "--users", str(args.users)]
        child += ["--duration", f"{args.duration:g}", "--rounds", str(args.rounds)]
        if args.otlp:
            otlp_port = free_port()
            receiver = [sys.executable, "-m", "bench.tracecontext", "--receiver", str(otlp_port)]
            if args.server_core is not None:
                receiver = ["taskset", "-c", str(args.server_core), *receiver]
            procs.REGISTRY.start(receiver, cwd=str(REPO))
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", otlp_port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the OTLP receiver did not listen within 10 s") from None
                    time.sleep(0.1)
            child += ["--child-otlp", f"http://127.0.0.1:{otlp_port}"]
        if args.gen_core is not None:
            child = ["taskset", "-c", str(args.gen_core), *child]
        r = procs.run(child, timeout_s=args.rounds * 2 * (args.duration + 5) + 60, cwd=str(REPO))
        assert master
    finally:
        procs.REGISTRY.stop_all()
        shutil.rmtree(d, ignore_errors=True)
    data = _last_json(r.stdout)
    if data is None:
        print(f"bench.tracecontext: no result (exit {r.rc}): {r.stderr[-2000:]}", file=sys.stderr)
        return 1
    rows = data["rounds"]
    for i, row in enumerate(rows, 1):
        w, wo = row["with"], row["without"]
        row["cost_pct"] = round(100 * (1 - w["rps"] / wo["rps"]), 2) if wo["rps"] else None
        print(
            f"  round {i}: with {w['rps']:>9,.0f} req/s {w['cpu_us_per_request']:>6} µs CPU/request | "
            f"without {wo['rps']:>9,.0f} req/s {wo['cpu_us_per_request']:>6} µs CPU/request | "
            f"cost {row['cost_pct']:+.1f} %"
            + (f"  ! errors {w['errors']}/{wo['errors']}" if w["errors"] or wo["errors"] else "")
            + (
                f"  spans exported {w['otlp']['exported']:,}, dropped {w['otlp']['dropped']:,}, "
                f"failed {w['otlp']['failed']:,}, exporter CPU {w['otlp']['cpu_ms']:,.0f} ms "
                f"of {w['cpu_us_per_request'] * w['requests'] / 1000:,.0f} ms"
                if w.get("otlp")
                else ""
            )
        )
    costs = [r["cost_pct"] for r in rows if r["cost_pct"] is not None]
    median = statistics.median(costs)
    med = {k: statistics.median(r[k]["rps"] for r in rows) for k in ("with", "without")}
    cpu = {k: statistics.median(r[k]["cpu_us_per_request"] for r in rows) for k in ("with", "without")}
    cpu_cost = 100 * (cpu["with"] / cpu["without"] - 1)
    print()
    names = ("trace context, no export", "trace context + OTLP export") if args.otlp else None
    names = names or ("without trace context", "with trace context (default)")
    print("| engine, 50 users, /2k        | requests/s (median) | CPU per request (median) |")
    print("|------------------------------|--------------------:|-------------------------:|")
    print(f"| {names[0]:<28} | {med['without']:>19,.0f} | {cpu['without']:>21.2f} µs |")
    print(f"| {names[1]:<28} | {med['with']:>19,.0f} | {cpu['with']:>21.2f} µs |")
    print(
        f"\ncost of {what}, median of {len(costs)} within-round ratios: {median:+.1f} % requests/s "
        f"({'meets' if median < 5 else 'misses'} the < 5 % goal); CPU per request {cpu_cost:+.1f} %"
    )
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{'otlp' if args.otlp else 'tracecontext'}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    summary = {"median_cost_pct": median, "cpu_us_per_request": cpu, "rps": med}
    path.write_text(json.dumps({"args": vars(args), "machine": machine(), "rounds": rows, **summary}, indent=2))
    print(f"written: {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
