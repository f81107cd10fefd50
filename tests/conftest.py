"""Personas present in every portal test (after healthchecks' hc/test.py).

alice owns a team with a project; bob is a viewer in alice's team; charlie is an
outsider with a team of his own. Each view test checks that charlie gets 404 and
bob gets 403 for a change.
"""

import gc
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

# Fixtures shared by modules of different folders (loaded for the whole suite, defined where they belong).
pytest_plugins = ["tests.portal.tryit_fixtures"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs):
    """Under pytest-xdist each process (gw0, gw1 …) gets a broker and a PLIMSOLL_VAR_DIR of its own.

    End-to-end tests run in the parallel pass too: each purges its broker's queues and starts
    Celery workers that take whatever shard they find there, so two processes must never share one.
    On Redis, gwK uses database number (N + K) % 16, where N is CELERY_BROKER_URL's own (so N for
    gw0; CI's 15 gives 15, 0, 1 …); the file-system broker is under PLIMSOLL_VAR_DIR, which becomes
    its gwK/ subfolder. Set in each process's environment as xdist starts it, before pytest-django
    loads the settings there (which read both); the Celery workers that tests start inherit them.
    """
    url = os.environ.get("CELERY_BROKER_URL", "")
    var = Path(os.environ.get("PLIMSOLL_VAR_DIR") or TESTS.parent / "var")
    offset = _lane_offset()
    for spec in specs:
        k = offset + int(spec.id.removeprefix("gw"))
        if url.startswith(("redis://", "rediss://")):
            parts = urlsplit(url)
            db = int(parts.path.strip("/") or 0)
            spec.env["CELERY_BROKER_URL"] = parts._replace(path=f"/{(db + k) % 16}").geturl()
        spec.env["PLIMSOLL_VAR_DIR"] = str(var / spec.id)


# Tests that measure time or memory, or push load: `make test` runs them alone on the machine, after
# the others have run on several processes (pytest-xdist), so that no other test's CPU is in their
# measurements. Whole folders (the engine's runs and rates, the demo's knobs timed under load, the
# keep-running wrapper's restart delays) less their modules that time nothing, a few portal modules,
# and the end-to-end tests whose
# assertions are timings, rates or latencies. The other end-to-end tests (imports, browsers, mail,
# the API, schedules, handoffs, outages …) start workers and targets and mostly wait on them: they
# run in the parallel pass, each xdist process with a broker of its own (above).
# The lanes of `make test` (scripts/run-tests.sh) run at the same time, each a pytest session with xdist processes
# of its own: a lane's gwK takes Redis database number (N + offset + K) % 16, and its test databases end in its name
# (test_plimsoll_gw0_timed), so that no two processes of any lane share a broker or a database. The parallel lane
# (no PLIMSOLL_TEST_LANE) has three processes (offsets 0–2), timed two (3–4), alone one (5).
LANES = {"": 0, "timed": 3, "alone": 5}


def _lane() -> str:
    lane = os.environ.get("PLIMSOLL_TEST_LANE", "")
    if lane not in LANES:
        raise pytest.UsageError(f"PLIMSOLL_TEST_LANE={lane!r}: expected one of {sorted(LANES)}")
    return lane


def _lane_offset() -> int:
    return LANES[_lane()]


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """pytest-django's suffix (``_gw0``), then the lane's (``_timed``): lanes create their test databases at once."""
    from django.conf import settings

    lane = _lane()
    if not lane:
        return
    for db in settings.DATABASES.values():
        name = db.get("TEST", {}).get("NAME") or f"test_{db['NAME']}"
        if name != ":memory:":
            db.setdefault("TEST", {})["NAME"] = f"{name}_{lane}"


