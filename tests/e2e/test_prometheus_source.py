"""Server metrics from a real Prometheus: the same raw values as a direct scrape of the same target.

Real parts only: Debian's ``/usr/bin/prometheus`` on a free loopback port scraping the demo target
every second, the demo target in its own process under a bounded loop of loopback requests, and for
the failure cases small HTTP servers on loopback that refuse the token, answer an error, or hang.
The scrape rounds are run in the test's process (``collect_tick``), one a second, with the next
round's scheduling recorded rather than queued: no worker is needed to read Prometheus.
"""

import contextlib
import http.server
import io
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from portal.metrics import services
from portal.metrics.models import ServerSample
from portal.metrics.selectors import run_servers
from portal.projects.models import Environment, Server
from portal.runs.models import Run
from portal.telemetry.countersets import DEMO
from portal.telemetry.exposition import figures
from portal.telemetry.promql import token_encrypt
from tests.portal.runs.factories import plan_run
from tests.processes import free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ROUNDS = 6


@pytest.fixture(scope="module")
def prometheus(demo_target, tmp_path_factory):
    """A real Prometheus scraping the demo target every second; yields (base URL, the demo's instance label)."""
    if not shutil.which(PROMETHEUS):
        pytest.fail("prometheus is not installed: run scripts/install-test-deps.sh")
    tmp = tmp_path_factory.mktemp("prometheus")
    instance = demo_target.base_url.removeprefix("http://")
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: demo\n    static_configs:\n      - targets: ['{instance}']\n"
    )
    port = free_port()
    log = open(tmp / "prometheus.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def scraped_the_demo() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/api/v1/query?query=up", timeout=2) as r:
                return any(s["value"][1] == "1" for s in json.load(r)["data"]["result"])
        except OSError:
            return False

    try:
        wait_until(scraped_the_demo, timeout=20, what="Prometheus to scrape the demo target")
        yield base, instance
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def load(demo_target):
    """Steady loopback traffic to the demo target for at most 20 s, so its counters move."""
    stop = threading.Event()

    def loop():
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline:
            with urllib.request.urlopen(f"{demo_target.base_url}/", timeout=5) as r:
                r.read()
            time.sleep(0.01)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(10)


@pytest.fixture
def scheduled(monkeypatch):
    """The rounds the collector would queue next (recorded: the test runs each round itself)."""
    queued = []
    monkeypatch.setattr(services, "_enqueue", lambda run_id, tick, eta: queued.append(tick))
    return queued


def _rounds(run: Run, ticks) -> None:
    for tick in ticks:
        time.sleep(max(0.0, run.start_at.timestamp() + tick - time.time()))
        services.collect_tick(run_id=run.id, tick=tick)


def _values(run: Run, server: Server) -> dict[int, list | None]:
    return {s.tick: s.values for s in ServerSample.objects.filter(run=run, server_id=server.id)}


def _assert_within_one_interval(direct: dict, promql: dict, ticks) -> None:
    """Every counter Prometheus reports at round k is the target's between rounds k-2 and k (a 1 s scrape)."""
    counters = [i for i, s in enumerate(DEMO.series) if s.kind == "rate" and direct[ticks[0]][i] is not None]
    assert counters, "the demo exposes no counter"
    for k in ticks[2:]:
        for i in counters:
            assert direct[k - 2][i] <= promql[k][i] <= direct[k][i], (DEMO.series[i].key, k, direct, promql)
    # and over the rounds, the same figures: requests/s from Prometheus within one interval's worth of the scrape's
    req = [s.key for s in DEMO.series].index("requests")
    first, last = ticks[1], ticks[-1]
    d_total, p_total = direct[last][req] - direct[first][req], promql[last][req] - promql[first][req]
    assert d_total > 20, "no load reached the demo target"
    assert abs(p_total - d_total) <= direct[last][req] - direct[last - 2][req], (p_total, d_total)
    d_fig = figures(DEMO, [(k, direct[k]) for k in ticks])["requests"]
    p_fig = figures(DEMO, [(k, promql[k]) for k in ticks])["requests"]
    assert sum(p_fig[2:]) == pytest.approx(sum(d_fig[2:]), rel=0.35), (p_fig, d_fig)


