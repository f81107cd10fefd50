import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.runs import services
from portal.runs.models import PageInterval, Run, RunShard, ShardInterval
from tests.portal.runs.factories import add_second, hist_of

pytestmark = pytest.mark.django_db


def test_run_create_snapshots_plan_and_configuration(plan, alice):
    # when
    run = services.run_create(plan=plan, user=alice)

    # then: later edits don't change the run
    plan.users = 999
    plan.save()
    plan.environment.configuration = [{"key": "search.index", "value": "on"}]
    plan.environment.save()
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert run.plan_snapshot["profile"]["users"] == 5
    assert run.plan_snapshot["base_url"] == "http://127.0.0.1:8001"
    assert run.plan_snapshot["test_cases"][0]["steps"][1]["path"] == "/articles"
    assert run.config_snapshot == [{"key": "search.index", "value": "off"}]
    assert (run.number, run.plan_name, run.environment_name) == (1, "Smoke", "Staging")


def test_runs_are_numbered_per_project(plan, alice):
    numbers = []
    for _ in range(3):
        run = services.run_create(plan=plan, user=alice)
        numbers.append(run.number)
        Run.objects.filter(id=run.id).update(status=Run.Status.PASSED)  # frees the environment
    assert numbers == [1, 2, 3]


def test_a_second_run_on_a_busy_environment_is_refused_and_names_the_first(plan, alice):
    first = services.run_create(plan=plan, user=alice)

    with pytest.raises(services.EnvironmentBusy, match=f"Run #{first.number} .* is on the environment"):
        services.run_create(plan=plan, user=alice)

    assert Run.objects.count() == 1


def test_a_second_run_on_the_same_target_through_another_environment_is_refused_and_names_the_first(
    plan, alice, environment
):
    from portal.projects.models import Environment, Plan

    first = services.run_create(plan=plan, user=alice)
    # The same system written differently: upper-case host, explicit port, a path.
    twin = Environment.objects.create(project=plan.project, name="Staging twin", base_url="HTTP://127.0.0.1:8001/app")
    other_plan = Plan.objects.get(pk=plan.pk)
    other_plan.pk, other_plan.id, other_plan.code, other_plan.name = None, None, uuid.uuid4(), "Smoke on the twin"
    other_plan.environment = twin
    other_plan.save()
    other_plan.mix.create(test_case=plan.mix.get().test_case, weight=1)

    with pytest.raises(
        services.EnvironmentBusy, match=rf"Run #{first.number} \(Smoke\) .* is loading http://127.0.0.1:8001 now"
    ):
        services.run_create(plan=other_plan, user=alice)
    assert Run.objects.count() == 1

    # Another port is another target: it may run.
    twin.base_url = "http://127.0.0.1:8002"
    twin.save()
    assert services.run_create(plan=Plan.objects.get(pk=other_plan.pk), user=alice).environment == twin


def test_another_teams_run_on_the_same_target_refuses_without_being_named(plan, alice, charlie):
    from portal.projects.models import Environment, MixEntry, Plan, Project, Step, TestCase

    first = services.run_create(plan=plan, user=alice)
    # charlie's own project, environment and plan, pointing at alice's system under test
    project = Project.objects.create(team=charlie.teams.get(), name="Charlie's")
    env = Environment.objects.create(project=project, name="Same box", base_url="http://127.0.0.1:8001")
    case = TestCase.objects.create(project=project, name="Home")
    Step.objects.create(test_case=case, position=0, name="Home", path="/")
    theirs = Plan.objects.create(project=project, environment=env, name="Theirs", users=1, hold=5)
    MixEntry.objects.create(plan=theirs, test_case=case, weight=1)

    with pytest.raises(services.EnvironmentBusy, match="A run of another team is loading http://127.0.0.1:8001") as exc:
        services.run_create(plan=theirs, user=charlie)
    assert first.plan_name not in str(exc.value) and plan.project.name not in str(exc.value)


