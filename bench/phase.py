"""Does nginx answer a client faster the slower the client turns around? (``python -m bench phase``)

The theory under test (issue 3): nginx keys ``echo_sleep``'s 50 ms timer on its
millisecond clock, read when ``epoll_wait`` returns, so a request read at
T + φ (T a millisecond boundary, 0 ≤ φ < 1 ms) is answered at about
T + 50 ms + δ: its latency is about 50 − φ + δ. In a closed loop a connection's
next request arrives ``turnaround`` after the previous answer, at phase
φ ≈ δ + turnaround, hence

    wire p50 ≈ 50 + c − turnaround   (modulo 1 ms, c constant)

(What the runs showed, in bench/README.md: the arrival phase is uniform for
every client and the turnaround sweep does not move wire p50 that way; the
difference between clients is how late nginx fires the timer.)

Every run here is captured on the wire (``bench.wire``), which gives both sides
of that formula per request: the turnaround (previous response's last byte →
this request's first byte, on the same connection) and the wire latency.

Clients:

- a **probe** (this module, ``python -m bench.phase probe``): one epoll loop
  over 50 keep-alive connections that, after each complete response, waits a
  fixed delay (busy-polling, so to the microsecond) and sends the next request:
  the only client here whose turnaround can be set below a millisecond. It also
  times its own requests (``perf_counter_ns`` around send … last recv), as a
  third opinion;
- **wrk** (``-t1 -c50``: turnaround ≈ 0.05–0.1 ms, a C event loop);
- the **engine** with no think time and with ``--think-time`` 0.1, 0.3, 0.5 and
  0.7 ms. On uvloop a sleep is a libuv timer of ``round(delay × 1000)``
  milliseconds, and a 0 ms one is ``call_soon``: 0.1, 0.3 and 0.5 ms (``round``
  rounds half to even) are the same as no think time, and 0.7 ms becomes a
  1 ms timer that fires on the loop's next millisecond tick. The engine cannot
  turn around in a chosen fraction of a millisecond, which is why the probe exists.
"""

from __future__ import annotations

import argparse
import heapq
import json
import select
import socket
import sys
import time
from typing import Any

from . import tools, wire

PROBE_DELAYS_MS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
ENGINE_THINK_MS = (0.0, 0.1, 0.3, 0.5, 0.7)
CONNECTIONS = 50


# -- the probe client ----------------------------------------------------------------------


def _run_probe(port: int, path: str, conns: int, delay_ns: int, duration: float) -> tuple[list[int], list[str]]:
    """One thread, one epoll loop; after each response, its connection waits ``delay_ns`` and sends again.

    The wait is a busy poll (``epoll_wait`` with a zero timeout) once the next
    send is less than 1.5 ms away: epoll and ``time.sleep`` both round or slack
    by tens of microseconds to milliseconds, spinning does not. The core is the
    generator's own, so spinning takes CPU from nothing we measure.
    """
    req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    now = time.perf_counter_ns
    ep = select.epoll()
    socks: dict[int, socket.socket] = {}
    bufs: dict[int, bytearray] = {}
    sent_at: dict[int, int] = {}
    due: list[tuple[int, int]] = []  # (when to send, fd)
    lat_us: list[int] = []
    errors: list[str] = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks[s.fileno()] = s
        bufs[s.fileno()] = bytearray()
        ep.register(s.fileno(), select.EPOLLIN)
    stop_at = now() + int(duration * 1e9)
    t = now()
    for fd in socks:
        heapq.heappush(due, (t, fd))
    try:
        while True:
            t = now()
            while due and due[0][0] <= t:
                _, fd = heapq.heappop(due)
                if t >= stop_at:
                    continue
                sent_at[fd] = now()
                socks[fd].send(req)  # 50 bytes into an empty socket buffer: all of it
            if t >= stop_at and not sent_at:
                break
            if due:
                wait_s = (due[0][0] - t) / 1e9 - 0.0015
                timeout = 0.0 if wait_s <= 0 else wait_s
            else:
                timeout = 1.0
            for fd, _ev in ep.poll(timeout):
                chunk = socks[fd].recv(65536)
                if not chunk:
                    raise ConnectionError("nginx closed a connection")
                buf = bufs[fd]
                buf += chunk
                size = wire._response_length(buf)
                if size is None:
                    continue
                t1 = now()
                del buf[:size]
                lat_us.append((t1 - sent_at.pop(fd) + 500) // 1000)
                if t1 < stop_at:
                    heapq.heappush(due, (t1 + delay_ns, fd))
    except (OSError, ValueError) as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        for s in socks.values():
            s.close()
        ep.close()
    return lat_us, errors


def probe_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.phase probe")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/sleep50")
    p.add_argument("--connections", type=int, default=CONNECTIONS)
    p.add_argument("--delay-ms", type=float, default=0.0, help="wait after each response (sub-millisecond is fine)")
    p.add_argument("--duration", type=float, default=10.0)
    a = p.parse_args(argv)
    t0 = time.monotonic()
    lat_us, errors = _run_probe(a.port, a.path, a.connections, round(a.delay_ms * 1e6), a.duration)
    wall = time.monotonic() - t0
    us = sorted(lat_us)
    res: dict[str, Any] = {"requests": len(us), "rps": round(len(us) / wall, 1), "errors": len(errors)}
    if us:
        res["p50_ms"] = wire.nearest_rank(us, 50) / 1000
        res["p99_ms"] = wire.nearest_rank(us, 99) / 1000
    if errors:
        res["first_error"] = errors[0]
    print(json.dumps(res))
    return 0 if us and not errors else 1


