"""Steps end to end: variables, extraction, bodies, resources, checks and timeouts, against loopback servers.

``StepsServer`` (below) records what it receives; the login flow runs against
the bundled demo target (``python -m demo``) in a subprocess. Every run is a
second or two.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web

from workers.engine import errors
from workers.engine.histogram import Histogram
from workers.engine.http import make_client
from workers.engine.plan import Extraction, Plan, PlanError
from workers.engine.runner import run_sync

from .servers import DemoProcess


class StepsServer:
    """An aiohttp app in its own thread and loop, on 127.0.0.1, that records the requests it serves."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.resource_hits = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="steps-target", daemon=True)
        self._thread.start()
        if not ready.wait(5):
            raise RuntimeError("the steps target did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self._lock:
            self.records.clear()
            self.resource_hits = self.in_flight = self.max_in_flight = 0

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _shutdown(self) -> None:
        await self._runner.cleanup()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:  # handlers still sleeping for a client that gave up
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/record", self._record)
        app.router.add_get("/items/{id}", self._record)
        app.router.add_get("/page", self._page)
        app.router.add_get("/api/items", self._items)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/r/{name}", self._resource)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _record(self, request: web.Request) -> web.Response:
        body = await request.text()
        form = dict(await request.post()) if request.content_type == "application/x-www-form-urlencoded" else {}
        record = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "content_type": request.headers.get("Content-Type", ""),
            "authorization": request.headers.get("Authorization", ""),
            "body": body,
            "form": {k: str(v) for k, v in form.items()},
        }
        with self._lock:
            self.records.append(record)
        return web.Response(text="recorded")

    async def _page(self, request: web.Request) -> web.Response:
        body = '<form><input type="hidden" value="t&amp;42" name="token"></form><a href="/items/7?from=page">7</a>'
        return web.Response(text=body, content_type="text/html", headers={"X-Session": "s-123"})

    async def _items(self, request: web.Request) -> web.Response:
        return web.json_response({"items": [{"id": 7, "name": "seven"}, {"id": 8, "name": "eight"}]})

    async def _slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("d", "1")))
        return web.Response(text="slow but fine")

    async def _resource(self, request: web.Request) -> web.Response:
        with self._lock:
            self.resource_hits += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(float(request.query.get("d", "0")))
            status = int(request.query.get("status", "200"))
            return web.Response(status=status, body=b"x" * 1000)
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.fixture(scope="module")
def _server():
    s = StepsServer()
    yield s
    s.stop()


@pytest.fixture
def server(_server: StepsServer) -> StepsServer:
    _server.reset()
    return _server


def make_plan(base_url, cases, *, users=1, hold=1.0, timeout=5.0):
    return Plan.from_dict(
        {
            "base_url": base_url,
            "test_cases": cases,
            "profile": {"users": users, "hold": hold},
            "request_timeout": timeout,
        }
    )


def one_case(*steps, name="Case", **extra):
    return [{"name": name, "steps": list(steps), **extra}]


def label_totals(totals, label):
    return totals.labels[label]


# -- variables and extraction in a run ------------------------------------------------------------------------


@pytest.mark.serial  # three iterations within a 0.6 s hold
def test_values_extracted_from_a_page_feed_later_steps_of_the_iteration(server):
    cases = one_case(
        {
            "name": "Page",
            "path": "/page",
            "extract": [
                {"name": "token", "source": "form_field", "expression": "token"},
                {"name": "next", "source": "regex", "expression": r'href="([^"]+)"'},
                {"name": "session", "source": "header", "expression": "x-session"},
            ],
        },
        {
            "name": "Items",
            "path": "/api/items",
            "extract": [{"name": "id", "source": "json", "expression": "$.items[1].id"}],
        },
        {
            "name": "Post form",
            "method": "POST",
            "path": "/record?id={{id}}",
            "headers": {"Authorization": "Bearer {{session}}"},
            "body_type": "form",
            "body": "token={{token}}&next={{next}}",
        },
        {
            "name": "Post json",
            "method": "POST",
            "path": "/record",
            "body_type": "json",
            "body": '{"token": "{{token}}", "id": {{id}}}',
            "think_time": 0.05,
        },
    )

    totals = run_sync(make_plan(server.url, cases, hold=0.6), sink=None)

    assert totals.errors == 0, totals.error_samples
    assert totals.iterations_completed >= 3
    forms = [r for r in server.records if r["content_type"] == "application/x-www-form-urlencoded"]
    jsons = [r for r in server.records if r["content_type"] == "application/json"]
    assert len(forms) == len(jsons) == totals.iterations_completed
    assert forms[0]["form"] == {"token": "t&42", "next": "/items/7?from=page"}
    assert forms[0]["query"] == {"id": "8"}
    assert forms[0]["authorization"] == "Bearer s-123"
    assert json.loads(jsons[0]["body"]) == {"token": "t&42", "id": 8}


