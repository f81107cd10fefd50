"""Tuning changes, trial sets and experiments: the steps of the results history.

Like the run lifecycle, every step looks at the database and does the next thing, with
conditional UPDATEs on the expected status, so it is safe to call any number of times:
a run's end calls it (``on_run_finished``), and so does the watchdog every few seconds
(``advance_all``), which also picks up what a lost message or a restart left behind.
"""

import logging
import time
from datetime import timedelta
from http import HTTPStatus

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from portal import outbound
from portal.common import task
from portal.projects import drift
from portal.projects.models import Environment, Plan
from portal.runs.models import Run
from portal.runs.services import EnvironmentBusy, RunError, active_run_on, run_cancel, run_create

from .models import MAX_TRIALS, Experiment, ExternalMeasurement, TrialSet, TuningChange, apply_edits

log = logging.getLogger(__name__)

HOOK_TIMEOUT_S = 60
HOOK_BODY_KEPT = 2000
# An experiment applying its change belongs to one caller for this long (its hook call and
# a margin): the watchdog, calling every few seconds, must not send the hook a second time.
HOOK_LEASE = timedelta(seconds=HOOK_TIMEOUT_S + 15)


class ChangeError(Exception):
    """A tuning change cannot be applied; the message is for the user."""


class EnvironmentBusyForChange(ChangeError):
    """A run is on the environment; the change can be applied once it has ended."""


# --------------------------------------------------------------------------------------
# Tuning changes
# --------------------------------------------------------------------------------------


def call_hook(change: TuningChange) -> dict:
    """Sends the change's hook request and returns what happened, for the record.

    Through ``portal.outbound``: only to an allowed target, connected to the address that
    was checked, no redirect followed, bounded by HOOK_TIMEOUT_S. Never raises: an error
    is recorded.
    """
    at = timezone.now().isoformat()
    data = change.hook_body.encode() if change.hook_body and change.hook_method != "GET" else None
    headers = {"User-Agent": "Plimsoll tuning-change hook"}
    if data is not None and change.hook_content_type:
        headers["Content-Type"] = change.hook_content_type
    started = time.perf_counter()
    try:
        response = outbound.request(
            change.hook_method, change.hook_url, body=data, headers=headers, timeout=HOOK_TIMEOUT_S
        )
    except outbound.OutboundRefused as exc:
        return {"error": f"Hook refused, no request was sent: {exc}", "at": at}
    except outbound.OutboundFailed as exc:
        return {
            "error": f"The hook request failed: {exc}",
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
            "at": at,
        }
    reason = HTTPStatus(response.status).phrase if response.status in HTTPStatus._value2member_map_ else ""
    result = {
        "status": response.status,
        "reason": reason,
        "body": response.body[:HOOK_BODY_KEPT].decode("utf-8", "replace"),
        "elapsed_ms": round(response.elapsed_s * 1000, 1),
        "address": response.address,
        "at": at,
    }
    if response.status >= 300:
        result["error"] = f"The hook answered {response.status} {reason}".rstrip()
    return result


def change_create(*, environment: Environment, user, edits: list[dict], **fields) -> TuningChange:
    """A planned change; ``fields`` are the model's (category, title, reason, reference, hook_*).

    A *control* is the one change that changes nothing: it has no edits and no hook.
    """
    if fields.get("category") == TuningChange.Category.BASELINE:
        raise ChangeError("A baseline is accepted on the regressed run's page (or its API), not written as a change.")
    if fields.get("category") == TuningChange.Category.CONTROL:
        if edits:
            raise ChangeError(
                "A control changes nothing: leave the configuration as it is, or choose another category."
            )
        if fields.get("hook_url"):
            raise ChangeError("A control changes nothing, so it has no hook to send: remove the hook URL.")
    elif not edits:
        raise ChangeError("The change changes no key: edit at least one value, add a key or remove one.")
    return TuningChange.objects.create(environment=environment, made_by=user, edits=edits, **fields)


