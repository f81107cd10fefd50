"""Projects, environments, test cases and plans through the API, × personas; the forms' rules and messages."""

import pytest

from portal.projects.models import Environment, MixEntry, Plan, Project, Step, TestCase

from .conftest import PERSONAS, READERS, expected, session

pytestmark = pytest.mark.django_db

WRITERS = ("owner", "editor")


def case_document(project, **extra):
    return {
        "project": str(project.code),
        "name": "Log in",
        "description": "",
        "steps": [
            {
                "name": "Form",
                "path": "/login",
                "extract": [{"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"}],
            },
            {
                "name": "Post",
                "method": "POST",
                "path": "/login",
                "body_type": "form",
                "body": "csrf={{csrf}}",
                "think_time": 0.5,
            },
        ],
        **extra,
    }


def plan_document(plan_or_project, environment, test_case, **extra):
    return {
        "project": str(plan_or_project.code),
        "environment": str(environment.code),
        "name": "Capacity",
        "profile_kind": "steps",
        "levels": [{"users": 2, "hold": 3}, {"users": 4, "ramp_up": 1, "hold": 3}],
        "threshold_apd_ms": 500,
        "degradation_drop_pct": 40,
        "mix": [{"test_case": str(test_case.code), "weight": 3}],
        **extra,
    }


def snapshot():
    """Everything a write could change, to prove that a refused one changed nothing."""
    return (
        list(Project.objects.values_list("name", "description")),
        list(TestCase.objects.values_list("name", "description")),
        list(Step.objects.order_by("id").values_list("name", "path", "test_case_id")),
        list(Plan.objects.values_list("name", "profile_kind", "users", "threshold_apd_ms")),
        list(MixEntry.objects.values_list("plan_id", "test_case_id", "weight")),
    )


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/projects/{project}/",
        "/api/v1/environments/{environment}/",
        "/api/v1/test-cases/{test_case}/",
        "/api/v1/plans/{plan}/",
    ],
)
def test_members_read_and_outsiders_get_404(persona, request, plan, path):
    codes = {
        "project": plan.project.code,
        "environment": plan.environment.code,
        "test_case": plan.mix.get().test_case.code,
        "plan": plan.code,
    }
    response = persona.get(path.format(**codes))
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=200, allowed=READERS)
    if name == "outsider":
        assert plan.name not in response.content.decode() and plan.project.name not in response.content.decode()


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_creating_a_test_case_needs_an_editor_or_a_write_token(persona, request, project, token_secret):
    before = snapshot()
    response = persona.post("/api/v1/test-cases/", case_document(project), format="json")
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=201, allowed=WRITERS)
    if response.status_code == 201:
        tc = TestCase.objects.get(code=response.json()["code"])
        assert [s.name for s in tc.steps.all()] == ["Form", "Post"]
        assert tc.steps.all()[0].extract == [
            {"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"}
        ]
    else:
        assert snapshot() == before


def test_a_write_token_creates_and_a_run_token_does_not(project, token_secret):
    from .conftest import bearer

    assert (
        bearer(token_secret("run")).post("/api/v1/test-cases/", case_document(project), format="json").status_code
        == 403
    )
    assert (
        bearer(token_secret("write")).post("/api/v1/test-cases/", case_document(project), format="json").status_code
        == 201
    )


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_replacing_and_deleting_a_plan_needs_an_editor(persona, request, plan, test_case):
    before = snapshot()
    document = plan_document(plan.project, plan.environment, test_case)
    put = persona.put(f"/api/v1/plans/{plan.code}/", document, format="json")
    delete = persona.delete(f"/api/v1/plans/{plan.code}/")
    name = request.node.callspec.params["persona"]
    assert put.status_code == expected(name, ok=200, allowed=WRITERS)
    assert delete.status_code == expected(name, ok=204, allowed=WRITERS)
    if name in WRITERS:
        assert not Plan.objects.filter(pk=plan.pk).exists()
    else:
        assert snapshot() == before