def test_a_content_type_given_by_the_user_is_kept(server):
    cases = one_case(
        {
            "name": "Post",
            "method": "POST",
            "path": "/record",
            "headers": {"content-type": "application/vnd.api+json"},
            "body_type": "json",
            "body": '{"a": 1}',
            "think_time": 0.2,
        }
    )

    run_sync(make_plan(server.url, cases, hold=0.3), sink=None)

    assert server.records[0]["content_type"] == "application/vnd.api+json"
    assert server.records[0]["body"] == '{"a": 1}'


@pytest.mark.serial  # three pages within a 0.5 s hold
def test_an_unknown_variable_fails_the_step_and_sends_nothing(server):
    cases = one_case({"name": "Use", "path": "/record?x={{csrf}}", "think_time": 0.1})

    totals = run_sync(make_plan(server.url, cases, hold=0.5), sink=None)

    assert server.records == []
    assert totals.requests == 0
    assert totals.pages == totals.errors >= 3
    assert totals.errors_by_kind == {errors.EXTRACTION_FAILED: totals.errors}
    assert totals.error_samples[errors.EXTRACTION_FAILED] == "{{csrf}} has no value: no earlier step extracted it"


def test_a_json_body_that_a_value_breaks_is_not_sent(server):
    cases = one_case(
        {"name": "Page", "path": "/page", "extract": [{"name": "id", "source": "header", "expression": "X-Session"}]},
        {
            "name": "Post",
            "method": "POST",
            "path": "/record",
            "body_type": "json",
            "body": '{"id": {{id}}}',
            "think_time": 0.2,
        },
    )

    totals = run_sync(make_plan(server.url, cases, hold=0.3), sink=None)

    assert server.records == []
    post = label_totals(totals, "Case: Post")
    assert post.errors_by_kind == {errors.EXTRACTION_FAILED: post.pages}
    assert post.error_samples[errors.EXTRACTION_FAILED].startswith(
        "the JSON body is not valid after substituting {{id}} (Expecting value"
    )


@pytest.mark.serial  # three pages within a 0.5 s hold
def test_a_failed_extraction_ends_the_iteration(server):
    cases = one_case(
        {"name": "Page", "path": "/page", "extract": [{"name": "id", "source": "json", "expression": "$.id"}]},
        {"name": "Never", "path": "/record"},
    )
    cases[0]["steps"][0]["think_time"] = 0.1

    totals = run_sync(make_plan(server.url, cases, hold=0.5), sink=None)

    assert server.records == []
    page = label_totals(totals, "Case: Page")
    assert page.pages == page.errors == page.hits >= 3
    assert page.errors_by_kind == {errors.EXTRACTION_FAILED: page.pages}
    assert page.error_samples[errors.EXTRACTION_FAILED].startswith("{{id}} (json): the body is not JSON")
    assert "Case: Never" not in totals.labels
    assert totals.iterations_completed == 0


