"""Workers on other machines join by pointing at the same PostgreSQL and Redis (issue 25 item 5).

Two network namespaces stand for two more machines (tests/netns.py): each has its own network,
whose only link goes to this one, and its own host name. One Celery load worker runs on each, in
pool ``remote`` with a zone label of its own, reaching PostgreSQL and Redis over that link (at
``10.200.R.1``, as a database server on the network; a relay there forwards to the 127.0.0.1 they
listen on). The bookkeeping worker and the demo target stay here. A run on an environment that
requires the pool is split over both, and the target counts what it served.

The target: load goes to loopback only (PLIMSOLL_ALLOWED_TARGETS, the default and the only
allowlist on these machines), so the environment's URL is ``http://127.0.0.1:PORT`` and each host
has a relay of its own on its 127.0.0.1:PORT that forwards to the one demo target here: each
worker sends to an address the allowlist allows, its engine's own check on connect passes, and one
target counts the requests of both. (Widening the allowlist to 10.200.0.0/16 for the test would
test a configuration these machines never run.)
"""

import subprocess
from urllib.parse import urlsplit

import pytest
from django.urls import reverse

from portal.runs import services
from portal.runs.models import GeneratorWorker, PageInterval, Run
from portal.runs.services.admission import pool_capacity
from tests import netns
from tests.e2e.test_distribution import make_plan
from tests.processes import Worker, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

POOL = "remote"


