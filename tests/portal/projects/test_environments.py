import pytest
from django.urls import reverse
from django.utils.html import escape

from portal.projects.models import Environment, Server

from .data import environment_data

pytestmark = pytest.mark.django_db


def _new(client, project, **fields):
    return client.post(reverse("projects:environment-new", args=[project.code]), environment_data(**fields))


def test_create_environment_with_configuration_and_servers(alice_client, project):
    # given
    configuration = "# database\nsql.startup_flags = -T1118 -T4618\n\niis.max_processes=7\nsharepoint.rbs = on\n"
    servers = [
        {"name": "db-01", "role": "database", "hardware": "8 vCPU"},
        {"name": "", "role": "", "hardware": ""},
        {"name": "web-01", "role": "web", "hardware": ""},
    ]
    # when
    response = _new(alice_client, project, configuration_text=configuration, servers=servers)
    # then
    environment = Environment.objects.get(name="Production")
    assert response.status_code == 302
    assert response.url == environment.get_absolute_url()
    assert environment.configuration == [
        {"key": "sql.startup_flags", "value": "-T1118 -T4618"},
        {"key": "iis.max_processes", "value": "7"},
        {"key": "sharepoint.rbs", "value": "on"},
    ]
    assert list(environment.servers.values_list("name", "role", "position")) == [
        ("db-01", "database", 0),
        ("web-01", "web", 1),
    ]


def test_base_url_loses_its_trailing_slash(alice_client, project):
    # when
    _new(alice_client, project, base_url="https://shop.test:8443/")
    # then
    assert Environment.objects.get(name="Production").base_url == "https://shop.test:8443"


@pytest.mark.parametrize(
    ("base_url", "message"),
    [
        ("ftp://files.test", "Use an http:// or https:// URL."),
        ("http://shop.test/app", "Give only scheme, host and port"),
        ("http://shop.test/?debug=1", "Give only scheme, host and port"),
        ("http://user:secret@shop.test", "Leave credentials out of the URL"),
        ("not a url", "write the URL without spaces"),
        ("http://shop.test:99999", "bad port"),
        ("http://shop.test:0", "bad port"),
        # the reason the docs promise, not Django's generic "Enter a valid URL."
        ("htp://shop.test", "Use an http:// or https:// URL."),
        ("http://127.1:8001", "127.1"),
        ("127.1", "127.1"),
    ],
)
def test_bad_base_url(alice_client, project, base_url, message):
    # when
    response = _new(alice_client, project, base_url=base_url)
    # then
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Environment.objects.filter(name="Production").exists()


@pytest.mark.parametrize(
    ("configuration", "message"),
    [
        ("a = 1\n\nthis line has no equals sign", "line 3: expected key = value"),
        ("= orphan value", "line 1: expected key = value"),
        ("sql.flags = -T1118\na = 1\n# comment\n\nsql.flags = -T4618", "line 5: key sql.flags appears twice"),
        ("a = 1\nmax memory = 4 GB", "line 2: the key “max memory” has a space"),
    ],
)
def test_bad_configuration(alice_client, project, configuration, message):
    # when
    response = _new(alice_client, project, configuration_text=configuration)
    # then
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Environment.objects.filter(name="Production").exists()


def test_environment_name_taken(alice_client, project, environment):
    # when
    response = _new(alice_client, project, name="staging")
    # then
    assert response.status_code == 200
    assert escape("This project already has an environment called “staging”.") in response.content.decode()
    assert project.environments.count() == 1


def test_same_name_in_another_project_is_fine(alice_client, project, environment, team):
    # given
    other = project.__class__.objects.create(team=team, name="Shop")
    # when
    response = _new(alice_client, other, name="Staging")
    # then
    assert response.status_code == 302
    assert other.environments.get().name == "Staging"


def test_edit_environment_sends_configuration_changes_to_tuning_changes(alice_client, environment):
    # when
    page = alice_client.get(reverse("projects:environment-edit", args=[environment.code])).content.decode()
    # then: no configuration text to edit, a way to record a tuning change instead
    assert 'name="configuration_text"' not in page
    assert "search.index = off" not in page
    assert "changes only through tuning changes" in page
    assert reverse("history:change-new", args=[environment.code]) in page


def test_new_environment_form_takes_the_initial_configuration(alice_client, project):
    # when
    page = alice_client.get(reverse("projects:environment-new", args=[project.code])).content.decode()
    # then
    assert 'name="configuration_text"' in page
    assert "changes only through" in page


def test_edit_environment_changes_and_deletes_servers(alice_client, environment):
    # given
    db = Server.objects.create(environment=environment, name="db-01", role="database", position=0)
    web = Server.objects.create(environment=environment, name="web-01", role="web", position=1)
    servers = [
        {"id": str(db.pk), "name": "db-01", "role": "database", "hardware": "", "DELETE": "on"},
        {"id": str(web.pk), "name": "web-01", "role": "web", "hardware": "16 GB"},
        {"name": "search-01", "role": "search", "hardware": ""},
    ]
    # a configuration posted anyway (an old form, a script) is ignored: it changes through tuning changes only
    data = environment_data(name="Staging", configuration_text="search.index = on", servers=servers, initial=2)
    # when
    response = alice_client.post(reverse("projects:environment-edit", args=[environment.code]), data)
    # then
    assert response.status_code == 302
    environment.refresh_from_db()
    assert environment.configuration == [{"key": "search.index", "value": "off"}]
    assert not environment.changes.exists()
    assert list(environment.servers.values_list("name", "hardware", "position")) == [
        ("web-01", "16 GB", 0),
        ("search-01", "", 1),
    ]


