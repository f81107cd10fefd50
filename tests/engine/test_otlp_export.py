"""OTLP export of sampled requests' spans (issue 29 item 4), against a real OTLP/HTTP receiver on loopback.

The receiver is a small HTTP server in the test that takes ``POST /v1/traces`` in OTLP/HTTP's JSON
encoding (as an OpenTelemetry Collector's ``otlphttp`` receiver does) and decodes every span. The
load runs against the demo target, which logs the ``traceparent`` headers it saw (``/_demo/traces``):
the spans that arrive must be exactly the sampled requests the target saw, with the same trace ids.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from workers.engine import otlp
from workers.engine.otlp import SpanExporter, encode, traces_url
from workers.engine.plan import Plan, PlanError
from workers.engine.runner import run_sync

from .servers import DemoProcess
from .test_trace_context import _demo_plan, _get


class OtlpReceiver:
    """Decodes each ``ExportTraceServiceRequest`` (JSON); answers ``status`` (200 by default) after ``delay_s``."""

    def __init__(self, status: int = 200, delay_s: float = 0.0) -> None:
        self.status, self.delay_s = status, delay_s
        self.requests: list[tuple[str, str, dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the exporter reuses its connection

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((self.path, self.headers["Content-Type"], json.loads(body)))
                time.sleep(receiver.delay_s)
                answer = b"{}" if receiver.status == 200 else b'{"code":14,"message":"unavailable"}'
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the slow one: it gave up
                    self.send_response(receiver.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def spans(self) -> list[tuple[dict, dict]]:
        """(resource attributes, span) of every span received."""
        out = []
        for _, _, doc in self.requests:
            for rs in doc["resourceSpans"]:
                resource = {a["key"]: a["value"]["stringValue"] for a in rs["resource"]["attributes"]}
                for ss in rs["scopeSpans"]:
                    out += [(resource, span) for span in ss["spans"]]
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(**kwargs):
        made.append(OtlpReceiver(**kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    process = DemoProcess(Path(tmp_path_factory.mktemp("demo")), items=2000)
    yield process
    process.stop()


def _attrs(span: dict) -> dict:
    return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}


def test_the_sampled_requests_spans_arrive_with_the_trace_ids_the_target_saw(demo, receiver, monkeypatch):
    # Every span, whatever this shared machine's load: the CPU budget's own test is below.
    monkeypatch.setattr(otlp, "CPU_BUDGET", 1.0)
    collector = receiver()
    _get(demo.url + "/_demo/counters/reset", "POST")
    plan = _demo_plan(demo.url, trace_sample_rate=0.5, otlp_endpoint=collector.base)
    started = time.time_ns()

    totals = run_sync(plan, sink=None, seed=1, allowlist="127.0.0.0/8")

    seen = _get(demo.url + "/_demo/traces")["paths"]
    sampled = seen["/"]["sampled"] + seen["/articles"]["sampled"]
    sent = seen["/"]["with_traceparent"] + seen["/articles"]["with_traceparent"]
    assert sent == totals.requests > 20 and 0.3 * sent < sampled < 0.7 * sent  # half flagged sampled
    spans = collector.spans
    assert len(spans) == sampled  # every sampled request, and only those
    assert totals.otlp == {
        "endpoint": collector.base + "/v1/traces", "spans": sampled, "exported": sampled, "dropped": 0,
        "failed": 0, "posts": len(collector.requests), "error": "", "cpu_ms": totals.otlp["cpu_ms"],
    }  # fmt: skip
    assert {path for path, _, _ in collector.requests} == {"/v1/traces"}
    assert {ctype for _, ctype, _ in collector.requests} == {"application/json"}
    recent = set(seen["/"]["recent_trace_ids"]) | set(seen["/articles"]["recent_trace_ids"])
    trace_ids = [span["traceId"] for _, span in spans]
    assert len(set(trace_ids)) == sampled and set(trace_ids) <= recent  # the ids the target logged
    for resource, span in spans:
        assert resource["service.name"] == "plimsoll-load-test" and resource["plimsoll.base_url"] == demo.url
        assert re.fullmatch(r"[0-9a-f]{32}", span["traceId"]) and re.fullmatch(r"[0-9a-f]{16}", span["spanId"])
        assert span["kind"] == 3 and span["name"] == "GET"  # SPAN_KIND_CLIENT
        assert started < int(span["startTimeUnixNano"]) < int(span["endTimeUnixNano"]) < time.time_ns()
        attrs = _attrs(span)
        assert attrs["http.request.method"] == "GET" and attrs["http.response.status_code"] == "200"
        assert attrs["url.full"] in (demo.url + "/", demo.url + "/articles")
        assert span["status"] == {}


def test_export_is_off_without_an_endpoint_and_refused_outside_the_allowlist(demo, receiver):
    collector = receiver()
    totals = run_sync(_demo_plan(demo.url), sink=None, seed=1, allowlist="127.0.0.0/8")
    assert totals.otlp is None and "otlp" not in totals.to_dict()
    # A collector outside the allowlist: nothing is sent to it, the run is not affected, and it says why.
    plan = _demo_plan(demo.url, otlp_endpoint=collector.base.replace("127.0.0.1", "127.0.0.2"))
    totals = run_sync(plan, sink=None, seed=1, allowlist="127.0.0.1/32")
    assert totals.pages > 10 and totals.errors == 0
    assert totals.otlp["posts"] == 0 and totals.otlp["error"].startswith("not exported:"), totals.otlp
    assert "127.0.0.2" in totals.otlp["error"]
    assert collector.requests == []
    # trace_context: false sends no traceparent, so there is nothing to export either
    totals = run_sync(_demo_plan(demo.url, trace_context=False, otlp_endpoint=collector.base), sink=None, seed=1)
    assert totals.otlp is None and collector.requests == []


def test_a_failing_collector_costs_only_its_spans(demo, receiver):
    collector = receiver(status=503)
    plan = _demo_plan(demo.url, otlp_endpoint=collector.base + "/v1/traces")
    totals = run_sync(plan, sink=None, seed=1, allowlist="127.0.0.0/8")
    assert totals.pages > 10 and totals.errors == 0
    stats = totals.otlp
    assert stats["exported"] == 0 and stats["failed"] > 0 and stats["failed"] + stats["dropped"] == stats["spans"]
    assert stats["spans"] == totals.requests  # every request was sampled: each is a failed or a dropped span
    assert stats["error"].startswith("HTTP 503") and len(collector.requests) == stats["posts"] >= 1


@pytest.mark.serial  # the run's end within the flush bound
def test_a_slow_collector_delays_the_runs_end_by_the_flush_bound_at_most(demo, receiver):
    collector = receiver(delay_s=10)  # answers after 10 s: each post gives up after 2 s
    plan = _demo_plan(demo.url, otlp_endpoint=collector.base)
    started = time.monotonic()
    totals = run_sync(plan, sink=None, seed=1, allowlist="127.0.0.0/8")
    elapsed = time.monotonic() - started
    assert totals.pages > 10 and totals.errors == 0
    assert elapsed < 2.0 + 3.0 + 2.0 + 1.5  # the hold, the flush bound, one post's timeout, slack
    assert totals.otlp["exported"] == 0 and totals.otlp["failed"] + totals.otlp["dropped"] == totals.otlp["spans"]
    assert "timed out" in totals.otlp["error"]


@pytest.mark.serial  # CPU: what the budget of a tenth of a millisecond affords
def test_the_cpu_budget_drops_what_it_cannot_afford(demo, receiver, monkeypatch):
    monkeypatch.setattr(otlp, "CPU_BUDGET", 0.0001)  # a tenth of a millisecond per second of the engine's CPU
    collector = receiver()
    totals = run_sync(_demo_plan(demo.url, otlp_endpoint=collector.base), sink=None, seed=1, allowlist="127.0.0.0/8")
    stats = totals.otlp
    assert totals.pages > 10 and totals.errors == 0
    assert stats["dropped"] > stats["exported"] and stats["exported"] + stats["dropped"] == stats["spans"]
    assert stats["spans"] == totals.requests and len(collector.spans) == stats["exported"]


def test_the_queue_is_capped_and_drops_are_counted():
    exporter = SpanExporter("http://127.0.0.1:9/", {"service.name": "t"}, cap=10)
    line = b"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n"
    for _ in range(15):
        exporter.add(line, "GET", "http://127.0.0.1:9/", 200, 1, 0.1, "")
    assert (exporter.dropped, len(exporter.queue), exporter.stats()["spans"]) == (5, 10, 15)
    stats = exporter.close()  # never started: what is queued is dropped, and said
    assert (stats["spans"], stats["dropped"], stats["exported"]) == (15, 15, 0)


def test_the_encoding_is_otlp_json():
    line = b"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n"
    doc = json.loads(
        encode(
            [
                (line, "POST", 'http://h/a?q="x"', 503, 10**18 + 250_000_000, 0.25, ""),
                (line, "GET", "http://h/b", 0, 3 * 10**9, 2.0, "TimeoutError"),
            ],
            {"service.name": "s"},
        )
    )
    ok, failed = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert ok["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736" and ok["spanId"] == "00f067aa0ba902b7"
    assert ok["startTimeUnixNano"] == str(10**18) and ok["endTimeUnixNano"] == str(10**18 + 250_000_000)
    assert ok["status"] == {"code": 2}  # a 5xx is an error
    assert _attrs(ok) == {
        "http.request.method": "POST",
        "url.full": 'http://h/a?q="x"',
        "http.response.status_code": "503",
    }
    assert failed["status"] == {"code": 2, "message": "TimeoutError"} and _attrs(failed)["error.type"] == "TimeoutError"


def test_the_plan_takes_an_http_endpoint():
    base = {"base_url": "http://127.0.0.1:8000", "test_cases": [{"name": "B", "steps": [{"name": "H", "path": "/"}]}]}
    base["profile"] = {"users": 1, "hold": 1}
    plan = Plan.from_dict({**base, "otlp_endpoint": "http://127.0.0.1:4318"})
    assert plan.otlp_endpoint == "http://127.0.0.1:4318" and Plan.from_dict(plan.to_dict()) == plan
    assert "otlp_endpoint" not in Plan.from_dict(base).to_dict()
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/otlp/v1/traces") == "http://c:4318/otlp/v1/traces"
    for bad in ("ftp://c/", "c:4318", 7):
        with pytest.raises(PlanError, match="otlp_endpoint"):
            Plan.from_dict({**base, "otlp_endpoint": bad})


def test_a_request_without_a_response_is_an_error_span(receiver, monkeypatch):
    from tests.processes import free_port

    monkeypatch.setattr(otlp, "CPU_BUDGET", 1.0)
    collector = receiver()
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens: every request is refused
    plan = _demo_plan(nobody, otlp_endpoint=collector.base)
    totals = run_sync(plan, sink=None, seed=1, allowlist="127.0.0.0/8")
    assert totals.errors > 0 and totals.otlp["exported"] == totals.otlp["spans"] > 0
    for _, span in collector.spans:
        assert span["status"] == {"code": 2, "message": "ConnectionRefusedError"}
        assert "http.response.status_code" not in _attrs(span)
        assert _attrs(span)["error.type"] == "ConnectionRefusedError"
