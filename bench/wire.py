"""Ground truth on the wire: capture the loopback traffic to nginx and time every request from the packets.

``Capture`` runs Wireshark's capture engine (``dumpcap``, from the ``tshark``
package; ``tshark`` itself when dumpcap is missing) on ``lo`` with a capture
filter on nginx's port that keeps only TCP segments with payload (pure ACKs are
dropped in the kernel, which halves what is copied), writing a classic pcap to a
temporary file. ``analyse()`` then reads that file and pairs, per TCP stream
(the client's port) and in order, request *i* with response *i* (keep-alive, no
pipelining in a closed loop, but pipelining would pair correctly too):

- **wire latency** = from the capture timestamp of the first request byte
  (client → server segment) to that of the segment holding the response's last
  byte (server → client; the response is complete when its HTTP framing says so:
  ``Content-Length`` or the chunked terminator, since ``/sleep50`` is chunked);
- **turnaround** = from the previous response's last byte on the same stream to
  this request's first byte: how fast the client answered the server.

On loopback a packet is timestamped once, when its sender hands it to the
device (``dev_queue_xmit_nit``), in microseconds. Wire latency therefore includes
nginx's work and none of the client's; a tool's own latency minus the wire's is
the tool's measurement error (its send and receive path, its event loop).

Percentiles are exact, nearest rank on the sorted microsecond values (rank =
⌈p/100 · n⌉), the same method as wrk's per-microsecond histogram. The engine's
log-linear histogram reports bucket midpoints, ±16 µs around 50 ms.

``phase`` is each request's arrival time modulo 1 ms on nginx's millisecond
clock: nginx keys its timers on ``ngx_current_msec``, whole milliseconds of
CLOCK_MONOTONIC read when ``epoll_wait`` returns. Capture timestamps are
CLOCK_REALTIME, so the offset between the two clocks (read here once per
capture) is subtracted.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .procs import REGISTRY
from .tools import pin

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 15.0
BUFFER_MIB = 64
PCAP_HEADER = 24


def capture_tool() -> str | None:
    """``dumpcap`` (what tshark runs underneath), else ``tshark``, else None."""
    return shutil.which("dumpcap") or shutil.which("tshark")


def clock_offset_ns() -> int:
    """CLOCK_REALTIME − CLOCK_MONOTONIC, in ns (the narrowest of a few readings)."""
    best = None
    for _ in range(20):
        m0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        r = time.clock_gettime_ns(time.CLOCK_REALTIME)
        m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, r - (m0 + m1) // 2)
    assert best is not None
    return best[1]


def bpf_filter(port: int) -> str:
    """TCP to or from ``port``, with payload (no pure ACKs, no handshake)."""
    return f"tcp port {port} and (((ip[2:2] - ((ip[0]&0xf)<<2)) - ((tcp[12]&0xf0)>>2)) != 0)"


@dataclass
class Capture:
    """``with Capture(port, core=1, limit_s=60) as cap: ...``; then ``cap.analyse(port)``."""

    port: int
    core: int | None
    limit_s: float
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="plimsoll-bench-wire-")))
    proc: subprocess.Popen[bytes] | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    stats: str = ""
    dropped: int | None = None
    offset_ns: int = 0
    problem: str = ""
    probe_ports: set[int] = field(default_factory=set)  # our own pokes, left out of the analysis

    @property
    def pcap(self) -> Path:
        return self.tmp / "lo.pcap"

    def __enter__(self) -> Capture:
        tool = capture_tool()
        if tool is None:
            raise RuntimeError("no dumpcap or tshark: apt-get install tshark")
        argv = [tool, "-i", "lo", "-f", bpf_filter(self.port), "-w", str(self.pcap), "-B", str(BUFFER_MIB)]
        argv += ["-a", f"duration:{math.ceil(self.limit_s)}"]  # bounded by itself, whatever happens to us
        argv += ["-P"] if tool.endswith("dumpcap") else ["-F", "pcap", "-q"]
        self.offset_ns = clock_offset_ns()
        self._t0 = time.monotonic()
        self._err = open(self.tmp / "stderr.log", "w+b")  # noqa: SIM115 - closed in __exit__
        self.proc = REGISTRY.start(pin(self.core, argv), stdout=subprocess.DEVNULL, stderr=self._err)
        # "Capturing on" comes before the ring delivers packets: poke nginx until the file holds a packet.
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.pcap.exists() or self.pcap.stat().st_size <= PCAP_HEADER:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                msg = self._stderr().decode(errors="replace").strip()
                self.__exit__()
                raise RuntimeError(f"{tool} did not start capturing within {START_TIMEOUT_S:g} s: {msg[-500:]}")
            self.probe_ports.add(_poke(self.port))
            time.sleep(0.1)
        return self

    def _stderr(self) -> bytes:
        self._err.seek(0)
        return self._err.read()

    def __exit__(self, *exc: object) -> None:
        p = self.proc
        if p is None:
            return
        self.proc = None
        time.sleep(0.2)  # the last packets reach the ring
        rusage = None
        try:
            os.killpg(p.pid, signal.SIGINT)  # dumpcap flushes, prints its counts and exits
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while rusage is None:
            pid, _status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                rusage = ru
                p.returncode = 0
                break
            if time.monotonic() > deadline:
                REGISTRY.stop(p, first=signal.SIGKILL, grace_s=2.0)
                self.problem = "capture did not stop in time"
                break
            time.sleep(0.05)
        REGISTRY.forget(p)
        self.wall_s = time.monotonic() - self._t0
        if rusage is not None:
            self.cpu_s = rusage.ru_utime + rusage.ru_stime
        self.stats = self._stderr().decode(errors="replace")
        self._err.close()
        m = re.search(r"received/dropped on interface .*?: (\d+)/(\d+) ", self.stats)
        if m:
            self.dropped = int(m.group(2))
        elif not self.problem:
            self.problem = "no packet counts from the capture"

    def analyse(self) -> dict[str, Any]:
        try:
            res = analyse(self.pcap, self.port, self.offset_ns, skip_ports=self.probe_ports)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        res["capture_cpu_pct"] = round(100 * self.cpu_s / self.wall_s, 2) if self.wall_s else None
        res["dropped"] = self.dropped
        if self.problem:
            res["problem"] = self.problem
        elif self.dropped:
            res["problem"] = f"the capture dropped {self.dropped} packets"
        return res


def _poke(port: int) -> int:
    """One small request to nginx (a 404), so that the capture sees a packet; the client port it used."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"GET /plimsoll-wire-probe HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        cport = s.getsockname()[1]
        while s.recv(4096):
            pass
    return cport