@pytest.mark.serial  # four pages within a 1 s hold
def test_extracted_values_do_not_outlive_their_iteration(server):
    # One user alternates between two test cases; "Use" needs a value only "Give" extracts.
    cases = [
        {
            "name": "Give",
            "steps": [
                {
                    "name": "Page",
                    "path": "/page",
                    "think_time": 0.05,
                    "extract": [{"name": "token", "source": "form_field", "expression": "token"}],
                }
            ],
        },
        {"name": "Use", "steps": [{"name": "Post", "path": "/record?t={{token}}", "think_time": 0.05}]},
    ]

    totals = run_sync(make_plan(server.url, cases, hold=1.0), sink=None, seed=3)

    give, use = totals.labels["Give: Page"], totals.labels["Use: Post"]
    assert give.pages > 3 and give.errors == 0
    assert use.pages > 3 and use.errors == use.pages  # never the value from an earlier iteration
    assert server.records == []


# -- the demo target's login ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    process = DemoProcess(Path(tmp_path_factory.mktemp("demo")), items=2000)
    yield process
    process.stop()


class Recording:
    """A client factory whose clients note (method, url, body, status, text) of every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bytes, int, str]] = []

    def __call__(self):
        recording = self
        inner = make_client()

        class Client:
            async def request(self, method, url, headers, body, timeout):
                resp = await inner.request(method, url, headers, body, timeout)
                recording.requests.append((method, url, body, resp.status, resp.body.decode("utf-8", "replace")))
                return resp

            async def close(self):
                await inner.close()

        return Client()


@pytest.mark.serial  # two iterations a user within a 1.5 s hold
def test_the_demo_login_flow_with_a_csrf_token_runs_without_errors(demo):
    cases = one_case(
        {
            "name": "Login form",
            "path": "/login",
            "text_present": "csrfmiddlewaretoken",
            "extract": [{"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"}],
            "think_time": 0.05,
        },
        {
            "name": "Log in",
            "method": "POST",
            "path": "/login",
            "body_type": "form",
            "body": "username={{username}}&password={{password}}&csrfmiddlewaretoken={{csrf}}",
            "expect_status": 200,  # after the redirect to /account
            "think_time": 0.05,
        },
        {"name": "Account", "path": "/account", "text_present": "Welcome, ", "think_time": 0.05},
        {"name": "Log out", "path": "/logout", "think_time": 0.05},
        name="Sign in",
        data_set={"columns": ["username", "password"], "rows": [["demo", "demo"], ["alice", "alice"], ["bob", "bob"]]},
    )
    recording = Recording()

    totals = run_sync(make_plan(demo.url, cases, users=3, hold=1.5), sink=None, client_factory=recording)

    assert totals.errors == 0, totals.error_samples
    assert totals.iterations_completed >= 6  # 3 users x at least 2 iterations
    posts = [r for r in recording.requests if r[0] == "POST"]
    assert len(posts) >= 6
    for _, _, body, status, text in posts:
        assert re.fullmatch(rb"username=(demo|alice|bob)&password=\1&csrfmiddlewaretoken=[0-9a-f]{64}", body), body
        user = body.split(b"&")[0].split(b"=")[1].decode()
        assert status == 200 and f"Welcome, {user}!" in text  # followed the redirect to /account
    welcomed = {t.split("Welcome, ")[1].split("!")[0] for *_, t in recording.requests if "Welcome, " in t}
    assert welcomed == {"demo", "alice", "bob"}  # user k starts at row k


# -- resources ------------------------------------------------------------------------------------------------


@pytest.mark.serial  # page durations between 0.2 and 2 s
def test_resources_are_hits_of_the_page_and_its_duration_runs_to_the_last_one(server):
    cases = one_case(
        {
            "name": "Home",
            "path": "/page",
            "resources": ["/r/site.css", "/r/slow.js?d=0.2", "/r/logo.png"],
            "think_time": 0.05,
        }
    )

    totals = run_sync(make_plan(server.url, cases, hold=0.8), sink=None)

    home = totals.labels["Case: Home"]
    assert home.errors == 0
    assert home.pages >= 2
    assert home.hits == 4 * home.pages == totals.requests
    assert server.resource_hits == 3 * home.pages
    assert home.bytes_in > 3000 * home.pages  # three 1000-byte resources per page, plus the page
    assert home.histogram.min >= 200_000  # µs: no page shorter than its slowest resource
    assert home.histogram.max < 2_000_000


@pytest.mark.serial  # two waves of 0.3 s, under 1.5 s
def test_resources_are_fetched_in_parallel_on_at_most_six_connections(server):
    cases = one_case({"name": "Gallery", "path": "/page", "resources": [f"/r/{i}.png?d=0.3" for i in range(8)]})

    totals = run_sync(make_plan(server.url, cases, hold=0.1), sink=None)

    gallery = totals.labels["Case: Gallery"]
    assert gallery.pages == 1 and gallery.errors == 0 and gallery.hits == 9
    assert server.max_in_flight == 6
    # two waves of 0.3 s (6, then 2), not eight in a row (2.4 s) nor one wave
    assert 0.6 <= gallery.histogram.max / 1e6 < 1.5


def test_a_failed_resource_fails_its_page(server):
    cases = one_case(
        {
            "name": "Home",
            "path": "/page",
            "resources": ["/r/ok.css", "/r/missing.png?status=404", "/r/x?status=500"],
            "think_time": 1,
        }
    )

    totals = run_sync(make_plan(server.url, cases, hold=0.1), sink=None)

    home = totals.labels["Case: Home"]
    assert home.pages == home.errors == 1
    assert home.hits == 4  # every resource is still fetched
    assert home.errors_by_kind == {errors.HTTP_STATUS: 1}
    assert home.error_samples[errors.HTTP_STATUS] == "resource GET /r/missing.png?status=404 -> 404 Not Found"
    assert home.histogram.count == 0


# -- checks and timeouts --------------------------------------------------------------------------------------


@pytest.mark.serial  # a page's duration between 0.3 and 2 s
def test_a_page_slower_than_max_duration_is_a_check_failure(server):
    cases = one_case(
        {"name": "Slow", "path": "/slow?d=0.3", "max_duration_ms": 100},
        {"name": "Never", "path": "/record"},
    )

    totals = run_sync(make_plan(server.url, cases, hold=0.2), sink=None)

    slow = totals.labels["Case: Slow"]
    assert slow.pages == slow.errors == 1
    assert slow.errors_by_kind == {errors.CHECK_FAILED: 1}
    assert re.fullmatch(r"page took (\d+) ms, more than 100 ms", slow.error_samples[errors.CHECK_FAILED])
    took = int(re.search(r"\d+", slow.error_samples[errors.CHECK_FAILED]).group())
    assert 300 <= took < 2000
    assert slow.histogram.count == 1  # the slow page still counts in the percentiles
    assert server.records == []  # the iteration ended there


@pytest.mark.serial  # two pages within a 0.3 s hold
def test_a_page_within_max_duration_passes(server):
    cases = one_case({"name": "Fast", "path": "/slow?d=0.01", "max_duration_ms": 5000, "think_time": 0.1})

    totals = run_sync(make_plan(server.url, cases, hold=0.3), sink=None)

    assert totals.errors == 0 and totals.pages >= 2


@pytest.mark.serial  # the run within 2.5 s
def test_a_step_timeout_overrides_the_plan_timeout(server):
    cases = one_case(
        {"name": "Quick", "path": "/slow?d=3", "timeout": 0.3},
        {"name": "Patient", "path": "/slow?d=0.5"},
    )
    started = time.monotonic()

    totals = run_sync(make_plan(server.url, cases, hold=0.1, timeout=0.2), sink=None)

    elapsed = time.monotonic() - started
    quick = totals.labels["Case: Quick"]
    assert quick.errors_by_kind == {errors.TIMEOUT: 1}
    assert quick.error_samples[errors.TIMEOUT] == "GET /slow?d=3 -> no complete response within 0.3 s"
    assert elapsed < 2.5
    # and a step without its own timeout keeps the plan's
    cases = one_case({"name": "Patient", "path": "/slow?d=0.5", "timeout": None})
    totals = run_sync(make_plan(server.url, cases, hold=0.1, timeout=0.2), sink=None)
    assert totals.labels["Case: Patient"].error_samples[errors.TIMEOUT].endswith("within 0.2 s")


def test_steps_without_variables_send_their_precomputed_request(server):
    cases = one_case({"name": "Plain", "method": "POST", "path": "/record?a=1", "body": "x={{ 1 }}", "think_time": 1})

    run_sync(make_plan(server.url, cases, hold=0.1), sink=None)

    (record,) = server.records
    assert record["body"] == "x={{ 1 }}"  # not a placeholder: sent as written
    assert record["content_type"] not in ("application/x-www-form-urlencoded", "application/json")  # raw


# -- the plan format ----------------------------------------------------------------------------------------------

FULL_STEP = {
    "name": "Log in",
    "method": "POST",
    "path": "/login?next={{next}}",
    "headers": {"Accept": "text/html"},
    "body_type": "form",
    "body": "username={{username}}&password={{password}}&csrfmiddlewaretoken={{csrf}}",
    "think_time": 1.0,
    "timeout": 10,
    "expect_status": 200,
    "text_present": "Welcome",
    "text_absent": "Traceback",
    "max_duration_ms": 1500,
    "extract": [
        {"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"},
        {"name": "next", "source": "regex", "expression": 'href="(/articles/\\d+)"'},
        {"name": "id", "source": "json", "expression": "$.items[0].id"},
        {"name": "loc", "source": "header", "expression": "Location"},
    ],
    "resources": ["/static/site.css", "/img/logo.png"],
}


def plan_with_step(step, **case):
    return {
        "base_url": "http://127.0.0.1:8001",
        "test_cases": [{"name": "Search", "steps": [step], **case}],
        "profile": {"users": 1, "hold": 1},
    }


def test_the_documented_step_parses_and_round_trips():
    plan = Plan.from_dict(
        plan_with_step(
            FULL_STEP,
            weight=3,
            data_set={"columns": ["username", "password"], "rows": [["alice", "a-pass"]], "mode": "sequential"},
        )
    )

    (step,) = plan.test_cases[0].steps
    assert step.body_type == "form"
    assert step.timeout == 10.0
    assert step.max_duration_ms == 1500.0
    assert step.extract[0] == Extraction(name="csrf", source="form_field", expression="csrfmiddlewaretoken")
    assert step.resources == ("/static/site.css", "/img/logo.png")
    assert Plan.from_dict(plan.to_dict()) == plan
    assert plan.to_dict()["test_cases"][0]["steps"][0] == {**FULL_STEP, "timeout": 10.0, "max_duration_ms": 1500.0}


def test_new_step_fields_have_defaults():
    plan = Plan.from_dict(plan_with_step({"name": "Home", "path": "/"}))

    (step,) = plan.test_cases[0].steps
    assert (step.body_type, step.timeout, step.max_duration_ms, step.extract, step.resources) == (
        "raw",
        None,
        None,
        (),
        (),
    )
    assert plan.test_cases[0].data_set is None
    d = plan.to_dict()["test_cases"][0]
    assert d["data_set"] is None
    assert {k: d["steps"][0][k] for k in ("body_type", "timeout", "max_duration_ms", "extract", "resources")} == {
        "body_type": "raw",
        "timeout": None,
        "max_duration_ms": None,
        "extract": [],
        "resources": [],
    }
    assert Plan.from_dict(plan.to_dict()) == plan


def extraction(**change):
    return {**{"name": "v", "source": "regex", "expression": "(a)"}, **change}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"body_type": "xml"}, "test_cases[0].steps[0].body_type: must be one of raw, form, json"),
        ({"body_type": "json", "body": '{"a": "{{v}}",}'}, "test_cases[0].steps[0].body: not valid JSON (Expecting"),
        ({"timeout": 0}, "test_cases[0].steps[0].timeout: must be greater than 0"),
        ({"timeout": 601}, "test_cases[0].steps[0].timeout: must be at most 600 s"),
        ({"max_duration_ms": -5}, "test_cases[0].steps[0].max_duration_ms: must be greater than 0"),
        ({"max_duration_ms": "1s"}, "test_cases[0].steps[0].max_duration_ms: must be a number"),
        ({"resources": "/a.css"}, "test_cases[0].steps[0].resources: must be a list of paths"),
        ({"resources": ["/a.css", "img/b.png"]}, "test_cases[0].steps[0].resources[1]: must start with '/'"),
        ({"resources": ["/a b.css"]}, "test_cases[0].steps[0].resources[0]: must not contain spaces"),
        ({"extract": {"name": "v"}}, "test_cases[0].steps[0].extract: must be a list of extractions"),
        ({"extract": [extraction(name="csrf-token")]}, "test_cases[0].steps[0].extract[0].name: must be an identifier"),
        ({"extract": [extraction(name="1st")]}, "test_cases[0].steps[0].extract[0].name: must be an identifier"),
        (
            {"extract": [extraction(), extraction()]},
            "test_cases[0].steps[0].extract[1].name: 'v' is already extracted by test_cases[0].steps[0].extract[0]",
        ),
        (
            {"extract": [extraction(source="xpath")]},
            "test_cases[0].steps[0].extract[0].source: must be one of regex, json, form_field, header",
        ),
        (
            {"extract": [extraction(expression="href=(")]},
            "test_cases[0].steps[0].extract[0].expression: not a valid regular expression (missing ), unterminated",
        ),
        (
            {"extract": [extraction(source="json", expression="items[0]")]},
            "test_cases[0].steps[0].extract[0].expression: not a supported JSONPath (must start with '$'",
        ),
        (
            {"extract": [extraction(source="json", expression="$.items[*].id")]},
            "test_cases[0].steps[0].extract[0].expression: not a supported JSONPath (expected [number]",
        ),
        (
            {"extract": [extraction(source="header", expression="X Token")]},
            "test_cases[0].steps[0].extract[0].expression: 'X Token' is not a valid header name",
        ),
        ({"extract": [extraction(expression="")]}, "test_cases[0].steps[0].extract[0].expression: must not be empty"),
        ({"extract": [extraction(group=1)]}, "test_cases[0].steps[0].extract[0].group: unknown key"),
        ({"extract": [{"name": "v", "source": "regex"}]}, "test_cases[0].steps[0].extract[0].expression: is required"),
    ],
)
def test_bad_step_fields_are_named_by_path(change, message):
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict(plan_with_step({"name": "Home", "path": "/", **change}))

    assert str(excinfo.value).startswith(message)


def test_a_json_body_with_a_placeholder_outside_strings_is_left_to_run_time():
    plan = Plan.from_dict(plan_with_step({"name": "Home", "path": "/", "body_type": "json", "body": '{"id": {{id}}}'}))

    assert plan.test_cases[0].steps[0].body == '{"id": {{id}}}'


def test_the_missing_value_message_says_when_only_a_later_step_extracts_it(server):
    cases = one_case(
        {"name": "Early", "path": "/record?t={{token}}", "think_time": 0.3},
        {
            "name": "Page",
            "path": "/page",
            "extract": [{"name": "token", "source": "form_field", "expression": "token"}],
        },
    )

    totals = run_sync(make_plan(server.url, cases, hold=0.2), sink=None)

    assert totals.labels["Case: Early"].error_samples == {
        errors.EXTRACTION_FAILED: "{{token}} has no value: only a later step ('Page') extracts it"
    }


def test_histograms_of_a_templated_run_merge_like_any_other(server):
    cases = one_case(
        {
            "name": "Items",
            "path": "/api/items",
            "extract": [{"name": "id", "source": "json", "expression": "$.items[0].id"}],
        },
        {"name": "Item", "path": "/items/{{id}}", "think_time": 0.05},
    )
    reports = []

    totals = run_sync(make_plan(server.url, cases, hold=0.6), sink=reports.append)

    merged = Histogram()
    for r in reports:
        for v in r["labels"].values():
            merged.merge(Histogram.from_dict(v["hist"]))
    assert totals.errors == 0
    assert merged.count == totals.pages
    # every finished iteration made its two pages; the hold's end may catch the one user between its two steps
    # (23 pages in 11 iterations on a busy machine, 2026-12-07), never further
    assert totals.pages - 2 * totals.iterations_completed in (0, 1), totals
    assert {r["path"] for r in server.records} == {"/items/7"}
