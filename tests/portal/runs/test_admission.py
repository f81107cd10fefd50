"""Admission: a run starts only when all its shards can start together, fairly between teams (issue 25)."""

import itertools
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.projects.models import Environment, MixEntry, Plan, Project
from portal.runs import services
from portal.runs.models import GeneratorWorker, Run, RunShard, TeamQuota
from portal.runs.services import admission
from portal.runs.services.admission import Waiting, fair_order

pytestmark = pytest.mark.django_db

PORTS = itertools.count(18000)


@pytest.fixture(autouse=True)
def no_broker(monkeypatch, settings):
    """Runs are created without sending tasks; shards of 10 users; the passes run in the test."""
    sent = []
    monkeypatch.setattr(services.lifecycle, "_enqueue_start", lambda run_id: None)
    monkeypatch.setattr(
        services.lifecycle, "task", lambda name: type("T", (), {"apply_async": lambda *a, **k: sent.append((a, k))})()
    )
    monkeypatch.setattr(services.lifecycle, "_metrics_start", lambda run_id: None)
    settings.PLIMSOLL_SHARD_MAX_USERS = 10
    return sent


def make_plan(team, test_case, users=10, hold=30):
    """A plan on its own environment and target (one run per environment and per target)."""
    project = Project.objects.get_or_create(team=team, name=f"P{team.id}")[0]
    port = next(PORTS)
    env = Environment.objects.create(project=project, name=f"E{port}", base_url=f"http://127.0.0.1:{port}")
    tc = test_case if test_case.project_id == project.id else _copy_case(test_case, project)
    plan = Plan.objects.create(project=project, environment=env, name=f"Plan {port}", users=users, ramp_up=0, hold=hold)
    MixEntry.objects.create(plan=plan, test_case=tc, weight=1)
    return plan


def _copy_case(test_case, project):
    from portal.projects.models import Step, TestCase

    tc, created = TestCase.objects.get_or_create(project=project, name="Browse")
    if created:
        Step.objects.create(test_case=tc, position=0, name="Home", path="/")
    return tc


def worker(node="w1@h", slots=2, *, labels=None, queues=("engine",), age_s=0):
    admission.worker_heartbeat(node=node, host="h", slots=slots, labels=labels or {}, queues=list(queues))
    if age_s:
        GeneratorWorker.objects.filter(node=node).update(heartbeat_at=timezone.now() - timedelta(seconds=age_s))


def status(run):
    run.refresh_from_db()
    return run.status


def test_a_run_waits_for_capacity_with_its_place_and_starts_when_a_worker_registers(team, test_case, alice):
    # given: no worker yet
    run = services.run_create(plan=make_plan(team, test_case, users=20), user=alice)

    assert services.admit() == []
    queue = services.run_queue(run)
    assert status(run) == Run.Status.QUEUED and not run.shards.exists()
    assert queue["position"] == 1 and "No worker of the default pool is registered" in queue["reason"]

    # when: a worker of 2 slots registers
    worker(slots=2)
    before = timezone.now()
    assert services.admit() == [run.id]

    # then: both shards start together, the common start set at admission
    run.refresh_from_db()
    assert run.status == Run.Status.STARTING and run.shard_count == 2 and run.shards.count() == 2
    assert run.admitted_at >= before and run.start_at >= run.admitted_at


def test_a_run_starts_only_when_all_its_shards_fit_and_its_position_and_estimate_show(team, test_case, alice):
    worker(slots=2)
    first = services.run_create(plan=make_plan(team, test_case, users=10, hold=60), user=alice)
    services.admit()
    second = services.run_create(plan=make_plan(team, test_case, users=20), user=alice)

    # 1 of 2 slots free, the second run needs 2: it waits (no shard of it starts alone)
    assert services.admit() == []
    assert status(second) == Run.Status.QUEUED and not second.shards.exists()
    queue = services.run_queue(second)
    assert queue["position"] == 1 and queue["free"] == 1 and queue["slots"] == 2
    assert 55 <= queue["estimate_s"] <= 63  # when the first run's 60 s end
    assert queue["reason"].startswith("Waiting for capacity: it needs 2 slots of the default pool, 1 of 2 free")

    # when: the first run's shard ends (its slot frees)
    RunShard.objects.filter(run=first).update(status=RunShard.Status.DONE)
    Run.objects.filter(id=first.id).update(status=Run.Status.PASSED)

    assert services.admit() == [second.id]


def test_a_run_that_can_never_fit_is_refused_at_once_with_what_to_do(team, test_case, alice):
    worker(slots=2)

    with pytest.raises(services.RunError) as refused:
        services.run_create(plan=make_plan(team, test_case, users=50), user=alice)

    assert str(refused.value) == (
        "The run needs 5 shards of 10 users (50 users) to start together, but the default pool has 2 slots on 1 "
        "worker: lower the plan's users to 20 or fewer, or ask an operator to add workers."
    )
    assert not Run.objects.exists()


def test_stop_works_while_waiting(team, test_case, alice):
    run = services.run_create(plan=make_plan(team, test_case), user=alice)

    services.run_cancel(run=run)
    worker(slots=2)

    assert services.admit() == []
    assert status(run) == Run.Status.CANCELLED and not run.shards.exists()