def test_a_plan_with_levels_thresholds_degradation_and_mix(alice, project, environment, test_case):
    response = session(alice).post("/api/v1/plans/", plan_document(project, environment, test_case), format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    plan = Plan.objects.get(code=body["code"])
    assert [lv.users for lv in plan.get_levels()] == [2, 4]
    assert (plan.threshold_apd_ms, plan.degradation_drop_pct) == (500, 40)
    assert [(e.test_case, e.weight) for e in plan.mix.all()] == [(test_case, 3)]
    assert body["problems"] == [] and body["duration_s"] == plan.duration == 7


def test_a_step_using_an_unknown_placeholder_gets_the_forms_message(alice, project):
    document = case_document(project)
    document["steps"][1]["body"] = "csrf={{token}}"

    response = session(alice).post("/api/v1/test-cases/", document, format="json")

    assert response.status_code == 400
    steps = response.json()["fields"]["steps"]
    assert steps[0] == {} and "{{token}}" in steps[1]["body"][0]
    assert not TestCase.objects.exists()  # the whole document was rolled back


def test_unknown_fields_are_refused_even_nested(alice, project):
    document = case_document(project)
    document["steps"][0]["wait"] = 3
    response = session(alice).post("/api/v1/test-cases/", document, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["steps"][0] == {"wait": ["Unknown field."]}


def test_a_name_taken_is_the_forms_message(alice, project, test_case):
    document = case_document(project, name=test_case.name)
    response = session(alice).post("/api/v1/test-cases/", document, format="json")
    assert response.json()["fields"]["name"] == [f"This project already has a test case called “{test_case.name}”."]


def test_a_test_case_in_a_mix_is_409_in_use(alice, plan, test_case):
    response = session(alice).delete(f"/api/v1/test-cases/{test_case.code}/")
    assert response.status_code == 409 and response.json()["code"] == "in_use"
    assert TestCase.objects.filter(pk=test_case.pk).exists()


def test_environments_list_their_configuration_and_a_patch_cannot_change_it(alice, environment):
    client = session(alice)
    body = client.get(f"/api/v1/environments/?project={environment.project.code}").json()["results"]
    assert body[0]["configuration"] == [{"key": "search.index", "value": "off"}]
    assert client.patch(f"/api/v1/environments/{environment.code}/", {}, format="json").status_code == 200
    changed = client.patch(
        f"/api/v1/environments/{environment.code}/",
        {"configuration": [{"key": "search.index", "value": "on"}]},
        format="json",
    )
    assert changed.status_code == 400
    assert Environment.objects.get().configuration == [{"key": "search.index", "value": "off"}]


def test_a_plan_cannot_use_another_projects_test_case(alice, project, environment, test_case, charlie):
    other = Project.objects.create(team=project.team, name="Other")
    foreign = TestCase.objects.create(project=other, name="Foreign")
    document = plan_document(project, environment, test_case)
    document["mix"].append({"test_case": str(foreign.code), "weight": 1})
    response = session(alice).post("/api/v1/plans/", document, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["mix"][1] == {"test_case": ["Not a test case of this plan's project."]}
    assert not Plan.objects.exists()


def test_a_100000_row_data_set_uploads_through_the_api(alice, test_case, token_secret):
    # given: 100,000 rows of user names and passwords (about 2.6 MB, above Django's default body limit)
    from django.core.files.uploadedfile import SimpleUploadedFile

    from .conftest import bearer

    lines = ["username,password", *(f"user{i:06d},secret-{i:06d}" for i in range(100_000))]
    upload = SimpleUploadedFile("users.csv", "\n".join(lines).encode(), content_type="text/csv")

    # when
    response = bearer(token_secret("write")).post(
        f"/api/v1/test-cases/{test_case.code}/data-set/", {"file": upload, "mode": "unique"}, format="multipart"
    )

    # then
    assert response.status_code == 201, response.json()
    assert response.json() == {
        "file_name": "users.csv",
        "columns": ["username", "password"],
        "row_count": 100_000,
        "mode": "unique",
    }
    assert test_case.get_data_set().rows[-1] == ["user099999", "secret-099999"]


def test_a_bad_data_set_gets_the_forms_message(alice, test_case):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("users.csv", b"user name,password\na,b\n", content_type="text/csv")
    response = session(alice).post(
        f"/api/v1/test-cases/{test_case.code}/data-set/", {"file": upload}, format="multipart"
    )
    assert response.status_code == 400
    assert "is not a valid name" in response.json()["fields"]["file"][0]


def test_a_viewer_cannot_upload_a_data_set(bob, test_case):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("users.csv", b"username\na\n", content_type="text/csv")
    response = session(bob).post(f"/api/v1/test-cases/{test_case.code}/data-set/", {"file": upload}, format="multipart")
    assert response.status_code == 403
    assert test_case.get_data_set() is None


def test_a_body_above_the_limit_is_413_in_the_error_shape(alice, project):
    document = case_document(project, description="y" * 6_000_000)
    response = session(alice).post("/api/v1/test-cases/", document, format="json")
    assert response.status_code == 413
    assert response.json()["code"] == "too_large"
    assert not TestCase.objects.exists()


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_projects_are_created_renamed_and_deleted_by_editors(persona, request, project, team):
    before = snapshot()
    name = request.node.callspec.params["persona"]
    created = persona.post("/api/v1/projects/", {"team": str(team.code), "name": "Shop"}, format="json")
    renamed = persona.put(f"/api/v1/projects/{project.code}/", {"name": "Intranet 2"}, format="json")
    deleted = persona.delete(f"/api/v1/projects/{project.code}/")
    assert created.status_code == expected(name, ok=201, allowed=WRITERS)
    assert renamed.status_code == expected(name, ok=200, allowed=WRITERS)
    assert deleted.status_code == expected(name, ok=204, allowed=WRITERS)
    if name in WRITERS:
        assert list(Project.objects.values_list("name", flat=True)) == ["Shop"]
    else:
        assert snapshot() == before


def test_a_project_name_taken_in_the_team_gets_the_forms_message(alice, project, team):
    response = session(alice).post("/api/v1/projects/", {"team": str(team.code), "name": "intranet"}, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["name"] == [f"{team} already has a project called “intranet”."]


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_environments_are_created_and_changed_by_editors_but_never_their_configuration(persona, request, project):
    name = request.node.callspec.params["persona"]
    document = {
        "project": str(project.code),
        "name": "Production",
        "base_url": "http://127.0.0.1:9000",
        "configuration": [{"key": "iis.max_processes", "value": "7"}],
        "servers": [{"name": "web-01", "role": "web"}, {"name": "sql-01", "role": "database"}],
    }
    created = persona.post("/api/v1/environments/", document, format="json")
    assert created.status_code == expected(name, ok=201, allowed=WRITERS)
    if created.status_code != 201:
        assert not Environment.objects.exists()
        return
    body = created.json()
    assert body["configuration"] == [{"key": "iis.max_processes", "value": "7"}]
    assert [s["name"] for s in body["servers"]] == ["web-01", "sql-01"]

    # a PUT changes servers and name; a configuration in it is refused, pointing to tuning changes
    changed = persona.put(
        f"/api/v1/environments/{body['code']}/",
        {**document, "name": "Prod", "servers": [{"name": "web-02"}], "configuration": []},
        format="json",
    )
    assert changed.status_code == 400 and "tuning changes" in changed.json()["fields"]["configuration"][0]
    del document["configuration"]
    changed = persona.put(
        f"/api/v1/environments/{body['code']}/",
        {**document, "name": "Prod", "servers": [{"name": "web-02"}]},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    env = Environment.objects.get()
    assert (env.name, [s.name for s in env.servers.all()]) == ("Prod", ["web-02"])
    assert env.configuration == [{"key": "iis.max_processes", "value": "7"}]


def test_a_base_url_with_a_path_gets_the_forms_message(alice, project):
    document = {"project": str(project.code), "name": "X", "base_url": "http://127.0.0.1:9000/app"}
    response = session(alice).post("/api/v1/environments/", document, format="json")
    assert response.status_code == 400
    assert "paths belong in the test cases' steps" in response.json()["fields"]["base_url"][0]


@pytest.mark.parametrize(
    ("base_url", "reason"),
    [("htp://127.0.0.1:9000", "Use an http:// or https:// URL."), ("http://127.1:9000", "dotted-decimal IPv4")],
)
def test_a_bad_base_url_gets_its_reason_not_a_generic_message(alice, project, base_url, reason):
    document = {"project": str(project.code), "name": "X", "base_url": base_url}
    response = session(alice).post("/api/v1/environments/", document, format="json")
    assert response.status_code == 400
    assert reason in response.json()["fields"]["base_url"][0]


def test_an_environment_names_where_its_target_reports_its_configuration(alice, project):
    document = {"project": str(project.code), "name": "X", "base_url": "http://127.0.0.1:9000"}
    url = "http://127.0.0.1:9000/_demo/knobs"
    created = session(alice).post("/api/v1/environments/", {**document, "config_url": url}, format="json")
    assert created.status_code == 201 and created.json()["config_url"] == url
    bad = session(alice).post(
        "/api/v1/environments/", {**document, "name": "Y", "config_url": "htp://x"}, format="json"
    )
    assert bad.status_code == 400 and "config_url" in bad.json()["fields"]


def test_an_environment_used_by_a_plan_is_409_in_use(alice, plan):
    response = session(alice).delete(f"/api/v1/environments/{plan.environment.code}/")
    assert response.status_code == 409 and "Smoke" in response.json()["detail"]


@pytest.mark.parametrize(
    "path", ["/api/v1/plans/", "/api/v1/test-cases/", "/api/v1/environments/", "/api/v1/projects/"]
)
def test_lists_take_a_fixed_number_of_queries(alice, plan, test_case, path, django_assert_max_num_queries):
    # given: 20 more of everything
    for n in range(20):
        tc = TestCase.objects.create(project=plan.project, name=f"Case {n}")
        Step.objects.create(test_case=tc, name="Home", path="/")
        p = Plan.objects.create(project=plan.project, environment=plan.environment, name=f"Plan {n}")
        MixEntry.objects.create(plan=p, test_case=tc, weight=1)
        Environment.objects.create(project=plan.project, name=f"Env {n}", base_url="http://127.0.0.1:9")
        Project.objects.create(team=plan.project.team, name=f"Project {n}")
    client = session(alice)

    # when / then: the same handful of queries as for one row
    with django_assert_max_num_queries(10):
        response = client.get(path)
    assert response.json()["count"] >= 21


def test_the_session_needs_csrf_for_writes(alice, plan):
    from rest_framework.test import APIClient

    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    refused = client.post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    client.get("/tokens/")  # any page sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    allowed = client.post(f"/api/v1/plans/{plan.code}/runs/", {}, format="json", HTTP_X_CSRFTOKEN=token)
    assert allowed.status_code == 201


@pytest.mark.parametrize("persona", PERSONAS, indirect=True)
def test_removing_a_data_set_needs_an_editor(persona, request, test_case):
    from portal.projects.models import DataSet

    DataSet.objects.create(test_case=test_case, file_name="u.csv", columns=["u"], rows=[["a"]], row_count=1)
    response = persona.delete(f"/api/v1/test-cases/{test_case.code}/data-set/")
    name = request.node.callspec.params["persona"]
    assert response.status_code == expected(name, ok=204, allowed=WRITERS)
    assert DataSet.objects.exists() is (response.status_code != 204)


@pytest.mark.parametrize("weight", [-1, 0, 10_001])
def test_a_mix_weight_out_of_range_gives_one_rule_whatever_the_number(alice, project, environment, test_case, weight):
    document = plan_document(project, environment, test_case)
    document["mix"][0]["weight"] = weight
    response = session(alice).post("/api/v1/plans/", document, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["mix"][0] == {"weight": ["Give a whole number from 1 to 10,000."]}
    assert not Plan.objects.exists()
