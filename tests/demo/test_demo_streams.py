"""The demo target's protocols face (demo/streams.py) as a user starts it: ``python -m demo.streams``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from workers.engine.h2 import H2Client

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    ca_file = tmp_path_factory.mktemp("ca") / "ca.pem"
    cmd = [sys.executable, "-m", "demo.streams", "--port", "0", "--tls-port", "0", "--ca-file", str(ca_file)]
    cmd += ["--knob", "sse.tokens=3", "--knob", "sse.gap_ms=1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read():
        lines.extend([proc.stdout.readline(), proc.stdout.readline()])
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    assert ready.wait(30), "demo.streams printed nothing"
    yield lines, ca_file
    proc.terminate()
    assert proc.wait(10) == 0  # a clean exit on SIGTERM


def _urls(lines):
    return lines[0].split()[5], lines[1].split()[5]


def test_it_announces_both_sockets_and_writes_its_ca(started):
    lines, ca_file = started
    http_url, https_url = _urls(lines)
    assert lines[0].startswith("Plimsoll demo streams listening on http://127.0.0.1:") and "(h1, h2c)" in lines[0]
    assert lines[1].startswith("Plimsoll demo streams listening on https://127.0.0.1:") and f"ca={ca_file}" in lines[1]
    assert ca_file.read_text().startswith("-----BEGIN CERTIFICATE-----")


def test_it_serves_h2_over_tls_sse_from_its_knobs_and_counts_it(started):
    lines, ca_file = started
    http_url, https_url = _urls(lines)

    async def go():
        client = H2Client(protocol="auto", ca_bundle=ca_file.read_text())
        try:
            await client.request("POST", f"{https_url}/_demo/counters/reset", {}, b"", 5)
            sse = await client.request("GET", f"{https_url}/sse", {}, b"", 5)
            bad = await client.request("POST", f"{https_url}/_demo/knobs", {}, b'{"sse.gap_ms": -1}', 5)
            unknown = await client.request("POST", f"{https_url}/_demo/knobs", {}, b'{"nope": 1}', 5)
            counters = await client.request("GET", f"{https_url}/_demo/counters", {}, b"", 5)
            return sse, bad, unknown, json.loads(counters.body)
        finally:
            await client.close()

    sse, bad, unknown, counters = asyncio.run(go())
    assert sse.protocol == "h2" and sse.headers["content-type"] == "text/event-stream"
    assert sse.body.count(b"event: token\n") == 3 and sse.body.endswith(b"event: done\ndata: [DONE]\n\n")
    assert (bad.status, json.loads(bad.body)) == (400, {"error": "sse.gap_ms: must be at least 0"})
    assert unknown.status == 400 and json.loads(unknown.body)["error"].startswith("unknown knob 'nope'")
    assert counters["sse_streams"] == 1 and counters["sse_events"] == 3 and counters["by_protocol"] == {"2": 1}
    assert len(counters["first_event_delay"]) == 1 and counters["first_event_delay"][0] >= 0