SERIAL_FOLDERS = {"engine", "demo", "scripts"}
# Modules of those folders whose outcome other processes' CPU cannot change: arithmetic and parsing on
# given values, and protocol behaviour checked by counts (what the engine recorded against what the
# server served), by content and by error kinds, with hard deadlines against a hang only. They run in
# the parallel pass, except their tests marked `@pytest.mark.serial` one by one, with the reason on the
# marker's line: a test that asserts a duration, a latency bound, a rate (how much gets done in a short
# hold), a timeout's timing, a race decided by a head start of milliseconds, CPU or memory. A new test of
# such a module that times anything carries that marker; a new module of those folders is serial
# until it is listed here.
NOT_SERIAL_MODULES = {
    "test_engine_plan.py",  # a plan's validation
    "test_engine_variables.py",  # substitution and extraction on given responses
    "test_engine_histogram.py",  # buckets, merges and percentiles of given values
    "test_engine_schedule.py",  # profiles' users over time, computed
    "test_engine_mix.py",  # weighted draws from a seeded generator
    "test_engine_targets.py",  # the allowlist, and addresses refused before a request
    "test_engine_profiles.py",  # profiles' validation and shapes, computed; runs counted (timed runs marked)
    # protocol behaviour (timing tests marked one by one)
    "test_h1.py",  # the HTTP/1.1 client: keep-alive, retries, bodies, redirects, cookies, TLS, misbehaving peers
    "test_h2.py",  # HTTP/2: multiplexing, ALPN, TLS, RST_STREAM, GOAWAY, flow control
    "test_websocket.py",  # sessions, expectations, closes, limits, framing errors
    "test_streams.py",  # SSE and chunked streams: events counted against the target's, stalls, drops
    "test_engine_steps.py",  # extraction, templated requests, resources, checks
    "test_engine_datasets.py",  # data-set rows per user and per shard
    "test_engine_cli.py",  # the command line's output, exit codes and allowlist
    "test_trace_context.py",  # traceparent headers, seen by the demo target
    "test_otlp_export.py",  # spans counted against the target's trace ids, the encoding, refusals
    "test_demo_app.py",  # the demo target's pages, login, counters, knobs, CLI
    "test_demo_streams.py",  # python -m demo.streams as a user starts it
}
SERIAL_MODULES = {
    "test_store_polling.py",  # sink write times while pollers read
    "test_client_outage.py",  # retries timed against an outage
    # end to end
    "test_soak_degradation.py",  # a throughput drop, and the second it began
    "test_server_metrics_soak.py",  # the same soak (one run for both: tests/e2e/soak.py)
    "test_tempdb_scalability.py",  # throughput at six levels of users, and σ from it
    "test_server_metrics.py",  # request rates against hits/s, CPU at the knee
    "test_baseline_end_to_end.py",  # latencies against a baseline: regressed, or within noise
    "test_experiment_end_to_end.py",  # the same, before and after a change
    # three unchanged builds must not be called regressed: on CI's loaded parallel pass a search page's p95 went
    # 31 → 90 ms between two of them (2026-11-28), so its baseline builds are timed alone like the two above
    "test_ci_gate_end_to_end.py",
    # a change point in the search page's APD over ten nights: it failed in the parallel pass on a loaded
    # machine (at two, three and four processes) and passed alone
    "test_change_points_end_to_end.py",
    "test_profiles_end_to_end.py",  # iterations started at the rate asked
    "test_run_end_to_end.py",  # page durations, and Stop within two seconds
    "test_stop_criteria_end_to_end.py",  # a run stopped by its criteria within the window and the check's period
    "test_protocol_figures_end_to_end.py",  # time to first event within 25 ms of the server's first token
    "test_capacity.py",  # a freed slot admits the waiting run within 2 s, its shard less than 1 s late
    # Locust's own mean response time against the imported one (to 0.05 ms): it drifted under the
    # parallel pass's load (10.67 against 10.60 ms), so Locust and JMeter push their load alone
    "test_import_jmeter_locust_end_to_end.py",
}
# Serial modules that `make test` runs alone (its `alone` lane, one process at nice 0, beside the others niced):
# their verdicts weigh latencies against the noise of runs measured minutes apart, so a burst of another test's
# CPU during one run is a false regression. Run two-wide with the timed tests on a busy machine (2026-12-07), the
# CI gate called an unchanged build regressed (APD 26.2 → 29.9 ms) and the experiment's trials were within noise.
# End-to-end modules of the parallel lane that mostly wait (on holds of 26-46 s, handoffs, an outage, restarts) and
# time nothing: `make test` runs them in the timed lane's slot once its timed tests are done (niced like the parallel
# lane), where two processes sat idle for the last ten minutes. In the parallel lane they filled its last minutes,
# when the CPU was 37-65 % busy (2026-12-08).
WAITS_MODULES = {
    "test_handoff.py",
    "test_outages.py",
    "test_server_metrics_restart.py",
    "test_remote_workers.py",
}
ALONE_MODULES = {
    "test_tempdb_scalability.py",
    "test_baseline_end_to_end.py",
    "test_experiment_end_to_end.py",
    "test_ci_gate_end_to_end.py",
    "test_change_points_end_to_end.py",
    "test_import_jmeter_locust_end_to_end.py",  # Locust's own mean against the imported one, to 0.05 ms
    # and those whose target or engine must get a whole core when it wants one: a throughput, a rate or the
    # CPU at the knee of a CPU-bound process (the demo's single web-garden process, the token-cache soak), and the
    # shard's writes timed while pollers read. Two-wide with the others on a busy machine (2026-12-07) each fell short.
    "test_server_metrics.py",
    "test_soak_degradation.py",
    "test_server_metrics_soak.py",  # the same soak as the module above (tests/e2e/soak.py): one lane runs it once
    "test_store_polling.py",
}
TESTS = Path(__file__).resolve().parent


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER") and config.pluginmanager.hasplugin("django"):
        from django.conf import settings

        if settings.VAR_DIR.name != os.environ["PYTEST_XDIST_WORKER"]:
            raise pytest.UsageError(f"{settings.VAR_DIR}: this xdist process has no broker of its own (above)")