def probe(port: int, *, delay_ms: float, duration: float, core: int | None, server_pids: list[int]) -> tools.Measure:
    argv = [sys.executable, "-m", "bench.phase", "probe", "--port", str(port), "--duration", f"{duration:g}"]
    argv += ["--delay-ms", f"{delay_ms:g}", "--connections", str(CONNECTIONS)]
    window = tools.Window.open(server_pids)
    r = tools.procs.run(tools.pin(core, argv), timeout_s=duration + tools.STARTUP_GRACE_S, cwd=str(tools.REPO))
    m = tools.Measure("probe", ok=False)
    data = tools._last_json(r.stdout)
    if data is None:
        m.problem = f"no JSON (exit {r.rc}): {r.tail(3)}"
        return tools._finish(m, r, window)
    m.ok = r.rc == 0
    m.rps, m.requests, m.errors = data["rps"], data["requests"], data["errors"]
    m.p50_ms, m.p99_ms = data.get("p50_ms"), data.get("p99_ms")
    if data.get("first_error"):
        m.problem = data["first_error"]
    return tools._finish(m, r, window)


# -- the experiment ------------------------------------------------------------------------


def experiment(ctx: Any, *, reps: int, duration: float, server_core: int | None) -> dict[str, Any]:
    """Every client setting once per repetition, each captured; rows with turnaround, wire and own p50."""
    url = ctx.nginx.url("/sleep50")
    port = ctx.nginx.port
    plan: list[tuple[str, float]] = [("wrk", 0.0)]
    plan += [("engine", t) for t in ENGINE_THINK_MS]
    plan += [("probe", d) for d in PROBE_DELAYS_MS]
    print(
        f"\n== phase: GET /sleep50, {CONNECTIONS} connections, {duration:g} s per run, every run captured; "
        f"{reps} × ({len(plan)} runs)"
    )
    runs: list[dict[str, Any]] = []
    for rep in range(1, reps + 1):
        for client, setting in plan:
            ctx.before_run()
            pids = ctx.nginx.worker_pids()
            with wire.Capture(port, core=server_core, limit_s=duration + tools.STARTUP_GRACE_S + 60) as cap:
                if client == "wrk":
                    m = tools.wrk(url, connections=CONNECTIONS, duration=duration, core=ctx.gen_core, server_pids=pids)
                elif client == "engine":
                    m = tools.engine(
                        url,
                        users=CONNECTIONS,
                        duration=duration,
                        think_time=setting / 1000,
                        core=ctx.gen_core,
                        server_pids=pids,
                    )
                else:
                    m = probe(port, delay_ms=setting, duration=duration, core=ctx.gen_core, server_pids=pids)
            w = cap.analyse()
            row = {
                "rep": rep,
                "client": client,
                "setting_ms": setting,
                "own": m.to_dict(),
                "wire": w,
            }
            turn = (w.get("turnaround_ms") or {}).get("p50")
            if m.ok and w.get("p50_ms") is not None and turn is not None:
                row["own_minus_wire_p50_ms"] = round(m.p50_ms - w["p50_ms"], 3)
                row["own_minus_wire_p99_ms"] = round(m.p99_ms - w["p99_ms"], 3)
                row["c_ms"] = round(w["p50_ms"] - 50 + turn, 3)  # constant if the theory holds (mod 1 ms)
            runs.append(row)
            label = client + ("" if client == "wrk" else f" {setting:g} ms")
            print(
                f"  rep {rep}/{reps} {label:<16} turnaround p50 {_f(turn)}  wire p50 {_f(w.get('p50_ms'))} "
                f"p99 {_f(w.get('p99_ms'))}  own p50 {_f(m.p50_ms)} p99 {_f(m.p99_ms)}  "
                f"c {_f(row.get('c_ms'))}  lateness p50 {_f((w.get('lateness_ms') or {}).get('p50'))}  "
                f"early {w.get('early', '?')}  cluster {w.get('cluster_mean', '?')}"
                + (f"  !! {m.problem}" if m.problem else "")
                + (f"  !! {w['problem']}" if w.get("problem") else ""),
                flush=True,
            )
    return {"settings": {"connections": CONNECTIONS, "duration_s": duration, "reps": reps}, "runs": runs}


