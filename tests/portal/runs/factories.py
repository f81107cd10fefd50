"""Runs and interval rows with known contents, for testing the analysis without running load."""

from django.utils import timezone

from portal.runs.models import PageInterval, Run, ShardInterval
from workers.engine.histogram import Histogram


def hist_of(*values_ms: float) -> dict:
    h = Histogram()
    for v in values_ms:
        h.record(int(v * 1000))
    return h.to_dict()


def add_second(run, second, *, shard_no=0, users=10, iterations=0, labels=None, lag_ms=None, cpu=None):
    """labels: {label: (latencies_ms list, errors dict)}"""
    ShardInterval.objects.create(
        run=run,
        shard_no=shard_no,
        second=second,
        active_users=users,
        iterations_completed=iterations,
        loop_lag_p99_ms=lag_ms,
        cpu_pct=cpu,
    )
    for label, (latencies, errors) in (labels or {}).items():
        n_err = sum(errors.values())
        PageInterval.objects.create(
            run=run,
            shard_no=shard_no,
            second=second,
            label=label,
            pages=len(latencies) + n_err,
            hits=len(latencies) + n_err,
            errors=n_err,
            errors_by_kind=errors,
            error_samples={k: f"sample {k}" for k in errors},
            bytes_in=1000 * len(latencies),
            hist=hist_of(*latencies),
        )


def plan_run(plan, **fields) -> Run:
    """A run of ``plan`` (its project, environment and names; its snapshot; started now) saved with
    ``fields`` over those defaults. Callers add its rows and summary."""
    defaults = {
        "project": plan.project,
        "number": Run.objects.filter(project=plan.project).count() + 1,
        "plan": plan,
        "environment": plan.environment,
        "plan_name": plan.name,
        "environment_name": plan.environment.name,
        "plan_snapshot": plan.to_engine_dict(),
        "start_at": timezone.now(),
    }
    return Run.objects.create(**{**defaults, **fields})


def project_run(project, **fields) -> Run:
    """A run in ``project`` of no plan (as when its plan was deleted, or in another team's project, where only
    scoping is tested), numbered next in the project, saved with ``fields`` over those defaults."""
    defaults = {
        "project": project,
        "number": Run.objects.filter(project=project).count() + 1,
        "plan_name": "Theirs",
        "environment_name": "E",
        "plan_snapshot": {},
    }
    return Run.objects.create(**{**defaults, **fields})