def test_a_run_records_the_analysis_settings_and_the_change_it_runs_under(plan, alice):
    from portal.history.services import change_apply, change_create

    change = change_create(
        environment=plan.environment, user=alice, title="Enable -T1118", edits=[{"key": "sql.flags", "value": "-T1118"}]
    )
    change_apply(change, user=alice)

    run = services.run_create(plan=plan, user=alice)

    assert run.tuning_change == change
    assert run.config_snapshot[-1] == {"key": "sql.flags", "value": "-T1118"}
    assert run.analysis_settings["degradation"]["drop_pct"] == plan.degradation_drop_pct


def test_a_plan_without_mix_cannot_run(plan, alice):
    plan.mix.all().delete()
    with pytest.raises(services.RunError, match="Add at least one test case"):
        services.run_create(plan=plan, user=alice)
    assert not Run.objects.exists()


def test_a_plan_longer_than_allowed_cannot_run(plan, alice, settings):
    settings.PLIMSOLL_MAX_RUN_SECONDS = 3
    with pytest.raises(services.RunError, match="more than the 3 s allowed"):
        services.run_create(plan=plan, user=alice)


def test_run_start_refuses_a_target_outside_the_allowlist(run):
    # given: a target outside loopback (never contacted: the check happens before any shard exists)
    run.plan_snapshot["base_url"] = "http://192.0.2.10"
    run.save()

    services.run_start(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert "192.0.2.10" in run.error_message and "not in the allowed targets" in run.error_message
    assert not run.shards.exists()


def test_run_start_refuses_a_websocket_steps_own_origin_outside_the_allowlist(run):
    # given: a WebSocket step of the snapshot that connects to a wss:// origin of its own, outside loopback
    session = {"name": "Chat", "path": "wss://192.0.2.10/chat", "websocket": {"actions": [{"send": "hi"}]}}
    run.plan_snapshot["test_cases"][0]["steps"].append(session)
    run.save()

    services.run_start(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert run.error_message.startswith("Target refused, no request was sent: wss://192.0.2.10:443 resolves to")
    assert "(the WebSocket step “Chat” of “Browse”)" in run.error_message
    assert not run.shards.exists()


def test_run_start_splits_users_into_shards_with_a_common_start(run, settings):
    settings.PLIMSOLL_SHARD_MAX_USERS = 2  # 5 users → 3 shards of 2, 2, 1

    services.run_start(run.id)
    services.run_start(run.id)  # a repeated message does nothing

    run.refresh_from_db()
    assert run.status == Run.Status.STARTING
    assert run.shard_count == 3
    assert [s.user_count for s in run.shards.all()] == [2, 2, 1]
    assert run.start_at > timezone.now() - timedelta(seconds=5)


def test_a_claimed_shard_is_not_run_again(run):
    # given: a shard another worker already claimed
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.RUNNING, worker="other:1")

    # when: the same message is delivered again
    services.shard_execute(run.id, 0)

    # then: nothing ran, the claim is untouched
    shard = run.shards.get()
    assert (shard.status, shard.worker) == (RunShard.Status.RUNNING, "other:1")
    assert not PageInterval.objects.exists()


def test_a_shard_keeps_the_labels_its_worker_claimed_it_with(run, settings):
    # given: a worker labelled zone=eu-west, registered under other labels now (or gone from the registry)
    from portal.runs.models import GeneratorWorker

    settings.PLIMSOLL_WORKER_LABELS = "zone=eu-west, pool=private"
    now = timezone.now()
    GeneratorWorker.objects.create(
        node="engine@eu-1", slots=1, labels={"zone": "us-east"}, started_at=now, heartbeat_at=now
    )
    Run.objects.filter(id=run.id).update(status=Run.Status.STARTING, start_at=now, shard_count=1, cancel_requested=True)
    RunShard.objects.create(run=run, shard_no=0, user_count=5)

    # when: it claims the shard (the run was stopped meanwhile: the shard ends at once, and the run is reported)
    services.shard_execute(run.id, 0, worker_node="engine@eu-1")

    # then: the shard and the report name the labels it ran under
    assert RunShard.objects.get(run=run).worker_labels == {"zone": "eu-west", "pool": "private"}
    run.refresh_from_db()
    assert run.load["shards"][0]["node"] == "engine@eu-1"
    assert run.load["shards"][0]["labels"] == {"zone": "eu-west", "pool": "private"}


def _report(second, pages=2):
    return {
        "second": second,
        "active_users": 5,
        "iterations_started": 1,
        "iterations_completed": 1,
        "labels": {
            "Browse: Home": {
                "pages": pages,
                "hits": pages,
                "errors": 0,
                "errors_by_kind": {},
                "error_samples": {},
                "bytes_in": 100,
                "bytes_out": 10,
                "hist": hist_of(*[10.0] * pages),
            }
        },
    }


def test_the_sink_never_counts_a_repeated_flush_twice(run):
    run.status = Run.Status.STARTING
    run.save()
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.RUNNING)
    sink = services.ShardSink(run.id, 0)

    assert sink(_report(3)) is False
    assert sink(_report(3)) is False  # the same second again (a retried write)

    assert PageInterval.objects.get().pages == 2
    assert ShardInterval.objects.count() == 1
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING  # the first flush marks the run running


