"""Time to first event against the server's own send timestamps (issue 26 item 6).

    .venv/bin/python -m bench.ttfe_wire [--users 2] [--duration 6] [--first-ms 50] [--protocol http1 --protocol h2c]

The demo target's counters see a request only once Hypercorn has parsed it and
called the application, and an event only when the application hands it to
Hypercorn, not when its bytes reach the socket; the difference between the
engine's TTFE and that figure mixes the server's work with the engine's. Here
the server is the bench's own (``SseWireProtocol``: a bare ``asyncio.Protocol``
on uvloop speaking HTTP/1.1, chunked, and h2c with python-hyper's ``h2``), which
stamps on CLOCK_MONOTONIC (``time.monotonic_ns``):

* ``req``: when the request's bytes were handed to it (first thing in
  ``data_received``, before parsing), and
* ``sent``: immediately before ``transport.write`` of the first event's bytes
  (the event is framed, for h2 encoded, before the stamp).

Each request carries its own id in the query (``?id=``), so every response is
compared on its own. Two measurements, each client pinned to the generator's
core, the server to the other one:

1. **per response** (``client``): a process pinned to the generator's core
   runs the engine's runner (``run_sync``, the plan below, the runner's own
   client factory ``make_client``) whose clients only add ``&id=`` to each
   URL and keep each request's ``StreamObserver``. The runner's TTFE is that
   observer's ``first_event - sent``: from the request's send to the first
   event's read, both ``time.perf_counter``, which on Linux is CLOCK_MONOTONIC
   too, so the same clock as the server's stamps; the run's own histogram
   (``run_ttfe_ms``) is given beside.
   Per response:

   - ``receipt``: the engine's first-event time − the server's ``sent``, on the
     same clock: how long after the server wrote the first event the engine
     stamped it (loopback delivery and the engine's read path). The engine's
     request-send stamp is taken just before its own write, so this is its
     error against the server's send timestamps;
   - ``send``: the server's ``req`` − the engine's send stamp: the request's trip
     and the server's own delay in reading it (its process waiting for the
     core), which the server's TTFE leaves out and any client's TTFE includes;
   - ``delta``: engine TTFE − server TTFE (``sent − req``) = ``send`` + ``receipt``.

2. **the engine's command** (``engine``): ``python -m workers.engine run --plan``
   with the same plan against the same server, its ``ttfe_ms`` p50/p95 against
   the server's own TTFE of the same responses (distributions, not per
   response: the command gives histograms).

A ``bare`` client (a bare ``asyncio.Protocol`` on uvloop that stamps at
``data_received`` and parses nothing) gives the floor: loopback and an event
loop's wake-up on this machine.

Percentiles are nearest rank on the exact values. The first response of each
connection is left out of the per-response figures (``first_on_connection``):
the server's connection is new there too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from . import procs
from .tools import REPO, _last_json, pin

GRACE_S = 40.0
USERS = 2  # few: queueing in either process (users waiting on each other) is not what is measured
STAGGER_S = 0.05  # the users' starts are spread over this (the first event's delay): not in lockstep
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_ns = time.monotonic_ns


def _query(target: str) -> dict[str, str]:
    path, _, qs = target.partition("?")
    q = {k: v[-1] for k, v in parse_qs(qs).items()}
    q["_path"] = path
    return q


def _event(i: int) -> bytes:
    return b'id: %d\nevent: token\ndata: {"i": %d}\n\n' % (i, i)


DONE = b"event: done\ndata: [DONE]\n\n"


class SseWireProtocol(asyncio.Protocol):
    """``GET /sse?id=&tokens=&first_ms=&gap_ms=`` (HTTP/1.1 or h2c) with send times stamped at the write.

    ``GET /_times`` (HTTP/1.1) answers ``{id: [req_ns, sent_ns], ...}`` of the
    streams served since the last call, and forgets them.
    """

    times: dict[str, list[int]] = {}
    served = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()
        self.buf = b""
        self.h2: Any = None

    def data_received(self, data: bytes) -> None:
        now = _ns()
        if self.h2 is not None:
            self._h2_data(data, now)
            return
        buf = self.buf + data
        if not self.buf and buf[:3] == b"PRI":
            if len(buf) < len(H2_PREFACE):
                self.buf = buf
                return
            self.buf = b""
            self._h2_start(buf, now)
            return
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            self.buf = buf
            return
        self.buf = buf[end + 4 :]  # GETs only: no body
        line = buf[: buf.find(b"\r\n")].decode("latin-1")
        q = _query(line.split(" ")[1] if " " in line else "/")
        if q["_path"] == "/_times":
            body = json.dumps(SseWireProtocol.times).encode()
            SseWireProtocol.times = {}
            self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            self.t.write(body)
            return
        self.t.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self._schedule(q, now, self._h1_send)

    def _schedule(self, q: dict[str, str], now: int, send: Any, *extra: Any) -> None:
        SseWireProtocol.served += 1
        rid = q.get("id") or f"_{SseWireProtocol.served}"  # the engine's run sends no id
        tokens = int(q.get("tokens", 5))
        first, gap = int(q.get("first_ms", 50)) / 1000, int(q.get("gap_ms", 5)) / 1000
        record = SseWireProtocol.times[rid] = [now, 0]
        for i in range(tokens):
            self.loop.call_later(first + i * gap, send, i, tokens, record, *extra)

    def _h1_send(self, i: int, tokens: int, record: list[int]) -> None:
        if self.t.is_closing():
            return
        ev = _event(i)
        data = b"%x\r\n%s\r\n" % (len(ev), ev)
        if i == tokens - 1:
            data += b"%x\r\n%s\r\n0\r\n\r\n" % (len(DONE), DONE)
        if i == 0:
            record[1] = _ns()
        self.t.write(data)

    # -- h2c (prior knowledge) --

    def _h2_start(self, data: bytes, now: int) -> None:
        import h2.config
        import h2.connection

        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self._h2_data(data, now)

    def _h2_data(self, data: bytes, now: int) -> None:
        import h2.events

        conn = self.h2
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                target = dict(ev.headers).get(":path", "/")
                conn.send_headers(ev.stream_id, [(":status", "200"), ("content-type", "text/event-stream")])
                self._schedule(_query(target), now, self._h2_send, ev.stream_id)
            elif isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        out = conn.data_to_send()
        if out:
            self.t.write(out)

    def _h2_send(self, i: int, tokens: int, record: list[int], stream_id: int) -> None:
        if self.t.is_closing():
            return
        conn = self.h2
        conn.send_data(stream_id, _event(i))
        if i == tokens - 1:
            conn.send_data(stream_id, DONE, end_stream=True)
        out = conn.data_to_send()
        if i == 0:
            record[1] = _ns()
        self.t.write(out)


def serve(port: int) -> None:
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(SseWireProtocol, "127.0.0.1", port, backlog=1024)
        async with server:
            await asyncio.sleep(600)  # bounded: the bench ends it long before

    try:
        uvloop.run(main())
    except KeyboardInterrupt:  # the bench's stop
        pass


# -- the client: the engine's own client and stream observer, per response ----------------------------


def _plan(port: int, protocol: str, users: int, duration: float, path: str) -> dict[str, Any]:
    return {
        "base_url": f"http://127.0.0.1:{port}",
        "protocol": protocol,
        "test_cases": [{"name": "SSE", "steps": [{"name": "tokens", "path": path, "stream": {"kind": "sse"}}]}],
        # the users' starts spread over the ramp-up (STAGGER_S): their events do not arrive together
        "profile": {"kind": "ramp", "users": users, "ramp_up": STAGGER_S, "hold": duration},
    }


def _runner(port: int, protocol: str, users: int, duration: float, path: str) -> dict[str, Any]:
    """The engine's runner (``run_sync``, as a run), each request tagged with an id for the server's stamps.

    The client factory is the runner's own (``make_client``); each client's ``request`` only adds
    ``&id=`` to the URL and keeps the request's ``StreamObserver`` for the figures.
    """
    import itertools

    from workers.engine.h2 import make_client
    from workers.engine.runner import run_sync

    seen: list[tuple[str, Any, Any]] = []
    ids = itertools.count(1)

    def factory() -> Any:
        client = make_client("127.0.0.1/32", protocol=protocol, verify=False)
        request = client.request

        async def tagged(method: str, url: str, headers: Any, body: bytes, timeout: Any, stream: Any = None) -> Any:
            rid = str(next(ids))
            resp = await request(method, f"{url}&id={rid}", headers, body, timeout, stream)
            if stream is not None:
                seen.append((rid, stream, resp))
            return resp

        client.request = tagged
        return client

    totals = run_sync(_plan(port, protocol, users, duration, path), sink=None, client_factory=factory)
    label = totals.labels.get("SSE: tokens")
    rows = [[rid, o.sent, o.first_event, r.connect_s > 0, r.protocol] for rid, o, r in seen if o.events]
    ttfe = label.to_dict().get("ttfe_ms", {}) if label is not None else {}
    return {
        "rows": rows,
        "error_count": totals.errors,
        "errors": dict(label.errors_by_kind) if label is not None else {},
        "run_ttfe_ms": {"p50": ttfe.get("p50"), "p95": ttfe.get("p95")},
    }


class _BareClient(asyncio.Protocol):
    """The floor: a bare HTTP/1.1 protocol on uvloop stamping every piece at ``data_received``, parsing nothing."""

    def __init__(self) -> None:
        self.buf = b""
        self.first = 0.0
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.buf += data
        if not self.first and b"event: token" in self.buf:
            self.first = now
        if self.buf.endswith(b"\r\n0\r\n\r\n") and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("closed"))


async def _bare(port: int, users: int, duration: float, path: str) -> dict[str, Any]:
    rows: list[list[Any]] = []
    loop = asyncio.get_running_loop()
    deadline = time.perf_counter() + duration

    async def user(u: int) -> None:
        await asyncio.sleep(u * STAGGER_S / users)
        t, proto = await loop.create_connection(_BareClient, "127.0.0.1", port)
        n = 0
        while time.perf_counter() < deadline:
            n += 1
            rid = f"{u}-{n}"
            proto.buf, proto.first, proto.done = b"", 0.0, loop.create_future()
            start = time.perf_counter()
            t.write(f"GET {path}&id={rid} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            await proto.done
            rows.append([rid, start, proto.first, n == 1, "bare"])
        t.close()

    await asyncio.gather(*(user(u) for u in range(users)))
    return {"rows": rows, "errors": [], "error_count": 0}


def client_main(argv: list[str]) -> None:
    import uvloop

    port, protocol, users, duration, path = int(argv[0]), argv[1], int(argv[2]), float(argv[3]), argv[4]
    if protocol == "bare":
        print(json.dumps(uvloop.run(_bare(port, users, duration, path))), flush=True)
        return
    print(json.dumps(_runner(port, protocol, users, duration, path)), flush=True)


# -- analysis ---------------------------------------------------------------------------------------------


def nearest_rank(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(p / 100 * len(v)) - 1)]


def _pcts(values: list[float]) -> dict[str, float | None]:
    return {k: None if not values else round(nearest_rank(values, p), 3) for k, p in (("p50", 50), ("p95", 95))}


def per_response(rows: list[list[Any]], times: dict[str, list[int]]) -> dict[str, Any]:
    """The figures of ``client`` rows against the server's stamps (ms)."""
    delta, receipt, send, engine, server = [], [], [], [], []
    first_conn = unmatched = 0
    for rid, start, first_event, connected, _proto in rows:
        t = times.get(rid)
        if t is None or not t[1]:
            unmatched += 1
            continue
        if connected:
            first_conn += 1
            continue
        req, sent = t
        start_ns, first_ns = round(start * 1e9), round(first_event * 1e9)
        engine.append((first_ns - start_ns) / 1e6)
        server.append((sent - req) / 1e6)
        delta.append(engine[-1] - server[-1])
        receipt.append((first_ns - sent) / 1e6)
        send.append((req - start_ns) / 1e6)
    return {
        "responses": len(delta),
        "first_on_connection": first_conn,
        "unmatched": unmatched,
        "engine_ttfe_ms": _pcts(engine),
        "server_ttfe_ms": _pcts(server),
        "delta_ms": _pcts(delta),
        "receipt_ms": _pcts(receipt),
        "send_ms": _pcts(send),
        "protocols": sorted({r[4] for r in rows}),
    }