def test_one_teams_queue_does_not_starve_anothers_run(team, test_case, alice, charlie):
    # given: one slot busy; team A queued five runs, then team B one
    worker(slots=1)
    busy = services.run_create(plan=make_plan(team, test_case), user=alice)
    services.admit()
    a_runs = [services.run_create(plan=make_plan(team, test_case), user=alice) for _ in range(5)]
    b_run = services.run_create(plan=make_plan(charlie.teams.get(), test_case), user=charlie)
    assert services.run_queue(b_run)["position"] == 1  # B has no active run, A has one

    # when: the slot frees
    RunShard.objects.filter(run=busy).update(status=RunShard.Status.DONE)
    Run.objects.filter(id=busy.id).update(status=Run.Status.PASSED)

    # then: B's run goes before A's four others
    assert services.admit() == [b_run.id]
    assert all(status(r) == Run.Status.QUEUED for r in a_runs)


def test_fair_order_is_round_robin_between_teams():
    waiting = [Waiting(run_id=n, team_id=1, created_at=n, shards=1) for n in range(5)]
    waiting += [Waiting(run_id=10 + n, team_id=2, created_at=100 + n, shards=1) for n in range(2)]

    order = [w.run_id for w in fair_order(waiting, team_active={}, team_last={})]

    assert order == [0, 10, 1, 11, 2, 3, 4]
    # a team with a run already active goes after one without
    assert [w.run_id for w in fair_order(waiting, team_active={1: 1}, team_last={})][:3] == [10, 0, 11]


def test_a_large_run_at_the_head_is_not_overtaken_by_smaller_ones():
    order = [Waiting(1, 1, 0, shards=2), Waiting(2, 2, 1, shards=1)]

    assert admission.plan_admissions(order, free={"": 1}, capacity={"": 2}) == []
    # but a run larger than the whole pool (a worker left) waits without holding the queue
    assert [w.run_id for w in admission.plan_admissions(order, free={"": 1}, capacity={"": 1})] == [2]


def test_a_dead_worker_no_longer_counts_and_the_run_waits(team, test_case, alice, settings):
    worker("w1@h", slots=1)
    worker("w2@h", slots=1, age_s=settings.PLIMSOLL_WORKER_TTL + 1)  # silent: died
    run = services.run_create(plan=make_plan(team, test_case, users=10), user=alice)
    services.admit()
    waiting = services.run_create(plan=make_plan(team, test_case, users=10), user=alice)

    assert status(run) == Run.Status.STARTING
    assert services.admit() == [] and status(waiting) == Run.Status.QUEUED
    # when w2 comes back, its slot counts again
    worker("w2@h", slots=1)
    assert services.admit() == [waiting.id]


def test_a_worker_that_re_registers_with_other_labels_moves_its_slots(team, test_case, alice):
    worker("w1@h", slots=2)
    assert admission.pool_capacity() == {"": 2}

    changed = admission.worker_heartbeat(
        node="w1@h", host="h", slots=2, labels={"pool": "private"}, queues=["engine.private"]
    )

    assert changed and admission.pool_capacity() == {"private": 2}
    run = services.run_create(plan=make_plan(team, test_case), user=alice)  # the default pool has none now
    assert services.admit() == [] and status(run) == Run.Status.QUEUED


def test_a_team_over_its_run_limit_is_refused_with_the_limit_and_its_usage(team, test_case, alice):
    TeamQuota.objects.create(team=team, max_runs=1)
    services.run_create(plan=make_plan(team, test_case), user=alice)

    with pytest.raises(services.RunError) as refused:
        services.run_create(plan=make_plan(team, test_case), user=alice)

    assert str(refused.value) == (
        "Your team has 1 run active or waiting; its limit is 1 at once. Stop one, or wait until one ends."
    )


def test_peak_users_and_user_hours_limits(team, test_case, alice, settings):
    settings.PLIMSOLL_TEAM_MAX_USERS = 15
    with pytest.raises(services.RunError, match="The run needs 20 users; your team's limit is 15 users per run."):
        services.run_create(plan=make_plan(team, test_case, users=20), user=alice)

    settings.PLIMSOLL_TEAM_MAX_USERS = 0
    TeamQuota.objects.create(team=team, max_user_hours=1)
    services.run_create(plan=make_plan(team, test_case, users=10, hold=300), user=alice)  # 0.8 user-hours
    with pytest.raises(services.RunError) as refused:
        services.run_create(plan=make_plan(team, test_case, users=10, hold=300), user=alice)
    assert str(refused.value) == (
        "The run needs 0.8 user-hours; your team has used 0.8 of its 1 user-hours this month."
    )


def test_a_quota_lowered_while_a_run_waits_refuses_it_at_admission(team, test_case, alice):
    run = services.run_create(plan=make_plan(team, test_case, users=10), user=alice)
    TeamQuota.objects.create(team=team, max_users=5)
    worker(slots=2)

    assert services.admit() == []

    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert run.error_message == (
        "Refused while waiting for capacity: The run needs 10 users; your team's limit is 5 users per run."
    )


