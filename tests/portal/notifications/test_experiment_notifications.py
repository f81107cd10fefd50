"""The "experiment finished" event: fired when the last trial's set ends, through real receivers.

The experiment is the TFS story (3 trials at ~40 ms, an index, 3 trials at ~9 ms). Its last
step is taken by the real ``experiment_advance``; the notification and the delivery run as
Celery tasks in this process (eager), sending to a real SMTP server and a real HTTP server
on loopback.
"""

import hmac
import json

import pytest

from portal.history.models import Experiment
from portal.history.services import experiment_advance, experiment_stop
from portal.notifications import services
from portal.notifications.models import Delivery

from .addresses import confirm_addresses

pytestmark = pytest.mark.django_db


@pytest.fixture
def eager():
    from workers.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@pytest.fixture
def last_trials_running(story):
    """The experiment in its last step: the trials after the change have just all finished."""
    experiment = story["experiment"]
    Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.AFTER, finished_at=None)
    return experiment


def test_the_last_trial_notifies_a_webhook_with_the_verdict(
    last_trials_running, receiver, eager, django_capture_on_commit_callbacks
):
    # given: a webhook that wants experiments, and one that does not
    hook, other = receiver(200), receiver(200)
    channel = services.channel_create(
        project=last_trials_running.project, name="CI", kind="webhook", events=["experiment_finished"], url=hook.url
    )
    services.channel_create(
        project=last_trials_running.project, name="Runs", kind="webhook", events=["run_finished"], url=other.url
    )

    # when: the experiment takes its last step (twice: the watchdog and the run's end both call it)
    with django_capture_on_commit_callbacks(execute=True):
        experiment_advance(last_trials_running.id)
        experiment_advance(last_trials_running.id)

    # then: one signed POST with the comparison's headline and verdicts, nothing for the other channel
    last_trials_running.refresh_from_db()
    assert last_trials_running.status == "done"
    assert len(hook.requests) == 1 and other.requests == []
    headers, body = hook.requests[0]
    assert headers["X-Plimsoll-Signature"] == "sha256=" + hmac.new(channel.secret.encode(), body, "sha256").hexdigest()
    assert headers["X-Plimsoll-Event"] == "experiment_finished"
    payload = json.loads(body)
    assert payload["event"] == "experiment_finished"
    assert "faster" in payload["headline"] and "Add index ix_work_items_area" in payload["headline"]
    experiment = payload["experiment"]
    assert (experiment["title"], experiment["status"], experiment["verdict"]) == (
        "Index on work_items.area", "done", "better",
    )  # fmt: skip
    apd = next(k for k in experiment["kpis"] if k["figure"] == "APD")
    assert apd["verdict"] == "better" and apd["before"].startswith("40") and apd["after"].startswith("9")
    assert experiment["url"].endswith(f"/experiments/{last_trials_running.code}/")
    assert Delivery.objects.get(channel=channel).status == "sent"


def test_the_mail_says_what_the_experiment_found(last_trials_running, smtp, eager, django_capture_on_commit_callbacks):
    services.channel_create(
        project=last_trials_running.project,
        name="Team",
        kind="email",
        events=["experiment_finished"],
        emails="dba@x.test",
    )
    confirm_addresses(last_trials_running.project.team, "dba@x.test")

    with django_capture_on_commit_callbacks(execute=True):
        experiment_advance(last_trials_running.id)

    ((rcpt, mail),) = smtp
    assert rcpt == ["dba@x.test"]
    assert "faster" in mail["Subject"]
    text = mail.get_body(("plain",)).get_content()
    html = mail.get_body(("html",)).get_content()
    assert "Experiment “Index on work_items.area”: done · change “Add index ix_work_items_area”" in text
    assert "APD: 40" in text and "— better" in text
    assert f"/experiments/{last_trials_running.code}/" in text
    assert '<th align="right">Before the change</th>' in html


def test_slack_gets_the_headline_and_the_experiments_link(
    last_trials_running, receiver, eager, django_capture_on_commit_callbacks
):
    hook = receiver(200)
    services.channel_create(
        project=last_trials_running.project, name="Slack", kind="webhook", events=["experiment_finished"],
        url=hook.url, payload_format="slack",
    )  # fmt: skip

    with django_capture_on_commit_callbacks(execute=True):
        experiment_advance(last_trials_running.id)

    slack = json.loads(hook.requests[0][1])
    assert "faster" in slack["text"]
    assert f"/experiments/{last_trials_running.code}/|Open in Plimsoll>" in slack["text"]


def test_a_persons_stop_is_not_notified_but_a_failure_is(
    last_trials_running, receiver, eager, django_capture_on_commit_callbacks
):
    hook = receiver(200, 200)
    services.channel_create(
        project=last_trials_running.project, name="CI", kind="webhook", events=["experiment_finished"], url=hook.url
    )

    # a person stops it: they know, nothing is sent
    with django_capture_on_commit_callbacks(execute=True):
        experiment_stop(last_trials_running)
    assert hook.requests == []

    # the trials after the change stopped on their own: the experiment ends stopped, and says why
    Experiment.objects.filter(pk=last_trials_running.pk).update(status=Experiment.Status.AFTER, finished_at=None)
    after = last_trials_running.after
    type(after).objects.filter(pk=after.pk).update(status="stopped", error_message="run #9 was lost")
    with django_capture_on_commit_callbacks(execute=True):
        experiment_advance(last_trials_running.id)
    (headers, body), = hook.requests  # fmt: skip
    payload = json.loads(body)
    assert payload["experiment"]["status"] == "stopped" and payload["experiment"]["verdict"] is None
    assert "The trials after the change stopped: run #9 was lost" in payload["headline"]