def change_apply(change: TuningChange, *, user=None, call_hook_first: bool = True) -> TuningChange:
    """Applies a planned change: its hook (if any), then the environment's new configuration.

    Refused while a run is on the environment (its figures would straddle two
    configurations). A hook that fails leaves the configuration as it was and the
    change *failed*, with the hook's answer recorded; it can be applied again.
    """
    if change.status == TuningChange.Status.APPLIED:
        return change
    if busy := active_run_on(change.environment_id):
        raise EnvironmentBusyForChange(
            f"Run #{busy.number} is on this environment now; apply the change when it has ended, "
            "so that no run measures two configurations."
        )
    if change.has_hook and call_hook_first:
        result = call_hook(change)
        change.hook_response = result
        if result.get("error"):
            change.status = TuningChange.Status.FAILED
            change.error_message = result["error"]
            change.save(update_fields=["hook_response", "status", "error_message", "updated_at"])
            raise ChangeError(f"The change was not applied: {result['error']}.")
    with transaction.atomic():
        environment = Environment.objects.select_for_update().get(pk=change.environment_id)
        # Another caller may have applied it meanwhile (``change`` is then stale): applying
        # it again would renumber it and record the new configuration as its "before".
        if TuningChange.objects.filter(pk=change.pk, status=TuningChange.Status.APPLIED).exists():
            change.refresh_from_db()
            return change
        before = list(environment.configuration)
        after = apply_edits(before, change.edits)
        number = (environment.changes.aggregate(n=Max("number"))["n"] or 0) + 1
        change.config_before, change.config_after = before, after
        change.number = number
        change.status = TuningChange.Status.APPLIED
        change.applied_at = timezone.now()
        change.error_message = ""
        if user is not None and change.made_by_id is None:
            change.made_by = user
        change.save()
        if not change.touches_nothing:  # a control takes its place in the ledger and touches nothing else
            environment.configuration = after
            environment.save(update_fields=["configuration", "updated_at"])
        change_id = change.id
        transaction.on_commit(lambda: _enqueue_change_notification(change_id))
    if environment.config_url and change.category != TuningChange.Category.BASELINE:
        verify_applied(change, environment)
    return change


def verify_applied(change: TuningChange, environment: Environment) -> None:
    """Reads the target's own configuration after the change and records how it compares with the ledger.

    Where the target reports it (``Environment.config_url``, as the demo's ``/_demo/config``): a hook
    that answered 200 but changed nothing, a person who recorded a change without making it, or a
    target restarted with its settings reset, shows as drift on the change instead of going unseen.
    The change stays applied either way: the ledger says what was decided, this says what the target said.
    """
    try:
        result = drift.configuration_drift(environment)
    except Exception:  # the change is applied and committed: a bug here must not turn that into an error
        log.exception("change %s: could not verify the target's configuration", change.code)
        return
    change.verification = result.record(timezone.now())
    change.save(update_fields=["verification", "updated_at"])
    if result.drifted:
        log.warning(
            "change %s: the target differs from the ledger on %s",
            change.code,
            ", ".join(d["key"] for d in result.drifted),
        )


def _enqueue_change_notification(change_id: int) -> None:
    """The channels that want it hear of the change (a Grafana channel marks it on the dashboards)."""
    try:
        task("change_notify_task").delay(change_id)
    except Exception:  # the broker is down: the ledger still has the change
        log.exception("change %s: could not enqueue its notification", change_id)


def change_in_effect(environment: Environment, at) -> TuningChange | None:
    """The environment's last change applied at or before ``at`` (None: the initial configuration)."""
    return environment.change_in_effect(at)


def measurement_record(*, environment: Environment, user, **fields) -> ExternalMeasurement:
    """Records an external measurement; without a change given, it belongs to the one in effect then."""
    measurement = ExternalMeasurement(environment=environment, created_by=user, **fields)
    if measurement.tuning_change_id is None:
        # Measured alongside a run: the run's configuration (None is the initial one); else the one then.
        if measurement.run_id is not None:
            measurement.tuning_change = measurement.run.tuning_change
        else:
            measurement.tuning_change = change_in_effect(environment, measurement.measured_at)
    measurement.save()
    return measurement


def measurement_delete(*, measurement: ExternalMeasurement) -> None:
    """Deletes a measurement recorded by mistake; the environment's other history stays."""
    measurement.delete()


class RunNotFinished(Exception):
    """A run still running cannot be judged, so it cannot be included nor left out yet."""


def run_include(*, run, include: bool | None = None):
    """Counts a doubtful run in trends, baselines and verdicts anyway (``include``), or leaves it out again.

    ``include=None`` flips the choice. The run's doubts stay on its report either way.
    """
    if run.is_active:
        raise RunNotFinished("The run has not finished: its figures cannot be judged yet.")
    run.include_anyway = (not run.include_anyway) if include is None else include
    run.save(update_fields=["include_anyway", "updated_at"])
    return run


# --------------------------------------------------------------------------------------
# Trial sets
# --------------------------------------------------------------------------------------