def test_the_sink_asks_to_stop_when_the_run_is_cancelled(run):
    run.status = Run.Status.RUNNING
    run.save()
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.RUNNING)
    sink = services.ShardSink(run.id, 0)
    assert sink(_report(1)) is False

    services.run_cancel(run=run)

    assert sink(_report(2)) is True
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLING


def test_cancelling_a_queued_run_ends_it_at_once(run):
    services.run_cancel(run=run)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and run.finished_at


def test_the_watchdog_marks_a_silent_shard_lost_and_keeps_its_data(run, settings, watched):
    # given: two shards; shard 1 stopped sending heartbeats 31 s ago, shard 0 finished
    now = timezone.now()
    run.status, run.shard_count, run.start_at = Run.Status.RUNNING, 2, now - timedelta(seconds=60)
    run.save()
    RunShard.objects.create(run=run, shard_no=0, user_count=3, status=RunShard.Status.DONE, heartbeat_at=now)
    RunShard.objects.create(
        run=run,
        shard_no=1,
        user_count=2,
        status=RunShard.Status.RUNNING,
        worker="w:9",
        heartbeat_at=now - timedelta(seconds=settings.PLIMSOLL_SHARD_TIMEOUT + 1),
    )
    for s in range(1, 4):
        add_second(run, s, shard_no=1, labels={"Browse: Home": ([10.0], {})})

    # when
    services.watchdog()

    # then
    run.refresh_from_db()
    lost = run.shards.get(shard_no=1)
    assert lost.status == RunShard.Status.LOST and "no heartbeat" in lost.error_message
    assert run.status == Run.Status.PARTIAL
    assert run.summary["totals"]["pages"] == 3  # every interval flushed before the loss


def test_the_watchdog_leaves_a_live_shard_alone(run):
    now = timezone.now()
    run.status, run.start_at = Run.Status.RUNNING, now
    run.save()
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.RUNNING, heartbeat_at=now)

    services.watchdog()

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert run.shards.get().status == RunShard.Status.RUNNING


def test_the_watchdog_ends_a_run_no_worker_took(run, watched):
    Run.objects.filter(id=run.id).update(created_at=timezone.now() - services.QUEUED_TIMEOUT - timedelta(seconds=1))

    services.watchdog()

    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert "No Celery worker took this run" in run.error_message


def test_finalize_runs_once(run):
    run.status = Run.Status.RUNNING
    run.save()
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.DONE)
    for s in range(6):  # the whole plan (1 s ramp, 5 s hold): a complete run
        add_second(run, s, labels={"Browse: Home": ([10.0], {})} if s == 2 else None)

    services.run_finalize(run.id)
    run.refresh_from_db()
    first = run.finished_at
    services.run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.FINISHED
    assert run.finished_at == first
