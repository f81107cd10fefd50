"""Server metrics during real runs: the demo's /metrics scraped by a real worker, beside the load.

Real parts only: the demo target in its own process, a real Celery worker (which runs the
shards and the scrape rounds), PostgreSQL and Redis, and for the failure cases small HTTP
servers on loopback that hang, answer garbage, or go away mid-run.
"""

import http.server
import threading
import time

import pytest

from portal.metrics.models import MetricCollection, ServerSample
from portal.metrics.selectors import run_servers
from portal.projects.models import Environment, MixEntry, Plan, PlanLevel, Server, Step, TestCase
from portal.runs.models import Run
from portal.runs.services import run_create
from portal.telemetry.countersets import DEMO
from tests.processes import free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

INTERVAL = 2


def finished(run: Run, timeout: float = 120) -> Run:
    wait_until(lambda: Run.objects.get(id=run.id).status in Run.FINISHED, timeout=timeout, what="the run to end")
    run.refresh_from_db()
    return run


def collected(run: Run, timeout: float = 30) -> MetricCollection:
    """The collection once its last round (the margin after the end) has run."""
    wait_until(lambda: MetricCollection.objects.get(run=run).done, timeout=timeout, what="the collector to finish")
    return MetricCollection.objects.get(run=run)


def demo_env(project, demo_target, name: str) -> Environment:
    env = Environment.objects.create(
        project=project, name=name, base_url=demo_target.base_url, metrics_interval_s=INTERVAL
    )
    Server.objects.create(
        environment=env, name="demo", role="web", metrics_url=f"{demo_target.base_url}/metrics", counter_set="demo"
    )
    return env


def one_page_plan(project, env, path: str, think: float, **fields) -> Plan:
    tc = TestCase.objects.create(project=project, name=f"Page {path} {fields['name']}")
    Step.objects.create(test_case=tc, name="Page", path=path, think_time=think)
    plan = Plan.objects.create(project=project, environment=env, **fields)
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
    return plan


def test_the_demo_is_scraped_every_interval_and_its_request_rate_matches_hits_per_s(
    project, alice, demo_target, celery_worker, client
):
    demo_target.set_knobs(latency_ms=0, **{"web_garden.processes": 1})
    env = demo_env(project, demo_target, "Demo scraped")
    plan = one_page_plan(project, env, "/", 0.05, name="Scraped", users=10, ramp_up=2, hold=16)

    run = finished(run_create(plan=plan, user=alice))
    assert run.status == Run.Status.FINISHED, (run.status, run.error_message, celery_worker.output()[-3000:])
    collection = collected(run)
    samples = list(ServerSample.objects.filter(run=run).order_by("tick"))

    # every scrape round from just before the start to past the end, each one answered
    ticks = [s.tick for s in samples]
    assert ticks == list(range(ticks[0], ticks[-1] + 1)), ticks
    assert samples[0].offset_s <= 0 and samples[-1].offset_s >= run.planned_duration
    assert all(s.values is not None and not s.error for s in samples), [s.error for s in samples if s.error]
    assert collection.restarts == 0

    # the demo's own request rate over the measured window agrees with Plimsoll's hits/s
    window = run.summary["windows"][0]
    inside = [s for s in samples if window["start"] - 0.5 <= s.offset_s <= window["end"] + 0.5]
    first, last = inside[0], inside[-1]
    requests_index = [s.key for s in DEMO.series].index("requests")
    demo_rate = (last.values[requests_index] - first.values[requests_index]) / (last.offset_s - first.offset_s)
    hits_per_s = run.summary["totals"]["hits_per_s"]
    print(
        f"demo requests/s {demo_rate:.1f} over {first.offset_s:.2f}-{last.offset_s:.2f} s; Plimsoll hits/s {hits_per_s}"
    )
    assert demo_rate == pytest.approx(hits_per_s, rel=0.05)

    # the report: a series per scrape, the window's table, and the chart's data endpoint
    report = run_servers(run)
    cpu = next(s for s in report["servers"][0]["series"] if s["key"] == "cpu")
    assert len(cpu["values"]) == len(samples) and all(v is not None for v in cpu["values"][1:])
    assert cpu["windows"][0]["n"] >= 6 and cpu["windows"][0]["mean"] > 0
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    assert 'id="servers"' in page and "servers.js" in page and "<script>" not in page.split('id="servers"')[1][:4000]
    assert client.get(f"/runs/{run.code}/servers.json").json()["servers"][0]["good_scrapes"] == len(samples)


