"""Imported runs in the portal: the command, the same file twice, bad files, and the pages that read runs."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.history import services as history
from portal.history.models import TuningChange
from portal.runs.models import Run, ShardInterval
from tests.portal.runs.test_result_files import METRIC, point, request

pytestmark = pytest.mark.django_db


@pytest.fixture
def k6_json(tmp_path):
    lines = [METRIC]
    for second in range(6):
        lines.append(point("vus", 2, f"2026-11-24T17:44:{second:02d}.0Z"))
        lines += request(second, 5.0 + second) + request(second, 7.0, name="Search")
    lines += request(5, 9.0, status="500", expected="false")
    path = tmp_path / "results.json"
    path.write_text("\n".join(lines) + "\n")
    return path


def _import(path, environment, *more) -> str:
    out = io.StringIO()
    call_command(
        "import_results",
        str(path),
        *more,
        "--project",
        environment.project.name,
        "--environment",
        environment.name,
        stdout=out,
        stderr=io.StringIO(),
    )
    return out.getvalue()


def test_the_command_imports_a_run_and_prints_its_url(k6_json, environment, settings):
    out = _import(k6_json, environment)

    run = Run.objects.get()
    assert out == f"{settings.SITE_URL}{run.get_absolute_url()}\n"
    assert (run.kind, run.status, run.plan, run.environment) == ("imported", "passed", None, environment)
    assert run.summary["whole_run"]["hits"] == 13 and run.summary["whole_run"]["errors"] == 1
    assert ShardInterval.objects.filter(run=run).count() == 6
    pages = {p["label"]: (p["pages"], p["errors"]) for p in run.summary["pages"]}
    assert pages == {"Home": (7, 1), "Search": (6, 0)}
    assert run.summary["errors"][0]["kind"] == "http_status" and run.summary["errors"][0]["sample"] == "HTTP 500"
    assert run.config_snapshot == environment.configuration and run.tuning_change is None


def test_the_same_file_twice_is_one_run(k6_json, environment):
    first = _import(k6_json, environment)
    second = _import(k6_json, environment)
    assert first == second and Run.objects.count() == 1


def test_an_import_records_the_configuration_it_was_measured_under(k6_json, environment, alice):
    change = history.change_create(
        environment=environment,
        user=alice,
        edits=[{"key": "search.index", "value": "on"}],
        category=TuningChange.Category.INDEX,
        title="Index",
    )
    history.change_apply(change, user=alice)
    TuningChange.objects.filter(pk=change.pk).update(applied_at="2026-11-24T17:00:00Z")  # before the file's start
    _import(k6_json, environment)
    run = Run.objects.get()
    assert run.tuning_change == change
    assert run.config_snapshot == [{"key": "search.index", "value": "on"}]


def test_bad_files_are_named_and_leave_nothing(tmp_path, k6_json, environment):
    bad = tmp_path / "cut.json"
    bad.write_text(k6_json.read_text()[:-40])
    with pytest.raises(CommandError, match="1 of 2 files could not be imported"):
        _import(bad, environment, str(k6_json))
    assert Run.objects.count() == 1  # the good one
    assert not Run.objects.filter(source__file_name="cut.json").exists()
    with pytest.raises(CommandError, match="No environment “Nope”"):
        call_command("import_results", str(k6_json), "--project", environment.project.name, "--environment", "Nope")


def test_the_pages_that_read_runs_read_an_imported_one(k6_json, environment, client, alice, charlie):
    _import(k6_json, environment)
    client.force_login(alice)
    alice_client = client
    run = Run.objects.get()
    page = alice_client.get(run.get_absolute_url())
    text = page.content.decode()
    assert page.status_code == 200
    assert "imported</span> from <strong>k6</strong>" in text and "results.json" in text
    assert "Search" in text and "6 s recorded" in text
    assert alice_client.get(reverse("runs:series", args=[run.code])).status_code == 200
    listing = alice_client.get(reverse("runs:project", args=[environment.project.code])).content.decode()
    assert 'title="k6 results: results.json">imported</span>' in listing
    compare = alice_client.get(
        reverse("history:compare", args=[environment.project.code]), {"a": run.code, "b": run.code}
    )
    assert compare.status_code == 200
    journey = alice_client.get(reverse("history:environment-journey", args=[environment.code]))
    assert journey.status_code == 200
    client.force_login(charlie)
    assert client.get(run.get_absolute_url()).status_code == 404


def _upload(client, environment, *paths, **data):
    files = []
    for path in paths:
        f = io.BytesIO(path.read_bytes())
        f.name = path.name
        files.append(f)
    return client.post(reverse("runs:import", args=[environment.code]), {"files": files, **data}, follow=True)


def test_several_files_on_the_environment_page_one_run_each(k6_json, tmp_path, environment, alice_client):
    other = tmp_path / "second.json"
    other.write_text(k6_json.read_text().replace("17:44:", "17:50:"))
    bad = tmp_path / "notes.txt"
    bad.write_text("not results")
    page = alice_client.get(environment.get_absolute_url()).content.decode()
    assert reverse("runs:import", args=[environment.code]) in page

    response = _upload(alice_client, environment, k6_json, other, bad)

    text = response.content.decode()
    assert response.redirect_chain[-1][0] == environment.get_absolute_url()
    runs = list(Run.objects.order_by("number"))
    assert [r.source["file_name"] for r in runs] == ["results.json", "second.json"]
    assert "results.json imported as run #1." in text and "second.json imported as run #2." in text
    assert "notes.txt: This is not a result file Plimsoll reads" in text
    assert all(r.created_by.username == "alice" for r in runs)
    again = _upload(alice_client, environment, k6_json).content.decode()
    assert "results.json was already imported as run #1." in again and Run.objects.count() == 2


def test_a_file_over_the_limit_is_refused_and_nothing_imported(k6_json, environment, alice_client, settings):
    settings.PLIMSOLL_RESULT_UPLOAD_MAX_MB = 1
    big = k6_json.parent / "big.json"
    big.write_bytes(k6_json.read_bytes() + b" " * (1024 * 1024))
    response = _upload(alice_client, environment, k6_json, big)
    assert response.status_code == 400 and "Over the 1 MB limit: big.json" in response.content.decode()
    assert not Run.objects.exists()


def test_viewers_and_outsiders_cannot_import(k6_json, environment, client, bob, charlie):
    url = reverse("runs:import", args=[environment.code])
    client.force_login(charlie)
    assert client.get(url).status_code == 404
    client.force_login(bob)
    assert client.get(url).status_code == 403
    assert _upload(client, environment, k6_json).status_code == 403
    assert url not in client.get(environment.get_absolute_url()).content.decode()
    assert not Run.objects.exists()


def test_an_import_for_a_plan_joins_its_journey_and_is_judged_by_its_thresholds(k6_json, plan):
    from portal.history.journey import environment_journey

    plan.threshold_apd_ms = 5  # the file's APD is above 5 ms: the import fails the plan's thresholds
    plan.save()
    _import(k6_json, plan.environment, "--plan", plan.name)

    run = Run.objects.get()
    assert (run.plan, run.plan_name, run.status) == (plan, plan.name, "failed")
    assert run.summary["thresholds"][0]["passed"] is False
    journey = environment_journey(plan.environment, plan)
    assert [p["number"] for p in journey["points"]] == [run.number]
    with pytest.raises(CommandError, match="no plan called “Nope”"):
        _import(k6_json, plan.environment, "--plan", "Nope")


def test_the_upload_form_offers_the_projects_plans(k6_json, plan, alice_client):
    page = alice_client.get(reverse("runs:import", args=[plan.environment.code])).content.decode()
    assert f'<option value="{plan.code}">Smoke</option>' in page
    _upload(alice_client, plan.environment, k6_json, plan=str(plan.code))
    assert Run.objects.get().plan == plan


def test_an_import_whose_process_dies_before_finalize_is_finished_by_the_watchdog(
    k6_json, environment, monkeypatch, settings
):
    from portal.runs import services

    monkeypatch.setattr(services, "_finalize", lambda run_id: None)  # the process "dies" after the rows' commit
    _import(k6_json, environment)
    monkeypatch.undo()
    run = Run.objects.get()
    assert run.status == Run.Status.FINISHING and run.summary is None

    settings.PLIMSOLL_FINALIZE_TIMEOUT = 0
    from tests.portal.runs.test_store import _sent_retries
    from workers.tasks import finalize_retry_task

    _sent_retries()
    services.finalize_stuck()
    assert _sent_retries() == [run.id]  # sent as a task of its own, run here as a worker would
    finalize_retry_task(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.PASSED and run.summary["whole_run"]["hits"] == 13