def test_the_watchdog_sends_a_pending_shard_at_most_once_more(team, test_case, alice, watched, monkeypatch):
    # given: an admitted run whose shard message was lost (a broker restart): pending past RESEND_AFTER
    worker(slots=2)
    run = services.run_create(plan=make_plan(team, test_case), user=alice)
    services.admit()
    Run.objects.filter(id=run.id).update(start_at=timezone.now() - timedelta(seconds=20))
    sent = []
    wd = sys.modules["portal.runs.services.watchdog"]  # the package exports the function under the same name

    monkeypatch.setattr(wd, "task", lambda name: type("T", (), {"apply_async": lambda *a, **k: sent.append(a)})())

    # when: the watchdog passes three times
    for _ in range(3):
        services.watchdog()

    # then: the shard was sent once more, not on every pass
    assert len(sent) == 1
    assert RunShard.objects.get(run=run).resent


def test_a_team_sees_its_usage_and_queue_and_no_other_teams(team, test_case, alice, charlie, client):
    from django.urls import reverse

    worker(slots=1)
    TeamQuota.objects.create(team=team, max_runs=3)
    services.run_create(plan=make_plan(team, test_case), user=alice)
    services.admit()
    waiting = services.run_create(plan=make_plan(team, test_case), user=alice)

    client.force_login(alice)
    page = client.get(reverse("runs:capacity")).content.decode()
    run_page = client.get(waiting.get_absolute_url()).content.decode()
    api = client.get(reverse("api:run-detail", args=[waiting.code])).json()
    client.force_login(charlie)
    other = client.get(reverse("runs:capacity")).content.decode()

    assert 'data-usage="runs">2</strong> of 3' in page
    assert f"#{waiting.number} {waiting.plan_name}" in page and "1 of 1" in page
    assert "Waiting for capacity</strong>: position 1 of 1" in run_page
    assert api["queue"]["position"] == 1 and api["queue"]["free"] == 0 and api["queue"]["slots"] == 1
    assert waiting.plan_name not in other and team.name not in other


def test_an_environment_that_requires_a_pool_runs_only_on_its_workers(
    team, test_case, alice, django_capture_on_commit_callbacks, no_broker
):
    plan = make_plan(team, test_case)
    Environment.objects.filter(id=plan.environment_id).update(generator_pool="private")
    plan.refresh_from_db()
    worker("public@h", slots=4)

    # no worker of the pool: refused at once, with what to do
    with pytest.raises(services.RunError) as refused:
        services.run_create(plan=plan, user=alice)
    assert str(refused.value) == (
        "No worker of pool “private” is running, so the run cannot start: ask an operator to start one."
    )

    # a worker of the pool registers: the run is admitted onto its slot, and its shard goes to its queue
    worker("private@h", slots=1, labels={"pool": "private", "zone": "eu"}, queues=["engine.private"])
    run = services.run_create(plan=plan, user=alice)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.admit() == [run.id]
    assert run.pool == "private"
    assert [call[1]["queue"] for call in no_broker] == ["engine.private"]


def test_the_environment_form_sets_a_pool_and_refuses_a_bad_name(alice_client, environment):
    from django.urls import reverse

    from tests.portal.projects.data import environment_data

    url = reverse("projects:environment-edit", args=[environment.code])
    data = environment_data(name=environment.name, base_url=environment.base_url)

    bad = alice_client.post(url, {**data, "generator_pool": "eu west!"})
    alice_client.post(url, {**data, "generator_pool": "private"})

    assert bad.status_code == 200 and "letters, numbers, underscores or hyphens" in bad.content.decode()
    environment.refresh_from_db()
    assert environment.generator_pool == "private"


def test_the_api_sets_an_environments_pool_and_refuses_a_bad_name(alice, environment):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(alice)
    url = f"/api/v1/environments/{environment.code}/"

    bad = client.patch(url, {"generator_pool": "eu west!"}, format="json")
    good = client.patch(url, {"generator_pool": "private"}, format="json")

    assert bad.status_code == 400 and "generator_pool" in str(bad.json())
    assert good.status_code == 200 and good.json()["generator_pool"] == "private"


def test_runs_waiting_through_a_broker_restart_are_admitted_once(team, test_case, alice, watched):
    # given: two waiting runs whose start messages were lost with the broker (no task ever arrives)
    runs = [services.run_create(plan=make_plan(team, test_case, users=20), user=alice) for _ in range(2)]
    worker(slots=4)

    # when: the watchdog passes (no admission message needed: waiting is a state in the database)
    services.watchdog()
    assert [status(r) for r in runs] == [Run.Status.STARTING] * 2
    # and passes again, with a duplicate admission pass, as a repeated message would run it
    services.admit()
    services.watchdog()

    # then: both started, each once: two shards each, one admission time
    for run in runs:
        run.refresh_from_db()
        assert run.status == Run.Status.STARTING and run.shards.count() == 2
    admitted = [Run.objects.get(id=r.id).admitted_at for r in runs]
    services.admit()
    assert [Run.objects.get(id=r.id).admitted_at for r in runs] == admitted