# The parallel pass's longest tests: those that start workers, servers or a browser, and the two walks
# that send thousands of requests. pytest-xdist's worksteal hands each process a contiguous half of the
# collection and lets an idle one take tests not yet started from the other; with the long tests first,
# what is left for the end are short ones, so neither process idles while the other finishes a long one.
LONG_FIRST = (
    "test_schemathesis.py",
    "test_malformed_requests.py",
    # portal modules with tests of 10–30 s each (`--durations` on 2026-11-28)
    "test_live_rollup.py",
    "test_run_list.py",
    "test_site_url.py",
    "test_deploy_settings.py",
    "test_drilldown.py",
    "test_result_files_tools.py",
    "test_try_it.py",
    # modules of many tests of a few seconds each, 10–35 s in all (`--durations` on 2026-12-07): run early, they
    # leave the pass's end to short tests, where the three processes ran at 41–81 % of the CPU for 4 minutes
    "test_store.py",
    "test_soak_verdicts.py",
    "test_regression_not_absorbed.py",
    "test_capacity_degradation.py",
    "test_one_figure.py",
    "test_export_formats.py",
    "test_try_it_api.py",
    "test_docs.py",
    "test_client_gate.py",
    "test_migrate_command.py",
)


def _long(item) -> bool:
    path = Path(item.path)
    return "e2e" in path.relative_to(TESTS).parts[:1] or path.name.endswith("_browser.py") or path.name in LONG_FIRST


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # under xdist only; stable: the order within each group stays
        # Locust's import test last: scripts/run-tests.sh installs Locust while the lanes run
        items.sort(
            key=lambda item: (not _long(item), Path(item.path).name == "test_import_jmeter_locust_end_to_end.py")
        )
    for item in items:
        parts = Path(item.path).resolve().relative_to(TESTS).parts
        name = Path(item.path).name
        if (parts[0] in SERIAL_FOLDERS and name not in NOT_SERIAL_MODULES) or name in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
        if name in ALONE_MODULES:
            item.add_marker(pytest.mark.alone)
        if name in WAITS_MODULES:
            item.add_marker(pytest.mark.waits)


CHROMIUM = "/usr/bin/chromium"
# Debian's Chromium, quiet: no sandbox (containers), no GPU, and nothing that phones home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="session", autouse=True)
def private_cache_keys():
    """The cache is shared by every process (Redis or files: the API's rate limits): this run's keys are its own,
    so counts left by an earlier run, or by another checkout on the same Redis, cannot throttle this one."""
    import uuid

    from django.conf import settings
    from django.test import override_settings

    tag = uuid.uuid4().hex[:12]
    caches = {
        alias: {**conf, "KEY_PREFIX": f"{conf.get('KEY_PREFIX', '')}-test-{tag}"}
        for alias, conf in settings.CACHES.items()
    }
    with override_settings(CACHES=caches):
        yield