def trialset_start(
    *, plan: Plan, size: int, user, label: str = "", experiment: Experiment | None = None, role: str = "", token=None
) -> TrialSet:
    """Creates a trial set and starts its first trial (or waits for the environment to be free)."""
    if problems := plan.problems():
        raise RunError(" ".join(problems))
    trial_set = TrialSet.objects.create(
        project=plan.project,
        environment=plan.environment,
        plan=plan,
        plan_name=plan.name,
        size=size,
        label=label,
        created_by=user,
        experiment=experiment,
        role=role,
        api_token=token,
    )
    transaction.on_commit(lambda: trialset_advance(trial_set.id))
    return trial_set


class TrialSetRefused(ValueError):
    """These runs cannot be one trial set; the message says why."""


@transaction.atomic
def trialset_from_runs(*, runs: list[Run], user, label: str = "") -> TrialSet:
    """A finished trial set made of runs that already exist: imported ones, or native ones (issue 18).

    A trial set is N runs of one plan on one configuration, so the runs must be finished, of one
    environment, under one configuration (the same tuning change in effect) and in no other trial
    set; if they all stand for the same plan, the set is that plan's. It is *done* at once: it
    compares, joins experiments' sides and the ledger like a set whose trials Plimsoll ran.
    """
    runs = sorted(runs, key=lambda run: (run.start_at or run.created_at, run.number))
    if len(runs) < 2:
        raise TrialSetRefused("Pick at least two runs: a trial set measures the spread between its trials.")
    if len(runs) > MAX_TRIALS:
        raise TrialSetRefused(f"A trial set holds at most {MAX_TRIALS} runs.")
    if any(run.is_active for run in runs):
        raise TrialSetRefused("Every run must have finished.")
    if len({run.environment_id for run in runs}) > 1 or runs[0].environment_id is None:
        raise TrialSetRefused("The runs must all be of one environment.")
    if len({run.tuning_change_id for run in runs}) > 1:
        raise TrialSetRefused(
            "The runs were measured under different configurations (a tuning change came between them): "
            "a trial set is N runs on one configuration."
        )
    locked = list(Run.objects.select_for_update().filter(id__in=[run.id for run in runs]))
    taken = sorted(f"#{run.number}" for run in locked if run.trial_set_id is not None)
    if taken:
        raise TrialSetRefused(f"Already in a trial set: {', '.join(taken)}.")
    plans = {run.plan_id for run in runs}
    plan = runs[0].plan if len(plans) == 1 else None
    tools = sorted({(run.source or {}).get("tool", "") for run in runs if run.kind == Run.Kind.IMPORTED})
    default_name = f"Imported {' and '.join(filter(None, tools))} runs" if tools else "Runs"
    trial_set = TrialSet.objects.create(
        project=runs[0].project,
        environment=runs[0].environment,
        plan=plan,
        plan_name=(plan.name if plan is not None else label or default_name)[:100],
        size=len(runs),
        label=label[:200],
        created_by=user,
        status=TrialSet.Status.DONE,
        finished_at=timezone.now(),
    )
    Run.objects.filter(id__in=[run.id for run in runs]).update(trial_set=trial_set)
    return trial_set


def _trialset_end(trial_set_id: int, status: str, message: str = "") -> bool:
    ended = TrialSet.objects.filter(id=trial_set_id, status=TrialSet.Status.RUNNING).update(
        status=status, error_message=message, finished_at=timezone.now()
    )
    if ended:
        experiment_id = TrialSet.objects.filter(id=trial_set_id).values_list("experiment_id", flat=True).first()
        if experiment_id:
            transaction.on_commit(lambda: experiment_advance(experiment_id))
    return bool(ended)


def trialset_advance(trial_set_id: int) -> None:
    """Starts the next trial when the previous one has ended, or ends the set."""
    trial_set = TrialSet.objects.select_related("plan__project", "plan__environment", "created_by", "api_token").filter(
        id=trial_set_id
    )
    trial_set = trial_set.first()
    if trial_set is None or trial_set.status != TrialSet.Status.RUNNING:
        return
    runs = list(trial_set.runs.order_by("id"))
    if any(run.is_active for run in runs):
        return
    if runs:
        last = runs[-1]
        if last.status == Run.Status.ERROR:
            first_line = (last.error_message or "no reason was recorded").splitlines()[0]
            _trialset_end(
                trial_set.id,
                TrialSet.Status.STOPPED,
                f"Trial {len(runs)} (run #{last.number}) ended in error: {first_line}",
            )
            return
        if last.status == Run.Status.CANCELLED:
            _trialset_end(trial_set.id, TrialSet.Status.STOPPED, f"Trial {len(runs)} (run #{last.number}) was stopped.")
            return
        if last.status == Run.Status.STOPPED:
            # The target broke: more trials would hammer it the same way.
            _trialset_end(
                trial_set.id,
                TrialSet.Status.STOPPED,
                f"Trial {len(runs)} (run #{last.number}) was stopped by its criteria: {last.stop_sentence}.",
            )
            return
    if len(runs) >= trial_set.size:
        _trialset_end(trial_set.id, TrialSet.Status.DONE)
        return
    if trial_set.plan is None:
        _trialset_end(trial_set.id, TrialSet.Status.STOPPED, "The plan was deleted.")
        return
    try:
        run_create(plan=trial_set.plan, user=trial_set.created_by, trial_set=trial_set, token=trial_set.api_token)
    except EnvironmentBusy:
        return  # another run holds the environment: the next call (its end, or the watchdog) tries again
    except RunError as exc:
        _trialset_end(trial_set.id, TrialSet.Status.STOPPED, f"Trial {len(runs) + 1} could not start: {exc}")


