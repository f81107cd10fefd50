"""Trial sets and experiments, driven through the services as the worker and the watchdog drive them.

No Celery worker runs here: ``enqueued`` records the runs the portal hands to Celery, and
the tests play the worker's part with the real run services (``run_start`` refusing a
target, ``run_finalize`` over interval rows with known latencies, ``run_cancel``), so each
run's end goes through the real ``run_finished`` signal to the trial set and the
experiment. ``on_commit`` callbacks run as they would after a commit
(``django_capture_on_commit_callbacks(execute=True)``). Hooks are sent to a real HTTP
server on 127.0.0.1.
"""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from portal.history import services
from portal.history.models import Experiment, TrialSet, TuningChange
from portal.runs import services as run_services
from portal.runs.models import Run, RunShard
from tests.portal.runs.factories import add_second

pytestmark = pytest.mark.django_db


# --------------------------------------------------------------------------------------
# The worker's part, and a real hook target
# --------------------------------------------------------------------------------------


@pytest.fixture
def enqueued(monkeypatch):
    """Run ids handed to Celery (no worker here: the tests end the runs themselves)."""
    ids = []
    monkeypatch.setattr(run_services.lifecycle, "_enqueue_start", ids.append)
    return ids


@pytest.fixture
def committed(django_capture_on_commit_callbacks, eager_tasks):
    """A block whose on_commit callbacks run at its end, as after a commit (and theirs too); the
    tasks they enqueue (a trial set's advance) run here, as a worker would run them."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def finish_trial(run: Run, *, apd_ms: float = 20.0, pages_per_s: int = 2) -> Run:
    """The worker's part for a run that goes well: one shard records 7 seconds, then the run is finalized.

    The plan fixture measures seconds 1–5 (ramp-up 1 s, hold 5 s), so the summary's APD
    is ``apd_ms`` and its pages/s ``pages_per_s``.
    """
    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING, start_at=timezone.now(), shard_count=1)
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.DONE)
    for second in range(7):
        add_second(run, second, iterations=1, labels={"Browse: Home": ([apd_ms] * pages_per_s, {})})
    run_services.run_finalize(run.id)
    run.refresh_from_db()
    return run


def active_trial(trial_set: TrialSet) -> Run:
    return trial_set.runs.get(status__in=Run.ACTIVE)


class HookTarget:
    """A real HTTP server on loopback that records each request and answers with a set status."""

    def __init__(self):
        self.requests: list[dict] = []
        self.status = 200
        self.body = b'{"search.index": "on"}'
        target = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                target.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "content_type": self.headers.get("Content-Type"),
                        "body": self.rfile.read(length).decode(),
                    }
                )
                self.send_response(target.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(target.body)))
                self.end_headers()
                self.wfile.write(target.body)

            do_POST = do_PUT = do_GET = _answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/_demo/knobs"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def hook_target():
    target = HookTarget()
    yield target
    target.close()


def make_experiment(plan, user, *, hook_url="", apply_mode=Experiment.ApplyMode.HOOK, trials=2) -> Experiment:
    change = services.change_create(
        environment=plan.environment,
        user=user,
        category=TuningChange.Category.INDEX,
        title="Add index ix_work_items_area",
        edits=[{"key": "search.index", "value": "on"}],
        hook_url=hook_url,
        hook_body=json.dumps({"search.index": "on"}) if hook_url else "",
    )
    return services.experiment_create(
        plan=plan, user=user, title="Index on work_items.area", trials=trials, apply_mode=apply_mode, change=change
    )


# --------------------------------------------------------------------------------------
# Trial sets
# --------------------------------------------------------------------------------------


def test_a_trial_set_runs_its_trials_one_after_the_other(plan, alice, enqueued, committed):
    # when: 3 trials start
    with committed():
        trial_set = services.trialset_start(plan=plan, size=3, user=alice, label="before")

    # then: one trial at a time, the next one created when the previous has ended
    finished = []
    for trial in range(1, 4):
        runs = list(trial_set.runs.order_by("id"))
        assert len(runs) == trial
        assert [r.is_active for r in runs] == [False] * (trial - 1) + [True]
        assert enqueued == [r.id for r in runs]
        with committed():
            finished.append(finish_trial(runs[-1], apd_ms=10.0 * trial))
    trial_set.refresh_from_db()
    assert trial_set.status == TrialSet.Status.DONE
    assert trial_set.finished_at is not None and trial_set.error_message == ""
    assert [r.status for r in finished] == ["finished"] * 3  # the plan sets no thresholds: no verdict (issue 28)
    assert [r.number for r in finished] == [1, 2, 3]
    assert [r.summary["totals"]["apd_ms"] for r in finished] == pytest.approx([10.0, 20.0, 30.0], rel=0.002)
    assert trial_set.runs.count() == 3 and len(enqueued) == 3


def test_the_watchdog_does_not_start_more_trials_than_the_set_holds(plan, alice, enqueued, committed):
    with committed():
        trial_set = services.trialset_start(plan=plan, size=1, user=alice)
    services.advance_all()  # the trial is still running: nothing to do
    with committed():
        finish_trial(active_trial(trial_set))
    services.advance_all()
    services.advance_all()

    trial_set.refresh_from_db()
    assert trial_set.status == TrialSet.Status.DONE
    assert trial_set.runs.count() == 1 and len(enqueued) == 1


def test_a_trial_that_ends_in_error_stops_the_set_with_the_reason(plan, alice, enqueued, committed):
    # given: a target outside the allowlist, so the worker refuses the run before any request
    plan.environment.base_url = "http://192.0.2.10"
    plan.environment.save()
    with committed():
        trial_set = services.trialset_start(plan=plan, size=3, user=alice)

    # when: the worker takes the first trial
    with committed():
        run_services.run_start(active_trial(trial_set).id)

    # then: the set stops, saying which trial failed and why; no second trial starts
    trial_set.refresh_from_db()
    assert trial_set.status == TrialSet.Status.STOPPED
    assert trial_set.error_message.startswith("Trial 1 (run #1) ended in error: Target refused, no request was sent")
    assert "192.0.2.10" in trial_set.error_message
    services.advance_all()
    assert trial_set.runs.count() == 1


def test_a_trial_stopped_by_its_criteria_stops_the_set_with_the_rule(plan, alice, enqueued, committed):
    from portal.runs.services.criteria import run_stop
    from workers.engine.stop_criteria import Rule

    with committed():
        trial_set = services.trialset_start(plan=plan, size=3, user=alice)
    trial = active_trial(trial_set)
    Run.objects.filter(id=trial.id).update(status=Run.Status.RUNNING, start_at=timezone.now(), shard_count=1)
    RunShard.objects.create(run=trial, shard_no=0, user_count=5, status=RunShard.Status.DONE)
    for second in range(7):
        add_second(trial, second, labels={"Browse: Home": ([20.0], {"http_status": 9})})
    window = {"from_s": 1, "to_s": 6, "pages": 50, "errors": 45, "error_rate_pct": 90.0, "pages_per_s": 10.0}
    assert run_stop(trial.id, Rule("error_rate_pct", 50.0, 5), window, now=timezone.now())

    with committed():
        run_services.run_finalize(trial.id)

    trial_set.refresh_from_db()
    assert Run.objects.get(id=trial.id).status == Run.Status.STOPPED
    assert trial_set.status == TrialSet.Status.STOPPED
    assert trial_set.error_message == (
        "Trial 1 (run #1) was stopped by its criteria: error rate 90 % > 50 % over the last 5 s "
        "(seconds 1–6: 50 pages, 45 errors, 10 pages/s)."
    )
    assert trial_set.runs.count() == 1


def test_a_trial_cancelled_on_its_run_page_stops_the_set(plan, alice, enqueued, committed):
    with committed():
        trial_set = services.trialset_start(plan=plan, size=3, user=alice)
    with committed():
        finish_trial(active_trial(trial_set))
    with committed():
        run_services.run_cancel(run=active_trial(trial_set))

    trial_set.refresh_from_db()
    assert trial_set.status == TrialSet.Status.STOPPED
    assert trial_set.error_message == "Trial 2 (run #2) was stopped."
    assert trial_set.runs.count() == 2


def test_a_trial_set_waits_while_another_run_holds_the_environment(plan, alice, enqueued, committed):
    # given: a run someone started by hand is on the environment
    other = run_services.run_create(plan=plan, user=alice)

    # when: a trial set starts, and the watchdog looks again while that run is still on
    with committed():
        trial_set = services.trialset_start(plan=plan, size=2, user=alice)
    services.advance_all()

    # then: nothing of the set has started
    assert trial_set.runs.count() == 0
    trial_set.refresh_from_db()
    assert trial_set.status == TrialSet.Status.RUNNING
    assert run_services.active_run_on(plan.environment_id) == other

    # when: that run ends, and the watchdog comes by
    with committed():
        finish_trial(other)
    assert trial_set.runs.count() == 0  # its end advances only its own set (it has none)
    with committed():
        services.advance_all()

    # then: the first trial starts
    first = active_trial(trial_set)
    assert first.number == 2 and enqueued == [first.id]


def test_stopping_a_trial_set_cancels_its_running_trial_and_starts_no_other(plan, alice, enqueued, committed):
    with committed():
        trial_set = services.trialset_start(plan=plan, size=3, user=alice)
    trial = active_trial(trial_set)

    with committed():
        services.trialset_stop(trial_set)
    with committed():
        services.advance_all()

    trial.refresh_from_db()
    trial_set.refresh_from_db()
    assert trial.status == Run.Status.CANCELLED
    assert trial_set.status == TrialSet.Status.STOPPED
    assert trial_set.error_message == "Stopped by a user."
    assert trial_set.runs.count() == 1


def test_a_plan_that_cannot_run_starts_no_trial_set(plan, alice, enqueued):
    plan.mix.all().delete()

    with pytest.raises(run_services.RunError, match="Add at least one test case"):
        services.trialset_start(plan=plan, size=3, user=alice)

    assert not TrialSet.objects.exists()


# --------------------------------------------------------------------------------------
# Experiments
# --------------------------------------------------------------------------------------


def test_an_experiment_measures_before_its_hook_applies_the_change_and_after(
    plan, alice, enqueued, committed, hook_target
):
    experiment = make_experiment(plan, alice, hook_url=hook_target.url)

    # when: it starts, and its 2 baseline trials end
    with committed():
        services.experiment_start(experiment, user=alice)
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.BASELINE and experiment.started_at is not None
    baseline = experiment.baseline
    for _ in range(2):
        assert hook_target.requests == []  # nothing is changed while the baseline runs
        with committed():
            finish_trial(active_trial(baseline), apd_ms=400.0)

    # then: the hook was sent once, as written, and the change is in the ledger
    assert hook_target.requests == [
        {
            "method": "POST",
            "path": "/_demo/knobs",
            "content_type": "application/json",
            "body": '{"search.index": "on"}',
        }
    ]
    change = TuningChange.objects.get(id=experiment.change_id)
    assert change.status == TuningChange.Status.APPLIED and change.number == 1
    assert change.hook_response["status"] == 200
    assert json.loads(change.hook_response["body"]) == {"search.index": "on"}
    plan.environment.refresh_from_db()
    assert plan.environment.configuration == [{"key": "search.index", "value": "on"}]
    assert change.config_before == [{"key": "search.index", "value": "off"}]

    # and: the trials after run under the change
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.AFTER
    after = experiment.after
    assert after.label == "After: Add index ix_work_items_area"
    for _ in range(2):
        with committed():
            finish_trial(active_trial(after), apd_ms=100.0)

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.DONE and experiment.finished_at is not None
    assert [r.tuning_change_id for r in baseline.runs.order_by("id")] == [None, None]
    assert [r.tuning_change_id for r in after.runs.order_by("id")] == [change.id, change.id]
    assert [r.summary["totals"]["apd_ms"] for r in after.runs.order_by("id")] == pytest.approx([100.0] * 2, rel=0.002)
    assert len(hook_target.requests) == 1 and len(enqueued) == 4


def test_a_failing_hook_fails_the_experiment_and_leaves_the_configuration(
    plan, alice, enqueued, committed, hook_target
):
    hook_target.status = 500
    hook_target.body = b'{"error": "unknown knob"}'
    experiment = make_experiment(plan, alice, hook_url=hook_target.url, trials=1)
    with committed():
        services.experiment_start(experiment, user=alice)

    with committed():
        finish_trial(active_trial(experiment.baseline))

    experiment.refresh_from_db()
    change = experiment.change
    change.refresh_from_db()
    plan.environment.refresh_from_db()
    assert len(hook_target.requests) == 1
    assert experiment.status == Experiment.Status.FAILED
    assert experiment.error_message == "The change was not applied: The hook answered 500 Internal Server Error."
    assert change.status == TuningChange.Status.FAILED and change.number is None
    assert change.hook_response["status"] == 500 and "unknown knob" in change.hook_response["body"]
    assert plan.environment.configuration == [{"key": "search.index", "value": "off"}]
    assert experiment.after is None
    services.advance_all()  # a failed experiment stays failed: the hook is not sent again
    assert len(hook_target.requests) == 1


def test_the_change_waits_for_a_run_that_holds_the_environment(plan, alice, enqueued, committed, hook_target):
    experiment = make_experiment(plan, alice, hook_url=hook_target.url, trials=1)
    with committed():
        services.experiment_start(experiment, user=alice)
    baseline_trial = active_trial(experiment.baseline)
    # given: the baseline ends, but someone's run takes the environment before the change is applied
    Run.objects.filter(id=baseline_trial.id).update(status=Run.Status.PASSED)
    other = run_services.run_create(plan=plan, user=alice)
    Run.objects.filter(id=baseline_trial.id).update(status=Run.Status.RUNNING)

    with committed():
        finish_trial(baseline_trial)

    # then: the hook is not sent while that run is on
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.APPLYING
    assert hook_target.requests == []

    # when: it ends and the watchdog comes by
    with committed():
        finish_trial(other)
    with committed():
        services.advance_all()

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.AFTER
    assert len(hook_target.requests) == 1
    assert experiment.after.runs.get().tuning_change == experiment.change


def test_a_manual_experiment_waits_for_a_person_to_confirm_the_change(plan, alice, bob, enqueued, committed):
    experiment = make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL, trials=1)
    with committed():
        services.experiment_start(experiment, user=alice)
    with pytest.raises(services.ChangeError, match="not waiting for its change"):
        services.experiment_confirm(experiment, user=alice)

    with committed():
        finish_trial(active_trial(experiment.baseline))
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.AWAITING
    services.advance_all()  # waiting for a person: the watchdog changes nothing
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.AWAITING
    assert experiment.change.status == TuningChange.Status.PLANNED

    with committed():
        services.experiment_confirm(experiment, user=alice)

    experiment.refresh_from_db()
    change = experiment.change
    assert experiment.status == Experiment.Status.AFTER
    assert change.status == TuningChange.Status.APPLIED and change.hook_response is None
    assert experiment.after.runs.get().tuning_change == change
    with committed():
        finish_trial(active_trial(experiment.after))
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.DONE


def test_an_experiment_starts_once(plan, alice, enqueued, committed):
    experiment = make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL)
    with committed():
        services.experiment_start(experiment, user=alice)

    with pytest.raises(services.ChangeError, match="already started"):
        services.experiment_start(Experiment.objects.get(id=experiment.id), user=alice)

    assert TrialSet.objects.count() == 1 and Run.objects.count() == 1


def test_an_experiment_whose_change_is_already_applied_cannot_start(plan, alice, enqueued):
    experiment = make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL)
    services.change_apply(experiment.change, user=alice)

    with pytest.raises(services.ChangeError, match="already applied"):
        services.experiment_start(Experiment.objects.get(id=experiment.id), user=alice)

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.DRAFT
    assert not TrialSet.objects.exists()


def test_a_baseline_that_stops_stops_the_experiment_with_its_reason(plan, alice, enqueued, committed, hook_target):
    plan.environment.base_url = "http://192.0.2.10"
    plan.environment.save()
    experiment = make_experiment(plan, alice, hook_url=hook_target.url)
    with committed():
        services.experiment_start(experiment, user=alice)

    with committed():
        run_services.run_start(active_trial(experiment.baseline).id)

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.STOPPED
    assert experiment.error_message.startswith("The baseline trials stopped: Trial 1 (run #1) ended in error: Target")
    assert hook_target.requests == []
    assert experiment.change.status == TuningChange.Status.PLANNED


def test_stopping_an_experiment_cancels_its_trial(plan, alice, enqueued, committed):
    experiment = make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL)
    with committed():
        services.experiment_start(experiment, user=alice)
    trial = active_trial(experiment.baseline)

    with committed():
        services.experiment_stop(experiment)

    experiment.refresh_from_db()
    trial.refresh_from_db()
    assert experiment.status == Experiment.Status.STOPPED and experiment.error_message == "Stopped by a user."
    assert trial.status == Run.Status.CANCELLED
    assert experiment.baseline.status == TrialSet.Status.STOPPED
    assert experiment.change.status == TuningChange.Status.PLANNED


def test_an_experiment_by_hook_needs_a_hook_url(plan, alice):
    change = services.change_create(
        environment=plan.environment, user=alice, title="Index", edits=[{"key": "search.index", "value": "on"}]
    )

    with pytest.raises(services.ChangeError, match="needs a hook URL"):
        services.experiment_create(
            plan=plan, user=alice, title="x", trials=3, apply_mode=Experiment.ApplyMode.HOOK, change=change
        )


def test_an_experiment_changes_its_plans_environment_only(plan, alice, project):
    from portal.projects.models import Environment

    elsewhere = Environment.objects.create(project=project, name="Production", base_url="http://127.0.0.1:9")
    change = services.change_create(
        environment=elsewhere, user=alice, title="Index", edits=[{"key": "search.index", "value": "on"}]
    )

    with pytest.raises(services.ChangeError, match="plan's environment"):
        services.experiment_create(
            plan=plan, user=alice, title="x", trials=3, apply_mode=Experiment.ApplyMode.MANUAL, change=change
        )
    assert not Experiment.objects.exists()


def test_a_run_outside_any_trial_set_moves_nothing(plan, alice, enqueued, committed):
    experiment = make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL)
    run = run_services.run_create(plan=plan, user=alice)

    with committed():
        finish_trial(run)

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.DRAFT
    assert not TrialSet.objects.exists()


def test_a_trials_end_only_enqueues_its_sets_advance(plan, alice, enqueued, django_capture_on_commit_callbacks):
    """The signal comes from the shard that finalized the run: the next trial starts in a task, never there."""
    from celery.signals import before_task_publish

    from workers.tasks import trialset_advance_task

    published = []

    def record(sender=None, body=None, **kwargs):
        published.append((sender, list(body[0]) if body else None))

    with django_capture_on_commit_callbacks(execute=True):
        trial_set = services.trialset_start(plan=plan, size=2, user=alice)
    first = active_trial(trial_set)

    # when: the first trial ends, with no worker in this process (tasks are really sent to the broker)
    before_task_publish.connect(record, weak=False)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            finish_trial(first)
    finally:
        before_task_publish.disconnect(record)

    # then: the set's advance was sent as a task, and nothing advanced inside the finishing code
    assert ("workers.tasks.trialset_advance_task", [trial_set.id]) in published
    assert trial_set.runs.count() == 1
    # and: the task, as a worker runs it, starts the second trial
    with django_capture_on_commit_callbacks(execute=True):
        trialset_advance_task.run(trial_set.id)
    assert trial_set.runs.count() == 2 and enqueued[-1] == active_trial(trial_set).id


def test_a_change_applied_twice_keeps_one_place_in_the_ledger(plan, alice):
    # given: two callers hold the same planned change (the worker and the watchdog, say)
    change = services.change_create(
        environment=plan.environment, user=alice, title="Index", edits=[{"key": "search.index", "value": "on"}]
    )
    stale = TuningChange.objects.get(id=change.id)

    # when: both apply it
    services.change_apply(change, user=alice)
    services.change_apply(stale, user=alice)

    # then: it is change #1, from off to on, once
    change.refresh_from_db()
    assert change.number == 1
    assert change.diff == [{"key": "search.index", "before": "off", "after": "on"}]
    assert change.config_before == [{"key": "search.index", "value": "off"}]


def test_the_watchdog_does_not_send_a_hook_again_while_it_is_being_sent(plan, alice, enqueued, committed, hook_target):
    # given: an experiment whose hook another process is sending right now (it moved it to applying)
    experiment = make_experiment(plan, alice, hook_url=hook_target.url, trials=1)
    with committed():
        services.experiment_start(experiment, user=alice)
    baseline = experiment.baseline
    Run.objects.filter(trial_set=baseline).update(status=Run.Status.PASSED)
    TrialSet.objects.filter(id=baseline.id).update(status=TrialSet.Status.DONE)
    Experiment.objects.filter(id=experiment.id).update(status=Experiment.Status.APPLYING, updated_at=timezone.now())

    # when: the watchdog comes by
    services.advance_all()

    # then: it leaves the hook to that process
    assert hook_target.requests == []
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.APPLYING

    # when: that process died, and a hook's time has passed
    Experiment.objects.filter(id=experiment.id).update(
        updated_at=timezone.now() - services.HOOK_LEASE - timedelta(seconds=1)
    )
    with committed():
        services.advance_all()

    # then: the watchdog sends it, once
    assert len(hook_target.requests) == 1
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.AFTER