# -- the bench ---------------------------------------------------------------------------------------------


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback only
        return r.read().decode()


def measure(args: argparse.Namespace, work: Path, also: Any = None) -> dict[str, Any]:
    """Both measurements, for each protocol, ``args.reps`` times; ``also(port, path)`` (optional) runs last,
    against the same server, and its result is ``also`` in the answer."""
    port = procs.free_port()
    procs.REGISTRY.start(
        pin(args.server_core, [sys.executable, "-m", "bench.ttfe_wire", "_serve", str(port)]), cwd=str(REPO)
    )
    path = f"/sse?tokens=5&first_ms={args.first_ms}&gap_ms=5"
    out: dict[str, Any] = {"users": args.users, "duration_s": args.duration, "first_ms": args.first_ms, "runs": []}
    try:
        procs.wait_port(port)
        _get(f"http://127.0.0.1:{port}/_times")  # the readiness pokes: forgotten
        for _ in range(args.reps):
            for protocol in args.protocol or ["bare", "http1", "h2c"]:
                argv = [sys.executable, "-m", "bench.ttfe_wire", "_client", str(port), protocol]
                argv += [str(args.users), str(args.duration), path]
                r = procs.run(pin(args.gen_core, argv), timeout_s=args.duration + GRACE_S, cwd=str(REPO))
                got = _last_json(r.stdout) or {}
                times = json.loads(_get(f"http://127.0.0.1:{port}/_times"))
                run: dict[str, Any] = {"protocol": protocol, "client": per_response(got.get("rows", []), times)}
                run["client"]["errors"] = got.get("error_count")
                run["client"]["run_ttfe_ms"] = got.get("run_ttfe_ms")  # the same run's own histogram
                if not got:
                    run["client"]["problem"] = f"exit {r.rc}: {r.tail(3)}"
                if protocol != "bare":
                    run["engine"] = _engine_run(args, work, port, protocol, path)
                out["runs"].append(run)
                print(protocol, json.dumps(run), flush=True)
        if also is not None:
            out["also"] = also(port, path)
        return out
    finally:
        procs.REGISTRY.stop_all()