def test_a_steps_run_on_one_web_garden_process_says_software_bottleneck(
    project, alice, demo_target, celery_worker, client
):
    demo_target.set_knobs(latency_ms=0, **{"web_garden.processes": 1})
    env = demo_env(project, demo_target, "Demo web garden")
    plan = one_page_plan(project, env, "/workitems/7", 0.1, name="Garden steps", profile_kind="steps")
    for position, users in enumerate([2, 6, 12, 24]):
        PlanLevel.objects.create(plan=plan, position=position, users=users, ramp_up=1, hold=8, ramp_down=0, quiet=0)

    run = finished(run_create(plan=plan, user=alice))
    assert run.status == Run.Status.FINISHED, (run.status, run.error_message)
    collected(run)
    capacity = run.summary["capacity"]
    levels = [(lv["users"], lv["pages_per_s"]) for lv in capacity["levels"]]
    report = run_servers(run)
    kinds = [h["kind"] for h in report["hints"]]
    print(f"levels {levels}; knee {capacity['knee_users']}; hints {report['hints']}")
    assert capacity["knee_users"] in (6, 12), levels  # one process: about 100 pages/s whatever the users
    assert kinds == ["software"], report["hints"]
    assert any("CPU at most" in e for e in report["hints"][0]["evidence"])

    # the page: each level's server figures beside its users, pages/s and APD, and the hint in the capacity section
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    levels_table = page.split('id="server-levels"')[1].split("</table>")[0]
    assert "demo: Process CPU (of one core) (%, mean)" in levels_table and "demo: Requests (/s, mean)" in levels_table
    assert levels_table.count("<tr>") == 1 + 4  # the header and one row per level
    capacity = page.split("<h2>Capacity</h2>")[1].split("<h2>")[0]
    assert 'data-capacity-hint="software"' in capacity and "A software bottleneck" in capacity
    assert "demo CPU at most" in capacity


class FlakyEndpoints:
    """Three metrics endpoints on one loopback port: /hang never answers, /garbage answers HTML,
    /vanish answers Prometheus text until ``vanish_after`` seconds, then the whole server goes away."""

    def __init__(self, vanish_after: float):
        release = self.release = threading.Event()
        started = time.monotonic()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/hang":
                    release.wait(30)
                    return
                if self.path == "/garbage":
                    body, kind = b"<html><body>It works!</body></html>", "text/html"
                else:
                    n = int((time.monotonic() - started) * 100)
                    body, kind = f"# TYPE demo_requests_total counter\ndemo_requests_total {n}\n".encode(), "text/plain"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.timer = threading.Timer(vanish_after, self.vanish)
        self.timer.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def vanish(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def close(self):
        self.timer.cancel()
        self.release.set()
        self.vanish()


@pytest.fixture
def flaky():
    """(endpoints that stay up, endpoints whose server goes away 8 s after the test begins)."""
    steady, going = FlakyEndpoints(vanish_after=3600), FlakyEndpoints(vanish_after=8)
    yield steady, going
    steady.close()
    going.close()


def test_hanging_garbage_and_vanishing_endpoints_leave_the_run_and_the_demo_series_intact(
    project, alice, demo_target, celery_worker, flaky, client
):
    demo_target.set_knobs(latency_ms=0)
    env = demo_env(project, demo_target, "Demo flaky")
    steady, going = flaky
    for name, url in (
        ("hangs", steady.url("/hang")),
        ("garbage", steady.url("/garbage")),
        ("vanishes", going.url("/")),
    ):
        Server.objects.create(environment=env, name=name, metrics_url=url, counter_set="demo")
    plan = one_page_plan(project, env, "/", 0.05, name="Flaky", users=10, ramp_up=1, hold=14)
    demo_target.reset()

    run = finished(run_create(plan=plan, user=alice))
    # the load figures are whole: every request the target served was recorded
    assert run.status == Run.Status.FINISHED, (run.status, run.error_message)
    assert run.summary["whole_run"]["hits"] == demo_target.counters()["requests"] > 100
    collected(run)

    servers = {s["name"]: s for s in run_servers(run)["servers"]}
    # the demo's own endpoint answered every round: the hanging one delayed none of its scrapes
    assert servers["demo"]["gaps"] == [] and servers["demo"]["good_scrapes"] == servers["demo"]["scrapes"]
    hang, garbage, vanish = servers["hangs"], servers["garbage"], servers["vanishes"]
    assert hang["good_scrapes"] == 0 and len(hang["gaps"]) == 1
    assert "did not answer within 1.6 s" in hang["gaps"][0]["reason"]
    assert garbage["good_scrapes"] == 0 and len(garbage["gaps"]) == 1
    assert "series is in the answer" in garbage["gaps"][0]["reason"] or "not Prometheus" in garbage["gaps"][0]["reason"]
    assert vanish["good_scrapes"] >= 3 and len(vanish["gaps"]) == 1
    assert "could not be reached" in vanish["gaps"][0]["reason"]
    assert vanish["gaps"][0]["from"] >= 4

    # the report shows each gap once, with its reason
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    assert page.count("did not answer within") == 1
    assert "could not be reached" in page