@pytest.fixture(scope="session", autouse=True)
def outbound_to_loopback():
    """Tests send webhooks, metrics scrapes and hooks to servers on loopback, as a checkout with DEBUG on may:
    with DEBUG off (as tests run) PLIMSOLL_OUTBOUND_ALLOWED allows nothing by default. The worker processes that
    tests start read it from their environment."""
    from django.test import override_settings

    loopback = os.environ.setdefault("PLIMSOLL_OUTBOUND_ALLOWED", "127.0.0.0/8,::1/128,localhost")
    with override_settings(PLIMSOLL_OUTBOUND_ALLOWED=loopback):
        yield


# Module scope: Playwright's sync API keeps an event loop running in this thread while it lives,
# and later tests that call asyncio.run() need it gone.
@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright, which never downloads a browser of its own."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does it)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls of the test are still synchronous.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def fast_password_hasher(request):
    """The personas are created in every test; the default hasher makes each cost a quarter of a second.

    Engine and demo tests run without Django too (``-p no:django``): then there is nothing to do.
    """
    if not request.config.pluginmanager.hasplugin("django"):
        return
    request.getfixturevalue("settings").PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-password")


@pytest.fixture
def bob(django_user_model, alice):
    from portal.accounts.models import Membership

    user = django_user_model.objects.create_user("bob", password="bob-password")
    Membership.objects.create(team=alice.teams.get(), user=user, role=Membership.Role.VIEWER)
    return user


@pytest.fixture
def charlie(django_user_model):
    return django_user_model.objects.create_user("charlie", password="charlie-password")


@pytest.fixture
def team(alice):
    return alice.teams.get()


@pytest.fixture
def project(team):
    from portal.projects.models import Project

    return Project.objects.create(team=team, name="Intranet", description="The SharePoint farm")


@pytest.fixture
def environment(project):
    from portal.projects.models import Environment

    return Environment.objects.create(
        project=project,
        name="Staging",
        base_url="http://127.0.0.1:8001",
        configuration=[{"key": "search.index", "value": "off"}],
    )


@pytest.fixture
def test_case(project):
    from portal.projects.models import Step, TestCase

    tc = TestCase.objects.create(project=project, name="Browse")
    Step.objects.create(test_case=tc, position=0, name="Home", path="/", think_time=0.5, text_present="Demo")
    Step.objects.create(test_case=tc, position=1, name="Articles", path="/articles", think_time=0.5)
    return tc


@pytest.fixture
def plan(project, environment, test_case):
    from portal.projects.models import MixEntry, Plan

    p = Plan.objects.create(project=project, environment=environment, name="Smoke", users=5, ramp_up=1, hold=5)
    MixEntry.objects.create(plan=p, test_case=test_case, weight=1)
    return p


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(client, bob):
    client.force_login(bob)
    return client


@pytest.fixture
def charlie_client(client, charlie):
    client.force_login(charlie)
    return client


def wait_for_js(page, expression: str, *, timeout: float = 10.0):
    """Polls ``expression`` in the page until it is truthy, under the portal's Content-Security-Policy.

    Playwright's ``wait_for_function`` compiles its predicate with eval inside the page, which the
    policy (script-src 'self', no 'unsafe-eval') refuses; ``page.evaluate`` goes through the
    DevTools protocol and is not subject to it, so pages can be tested with the policy enforced.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {expression!r} in {page.url}")
        time.sleep(0.1)


def pytest_collection_finish(session):
    """The heap as collection left it (every test module, Django, numpy …) is frozen: a full ``gc.collect()``
    — the engine's at each run's start (workers/engine/gcpolicy.py), the leak checks' before and after each
    engine test — then walks only what tests made since, not the few hundred thousand objects that live as
    long as the session. The engine's run unfreezes at its end; the autouse fixture below freezes again."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _session_heap_frozen():
    yield
    if gc.get_freeze_count() == 0:  # an engine run ended (GcPolicy.stop unfreezes everything)
        gc.collect()
        gc.freeze()
