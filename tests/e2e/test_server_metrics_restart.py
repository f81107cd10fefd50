"""A lost collector: its worker is killed mid-run, the watchdog restarts it, and what it stored stays.

A module of its own: it starts and kills its own workers, and a worker left from another
module would take its tasks.
"""

import pytest

from portal.metrics.models import MetricCollection, ServerSample
from portal.metrics.selectors import LOST_ROUNDS, run_servers
from portal.metrics.services import collection_watchdog
from portal.projects.models import Environment, MixEntry, Plan, Server, Step, TestCase
from portal.runs import services
from portal.runs.models import Run
from tests.processes import Worker, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_killed_collector_is_restarted_by_the_watchdog_and_keeps_what_it_stored(
    project, alice, demo_target, worker_env, tmp_path
):
    from workers.celery import app

    app.control.purge()
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url, metrics_interval_s=2)
    Server.objects.create(
        environment=env, name="demo", metrics_url=f"{demo_target.base_url}/metrics", counter_set="demo"
    )
    tc = TestCase.objects.create(project=project, name="Home")
    Step.objects.create(test_case=tc, name="Home", path="/", think_time=0.2)
    plan = Plan.objects.create(project=project, environment=env, name="Long", users=4, ramp_up=0, hold=40)
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
    first = Worker(tmp_path / "first.log", worker_env, name="first")
    try:
        run = services.run_create(plan=plan, user=alice)
        wait_until(lambda: ServerSample.objects.filter(run=run).count() >= 4, timeout=30, what="4 scrapes")
        # when: the worker dies (kill -9): the shard and the collector's chain with it
        first.kill_hard()
        kept = set(ServerSample.objects.filter(run=run).values_list("tick", flat=True))
    finally:
        first.close()
    second = Worker(tmp_path / "second.log", worker_env, name="second")
    try:
        # then: polled like Celery beat would, the watchdog restarts the collector on the new worker …
        def restarted_and_scraping():
            services.watchdog()
            collection_watchdog()
            ticks = set(ServerSample.objects.filter(run=run).values_list("tick", flat=True))
            return MetricCollection.objects.get(run=run).restarts >= 1 and len(ticks - kept) >= 2

        wait_until(restarted_and_scraping, timeout=45, interval=1, what="the collector to be restarted")
        wait_until(
            lambda: (services.watchdog(), Run.objects.get(id=run.id).status in Run.FINISHED)[1],
            timeout=60,
            interval=1,
            what="the run to end",
        )
    finally:
        second.close()
    # … every scrape stored before the kill is still there, the missed rounds are one gap with its reason
    ticks = set(ServerSample.objects.filter(run=run).values_list("tick", flat=True))
    assert kept <= ticks
    assert MetricCollection.objects.get(run=run).restarts == 1
    gaps = run_servers(Run.objects.get(id=run.id))["servers"][0]["gaps"]
    assert [g["reason"] for g in gaps] == [LOST_ROUNDS], gaps
