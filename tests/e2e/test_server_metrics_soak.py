"""The token-cache story seen from the server: a soak with the cache uncapped, and the hint that names it.

A module of its own with its own demo target, whose cache must start empty and be fed by
this run alone (as in test_soak_degradation.py): 20 users without think time for 90 s, so
the cache passes 100,000 entries and its clean-ups stall the pages part-way through.
"""

import pytest

from portal.metrics.selectors import run_servers
from portal.projects.models import Environment, MixEntry, Plan, Server, Step, TestCase
from portal.runs.models import Run
from portal.runs.services import run_create
from tests.processes import DemoTarget, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def soak_target(tmp_path_factory):
    target = DemoTarget(tmp_path_factory.mktemp("metrics-soak-demo"), items=1000)
    yield target
    target.close()


def test_an_uncapped_token_cache_is_named_by_the_hint(project, alice, soak_target, celery_worker):
    env = Environment.objects.create(project=project, name="Soak", base_url=soak_target.base_url, metrics_interval_s=3)
    Server.objects.create(
        environment=env, name="demo", metrics_url=f"{soak_target.base_url}/metrics", counter_set="demo"
    )
    home = TestCase.objects.create(project=project, name="Home")
    Step.objects.create(test_case=home, name="Home", path="/", think_time=0)
    plan = Plan.objects.create(
        project=project, environment=env, name="Soak", profile_kind=Plan.ProfileKind.CONSTANT, users=20, hold=90
    )
    MixEntry.objects.create(plan=plan, test_case=home, weight=1)
    soak_target.set_knobs(**{"token_cache.cap": 0, "latency_ms": 0})
    soak_target.reset()

    run = run_create(plan=plan, user=alice)
    wait_until(lambda: Run.objects.get(id=run.id).status in Run.FINISHED, timeout=160, interval=1, what="the soak")
    run.refresh_from_db()
    assert run.status == Run.Status.PASSED, (run.status, run.error_message)
    assert soak_target.counters()["token_cache_entries"] > 100_000  # the story happened

    hints = run_servers(run)["hints"]
    print(hints)
    growing = [h for h in hints if h["kind"] == "growing"]
    assert any(h["text"].startswith("demo: Token cache entries grew from") for h in growing), hints
    assert "software" not in [h["kind"] for h in hints] and "hardware" not in [h["kind"] for h in hints]
