"""A real beat and a real worker: a schedule whose fire just came due starts a real run on the demo target."""

import subprocess
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.projects.models import Environment, MixEntry, Plan, Step, TestCase
from portal.runs.models import Run
from portal.schedules.models import Schedule, ScheduleFire
from portal.schedules.services import schedule_save
from tests.processes import PYTHON, ROOT, stop, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def beat(worker_env, tmp_path):
    """``celery -A workers.celery beat``, as in production, with its state file in a temporary directory."""
    log_path = tmp_path / "beat.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "workers.celery", "beat", "-s", str(tmp_path / "beat-schedule"),
             "--pidfile=", "--loglevel", "INFO"],
            cwd=ROOT, env=worker_env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        yield log_path
        stop(proc)


@pytest.fixture
def quick_plan(project, demo_target):
    env = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)
    home = TestCase.objects.create(project=project, name="Home")
    Step.objects.create(test_case=home, position=0, name="Home", path="/", think_time=0.2, text_present="Plimsoll")
    plan = Plan.objects.create(project=project, environment=env, name="Nightly", users=4, ramp_up=1, hold=3)
    MixEntry.objects.create(plan=plan, test_case=home, weight=1, position=0)
    return plan


def test_beat_starts_the_scheduled_run(quick_plan, project, celery_worker, beat):
    # given: a daily schedule whose fire time is this very minute (so it fires once), not handled yet
    boundary = timezone.now().replace(second=0, microsecond=0)
    schedule = schedule_save(
        project=project, plan=quick_plan, kind="daily", at_time=boundary.time(), every_hours=None, cron="",
        time_zone="UTC", enabled=True, ends_on=None, busy_wait_minutes=30, catch_up_hours=2,
    )  # fmt: skip
    Schedule.objects.filter(id=schedule.id).update(last_due_at=boundary - timedelta(seconds=1))

    # when: the real beat ticks and the real worker takes the tick
    fire = wait_until(
        lambda: ScheduleFire.objects.filter(schedule=schedule, due_at=boundary, outcome="started").first(),
        timeout=60,
        what="the beat to start the scheduled run",
    )

    # then: the fire started one real run of the plan, which ran against the demo target and ended
    run = fire.run
    wait_until(lambda: Run.objects.get(id=run.id).status in Run.FINISHED, timeout=90, what=f"run #{run.number} to end")
    run.refresh_from_db()
    assert run.status == "finished", run.error_message
    assert run.plan == quick_plan and run.created_by is None and run.schedule_fire == fire
    assert run.summary["whole_run"]["pages"] > 0
    # One fire, one run, however many ticks went by meanwhile.
    assert ScheduleFire.objects.filter(schedule=schedule, due_at=boundary).count() == 1
    assert Run.objects.filter(plan=quick_plan).count() == 1
