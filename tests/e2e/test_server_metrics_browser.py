"""The Servers section in Chromium: drawn live while the run runs, and in the report after it."""

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from portal.projects.models import Environment, MixEntry, Plan, Server, Step, TestCase
from portal.runs.models import Run
from portal.runs.services import run_create
from tests.conftest import wait_for_js

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class HeldMetrics:
    """The demo's /metrics on loopback, answering 503 until ``release()``: the run page sees the
    server before any of its figures (as when it is opened at the start of a run) for as long as the test needs."""

    def __init__(self, upstream: str):
        released = self.released = threading.Event()
        served = self.served = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if released.is_set():
                    with urllib.request.urlopen(upstream, timeout=5) as r:
                        status, body = r.status, r.read()
                    served.append(status)
                else:
                    status, body = 503, b"not yet"
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def release(self):
        self.released.set()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_server_charts_live_and_in_the_report(
    browser, live_server, alice, project, demo_target, celery_worker, tmp_path
):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url, metrics_interval_s=1)
    metrics = HeldMetrics(f"{demo_target.base_url}/metrics")
    Server.objects.create(environment=env, name="demo", metrics_url=metrics.url, counter_set="demo")
    tc = TestCase.objects.create(project=project, name="Home")
    Step.objects.create(test_case=tc, name="Home", path="/", think_time=0.1)
    plan = Plan.objects.create(project=project, environment=env, name="Short", users=3, ramp_up=0, hold=10)
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-password")
        page.click("button[type=submit]")
        run = run_create(plan=plan, user=alice)
        # live: opened while the run is queued (Run takes people there), the chart draws the server's
        # own series as its scrapes arrive, in the same document (the page reloads itself at the end,
        # which would build the chart afresh: the mark set here would be gone)
        page.goto(f"{live_server.url}{run.get_absolute_url()}")
        page.evaluate("window.openedAtStart = true")
        # the server's card and chart exist before any of its figures: failed scrapes only
        wait_for_js(
            page,
            "(() => { const c = document.querySelector('#server-charts canvas');"
            " return c && window.Chart.getChart(c) })()",
            timeout=30,
        )
        metrics.release()
        server_points = """(() => {
            const c = document.querySelector('#server-charts canvas');
            const chart = c && window.Chart.getChart(c);
            if (!window.openedAtStart || !chart) return 0;
            const own = chart.data.datasets.filter((d) => d.label !== 'Plimsoll pages/s');
            return own.length ? own[0].data.filter((p) => p.y !== null).length : 0;
        })()"""
        assert wait_for_js(page, f"{server_points} > 1", timeout=30)
        assert Run.objects.get(id=run.id).is_active
        assert int(page.locator("#server-charts canvas").first.get_attribute("data-points")) > 1
        assert page.locator("#servers").is_visible()
        # the report: after the run the page reloads itself, with the window's table and the chart
        page.wait_for_selector("#summary", timeout=60_000)
        assert Run.objects.get(id=run.id).status == Run.Status.FINISHED
        wait_for_js(page, "document.querySelector('#server-charts').dataset.loaded === '1'", timeout=30)
        # every scrape the server answered is in the report: the first series is a rate, which needs
        # two scrapes for its first point, and the last scrape may come after the run's window closed
        # (how many there were depends on how soon the page was drawn, so the count is the server's)
        answered = metrics.served.count(200)
        assert answered >= 3
        assert int(page.locator("#server-charts canvas").first.get_attribute("data-points")) >= answered - 2
        table = page.locator("table.server-window").first
        assert "Process CPU" in table.inner_text() and "Requests" in table.inner_text()
        assert errors == []
    finally:
        page.screenshot(path=str(tmp_path / "servers.png"), full_page=True)
        context.close()
        metrics.close()