def _f(v: float | None) -> str:
    return "     ?" if v is None else f"{v:6.3f}"


def render(doc: dict[str, Any], res: dict[str, Any]) -> str:
    lines = [
        "### Phase experiment",
        "",
        f"GET `/sleep50`, {res['settings']['connections']} connections, {res['settings']['duration_s']:g} s per run, "
        "every run captured on the wire. Turnaround = previous response's last byte → next request's first byte on "
        "the same connection (wire, median). c = wire p50 − 50 + turnaround: the theory says it is constant "
        "(modulo 1 ms). Arrival phase: where in nginx's millisecond (CLOCK_MONOTONIC) requests arrive, mean (0.5 if "
        "uniform). Lateness: answer − timer key (the arrival's millisecond + 50 ms); *early*: requests answered "
        "before their key (0 if nginx works as modelled). Cluster: mean size of the burst of responses (< 100 µs "
        "apart) a request's answer was part of. All figures in ms.",
        "",
        "| rep | client | setting | turnaround p50 (p10–p90) | wire p50 | wire p99 | own p50 | own p99 "
        "| own − wire p50 | own − wire p99 | c | arrival phase mean | lateness p50 | early | cluster |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["runs"]:
        w, o = r["wire"], r["own"]
        t = w.get("turnaround_ms") or {}
        setting = "–" if r["client"] == "wrk" else ("think " if r["client"] == "engine" else "delay ")
        setting += "" if r["client"] == "wrk" else f"{r['setting_ms']:g}"
        lines.append(
            "| "
            + " | ".join(
                [
                    str(r["rep"]),
                    r["client"],
                    setting,
                    f"{t.get('p50', 0):.3f} ({t.get('p10', 0):.2f}–{t.get('p90', 0):.2f})" if t else "–",
                    _c(w.get("p50_ms")),
                    _c(w.get("p99_ms")),
                    _c(o.get("p50_ms")),
                    _c(o.get("p99_ms")),
                    _s(r.get("own_minus_wire_p50_ms")),
                    _s(r.get("own_minus_wire_p99_ms")),
                    _c(r.get("c_ms")),
                    _c(w.get("phase_mean_ms")),
                    _c((w.get("lateness_ms") or {}).get("p50")),
                    str(w.get("early", "–")),
                    "–" if w.get("cluster_mean") is None else f"{w['cluster_mean']:.1f}",
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def _c(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _s(v: float | None) -> str:
    return "–" if v is None else f"{v:+.3f}"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "probe":
        sys.exit(probe_main(sys.argv[2:]))
    print("usage: python -m bench.phase probe --port P [--delay-ms D] [--duration S]")
    print("(the experiment itself: python -m bench phase)")
    sys.exit(2)