# -- reading the pcap ------------------------------------------------------------------


def segments(path: Path, port: int) -> list[tuple[int, bool, int, bytes]]:
    """``(timestamp ns since the epoch, to_server, client port, payload)`` of every captured TCP segment."""
    data = path.read_bytes()
    if len(data) < 24:
        return []
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError(f"{path} is not a classic pcap file (magic {magic.hex()})")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    link_len = {1: 14, 113: 16, 276: 20, 0: 4}.get(linktype)  # Ethernet (lo), Linux cooked v1/v2, BSD loopback
    if link_len is None:
        raise ValueError(f"unexpected link type {linktype} in {path}")
    rec = struct.Struct(endian + "IIII")
    out = []
    pos = 24
    n = len(data)
    while pos + 16 <= n:
        sec, frac, caplen, _origlen = rec.unpack_from(data, pos)
        pos += 16
        pkt = data[pos : pos + caplen]
        pos += caplen
        ts = sec * 1_000_000_000 + (frac if nano else frac * 1000)
        ip = link_len
        if len(pkt) < ip + 20 or pkt[ip] >> 4 != 4 or pkt[ip + 9] != 6:
            continue
        ihl = (pkt[ip] & 0x0F) * 4
        total = struct.unpack_from("!H", pkt, ip + 2)[0]
        tcp = ip + ihl
        sport, dport = struct.unpack_from("!HH", pkt, tcp)
        doff = (pkt[tcp + 12] >> 4) * 4
        payload = pkt[tcp + doff : ip + total]
        if not payload:
            continue
        if dport == port:
            out.append((ts, True, sport, payload))
        elif sport == port:
            out.append((ts, False, dport, payload))
    return out