def trialset_stop(trial_set: TrialSet) -> None:
    """Stops a trial set: its running trial is cancelled, no further trial starts."""
    if _trialset_end(trial_set.id, TrialSet.Status.STOPPED, "Stopped by a user."):
        for run in trial_set.runs.filter(status__in=Run.ACTIVE):
            run_cancel(run=run)


# --------------------------------------------------------------------------------------
# Experiments
# --------------------------------------------------------------------------------------


def experiment_create(
    *, plan: Plan, user, title: str, trials: int, apply_mode: str, change: TuningChange, description: str = ""
) -> Experiment:
    if apply_mode == Experiment.ApplyMode.HOOK and not change.has_hook and not change.is_control:
        raise ChangeError("An experiment that applies its change by hook needs a hook URL on the change.")
    if change.environment_id != plan.environment_id:
        raise ChangeError("The change must be on the plan's environment.")
    return Experiment.objects.create(
        project=plan.project,
        environment=plan.environment,
        plan=plan,
        title=title,
        description=description,
        trials=trials,
        apply_mode=apply_mode,
        change=change,
        created_by=user,
    )


def experiment_start(experiment: Experiment, *, user) -> Experiment:
    """Starts the baseline trials of a ready experiment."""
    if experiment.change.status == TuningChange.Status.APPLIED:
        raise ChangeError("Its change is already applied, so there is no baseline to measure: plan a new experiment.")
    if problems := experiment.plan.problems():
        raise RunError(" ".join(problems))
    with transaction.atomic():
        if not Experiment.objects.filter(id=experiment.id, status=Experiment.Status.DRAFT).update(
            status=Experiment.Status.BASELINE, started_at=timezone.now()
        ):
            raise ChangeError("This experiment has already started.")
        trialset_start(
            plan=experiment.plan,
            size=experiment.trials,
            user=user,
            label=f"Baseline: {experiment.title}",
            experiment=experiment,
            role=TrialSet.Role.BASELINE,
        )
    experiment.refresh_from_db()
    return experiment


def _experiment_end(
    experiment_id: int, status: str, message: str = "", *, from_statuses=Experiment.ACTIVE, notify: bool = True
) -> bool:
    """Ends an experiment once (a conditional UPDATE); the call that ends it enqueues the notification.

    A person's stop is not notified (``notify=False``): they know; an end on its own (its
    last trial finished, a change that failed, trials stopped) is the "experiment finished" event.
    """
    ended = bool(
        Experiment.objects.filter(id=experiment_id, status__in=from_statuses).update(
            status=status, error_message=message, finished_at=timezone.now()
        )
    )
    if ended and notify:
        transaction.on_commit(lambda: _enqueue_experiment_notification(experiment_id))
    return ended


def _enqueue_experiment_notification(experiment_id: int) -> None:
    try:
        task("experiment_notify_task").delay(experiment_id)
    except Exception:  # the broker is down: the experiment's page still says it ended
        log.exception("experiment %s: could not enqueue its notification", experiment_id)


def _start_after(experiment: Experiment) -> None:
    trialset_start(
        plan=experiment.plan,
        size=experiment.trials,
        user=experiment.created_by,
        label=f"After: {experiment.change.title}",
        experiment=experiment,
        role=TrialSet.Role.AFTER,
    )