def test_prometheus_reads_the_same_figures_as_the_scrape_live_and_afterwards(
    project, alice, demo_target, prometheus, load, scheduled, plan
):
    base, instance = prometheus
    env: Environment = plan.environment
    env.prometheus_url, env.metrics_interval_s = base, 1
    env.save()
    scraped = Server.objects.create(
        environment=env, name="demo", metrics_url=f"{demo_target.base_url}/metrics", counter_set="demo"
    )
    queried = Server.objects.create(
        environment=env,
        name="demo via Prometheus",
        counter_set="demo",
        prometheus_selector=f'job="demo", instance="{instance}"',
    )
    run = plan_run(plan, status=Run.Status.RUNNING, start_at=timezone.now())
    collection = services.collection_start(run_id=run.id)
    assert [("prometheus" in s) for s in collection.servers] == [False, True]

    ticks = list(range(ROUNDS + 1))
    _rounds(run, ticks)
    assert scheduled[-1] == ROUNDS + 1  # the chain goes on

    direct, live = _values(run, scraped), _values(run, queried)
    # the run page's Servers section: both servers, the same series, each round answered
    shown = {s["name"]: s for s in run_servers(run)["servers"]}
    assert shown["demo via Prometheus"]["url"] == f'{base} {{job="demo", instance="{instance}"}}'
    assert [s["key"] for s in shown["demo via Prometheus"]["series"]] == [s["key"] for s in shown["demo"]["series"]]
    assert shown["demo via Prometheus"]["good_scrapes"] == shown["demo via Prometheus"]["scrapes"] == ROUNDS + 1
    errors = list(ServerSample.objects.filter(run=run).exclude(error="").values_list("error", flat=True))
    assert not errors, errors
    _assert_within_one_interval(direct, live, ticks)

    # A run in the past: the same rows, read afterwards with query_range at the environment's interval.
    ServerSample.objects.filter(run=run, server_id=queried.id).delete()
    end = run.start_at + timedelta(seconds=ROUNDS + 0.5)
    Run.objects.filter(id=run.id).update(status=Run.Status.FINISHED, finished_at=end)
    call_command("metrics_from_prometheus", run.id, stdout=io.StringIO())
    afterwards = _values(run, queried)
    assert set(ticks) <= set(afterwards)
    _assert_within_one_interval(direct, afterwards, ticks)


MANY = [{"metric": {"__name__": "demo_requests_total", "instance": f"web-{i}"}, "value": [1, "1"]} for i in range(3000)]


class _Answers(http.server.BaseHTTPRequestHandler):
    """A stand-in for a Prometheus that misbehaves, chosen by the path's first segment."""

    seen: list = []

    def do_GET(self):  # noqa: N802
        self.seen.append((self.path.split("/")[1], self.headers.get("Authorization")))
        kind = self.path.split("/")[1]
        if kind == "slow":
            time.sleep(3)
        status, body = {
            "refuse": (401, b"Unauthorized"),
            "error": (422, b'{"status":"error","errorType":"execution","error":"query timed out in expression"}'),
            "slow": (200, b'{"status":"success","data":{"resultType":"vector","result":[]}}'),
            "many": (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": MANY}}).encode()),
        }[kind]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the slow one: Plimsoll gave up
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def misbehaving():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("refuse", "Prometheus refused the token (HTTP 401)"),
        ("error", "Prometheus answered an error (execution): query timed out in expression"),
        ("slow", "did not answer within 0.8 s"),
        ("many", "The query matched 3,000 series (at most 2,000): narrow the server's label matchers."),
        (None, "No series in Prometheus match"),
    ],
)
def test_a_bad_prometheus_is_a_gap_with_its_reason_and_the_scrape_goes_on(
    demo_target, prometheus, misbehaving, scheduled, plan, path, reason
):
    env: Environment = plan.environment
    env.prometheus_url = f"{misbehaving}/{path}" if path else prometheus[0]
    env.prometheus_token, env.metrics_interval_s = token_encrypt("s3cret"), 1
    env.save()
    scraped = Server.objects.create(
        environment=env, name="demo", metrics_url=f"{demo_target.base_url}/metrics", counter_set="demo"
    )
    queried = Server.objects.create(
        environment=env, name="web", counter_set="demo", prometheus_selector='instance="nowhere:9100"'
    )
    run = plan_run(plan, status=Run.Status.RUNNING, start_at=timezone.now())
    services.collection_start(run_id=run.id)
    started = time.monotonic()
    services.collect_tick(run_id=run.id, tick=0)
    assert time.monotonic() - started < 2.5  # bounded: a hanging Prometheus costs the round its timeout only

    gap = ServerSample.objects.get(run=run, server_id=queried.id)
    assert gap.values is None and reason in gap.error, gap.error
    assert "s3cret" not in gap.error
    assert ServerSample.objects.get(run=run, server_id=scraped.id).values  # the other server is unaffected
    assert scheduled == [1]  # and so is the chain of rounds
    if path:
        assert "Bearer s3cret" in [auth for kind, auth in _Answers.seen if kind == path]
