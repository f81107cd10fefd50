"""The honest control (issue 18, section 3): a change of kind *control* changes nothing, yet takes its
place in the ledger, so an experiment made of it measures the noise floor."""

import pytest
from django.urls import reverse

from portal.history import services
from portal.history.forms import ChangeForm
from portal.history.models import Experiment, TuningChange
from tests.portal.history.test_services import (  # noqa: F401 (fixtures)
    active_trial,
    committed,
    enqueued,
    finish_trial,
)

pytestmark = pytest.mark.django_db

CONTROL = TuningChange.Category.CONTROL


def _control(environment, user, **fields):
    return services.change_create(
        environment=environment, user=user, edits=[], category=CONTROL, title="No change (A/A)", **fields
    )


def test_a_control_is_applied_without_touching_the_configuration(environment, alice):
    before = list(environment.configuration)
    updated_at = environment.updated_at

    change = services.change_apply(_control(environment, alice), user=alice)

    environment.refresh_from_db()
    assert change.status == TuningChange.Status.APPLIED and change.number == 1 and change.is_control
    assert change.config_before == change.config_after == before
    assert change.diff == []
    assert environment.configuration == before and environment.updated_at == updated_at
    assert change.hook_response is None  # nothing was sent


def test_a_control_that_would_change_a_key_or_send_a_hook_is_refused(environment, alice):
    with pytest.raises(services.ChangeError, match="A control changes nothing"):
        services.change_create(
            environment=environment,
            user=alice,
            edits=[{"key": "search.index", "value": "on"}],
            category=CONTROL,
            title="Sneaky",
        )
    with pytest.raises(services.ChangeError, match="no hook to send"):
        _control(environment, alice, hook_url="http://127.0.0.1:8001/_demo/knobs")
    assert not TuningChange.objects.exists()


def _form(environment, configuration, **fields):
    data = {
        "title": "A/A",
        "category": "control",
        "reason": "",
        "reference": "",
        "configuration": configuration,
        "hook_method": "POST",
        "hook_url": "",
        "hook_body": "",
        "hook_content_type": "application/json",
    }
    data.update(fields)
    return ChangeForm(data, environment=environment)


def test_the_change_form_takes_an_unchanged_configuration_for_a_control_only(environment):
    unchanged = "search.index = off"
    assert _form(environment, unchanged).is_valid()
    form = _form(environment, "search.index = on")
    assert not form.is_valid() and "A control changes nothing" in form.errors["configuration"][0]
    form = _form(environment, unchanged, hook_url="http://127.0.0.1:8001/_demo/knobs")
    assert not form.is_valid() and "no hook to send" in form.errors["hook_url"][0]
    form = _form(environment, unchanged, category="index")
    assert not form.is_valid() and "The configuration is unchanged" in form.errors["configuration"][0]


def test_alice_records_and_applies_a_control_on_the_environment_page(alice_client, environment):
    response = alice_client.post(
        reverse("history:change-new", args=[environment.code]),
        {
            "title": "Noise floor",
            "category": "control",
            "reason": "",
            "reference": "",
            "configuration": "search.index = off",
            "hook_method": "POST",
            "hook_url": "",
            "hook_body": "",
            "hook_content_type": "application/json",
        },
    )
    change = TuningChange.objects.get()
    assert response.status_code == 302 and change.is_control and change.edits == []
    alice_client.post(reverse("history:change-apply", args=[change.code]))
    change.refresh_from_db()
    assert change.status == TuningChange.Status.APPLIED
    page = alice_client.get(change.get_absolute_url()).content.decode()
    assert "A control: no key was changed" in page and "?revert=" not in page
    environment.refresh_from_db()
    assert environment.configuration == [{"key": "search.index", "value": "off"}]
    assert "a control: nothing changed" in alice_client.get(environment.get_absolute_url()).content.decode()


def test_a_control_experiment_runs_before_and_after_with_nothing_to_confirm(plan, alice, enqueued, committed):  # noqa: F811
    # given: a control experiment, even one set to wait for a person
    experiment = services.experiment_create(
        plan=plan,
        user=alice,
        title="Noise floor",
        trials=1,
        apply_mode=Experiment.ApplyMode.MANUAL,
        change=_control(plan.environment, alice),
    )
    configuration = list(plan.environment.configuration)

    # when: its baseline ends
    with committed():
        services.experiment_start(experiment, user=alice)
    with committed():
        finish_trial(active_trial(experiment.baseline), apd_ms=20.0)

    # then: the control is in the ledger at once, the configuration untouched, and the trials after run
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.AFTER
    assert experiment.change.status == TuningChange.Status.APPLIED and experiment.change.number == 1
    plan.environment.refresh_from_db()
    assert plan.environment.configuration == configuration
    after = active_trial(experiment.after)
    assert after.tuning_change == experiment.change
    with committed():
        finish_trial(after, apd_ms=21.0)
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.DONE


def test_an_experiment_with_a_control_needs_no_hook_and_its_page_explains_it(alice_client, project, plan):
    url = reverse("history:experiment-new", args=[project.code]) + f"?plan={plan.code}"
    response = alice_client.post(
        url,
        {
            "title": "Noise floor",
            "description": "",
            "trials": "3",
            "apply_mode": "hook",
            "change-category": "control",
            "change-title": "No change",
            "change-reason": "",
            "change-reference": "",
            "change-configuration": "search.index = off\n",
            "change-hook_method": "POST",
            "change-hook_url": "",
            "change-hook_body": "",
            "change-hook_content_type": "application/json",
        },
    )
    experiment = Experiment.objects.get()
    assert response.status_code == 302 and experiment.change.is_control
    page = alice_client.get(experiment.get_absolute_url()).content.decode()
    assert "A control: what it is for" in page
    assert "noise floor a real tuning change has to beat" in page
    assert "a control: nothing is changed" in page


def test_an_ordinary_experiment_page_does_not_claim_to_be_a_control(client, alice, plan):
    from tests.portal.history.test_services import make_experiment

    experiment = make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL)
    client.force_login(alice)
    assert "A control: what it is for" not in client.get(experiment.get_absolute_url()).content.decode()
