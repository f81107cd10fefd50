"""W3C trace context: a ``traceparent`` on every request, the slowest pages' trace ids kept, proven at the demo target.

The end-to-end tests run a short load (about two seconds) against the bundled
demo target (``python -m demo``) on loopback, which logs the trace ids it saw
(``GET /_demo/traces``): the ids the engine kept for its slowest pages must be
among them, and a plan with ``trace_context: false`` sends none.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.request
from pathlib import Path

import pytest

from workers.engine.h1 import H1Client
from workers.engine.plan import Plan, PlanError
from workers.engine.runner import run_sync
from workers.engine.tracecontext import TraceContext, parse_traceparent

from .servers import DemoProcess

TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]")


# -- the header itself ---------------------------------------------------------------------------------------


def test_each_traceparent_is_well_formed_and_new():
    tc = TraceContext()
    seen_traces, seen_parents = set(), set()
    for _ in range(1000):  # several refills of the random block
        trace_id, value = tc.next()
        assert TRACEPARENT.fullmatch(value), value
        parsed = parse_traceparent(value)
        assert parsed is not None and parsed[0] == trace_id and parsed[2] == "01"
        seen_traces.add(trace_id)
        seen_parents.add(parsed[1])
    assert len(seen_traces) == 1000 and len(seen_parents) == 1000


def test_the_sample_rate_sets_the_sampled_flag():
    def flags(rate):
        tc = TraceContext(rate)
        return [tc.next()[1][-2:] for _ in range(2000)]

    assert set(flags(1.0)) == {"01"}
    assert set(flags(0.0)) == {"00"}
    quarter = flags(0.25).count("01") / 2000
    assert 0.18 < quarter < 0.32, quarter
    with pytest.raises(ValueError):
        TraceContext(1.5)


@pytest.mark.parametrize(
    "value",
    [
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero parent id
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # unknown version
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short
    ],
)
def test_malformed_traceparents_are_refused(value):
    assert parse_traceparent(value) is None


# -- the plan ------------------------------------------------------------------------------------------------


def _plan_dict(base_url="http://127.0.0.1:8000", **extra):
    return {
        "base_url": base_url,
        "test_cases": [{"name": "Browse", "steps": [{"name": "Home", "path": "/"}]}],
        "profile": {"users": 1, "hold": 1},
        **extra,
    }


def test_trace_context_is_on_by_default_and_round_trips():
    plan = Plan.from_dict(_plan_dict())
    assert plan.trace_context is True and plan.trace_sample_rate == 1.0
    assert "trace_context" not in plan.to_dict()  # plans saved before keep their form
    off = Plan.from_dict(_plan_dict(trace_context=False, trace_sample_rate=0.1))
    assert off.trace_context is False and off.trace_sample_rate == 0.1
    assert Plan.from_dict(off.to_dict()) == off


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"trace_context": "no"}, "trace_context: must be true or false"),
        ({"trace_sample_rate": 1.5}, "trace_sample_rate: must be between 0 and 1"),
        ({"trace_sample_rate": -0.1}, "trace_sample_rate: must be at least 0"),
        ({"trace_sample_rate": "all"}, "trace_sample_rate: must be a number"),
    ],
)
def test_bad_trace_options_are_named(extra, message):
    with pytest.raises(PlanError, match=re.escape(message)):
        Plan.from_dict(_plan_dict(**extra))


# -- on the wire: HTTP/1.1 with and without a body, and a step's own header ----------------------------------


class _RawServer:
    """Loopback HTTP/1.1 server noting each request's head; answers 200 with keep-alive."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve():
            asyncio.set_event_loop(self.loop)

            async def handle(reader, writer):
                try:
                    while True:
                        head = await reader.readuntil(b"\r\n\r\n")
                        self.heads.append(head)
                        m = re.search(rb"content-length: (\d+)", head, re.I)
                        if m and int(m[1]):
                            await reader.readexactly(int(m[1]))
                        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        await writer.drain()
                except (asyncio.IncompleteReadError, ConnectionError):
                    writer.close()

            self.server = self.loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(5)

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_h1_adds_a_new_traceparent_per_request_at_write_time():
    server = _RawServer()
    url = f"http://127.0.0.1:{server.port}/x"

    async def go():
        client = H1Client("127.0.0.1/32")
        client.trace = TraceContext()
        ids = []
        for body in (b"", b"", b"payload"):
            await client.request("POST" if body else "GET", url, {}, body, 5)
            ids.append(client.last_trace_id)
        await client.request("GET", url, {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}, b"", 5)
        own = client.last_trace_id
        client.trace = None
        await client.request("GET", url, {}, b"", 5)
        await client.close()
        return ids, own

    try:
        ids, own = asyncio.run(go())
    finally:
        server.stop()
    sent = [re.findall(rb"(?im)^traceparent: (.*)\r$", h) for h in server.heads]
    assert [len(s) for s in sent] == [1, 1, 1, 1, 0]  # one each; the step's own wins; none when off
    assert [parse_traceparent(s[0].decode())[0] for s in sent[:3]] == ids
    assert len(set(ids)) == 3  # the same (method, URL, headers) twice: the cached block, a new id
    assert sent[3] == [b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"] and own == ""


# -- end to end against the demo target ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    process = DemoProcess(Path(tmp_path_factory.mktemp("demo")), items=2000)
    yield process
    process.stop()


class Reports(list):
    def __call__(self, report):
        self.append(report)


def _get(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _demo_plan(url, **extra):
    return Plan.from_dict(
        {
            "base_url": url,
            "test_cases": [
                {
                    "name": "Browse",
                    "steps": [
                        {"name": "Home", "path": "/", "think_time": 0.01},
                        {"name": "Articles", "path": "/articles", "think_time": 0.01},
                    ],
                }
            ],
            "profile": {"users": 4, "hold": 2.0},
            "request_timeout": 5.0,
            **extra,
        }
    )


def test_the_slowest_pages_trace_ids_were_seen_by_the_demo_target(demo):
    _get(demo.url + "/_demo/counters/reset", "POST")
    reports = Reports()
    totals = run_sync(_demo_plan(demo.url), sink=reports, seed=1)
    seen = _get(demo.url + "/_demo/traces")["paths"]
    for label, path in (("Browse: Home", "/"), ("Browse: Articles", "/articles")):
        pages = totals.labels[label].pages
        assert pages > 10 and totals.labels[label].errors == 0
        at_target = seen[path]
        assert at_target["with_traceparent"] == pages and at_target["without"] == 0 == at_target["malformed"]
        assert at_target["sampled"] == pages  # sample rate 1.0: every one flagged
        kept = [r["labels"][label]["slowest"] for r in reports if label in r["labels"]]
        assert len(kept) >= 2  # one per second with pages
        recent = set(at_target["recent_trace_ids"])
        for slowest in kept:
            assert re.fullmatch(r"[0-9a-f]{32}", slowest["trace_id"]) and slowest["trace_id"] != "0" * 32
            assert slowest["trace_id"] in recent  # a real id, sent on this path
            assert slowest["ms"] > 0
        # the run's slowest page is among the kept ones: its duration equals the histogram's max
        run_max_ms = totals.labels[label].histogram.max / 1000
        assert max(s["ms"] for s in kept) == pytest.approx(run_max_ms, abs=0.01)


def test_trace_context_false_sends_none(demo):
    _get(demo.url + "/_demo/counters/reset", "POST")
    reports = Reports()
    totals = run_sync(_demo_plan(demo.url, trace_context=False), sink=reports, seed=1)
    seen = _get(demo.url + "/_demo/traces")["paths"]
    pages = totals.labels["Browse: Home"].pages
    assert pages > 10
    assert seen["/"]["without"] == pages and seen["/"]["with_traceparent"] == 0 == seen["/"]["malformed"]
    assert all("slowest" not in lr for r in reports for lr in r["labels"].values())


def test_a_low_sample_rate_flags_few_requests(demo):
    _get(demo.url + "/_demo/counters/reset", "POST")
    totals = run_sync(_demo_plan(demo.url, trace_sample_rate=0.0), sink=None, seed=1)
    seen = _get(demo.url + "/_demo/traces")["paths"]["/"]
    assert seen["with_traceparent"] == totals.labels["Browse: Home"].pages > 10
    assert seen["sampled"] == 0  # sent, but not flagged


# -- HTTP/2 and the WebSocket handshake, at the demo's streams face ------------------------------------------


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    from .protocol_servers import StreamsServer

    server = StreamsServer(tmp_path_factory.mktemp("streams"))
    yield server
    server.stop()


@pytest.mark.serial
def test_h2_and_websocket_steps_send_a_traceparent(streams):
    streams.reset()
    plan = {
        "base_url": streams.http_url,
        "protocol": "h2c",
        "test_cases": [
            {
                "name": "P",
                "steps": [
                    {"name": "page", "path": "/page", "resources": ["/res/100", "/res/200"]},
                    {
                        "name": "chat",
                        "path": "/ws",
                        "websocket": {"actions": [{"send": "hi"}, {"expect": {"contains": "hi"}}]},
                    },
                ],
            }
        ],
        "profile": {"kind": "constant", "users": 2, "hold": 0.6},
        "request_timeout": 5,
    }
    reports = Reports()
    totals = run_sync(plan, sink=reports)
    served = streams.app.counters.snapshot()
    assert totals.errors == 0 and served["by_protocol"].get("2", 0) > 0
    page = totals.labels["P: page"]
    traces = served["traces"]
    assert traces["/page"]["with_traceparent"] == page.pages and traces["/page"]["without"] == 0
    assert traces["/res/"]["with_traceparent"] == 2 * page.pages  # the resources carry one too
    assert traces["/ws"]["with_traceparent"] == served["ws_sessions"] == totals.labels["P: chat"].pages
    recent = set(traces["/page"]["recent_trace_ids"])
    kept = [r["labels"]["P: page"]["slowest"]["trace_id"] for r in reports if "P: page" in r["labels"]]
    assert kept and set(kept) <= recent

    streams.reset()
    run_sync({**plan, "trace_context": False}, sink=None)
    traces = streams.app.counters.snapshot()["traces"]
    assert all(t["with_traceparent"] == 0 and t["without"] > 0 for t in traces.values())


def test_the_cli_sends_trace_context_unless_told_not_to(capsys):
    from workers.engine.__main__ import main

    server = _RawServer()
    url = f"http://127.0.0.1:{server.port}/x"
    try:
        common = ["run", "--url", url, "--users", "1", "--duration", "0.3", "--think-time", "0.05", "--json"]
        assert main([*common, "--allow", "127.0.0.1/32"]) == 0
        on = len(server.heads)
        assert main([*common, "--allow", "127.0.0.1/32", "--no-trace-context"]) == 0
    finally:
        server.stop()
    with_header = [b"traceparent:" in h for h in server.heads]
    assert on > 0 and all(with_header[:on]) and not any(with_header[on:]) and len(with_header) > on
