"""The TFS story as rows: 3 baseline trials at ~40 ms, an index, 3 trials after at ~9 ms, as an experiment."""

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.history.models import Experiment, TrialSet, TuningChange
from tests.portal.history.test_comparison import make_run

INDEX_OFF = [{"key": "search.index", "value": "off"}, {"key": "tempdb.files", "value": "1"}]
INDEX_ON = [{"key": "search.index", "value": "on"}, {"key": "tempdb.files", "value": "1"}]


def _trials(plan, apds, *, role, experiment, change=None, config):
    trial_set = TrialSet.objects.create(
        project=plan.project,
        environment=plan.environment,
        plan=plan,
        plan_name=plan.name,
        label=f"{role} trials",
        size=len(apds),
        status=TrialSet.Status.DONE,
        role=role,
        experiment=experiment,
    )
    runs = [make_run(plan, apd, trial_set=trial_set, tuning_change=change) for apd in apds]
    for run in runs:
        run.config_snapshot = config
        run.save(update_fields=["config_snapshot"])
    return trial_set, runs


@pytest.fixture
def story(plan, alice):
    env = plan.environment
    env.configuration = INDEX_OFF
    env.save()
    change = TuningChange.objects.create(
        environment=env,
        number=1,
        title="Add index ix_work_items_area",
        category=TuningChange.Category.INDEX,
        edits=[{"key": "search.index", "value": "on"}],
        status=TuningChange.Status.APPLIED,
        applied_at=timezone.now() - timedelta(minutes=30),
        config_before=INDEX_OFF,
        config_after=INDEX_ON,
        made_by=alice,
    )
    experiment = Experiment.objects.create(
        project=plan.project,
        environment=env,
        plan=plan,
        title="Index on work_items.area",
        trials=3,
        change=change,
        status=Experiment.Status.DONE,
        created_by=alice,
    )
    baseline, before = _trials(plan, (40, 42, 38), role="baseline", experiment=experiment, config=INDEX_OFF)
    # applied between the baseline and the trials after, as the experiment does it
    change.applied_at = timezone.now()
    change.save(update_fields=["applied_at"])
    after_set, after = _trials(plan, (9, 9.5, 8.7), role="after", experiment=experiment, change=change, config=INDEX_ON)
    return {
        "experiment": experiment,
        "change": change,
        "baseline": baseline,
        "after_set": after_set,
        "before": before,
        "after": after,
    }