def _response_length(buf: bytes | bytearray) -> int | None:
    """Bytes of the first complete HTTP/1.1 response in ``buf``, or None while it is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buf[:end]).decode("latin-1").lower()
    body = end + 4
    m = re.search(r"\r\ncontent-length:\s*(\d+)", head)
    if m:
        size = body + int(m.group(1))
        return size if len(buf) >= size else None
    if re.search(r"\r\ntransfer-encoding:[^\r]*chunked", head):
        pos = body
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            pos = eol + 2
            if size == 0:  # trailers (none here), then the blank line
                fin = buf.find(b"\r\n", pos)
                while fin > pos:
                    pos = fin + 2
                    fin = buf.find(b"\r\n", pos)
                return pos + 2 if fin == pos else None
            pos += size + 2
            if len(buf) < pos:
                return None
    status = head.split(" ", 2)[1] if " " in head else ""
    if status in ("204", "304") or status.startswith("1"):
        return body
    raise ValueError(f"a response without length: {head[:200]!r}")


@dataclass
class _Stream:
    req_buf: bytearray = field(default_factory=bytearray)
    req_start: int = 0
    pending: list[tuple[int, int | None]] = field(default_factory=list)  # (first byte ns, turnaround ns)
    resp_buf: bytearray = field(default_factory=bytearray)
    last_resp_end: int | None = None


def exchanges(segs: list[tuple[int, bool, int, bytes]]) -> tuple[list[tuple[int, int, int | None]], int]:
    """``([(request start ns, response end ns, turnaround ns or None), …], requests left unanswered)``."""
    streams: dict[int, _Stream] = {}
    out = []
    for ts, to_server, cport, payload in segs:
        st = streams.setdefault(cport, _Stream())
        if to_server:
            if not st.req_buf:
                st.req_start = ts
            st.req_buf += payload
            while (end := st.req_buf.find(b"\r\n\r\n")) >= 0:  # GETs: no body
                turn = None if st.last_resp_end is None else st.req_start - st.last_resp_end
                st.pending.append((st.req_start, turn))
                del st.req_buf[: end + 4]
                st.req_start = ts
        else:
            st.resp_buf += payload
            while st.pending and (size := _response_length(st.resp_buf)) is not None:
                start, turn = st.pending.pop(0)
                out.append((start, ts, turn))
                st.last_resp_end = ts
                del st.resp_buf[:size]
    unanswered = sum(len(s.pending) for s in streams.values())
    out.sort()
    return out, unanswered


def nearest_rank(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


def analyse(path: Path, port: int, offset_ns: int = 0, skip_ports: set[int] | frozenset[int] = frozenset()) -> dict:
    """Wire figures of one capture: count, p50/p99 (ms), turnaround, latency by arrival phase."""
    ex, unanswered = exchanges([s for s in segments(path, port) if s[2] not in skip_ports])
    lat_us = sorted(round((b - a) / 1000) for a, b, _ in ex)
    turns = sorted(t / 1e6 for _, _, t in ex if t is not None)
    res: dict[str, Any] = {
        "requests": len(ex),
        "unanswered": unanswered,
        "method": "exact nearest-rank percentiles of per-request wire latencies (µs resolution)",
    }
    if ex:
        span = (ex[-1][0] - ex[0][0]) / 1e9
        res["rps"] = round(len(ex) / span, 1) if span > 0 else None
        res["p50_ms"] = nearest_rank(lat_us, 50) / 1000
        res["p99_ms"] = nearest_rank(lat_us, 99) / 1000
        res["mean_ms"] = round(statistics.fmean(lat_us) / 1000, 3)
    if turns:
        res["turnaround_ms"] = {
            "p10": round(nearest_rank(turns, 10), 3),
            "p50": round(nearest_rank(turns, 50), 3),
            "p90": round(nearest_rank(turns, 90), 3),
        }
    if ex:
        res |= server_side(ex, offset_ns)
    res["by_phase"] = by_phase(ex, offset_ns)
    return res


def server_side(ex: list[tuple[int, int, int | None]], offset_ns: int) -> dict[str, Any]:
    """What nginx did with the requests it was sent, on its own millisecond clock.

    - ``phase_mean_ms``: mean arrival phase within nginx's millisecond (0.5 if uniform);
    - ``lateness_ms``: answer time − the timer's key, taken as the arrival's whole
      millisecond + 50 (nginx reads the clock when epoll_wait returns, just after
      the arrival); never negative if nginx keys timers on CLOCK_MONOTONIC as
      modelled, so ``early`` counts the requests that contradict the model;
    - ``cluster_mean``: responses nginx sent within 100 µs of each other form a
      cluster; the size of its cluster, averaged over requests. 50 connections in
      lockstep would give 50, connections spread over time 1.
    """
    lateness, phases = [], []
    for a, b, _ in ex:
        am, bm = a - offset_ns, b - offset_ns
        phases.append((am % 1_000_000) / 1e6)
        lateness.append((bm - (am // 1_000_000 + 50) * 1_000_000) / 1e6)
    lateness.sort()
    ends = sorted(b for _, b, _ in ex)
    sizes, cur = [], 1
    for x, y in zip(ends, ends[1:], strict=False):
        if y - x < 100_000:
            cur += 1
        else:
            sizes.append(cur)
            cur = 1
    sizes.append(cur)
    return {
        "phase_mean_ms": round(statistics.fmean(phases), 3),
        "lateness_ms": {q: round(nearest_rank(lateness, p), 3) for q, p in (("p10", 10), ("p50", 50), ("p90", 90))},
        "early": sum(1 for v in lateness if v < 0),
        "cluster_mean": round(sum(n * n for n in sizes) / sum(sizes), 1),
    }


def by_phase(ex: list[tuple[int, int, int | None]], offset_ns: int, bins: int = 10) -> list[dict[str, Any]]:
    """Median wire latency of the requests arriving in each tenth of nginx's millisecond (CLOCK_MONOTONIC)."""
    groups: list[list[int]] = [[] for _ in range(bins)]
    for a, b, _ in ex:
        phase = ((a - offset_ns) % 1_000_000) / 1_000_000
        groups[min(bins - 1, int(phase * bins))].append(b - a)
    out = []
    for i, g in enumerate(groups):
        g.sort()
        out.append(
            {
                "phase_ms": round((i + 0.5) / bins, 2),
                "n": len(g),
                "p50_ms": None if not g else round(nearest_rank(g, 50) / 1e6, 3),
            }
        )
    return out