def test_environment_detail(alice_client, environment, plan):
    # given
    Server.objects.create(environment=environment, name="db-01", role="database", hardware="8 vCPU")
    # when
    page = alice_client.get(reverse("projects:environment", args=[environment.code])).content.decode()
    # then
    for text in ("http://127.0.0.1:8001", "search.index", "db-01", "8 vCPU", plan.get_absolute_url()):
        assert text in page
    assert reverse("projects:environment-edit", args=[environment.code]) in page


def test_viewer_sees_no_environment_buttons(bob_client, environment):
    # when
    page = bob_client.get(reverse("projects:environment", args=[environment.code])).content.decode()
    # then
    assert reverse("projects:environment-edit", args=[environment.code]) not in page
    assert reverse("projects:environment-delete", args=[environment.code]) not in page


def test_delete_environment(alice_client, environment, project):
    # when
    response = alice_client.post(reverse("projects:environment-delete", args=[environment.code]))
    # then
    assert response.status_code == 302
    assert response.url == project.get_absolute_url()
    assert not Environment.objects.exists()


def test_delete_environment_used_by_a_plan_is_refused(alice_client, environment, plan):
    # given
    confirm = alice_client.get(reverse("projects:environment-delete", args=[environment.code])).content.decode()
    # when
    response = alice_client.post(reverse("projects:environment-delete", args=[environment.code]), follow=True)
    # then
    assert escape("It is used by the plans “Smoke”") in confirm
    assert 'class="danger"' not in confirm
    assert escape("Not deleted: “Staging” is used by the plans “Smoke”") in response.content.decode()
    assert Environment.objects.filter(pk=environment.pk).exists()


def test_a_target_outside_the_allowlist_is_named_before_anyone_presses_run(alice_client, project, environment, plan):
    # given: an address the default allowlist (loopback only) refuses; an IP literal needs no DNS
    response = alice_client.post(
        reverse("projects:environment-edit", args=[environment.code]),
        environment_data(name="Staging", base_url="http://192.0.2.10:8080"),
        follow=True,
    )

    # then: saving says so, the environment, its form and its plan say so, and Run is disabled
    assert response.redirect_chain[-1][0] == environment.get_absolute_url()
    page = response.content.decode()
    assert "Its plans cannot run until then." in page
    assert 'id="target-problem"' in page and "192.0.2.10" in page
    form = alice_client.get(reverse("projects:environment-edit", args=[environment.code])).content.decode()
    assert 'id="target-problem"' in form
    plan_page = alice_client.get(plan.get_absolute_url()).content.decode()
    assert "http://192.0.2.10:8080 is not allowed" in plan_page
    assert '<button type="submit" class="run-button" disabled>' in plan_page


def test_an_allowed_target_shows_no_refusal(alice_client, environment, plan):
    assert 'id="target-problem"' not in alice_client.get(environment.get_absolute_url()).content.decode()
    plan_page = alice_client.get(plan.get_absolute_url()).content.decode()
    assert "is not allowed" not in plan_page
    assert '<button type="submit" class="run-button" >' in plan_page


def test_the_base_url_hint_names_this_instances_demo_target(alice_client, project, settings):
    # given: the demo target on another port than the default (make run DEMO_PORT=8611)
    settings.DEMO_BASE_URL = "http://127.0.0.1:8611"
    # when
    page = alice_client.get(reverse("projects:environment-new", args=[project.code])).content.decode()
    # then
    assert "e.g. http://127.0.0.1:8611" in page and 'placeholder="http://127.0.0.1:8611"' in page
    assert "8001" not in page


def test_the_environment_form_takes_a_trace_url_template_and_refuses_a_bad_one(alice_client, environment):
    url = reverse("projects:environment-edit", args=[environment.code])
    bad = alice_client.post(url, environment_data(name="Staging", trace_url_template="https://tempo.example/trace/"))
    assert bad.status_code == 200 and "Put {trace_id} once" in bad.content.decode()
    assert Environment.objects.get(pk=environment.pk).trace_url_template == ""

    good = alice_client.post(
        url, environment_data(name="Staging", trace_url_template="https://j.example/trace/{trace_id}")
    )
    assert good.status_code == 302
    assert Environment.objects.get(pk=environment.pk).trace_url_template == "https://j.example/trace/{trace_id}"
    page = alice_client.get(environment.get_absolute_url()).content.decode()
    assert "https://j.example/trace/{trace_id}" in page


def test_the_environment_form_takes_an_otlp_endpoint_and_runs_export_to_it(alice_client, environment, plan):
    url = reverse("projects:environment-edit", args=[environment.code])
    bad = alice_client.post(url, environment_data(name="Staging", otlp_endpoint="ftp://collector:4318"))
    assert bad.status_code == 200 and "Not an OTLP/HTTP endpoint" in bad.content.decode()
    assert Environment.objects.get(pk=environment.pk).otlp_endpoint == ""
    assert "otlp_endpoint" not in plan.to_engine_dict()  # off by default

    good = alice_client.post(url, environment_data(name="Staging", otlp_endpoint="http://127.0.0.1:4318"))
    assert good.status_code == 302
    plan.refresh_from_db()
    assert plan.to_engine_dict()["otlp_endpoint"] == "http://127.0.0.1:4318"  # the run's snapshot carries it
    assert 'id="otlp-endpoint"' in alice_client.get(environment.get_absolute_url()).content.decode()
    plan.trace_context = False  # no traceparent, no span to export
    assert "otlp_endpoint" not in plan.to_engine_dict()