def experiment_advance(experiment_id: int) -> None:
    """Takes the experiment's next step once the current one is over."""
    experiment = Experiment.objects.select_related("plan", "change", "created_by").filter(id=experiment_id).first()
    if experiment is None or not experiment.is_active:
        return
    status = experiment.status
    if status == Experiment.Status.BASELINE:
        baseline = experiment.baseline
        if baseline is None or baseline.is_active:
            return
        if baseline.status == TrialSet.Status.STOPPED:
            _experiment_end(
                experiment.id, Experiment.Status.STOPPED, f"The baseline trials stopped: {baseline.error_message}"
            )
            return
        # A control has nothing for a person to do: it is recorded at once, whatever the mode.
        if experiment.apply_mode == Experiment.ApplyMode.MANUAL and not experiment.change.is_control:
            Experiment.objects.filter(id=experiment.id, status=status).update(status=Experiment.Status.AWAITING)
            return
        # Moving it to applying claims the hook call (updated_at starts the lease).
        if not Experiment.objects.filter(id=experiment.id, status=status).update(
            status=Experiment.Status.APPLYING, updated_at=timezone.now()
        ):
            return
        status = Experiment.Status.APPLYING
    elif status == Experiment.Status.APPLYING:
        # Another call holds the lease while it sends the hook; once a hook's time has
        # passed, that call has ended or its process died, and this one takes over.
        now = timezone.now()
        if not Experiment.objects.filter(id=experiment.id, status=status, updated_at__lt=now - HOOK_LEASE).update(
            updated_at=now
        ):
            return
    if status == Experiment.Status.APPLYING:
        try:
            change_apply(experiment.change, user=experiment.created_by)
        except EnvironmentBusyForChange:
            # No hook was sent: release the lease, so that the watchdog's next call tries again.
            Experiment.objects.filter(id=experiment.id, status=status).update(
                updated_at=timezone.now() - HOOK_LEASE - timedelta(seconds=1)
            )
            return
        except ChangeError as exc:
            _experiment_end(experiment.id, Experiment.Status.FAILED, str(exc))
            return
        with transaction.atomic():
            if Experiment.objects.filter(id=experiment.id, status=Experiment.Status.APPLYING).update(
                status=Experiment.Status.AFTER
            ):
                _start_after(experiment)
        return
    if status == Experiment.Status.AFTER:
        after = experiment.after
        if after is None or after.is_active:
            return
        if after.status == TrialSet.Status.STOPPED:
            _experiment_end(
                experiment.id, Experiment.Status.STOPPED, f"The trials after the change stopped: {after.error_message}"
            )
            return
        _experiment_end(experiment.id, Experiment.Status.DONE)


def experiment_confirm(experiment: Experiment, *, user) -> Experiment:
    """A person says the change has been made (manual mode): record it and start the trials after."""
    if experiment.status != Experiment.Status.AWAITING:
        raise ChangeError("This experiment is not waiting for its change.")
    change_apply(experiment.change, user=user, call_hook_first=False)
    with transaction.atomic():
        if Experiment.objects.filter(id=experiment.id, status=Experiment.Status.AWAITING).update(
            status=Experiment.Status.AFTER
        ):
            _start_after(experiment)
    experiment.refresh_from_db()
    return experiment


def experiment_stop(experiment: Experiment) -> None:
    if _experiment_end(
        experiment.id,
        Experiment.Status.STOPPED,
        "Stopped by a user.",
        from_statuses=[*Experiment.ACTIVE],
        notify=False,
    ):
        for trial_set in experiment.trial_sets.filter(status=TrialSet.Status.RUNNING):
            trialset_stop(trial_set)


# --------------------------------------------------------------------------------------
# Following runs
# --------------------------------------------------------------------------------------


def on_run_finished(sender, run_id: int, **kwargs) -> None:
    """A run ended: if it is a trial, its set advances in a task on the bookkeeping (default) queue.

    Never here: the signal is sent by the shard (or the watchdog) that finalized the run, and
    advancing may start the next trial and step an experiment, whose change may call a hook for
    up to a minute. A lost message is caught up by the watchdog (``advance_all``).
    """
    trial_set_id = Run.objects.filter(id=run_id).values_list("trial_set_id", flat=True).first()
    if not trial_set_id:
        return
    try:
        task("trialset_advance_task").delay(trial_set_id)
    except Exception:  # a broker hiccup must not break the run's own ending; the watchdog advances it
        log.exception("trial set %s: could not enqueue its advance after run %s", trial_set_id, run_id)


def advance_all() -> None:
    """Advances every running trial set and active experiment (the watchdog's safety net)."""
    for trial_set_id in TrialSet.objects.filter(status=TrialSet.Status.RUNNING).values_list("id", flat=True):
        try:
            trialset_advance(trial_set_id)
        except Exception:
            log.exception("trial set %s: could not advance", trial_set_id)
    for experiment_id in Experiment.objects.filter(status__in=Experiment.ACTIVE).values_list("id", flat=True):
        try:
            experiment_advance(experiment_id)
        except Exception:
            log.exception("experiment %s: could not advance", experiment_id)
