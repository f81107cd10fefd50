"""What the comparison's picker offers, its links, and an experiment's report.

Moved out of ``comparison.py`` (issue 27), which re-exports its names.
"""

from __future__ import annotations

from django.db.models import Count
from django.urls import reverse
from django.utils import timezone

from portal.runs.models import Run

from .comparison import Report, compare_sides, side_for_trialset
from .models import TrialSet

PICKER_LIMIT = 200
"""At most this many runs (and as many trial sets) in the picker, newest first."""


# --------------------------------------------------------------------------------------
# What the picker offers
# --------------------------------------------------------------------------------------


def run_choice_label(run: Run) -> str:
    """ "Run #12 · Smoke · passed · 2026-11-22 10:00" """
    when = timezone.localtime(run.created_at).strftime("%Y-%m-%d %H:%M")
    return f"Run #{run.number} · {run.plan_name} · {run.status} · {when}"


def trialset_choice_label(trial_set: TrialSet, n: int) -> str:
    """ "Trial set: Baseline: Add index (3 runs) · 2026-11-22 10:00" """
    when = timezone.localtime(trial_set.created_at).strftime("%Y-%m-%d %H:%M")
    return f"Trial set: {trial_set} ({n} run{'' if n == 1 else 's'}) · {when}"


def compare_choices(project) -> dict[str, list[tuple[str, str]]]:
    """The project's finished runs and trial sets that can be compared, newest first: {runs, trial_sets}."""
    runs = project.runs.filter(status__in=Run.FINISHED).order_by("-number")[:PICKER_LIMIT]
    trial_sets = (
        project.trial_sets.exclude(status=TrialSet.Status.RUNNING)
        .annotate(n=Count("runs"))
        .filter(n__gt=0)
        .order_by("-created_at", "-id")[:PICKER_LIMIT]
    )
    return {
        "runs": [(str(r.code), run_choice_label(r)) for r in runs],
        "trial_sets": [(str(t.code), trialset_choice_label(t, t.n)) for t in trial_sets],
    }


def compare_url(project, a, b=None) -> str:
    url = reverse("history:compare", args=[project.code]) + f"?a={a}"
    return url + f"&b={b}" if b else url


def experiment_report(experiment) -> Report | None:
    """Baseline against after, once the experiment is done or both sides have a run that counts.

    Showing it before the end lets people see the trend as trials come in; the
    comparison itself says how many runs each side has.
    """
    baseline, after = experiment.baseline, experiment.after
    if baseline is None or after is None:
        return None
    ready = experiment.status == type(experiment).Status.DONE or (
        any(run.counts for run in baseline.runs.all()) and any(run.counts for run in after.runs.all())
    )
    if not ready:
        return None
    return compare_sides(side_for_trialset(baseline), side_for_trialset(after), title=experiment.change.title)