def _engine_run(args: argparse.Namespace, work: Path, port: int, protocol: str, path: str) -> dict[str, Any]:
    (work / "plan.json").write_text(json.dumps(_plan(port, protocol, args.users, args.duration, path)))
    argv = [sys.executable, "-m", "workers.engine", "run", "--plan", str(work / "plan.json"), "--json"]
    r = procs.run(pin(args.gen_core, argv), timeout_s=args.duration + GRACE_S, cwd=str(REPO))
    data = _last_json(r.stdout) or {}
    times = json.loads(_get(f"http://127.0.0.1:{port}/_times"))
    server = [(sent - req) / 1e6 for req, sent in times.values() if sent]
    ttfe = ((data.get("labels") or {}).get("SSE: tokens") or {}).get("ttfe_ms") or {}
    res: dict[str, Any] = {
        "streams": len(server),
        "engine_ttfe_ms": {"p50": ttfe.get("p50"), "p95": ttfe.get("p95")},
        "server_ttfe_ms": _pcts(server),
        "errors": data.get("errors"),
    }
    if ttfe.get("p50") is not None and server:
        res["delta_p50_ms"] = round(ttfe["p50"] - statistics.median(sorted(server)), 3)
        res["delta_p95_ms"] = round(ttfe["p95"] - nearest_rank(server, 95), 3)
    if not data:
        res["problem"] = f"exit {r.rc}: {r.tail(3)}"
    return res


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_serve"]:
        serve(int(argv[1]))
        return 0
    if argv[:1] == ["_client"]:
        client_main(argv[1:])
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.ttfe_wire", description=__doc__.split("\n", 1)[0])
    p.add_argument("--duration", type=float, default=6.0)
    p.add_argument("--users", type=int, default=USERS, help="few: queueing in either process is not what is measured")
    p.add_argument("--first-ms", type=int, default=50)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--gen-core", type=int, default=0)
    p.add_argument("--server-core", type=int, default=1)
    p.add_argument("--protocol", choices=("bare", "http1", "h2c"), action="append")
    args = p.parse_args(argv)
    results: dict[str, Any] = {"args": vars(args), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="plimsoll-bench-ttfe-") as tmp:
        results["ttfe_wire"] = measure(args, Path(tmp))
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"ttfe-wire-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
