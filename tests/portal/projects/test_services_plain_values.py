"""environment_save and plan_save take plain values and hold the rules: what the form refuses, the
service refuses too, with the same messages (the API calls the service with no form in between)."""

import pytest

from portal.common import Invalid
from portal.projects import services
from portal.projects.forms import EnvironmentForm, PlanForm
from portal.projects.models import Environment, Plan

pytestmark = pytest.mark.django_db


def test_an_environment_from_plain_values_with_its_servers_in_order(project):
    env = services.environment_save(
        project=project,
        name=" Staging ",
        base_url="127.0.0.1:8001",
        configuration=[{"key": "iis.max_processes", "value": "1"}],
        servers=[services.ServerSpec(name="web-01", role="web"), services.ServerSpec(name="sql-01")],
    )
    assert (env.name, env.base_url, env.configuration) == (
        "Staging",
        "http://127.0.0.1:8001",
        [{"key": "iis.max_processes", "value": "1"}],
    )
    web, sql = env.servers.all()
    # an edit keeps the row named by its id (its metrics stay attached) and drops the others
    services.environment_save(
        project=project,
        environment=env,
        name="Staging",
        base_url=env.base_url,
        servers=[services.ServerSpec(name="web-01b", id=web.pk)],
    )
    assert [(s.pk, s.name) for s in env.servers.all()] == [(web.pk, "web-01b")]


@pytest.mark.parametrize(
    "base_url",
    ["http://user:pw@127.0.0.1:8001", "http://127.0.0.1:8001/app", "ftp://127.0.0.1", "not a url"],
)
def test_the_service_and_the_form_refuse_a_base_url_alike(project, base_url):
    form = EnvironmentForm({"name": "X", "base_url": base_url, "description": ""}, project=project)
    assert not form.is_valid()
    with pytest.raises(Invalid) as refused:
        services.environment_save(project=project, name="X", base_url=base_url)
    assert refused.value.errors["base_url"] == form.errors["base_url"]
    assert not Environment.objects.filter(name="X").exists()


def test_an_existing_environments_configuration_is_refused_and_nothing_changes(environment):
    with pytest.raises(Invalid) as refused:
        services.environment_save(
            project=environment.project,
            environment=environment,
            name="Renamed",
            base_url=environment.base_url,
            configuration=[{"key": "search.index", "value": "on"}],
        )
    assert "tuning changes" in refused.value.errors["configuration"][0]
    environment.refresh_from_db()
    assert environment.name != "Renamed"


def test_a_server_endpoint_needs_its_counter_set(project):
    with pytest.raises(Invalid) as refused:
        services.environment_save(
            project=project,
            name="X",
            base_url="http://127.0.0.1:8001",
            servers=[
                services.ServerSpec(name="ok"),
                services.ServerSpec(name="web", metrics_url="http://127.0.0.1:9/m"),
            ],
        )
    assert refused.value.errors["servers"] == [
        {},
        {"counter_set": ["Choose the counter set that matches the endpoint's exporter."]},
    ]


def test_a_plan_from_plain_values_with_levels_and_mix(project, environment, test_case):
    plan = services.plan_save(
        project=project,
        name="Capacity",
        environment=str(environment.code),
        values={"profile_kind": "steps", "threshold_apd_ms": 500},
        levels=[services.LevelSpec(users=2, hold=3), services.LevelSpec(users=4, hold=3, ramp_up=1)],
        mix=[(test_case, 3)],
    )
    assert [lv.users for lv in plan.get_levels()] == [2, 4]
    assert [(e.test_case_id, e.weight) for e in plan.mix.all()] == [(test_case.pk, 3)]


def test_the_plan_service_and_form_say_the_same_about_a_too_long_ramp(project, environment, settings):
    values = {"profile_kind": "ramp", "users": 5, "ramp_up": 10, "hold": 10**7, "ramp_down": 0}
    form = PlanForm(
        {
            "name": "Long",
            "environment": str(environment.code),
            **{k: str(v) for k, v in values.items()},
            "think_time_mode": "fixed",
            "request_timeout": "30",
            "levels-TOTAL_FORMS": "0",
            "levels-INITIAL_FORMS": "0",
        },
        project=project,
    )
    assert not form.is_valid()
    with pytest.raises(Invalid) as refused:
        services.plan_save(project=project, name="Long", environment=environment, values=values)
    assert refused.value.errors["hold"] == form.errors["hold"]
    assert not Plan.objects.filter(name="Long").exists()


def test_a_mix_takes_only_the_projects_test_cases_once(project, environment, test_case):
    with pytest.raises(Invalid) as refused:
        services.plan_save(
            project=project,
            name="Mixed",
            environment=environment,
            values={"profile_kind": "constant", "users": 2, "hold": 5},
            mix=[(test_case, 1), (test_case, 2), ("00000000-0000-4000-8000-000000000000", 1)],
        )
    assert refused.value.errors["mix"] == [
        {},
        {"test_case": ["This test case is already in the mix."]},
        {"test_case": ["Not a test case of this plan's project."]},
    ]