def _at(url: str, address: str) -> str:
    """``url`` with its host replaced by ``address`` (user, password, port, path kept)."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@{address}" if credentials else address
    return parts._replace(netloc=f"{netloc}:{parts.port}" if parts.port else netloc).geturl()


@pytest.fixture
def two_hosts(tmp_path, demo_target, worker_env):
    """host-a and host-b, each with its relays; everything they started is stopped and their namespaces
    removed at the end, whatever happened."""
    if reason := netns.unavailable():
        pytest.skip(reason)
    if not worker_env["DATABASE_URL"].startswith("postgres") or not worker_env["CELERY_BROKER_URL"].startswith("redis"):
        pytest.skip(
            "workers on other machines need PostgreSQL and Redis (SQLite and the file-system broker are one machine's)"
        )
    netns.remove_stale()
    services_ports = [
        urlsplit(worker_env["DATABASE_URL"]).port or 5432,
        urlsplit(worker_env["CELERY_BROKER_URL"]).port or 6379,
        demo_target.port,
    ]
    hosts, relays = [], []
    try:
        subnet = netns.free_subnet()
        for index, name in enumerate(("host-a", "host-b")):
            hosts.append(netns.Host(name, subnet, index, tmp_path))
        # here: PostgreSQL, Redis and the target on each host's link (they listen on 127.0.0.1 only)
        relays.append(
            netns.Relay(
                [
                    netns.PYTHON,
                    "-m",
                    "tests.tcp_relay",
                    *(f"{h.root_address}:{p}=127.0.0.1:{p}" for h in hosts for p in services_ports),
                ],
                tmp_path / "relay-root.log",
            )
        )
        for host in hosts:  # there: the target on the host's own loopback, through its link
            host.target_relay = host.relay(
                [f"127.0.0.1:{demo_target.port}={host.root_address}:{demo_target.port}"], log_name=f"{host.name}.log"
            )
        yield hosts
    finally:
        for relay in relays:
            relay.close()
        for host in hosts:
            host.close()


def test_workers_on_two_hosts_join_through_postgresql_and_redis_and_both_load_the_target(
    two_hosts, worker_env, project, alice, client, demo_target, settings, tmp_path
):
    from workers.celery import app

    settings.PLIMSOLL_SHARD_MAX_USERS = 2
    app.control.purge()
    env = dict(worker_env, PLIMSOLL_SHARD_MAX_USERS="2", PLIMSOLL_START_DELAY="2")
    bookkeeping = Worker(tmp_path / "bookkeeping.log", env, name="bookkeeping", concurrency=1, queues="default")
    workers = []
    try:
        # given: hosts apart from this one: PostgreSQL's 127.0.0.1 is not theirs
        for host in two_hosts:
            probe = f"import socket; socket.create_connection(('127.0.0.1', {urlsplit(env['DATABASE_URL']).port}), 2)"
            reached = subprocess.run(host.command([netns.PYTHON, "-c", probe]), capture_output=True, timeout=20)
            assert reached.returncode != 0 and b"ConnectionRefusedError" in reached.stderr, reached

        # given: a load worker on each host, configured as an operator would on another machine: the
        # database and broker by address, its labels, its pool's queue, and a folder of its own
        for host in two_hosts:
            host_env = dict(
                env,
                DATABASE_URL=_at(env["DATABASE_URL"], host.root_address),
                CELERY_BROKER_URL=_at(env["CELERY_BROKER_URL"], host.root_address),
                PLIMSOLL_WORKER_LABELS=f"zone={host.name},pool={POOL}",
                PLIMSOLL_VAR_DIR=str(tmp_path / f"var-{host.name}"),
                SECRET_KEY=settings.SECRET_KEY,  # the site's (a folder of its own would make another)
            )
            host_env.pop("PLIMSOLL_CACHE_URL", None)  # the broker's Redis, as on the real stack
            workers.append(
                Worker(
                    tmp_path / f"worker-{host.name}.log",
                    host_env,
                    name="load",
                    concurrency=1,
                    queues=f"engine.{POOL}",
                    host=host,
                )
            )

        # then: both registered, from their own hosts, with one slot each in the pool
        wait_until(lambda: GeneratorWorker.objects.count() == 2, timeout=30, what="both registrations")
        registered = {w.host: w for w in GeneratorWorker.objects.all()}
        assert set(registered) == {"host-a", "host-b"}
        assert all(w.pools == [POOL] and w.slots == 1 for w in registered.values())
        assert registered["host-a"].labels == {"zone": "host-a", "pool": POOL}
        assert pool_capacity() == {POOL: 2}

        # when: a 4-user run (two shards of 2) on an environment that requires the pool
        plan = make_plan(project, demo_target.base_url, hold=6)
        plan.environment.generator_pool = POOL
        plan.environment.save(update_fields=["generator_pool"])
        demo_target.reset()
        run = services.run_create(plan=plan, user=alice)
        wait_until(lambda: Run.objects.get(id=run.id).status in Run.FINISHED, timeout=90, what="the run to end")
        run.refresh_from_db()

        # then: it ran complete, one shard on each host, each named with its worker, pool and zone
        logs = "\n".join(w.output()[-1500:] for w in [*workers, bookkeeping])
        assert run.status == Run.Status.FINISHED, (run.status, run.error_message, logs)
        assert run.pool == POOL and run.load["complete"], run.load
        shards = {s["node"].rpartition("@")[2]: s for s in run.load["shards"]}
        assert set(shards) == {"host-a", "host-b"}, run.load["shards"]
        for host, shard in shards.items():
            assert shard["pool"] == POOL and shard["labels"]["zone"] == host
            assert shard["worker"].startswith(f"{host}:")
        # both loaded the target, each through its own host's link …
        for shard in run.load["shards"]:
            hits = sum(PageInterval.objects.filter(run=run, shard_no=shard["shard_no"]).values_list("hits", flat=True))
            assert hits > 10, (shard, hits)
        for host in two_hosts:
            assert host.target_relay.connections(f"127.0.0.1:{demo_target.port}") >= 1, host.name
        # … and every request the target served was recorded, none twice
        recorded = sum(PageInterval.objects.filter(run=run).values_list("hits", flat=True))
        assert recorded == demo_target.counters()["requests"]
        print(f"{recorded} requests recorded and served; {[(s['node'], s['pool'], s['pct']) for s in shards.values()]}")

        # and the run's page says which worker, pool and zone ran each shard
        client.force_login(alice)
        page = client.get(reverse("runs:detail", args=[run.code])).content.decode()
        for host in ("host-a", "host-b"):
            assert f"@{host}, pool {POOL}, zone={host})" in page
    finally:
        for worker in [*workers, bookkeeping]:
            if worker.proc.poll() is None:
                worker.close()
