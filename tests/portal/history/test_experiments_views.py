"""The trial-set and experiment pages: who may see and do what, and what each page says.

Runs end as in tests/portal/history/test_services.py: the test plays the worker's part
with the real run services, and on_commit callbacks run as after a commit.
"""

import re

import pytest
from django.core.management import call_command
from django.urls import reverse

from portal.history import services
from portal.history.models import Experiment, TrialSet, TuningChange
from portal.projects.models import Environment, Plan, Project
from portal.runs import services as run_services
from portal.runs.models import Run
from tests.portal.history.test_services import (  # noqa: F401 (fixtures)
    active_trial,
    committed,
    enqueued,
    finish_trial,
    hook_target,
    make_experiment,
)

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def text(response) -> str:
    """The page's text without tags or repeated spaces, to assert on what a reader sees."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


@pytest.fixture
def trial_set(plan, alice, enqueued, committed):  # noqa: F811
    with committed():
        return services.trialset_start(plan=plan, size=3, user=alice, label="Before the index")


@pytest.fixture
def experiment(plan, alice):
    return make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL, trials=2)


# --------------------------------------------------------------------------------------
# Trial sets
# --------------------------------------------------------------------------------------


def test_the_plan_page_offers_n_trials_to_writers_only(client, alice, bob, plan):
    url = reverse("history:trialset-new", args=[plan.code])
    client.force_login(alice)
    assert f'action="{url}"' in client.get(plan.get_absolute_url()).content.decode()
    client.force_login(bob)
    assert f'action="{url}"' not in client.get(plan.get_absolute_url()).content.decode()


def test_alice_runs_three_trials_of_a_plan(alice_client, plan, enqueued):  # noqa: F811
    response = alice_client.post(reverse("history:trialset-new", args=[plan.code]), {"size": "3", "label": "before"})

    trial_set = TrialSet.objects.get()
    assert response.status_code == 302 and response.url == trial_set.get_absolute_url()
    assert (trial_set.size, trial_set.label, trial_set.plan, trial_set.status) == (3, "before", plan, "running")
    assert trial_set.environment == plan.environment and trial_set.project == plan.project


@pytest.mark.parametrize("size", ["0", "21", "three"])
def test_a_number_of_trials_out_of_range_is_refused(alice_client, plan, size):
    response = alice_client.post(reverse("history:trialset-new", args=[plan.code]), {"size": size})

    assert response.status_code == 400
    assert 'class="field has-error"' in response.content.decode()
    assert not TrialSet.objects.exists()


def test_trials_of_a_plan_that_cannot_run_are_refused_with_the_reason(alice_client, plan):
    plan.mix.all().delete()

    response = alice_client.post(reverse("history:trialset-new", args=[plan.code]), {"size": "3"}, follow=True)

    assert "The trials did not start: Add at least one test case" in text(response)
    assert not TrialSet.objects.exists()


def test_viewers_cannot_start_trials_and_outsiders_do_not_see_the_plan(client, bob, charlie, plan):
    url = reverse("history:trialset-new", args=[plan.code])
    client.force_login(bob)
    assert client.post(url, {"size": "3"}).status_code == 403
    client.force_login(charlie)
    assert client.post(url, {"size": "3"}).status_code == 404
    assert not TrialSet.objects.exists()


def test_a_running_trial_set_shows_its_progress_and_polls(alice_client, trial_set, committed):  # noqa: F811
    with committed():
        finish_trial(active_trial(trial_set), apd_ms=40.0)
    second = active_trial(trial_set)

    response = alice_client.get(trial_set.get_absolute_url())

    page = response.content.decode()
    words = text(response)
    assert response.status_code == 200
    assert "Before the index" in words
    assert 'hx-trigger="every 2s"' in page
    assert 'aria-valuenow="33.3"' in page  # 1 of 3 finished, the second not started yet
    assert f"1 of 3 trials finished; trial 2 ( run #{second.number} ) is queued, 0.0 % through." in words
    assert reverse("history:trialset-stop", args=[trial_set.code]) in page
    assert re.search(r"<td>1</td>\s*<td><a [^>]*>#1</a></td>", page)
    assert "40 ms" in words


def test_the_trial_set_table_gives_mean_and_spread_of_counting_trials(
    alice_client,
    trial_set,
    committed,  # noqa: F811
):
    for apd in (100.0, 200.0):
        with committed():
            finish_trial(active_trial(trial_set), apd_ms=apd)
    with committed():
        run_services.run_cancel(run=active_trial(trial_set))  # the third trial is stopped: it does not count

    response = alice_client.get(trial_set.get_absolute_url())

    words = text(response)
    # pooled (as many pages in each trial) 150 ms, sample sd of (100, 200) = 70.7 ms
    assert "All 2 counting trials pooled ± sd 150 ms ± 70.7 ms" in words
    assert "left out it was cancelled" in words
    assert "The trials stopped. Trial 3 (run #3) was stopped." in words
    assert 'class="alert error" id="stopped-reason"' in response.content.decode()
    assert 'hx-trigger="every 2s"' not in response.content.decode()


def test_a_trial_set_waiting_for_another_run_says_which(alice_client, plan, alice, enqueued, committed):  # noqa: F811
    other = run_services.run_create(plan=plan, user=alice)
    with committed():
        trial_set = services.trialset_start(plan=plan, size=2, user=alice)

    words = text(alice_client.get(trial_set.get_absolute_url()))

    assert f"Waiting for run #{other.number} (Smoke) to end" in words


def test_a_finished_trial_set_links_to_the_comparison(alice_client, trial_set, committed):  # noqa: F811
    for _ in range(3):
        with committed():
            finish_trial(active_trial(trial_set))

    page = alice_client.get(trial_set.get_absolute_url()).content.decode()

    compare = reverse("history:compare", args=[trial_set.project.code]) + f"?a={trial_set.code}"
    assert f'href="{compare}"' in page
    assert 'aria-valuenow="100.0"' in page
    assert reverse("history:trialset-stop", args=[trial_set.code]) not in page


def test_the_live_region_alone_answers_htmx(alice_client, trial_set):
    response = alice_client.get(trial_set.get_absolute_url(), headers=HTMX)

    page = response.content.decode()
    assert page.lstrip().startswith('<section id="live"')
    assert '<header class="topbar">' not in page


def test_viewers_read_trial_sets_without_a_stop_button_and_outsiders_get_404(client, bob, charlie, trial_set):
    client.force_login(bob)
    page = client.get(trial_set.get_absolute_url())
    assert page.status_code == 200
    assert reverse("history:trialset-stop", args=[trial_set.code]) not in page.content.decode()
    assert client.post(reverse("history:trialset-stop", args=[trial_set.code])).status_code == 403
    client.force_login(charlie)
    assert client.get(trial_set.get_absolute_url()).status_code == 404
    assert client.post(reverse("history:trialset-stop", args=[trial_set.code])).status_code == 404
    trial_set.refresh_from_db()
    assert trial_set.status == TrialSet.Status.RUNNING


def test_alice_stops_a_trial_set(alice_client, trial_set, committed):  # noqa: F811
    trial = active_trial(trial_set)

    with committed():
        response = alice_client.post(reverse("history:trialset-stop", args=[trial_set.code]))

    assert response.status_code == 302
    trial.refresh_from_db()
    trial_set.refresh_from_db()
    assert trial.status == Run.Status.CANCELLED
    assert (trial_set.status, trial_set.error_message) == ("stopped", "Stopped by a user.")


# --------------------------------------------------------------------------------------
# The experiments of a project
# --------------------------------------------------------------------------------------


def test_a_project_without_experiments_says_how_to_make_one(alice_client, project):
    response = alice_client.get(reverse("history:experiments", args=[project.code]))

    assert "No experiments yet" in text(response)
    assert reverse("history:experiment-new", args=[project.code]) in response.content.decode()


def test_the_experiment_list_shows_each_with_its_status(client, alice, bob, experiment):
    url = reverse("history:experiments", args=[experiment.project.code])
    client.force_login(alice)
    response = client.get(url)
    assert "Index on work_items.area" in text(response)
    assert 'data-status="draft">Ready to start</span>' in response.content.decode()
    assert reverse("history:experiment-new", args=[experiment.project.code]) in response.content.decode()

    client.force_login(bob)
    response = client.get(url)
    assert response.status_code == 200 and "Index on work_items.area" in text(response)
    assert reverse("history:experiment-new", args=[experiment.project.code]) not in response.content.decode()


def test_the_project_page_links_to_its_experiments(alice_client, project):
    page = alice_client.get(project.get_absolute_url()).content.decode()
    assert reverse("history:experiments", args=[project.code]) in page


def test_the_project_page_lists_its_experiments(client, alice, bob, experiment, django_assert_max_num_queries):
    client.force_login(alice)
    with django_assert_max_num_queries(20):
        page = client.get(experiment.project.get_absolute_url()).content.decode()
    section = page[page.index('id="experiments"') : page.index('id="recent-runs"')]
    assert "Index on work_items.area" in section and experiment.get_absolute_url() in section
    client.force_login(bob)  # a viewer reads them too
    assert experiment.get_absolute_url() in client.get(experiment.project.get_absolute_url()).content.decode()


def test_outsiders_do_not_see_the_experiments(charlie_client, experiment):
    project = experiment.project
    assert charlie_client.get(reverse("history:experiments", args=[project.code])).status_code == 404
    assert charlie_client.get(experiment.get_absolute_url()).status_code == 404
    assert charlie_client.get(reverse("history:experiment-new", args=[project.code])).status_code == 404
    for name in ("experiment-start", "experiment-confirm", "experiment-stop"):
        assert charlie_client.post(reverse(f"history:{name}", args=[experiment.code])).status_code == 404


# --------------------------------------------------------------------------------------
# A new experiment
# --------------------------------------------------------------------------------------


def _experiment_data(**overrides) -> dict:
    data = {
        "title": "Index on work_items.area",
        "description": "Does the index help?",
        "trials": "3",
        "apply_mode": "hook",
        "change-category": "index",
        "change-title": "Add index ix_work_items_area",
        "change-reason": "Searches scan the whole table",
        "change-reference": "https://learn.microsoft.com/en-us/sql/relational-databases/indexes/",
        "change-configuration": "search.index = on\n",
        "change-hook_method": "POST",
        "change-hook_url": "http://127.0.0.1:8001/_demo/knobs",
        "change-hook_body": '{"search.index": "on"}',
        "change-hook_content_type": "application/json",
    }
    data.update(overrides)
    return data


def test_a_new_experiment_starts_with_its_plan(alice_client, project, plan):
    response = alice_client.get(reverse("history:experiment-new", args=[project.code]))

    page = response.content.decode()
    assert 'id="plan-step"' in page and "1. Which plan measures it?" in text(response)
    assert f'<option value="{plan.code}">Smoke (on Staging)</option>' in page
    assert 'id="experiment-form"' not in page


def test_the_experiment_form_starts_from_the_plans_configuration(alice_client, project, plan):
    url = reverse("history:experiment-new", args=[project.code])

    response = alice_client.get(url, {"plan": plan.code})

    page = response.content.decode()
    assert response.status_code == 200
    assert f'action="{url}?plan={plan.code}"' in page
    assert re.search(r'name="change-configuration"[^>]*>\s*search.index = off', page)
    assert 'name="trials" value="3"' in page


def test_alice_saves_an_experiment_and_its_planned_change(alice_client, alice, project, plan):
    url = reverse("history:experiment-new", args=[project.code]) + f"?plan={plan.code}"

    response = alice_client.post(url, _experiment_data())

    experiment = Experiment.objects.get()
    change = experiment.change
    assert response.status_code == 302 and response.url == experiment.get_absolute_url()
    assert (experiment.title, experiment.trials, experiment.apply_mode, experiment.status) == (
        "Index on work_items.area",
        3,
        "hook",
        "draft",
    )
    assert (experiment.plan, experiment.environment, experiment.created_by) == (plan, plan.environment, alice)
    assert change.status == TuningChange.Status.PLANNED and change.number is None
    assert change.edits == [{"key": "search.index", "value": "on"}]
    assert (change.title, change.category, change.hook_url) == (
        "Add index ix_work_items_area",
        "index",
        "http://127.0.0.1:8001/_demo/knobs",
    )
    plan.environment.refresh_from_db()
    assert plan.environment.configuration == [{"key": "search.index", "value": "off"}]  # planned, not applied


def test_an_experiment_by_hook_without_a_hook_url_is_refused_next_to_the_mode(alice_client, project, plan):
    url = reverse("history:experiment-new", args=[project.code]) + f"?plan={plan.code}"

    response = alice_client.post(url, _experiment_data(**{"change-hook_url": "", "change-hook_body": ""}))

    assert response.status_code == 400
    assert "Applying by hook needs the change&#x27;s hook URL" in response.content.decode()
    assert not Experiment.objects.exists() and not TuningChange.objects.exists()


def test_an_experiment_whose_change_changes_nothing_is_refused(alice_client, project, plan):
    url = reverse("history:experiment-new", args=[project.code]) + f"?plan={plan.code}"

    response = alice_client.post(url, _experiment_data(**{"change-configuration": "search.index = off"}))

    assert response.status_code == 400
    assert "The configuration is unchanged" in text(response)
    assert not Experiment.objects.exists() and not TuningChange.objects.exists()


def test_an_experiment_by_hand_needs_no_hook(alice_client, project, plan):
    url = reverse("history:experiment-new", args=[project.code]) + f"?plan={plan.code}"

    alice_client.post(url, _experiment_data(apply_mode="manual", **{"change-hook_url": "", "change-hook_body": ""}))

    experiment = Experiment.objects.get()
    assert experiment.apply_mode == "manual" and not experiment.change.has_hook


def test_a_plan_of_another_project_cannot_be_chosen(alice_client, alice, project, plan):
    other = Project.objects.create(team=project.team, name="Other")
    env = Environment.objects.create(project=other, name="Other env", base_url="http://127.0.0.1:8002")
    foreign = Plan.objects.create(project=other, environment=env, name="Other plan")

    response = alice_client.get(reverse("history:experiment-new", args=[project.code]), {"plan": foreign.code})

    assert response.status_code == 404


def test_viewers_cannot_create_experiments(bob_client, project, plan):
    url = reverse("history:experiment-new", args=[project.code])
    assert bob_client.get(url).status_code == 403
    assert bob_client.post(url + f"?plan={plan.code}", _experiment_data()).status_code == 403
    assert not Experiment.objects.exists()


# --------------------------------------------------------------------------------------
# An experiment's page and its buttons
# --------------------------------------------------------------------------------------


def _steps(response) -> dict:
    return dict(re.findall(r'data-step="(\w+)" data-state="(\w+)"', response.content.decode()))


def test_a_ready_experiment_shows_its_steps_its_change_and_a_start_button(client, alice, bob, experiment):
    client.force_login(alice)
    response = client.get(experiment.get_absolute_url())

    page = response.content.decode()
    assert _steps(response) == {"baseline": "waiting", "apply": "waiting", "after": "waiting", "compare": "waiting"}
    assert reverse("history:experiment-start", args=[experiment.code]) in page
    assert 'hx-trigger="every 2s"' not in page
    assert re.search(r"<code>search.index</code></td>\s*<td><code>off</code></td>\s*<td><code>on</code></td>", page)

    client.force_login(bob)
    response = client.get(experiment.get_absolute_url())
    assert response.status_code == 200
    assert reverse("history:experiment-start", args=[experiment.code]) not in response.content.decode()
    assert client.post(reverse("history:experiment-start", args=[experiment.code])).status_code == 403
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.DRAFT


def test_alice_starts_an_experiment_and_sees_its_baseline_run(alice_client, experiment, enqueued, committed):  # noqa: F811
    with committed():
        started = alice_client.post(reverse("history:experiment-start", args=[experiment.code]), follow=True)
    response = alice_client.get(experiment.get_absolute_url())

    assert "Started: 2 baseline trials run first." in text(started)
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.BASELINE
    trial = active_trial(experiment.baseline)
    page = response.content.decode()
    assert _steps(response)["baseline"] == "current"
    assert 'hx-trigger="every 2s"' in page
    assert f"Trial 1: run #{trial.number} queued" in text(response)
    assert "0/2" in text(response)
    assert reverse("history:experiment-stop", args=[experiment.code]) in page

    again = alice_client.post(reverse("history:experiment-start", args=[experiment.code]), follow=True)
    assert "Not started: This experiment has already started." in text(again)
    assert TrialSet.objects.count() == 1


def test_a_manual_experiment_asks_for_the_change_and_alice_confirms_it(
    client,
    alice,
    bob,
    experiment,
    enqueued,  # noqa: F811
    committed,  # noqa: F811
):
    with committed():
        services.experiment_start(experiment, user=alice)
    for _ in range(2):
        with committed():
            finish_trial(active_trial(experiment.baseline))
    confirm = reverse("history:experiment-confirm", args=[experiment.code])

    client.force_login(bob)
    response = client.get(experiment.get_absolute_url())
    assert _steps(response) == {"baseline": "done", "apply": "current", "after": "waiting", "compare": "waiting"}
    assert "Make the change now" in text(response) and confirm not in response.content.decode()
    assert client.post(confirm).status_code == 403

    client.force_login(alice)
    assert confirm in client.get(experiment.get_absolute_url()).content.decode()
    with committed():
        response = client.post(confirm, follow=True)

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.AFTER
    assert _steps(response) == {"baseline": "done", "apply": "done", "after": "current", "compare": "waiting"}
    assert "as change #1" in text(response)


def test_a_failed_hook_shows_the_request_the_answer_and_the_reason(
    alice_client,
    alice,
    plan,
    enqueued,  # noqa: F811
    committed,  # noqa: F811
    hook_target,  # noqa: F811
):
    hook_target.status = 500
    hook_target.body = b'{"error": "unknown knob"}'
    experiment = make_experiment(plan, alice, hook_url=hook_target.url, trials=1)
    with committed():
        services.experiment_start(experiment, user=alice)
    with committed():
        finish_trial(active_trial(experiment.baseline))

    response = alice_client.get(experiment.get_absolute_url())

    words = text(response)
    assert _steps(response) == {"baseline": "done", "apply": "failed", "after": "waiting", "compare": "waiting"}
    assert "The experiment failed. The change was not applied: The hook answered 500 Internal Server Error." in words
    assert f"POST {hook_target.url}" in words
    assert "Answered 500 Internal Server Error" in words
    assert "unknown knob" in words


def test_a_done_experiment_shows_the_comparison(alice_client, alice, plan, enqueued, committed, hook_target):  # noqa: F811
    experiment = make_experiment(plan, alice, hook_url=hook_target.url, trials=2)
    with committed():
        services.experiment_start(experiment, user=alice)
    for apd in (400.0, 420.0):
        with committed():
            finish_trial(active_trial(experiment.baseline), apd_ms=apd)
    experiment.refresh_from_db()
    for apd in (100.0, 104.0):
        with committed():
            finish_trial(active_trial(experiment.after), apd_ms=apd)

    response = alice_client.get(experiment.get_absolute_url())

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.DONE
    assert _steps(response) == {"baseline": "done", "apply": "done", "after": "done", "compare": "done"}
    headline = re.search(r'id="headline">([^<]+)<', response.content.decode()).group(1)
    assert headline.startswith("Add index ix_work_items_area: APD")
    assert 'data-verdict="better"' in response.content.decode()


def test_an_active_experiment_polls_its_live_region_and_reloads_when_it_ends(
    alice_client,
    alice,
    experiment,
    enqueued,  # noqa: F811
    committed,  # noqa: F811
):
    with committed():
        services.experiment_start(experiment, user=alice)

    live = alice_client.get(experiment.get_absolute_url(), headers=HTMX)
    assert live.content.decode().lstrip().startswith('<section id="live"')
    assert "HX-Refresh" not in live.headers

    with committed():
        alice_client.post(reverse("history:experiment-stop", args=[experiment.code]))
    ended = alice_client.get(experiment.get_absolute_url(), headers=HTMX)

    assert ended.headers["HX-Refresh"] == "true"
    experiment.refresh_from_db()
    assert (experiment.status, experiment.error_message) == ("stopped", "Stopped by a user.")
    assert "The experiment stopped. Stopped by a user." in text(alice_client.get(experiment.get_absolute_url()))


def test_viewers_cannot_stop_an_experiment(client, alice, bob, experiment, enqueued, committed):  # noqa: F811
    with committed():
        services.experiment_start(experiment, user=alice)
    client.force_login(bob)

    assert client.post(reverse("history:experiment-stop", args=[experiment.code])).status_code == 403

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.BASELINE


# --------------------------------------------------------------------------------------
# The demo's ready experiment
# --------------------------------------------------------------------------------------


def test_seed_demo_twice_gives_one_experiment_ready_to_start(client):
    call_command("seed_demo")
    call_command("seed_demo")

    experiment = Experiment.objects.get()
    change = experiment.change
    plan = experiment.plan
    env = experiment.environment
    assert (experiment.title, experiment.trials, experiment.apply_mode, experiment.status) == (
        "Index on work_items.area",
        3,
        "hook",
        "draft",
    )
    assert TuningChange.objects.count() == 1 and Plan.objects.filter(name="Search: 20 users, 20 s").count() == 1
    assert (change.category, change.title, change.status) == ("index", "Add index ix_work_items_area", "planned")
    assert change.edits == [{"key": "db.index.work_items.area", "value": "on"}]
    assert (
        change.reference
        == "https://learn.microsoft.com/en-us/sql/relational-databases/indexes/create-nonclustered-indexes"
    )
    assert (change.hook_method, change.hook_url, change.hook_content_type) == (
        "POST",
        "http://127.0.0.1:8001/_demo/knobs",
        "application/json",
    )
    assert change.hook_body == '{"search.index": "on"}'
    assert change.diff == [{"key": "db.index.work_items.area", "before": "off", "after": "on"}]
    config = {item["key"]: item["value"] for item in env.configuration}
    assert config["db.index.work_items.area"] == "off" and config["tempdb.files"] == "1"
    assert config["token_cache.cap"] == "0" and config["documents.storage"] == "database"
    assert (plan.profile_kind, plan.users, plan.hold, plan.environment) == ("constant", 20, 20, env)
    assert [e.test_case.name for e in plan.mix.all()] == ["Search work items"]
    assert plan.problems() == []
    soak = Plan.objects.get(name="Soak: token cache, 20 users for 15 min")
    assert (soak.hold, soak.degradation_steady_s, soak.degradation_sustain_s, soak.problems()) == (900, 120, 30, [])
    assert [step.path for step in soak.mix.get().test_case.steps.all()] == ["/"]
    tempdb = Plan.objects.get(name="Capacity search: tempdb, 1 → 8 users")
    assert (tempdb.profile_kind, tempdb.capacity_search, tempdb.threshold_apd_ms, tempdb.problems()) == (
        "steps",
        True,
        30,
        [],
    )
    assert [lv.users for lv in tempdb.get_levels()] == [1, 2, 3, 4, 6, 8]
    assert [step.path for step in tempdb.mix.get().test_case.steps.all()] == ["/articles/7"]
    assert "σ falls to about 0" in tempdb.description

    # and: one click starts it
    client.login(username="demo", password="demo")
    page = client.get(experiment.get_absolute_url()).content.decode()
    assert reverse("history:experiment-start", args=[experiment.code]) in page


def test_seed_demo_brings_an_earlier_demo_environment_up_to_date():
    call_command("seed_demo")
    env = Environment.objects.get(name="Demo target")
    Experiment.objects.all().delete()
    TuningChange.objects.all().delete()
    env.configuration = [{"key": "search.index", "value": "off"}, {"key": "compression", "value": "on"}]
    env.save()

    call_command("seed_demo")

    env.refresh_from_db()
    config = {item["key"]: item["value"] for item in env.configuration}
    assert "search.index" not in config
    assert config["db.index.work_items.area"] == "off"
    assert config["compression"] == "on"  # a value already there is kept
    assert config["tempdb.files"] == "1"
    assert Experiment.objects.count() == 1


def test_a_stopped_set_polls_until_its_trial_has_ended(alice_client, trial_set, committed):  # noqa: F811
    trial = active_trial(trial_set)
    Run.objects.filter(id=trial.id).update(status=Run.Status.RUNNING)  # a worker has it
    with committed():
        alice_client.post(reverse("history:trialset-stop", args=[trial_set.code]))

    page = alice_client.get(trial_set.get_absolute_url()).content.decode()

    trial.refresh_from_db()
    assert trial.status == Run.Status.CANCELLING
    assert 'hx-trigger="every 2s"' in page
    assert reverse("history:trialset-stop", args=[trial_set.code]) not in page


def test_an_experiment_of_one_trial_a_side_says_trial_and_run_in_the_singular(alice_client, plan, alice):
    experiment = make_experiment(plan, alice, apply_mode=Experiment.ApplyMode.MANUAL, trials=1)
    page = text(alice_client.get(experiment.get_absolute_url()))
    assert "1 baseline trial of" in page and "then 1 trial after" in page
    assert "1 run of the plan" in page and "1 runs" not in page and "1 trials" not in page
