"""Every projects page for each persona: alice (owner) may do it, bob (viewer) may only read, charlie sees nothing.

Each endpoint names the fixture its URL takes and, for writes, a valid post; the
dedicated test modules check what the pages do, this one who may reach them.
"""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from portal.projects.models import DataSet, TestCase

from .data import environment_data, plan_data, step_data


@pytest.fixture
def objects(project, environment, test_case, plan, step, mix_entry):
    other = TestCase.objects.create(project=project, name="Search")
    DataSet.objects.create(test_case=test_case, file_name="u.csv", columns=["username"], rows=[["a"]], row_count=1)
    return {
        "project": project,
        "environment": environment,
        "test_case": test_case,
        "plan": plan,
        "step": step,
        "mix_entry": mix_entry,
        "other_test_case": other,
    }


def _url(name, objects, target, *extra):
    obj = objects[target]
    key = obj.pk if target == "mix_entry" else obj.code
    return reverse(name, args=[key, *extra])


# Pages anyone in the team reads.
READS = [
    ("projects:detail", "project"),
    ("projects:environment", "environment"),
    ("projects:testcase", "test_case"),
    ("projects:plan", "plan"),
]

# Pages that are themselves part of a change (forms, confirmations): viewers get 403 already on GET.
WRITE_PAGES = [
    ("projects:edit", "project"),
    ("projects:delete", "project"),
    ("projects:environment-new", "project"),
    ("projects:environment-edit", "environment"),
    ("projects:environment-delete", "environment"),
    ("projects:testcase-new", "project"),
    ("projects:testcase-edit", "test_case"),
    ("projects:testcase-delete", "test_case"),
    ("projects:step-new", "test_case"),
    ("projects:step-edit", "step"),
    ("projects:step-delete", "step"),
    ("projects:data-set-upload", "test_case"),
    ("projects:data-set-delete", "test_case"),
    ("projects:plan-new", "project"),
    ("projects:plan-edit", "plan"),
    ("projects:plan-delete", "plan"),
]

# (name, target fixture, extra URL args, data builder): each a valid change when alice posts it.
POSTS = [
    ("projects:edit", "project", (), lambda o: {"name": "Extranet", "description": ""}),
    ("projects:delete", "project", (), lambda o: {}),
    ("projects:environment-new", "project", (), lambda o: environment_data()),
    ("projects:environment-edit", "environment", (), lambda o: environment_data(name="Staging 2")),
    ("projects:environment-delete", "environment", (), lambda o: {}),
    ("projects:testcase-new", "project", (), lambda o: {"name": "Upload", "description": ""}),
    ("projects:testcase-edit", "test_case", (), lambda o: {"name": "Browse 2", "description": ""}),
    ("projects:testcase-delete", "test_case", (), lambda o: {}),
    ("projects:step-new", "test_case", (), lambda o: step_data()),
    ("projects:step-edit", "step", (), lambda o: step_data(name="Home 2", path="/")),
    ("projects:step-delete", "step", (), lambda o: {}),
    ("projects:step-move", "step", ("down",), lambda o: {}),
    (
        "projects:data-set-upload",
        "test_case",
        (),
        lambda o: {"file": SimpleUploadedFile("t.csv", b"term\nreport\n"), "mode": "random"},
    ),
    ("projects:data-set-mode", "test_case", (), lambda o: {"mode": "unique"}),
    ("projects:data-set-delete", "test_case", (), lambda o: {}),
    ("projects:plan-new", "project", (), lambda o: plan_data(o["environment"])),
    ("projects:plan-edit", "plan", (), lambda o: plan_data(o["environment"], name="Smoke 2")),
    ("projects:plan-delete", "plan", (), lambda o: {}),
    ("projects:mix-add", "plan", (), lambda o: {"test_case": str(o["other_test_case"].code), "weight": "2"}),
    ("projects:mix-update", "mix_entry", (), lambda o: {"weight": "3"}),
    ("projects:mix-delete", "mix_entry", (), lambda o: {}),
    ("projects:mix-move", "mix_entry", ("up",), lambda o: {}),
]

ALL_GETS = READS + WRITE_PAGES


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "target"), ALL_GETS)
def test_alice_opens_every_page(alice_client, objects, name, target):
    # when
    response = alice_client.get(_url(name, objects, target))
    # then
    assert response.status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "target", "extra", "data"), POSTS)
def test_alice_makes_every_change(alice_client, objects, name, target, extra, data):
    # when
    response = alice_client.post(_url(name, objects, target, *extra), data(objects))
    # then: done (or refused with a message), and back to a page
    assert response.status_code == 302, response.content.decode()[:2000]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "target"), READS)
def test_bob_reads_every_page(bob_client, objects, name, target):
    # when
    response = bob_client.get(_url(name, objects, target))
    # then
    assert response.status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "target"), WRITE_PAGES)
def test_bob_gets_403_on_every_form(bob_client, objects, name, target):
    # when
    response = bob_client.get(_url(name, objects, target))
    # then
    assert response.status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "target", "extra", "data"), POSTS)
def test_bob_gets_403_on_every_change(bob_client, objects, name, target, extra, data):
    # given
    before = _snapshot()
    # when
    response = bob_client.post(_url(name, objects, target, *extra), data(objects))
    # then
    assert response.status_code == 403
    assert _snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "target"), ALL_GETS)
def test_charlie_gets_404_on_every_page(charlie_client, objects, name, target):
    # when
    response = charlie_client.get(_url(name, objects, target))
    # then
    assert response.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "target", "extra", "data"), POSTS)
def test_charlie_gets_404_on_every_change(charlie_client, objects, name, target, extra, data):
    # given
    before = _snapshot()
    # when
    response = charlie_client.post(_url(name, objects, target, *extra), data(objects))
    # then
    assert response.status_code == 404
    assert _snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "target"), READS)
def test_anonymous_is_sent_to_log_in(client, objects, name, target):
    # when
    response = client.get(_url(name, objects, target))
    # then
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def _snapshot():
    """Everything the projects pages can change, as plain values."""
    from portal.projects.models import Environment, MixEntry, Plan, PlanLevel, Project, Server, Step

    models = (Project, Environment, Server, TestCase, Step, Plan, PlanLevel, MixEntry, DataSet)
    return {m.__name__: sorted(map(repr, m.objects.values())) for m in models}
