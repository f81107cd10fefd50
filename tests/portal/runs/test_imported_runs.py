"""Imported runs in the portal: the command, the same file twice, bad files, and the pages that read runs."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.history import services as history
from portal.history.models import TrialSet, TuningChange
from portal.runs import services
from portal.runs.models import ResultImport, Run, ShardInterval
from tests.portal.runs.test_result_files import METRIC, point, request

pytestmark = pytest.mark.django_db


@pytest.fixture
def k6_json(tmp_path):
    lines = [METRIC]
    for second in range(6):
        lines.append(point("vus", 2, f"2026-11-24T17:44:{second:02d}.0Z"))
        lines += request(second, 5.0 + second) + request(second, 7.0, name="Search")
    lines += request(5, 9.0, status="500", expected="false")
    lines.append(point("vus", 0, "2026-11-24T17:44:06.0Z"))  # the test's end: it ran 6 s
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
    assert (run.kind, run.status, run.plan, run.environment) == ("imported", "finished", None, environment)
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
    # a second import of the same results (a copy with one more blank line: another file) to compare it with
    again = k6_json.with_name("again.json")
    again.write_text(k6_json.read_text() + "\n")
    _import(again, environment)
    other = Run.objects.exclude(pk=run.pk).get()
    compare = alice_client.get(
        reverse("history:compare", args=[environment.project.code]), {"a": run.code, "b": other.code}
    )
    assert compare.status_code == 200
    words = compare.content.decode()
    assert "k6 · results.json" in words and "k6 · again.json" in words  # the source beside each run
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


@pytest.fixture
def tasks_at_commit(django_capture_on_commit_callbacks):
    """Runs a block's on_commit callbacks with Celery tasks in this process: the task's code runs as in a worker."""
    from workers.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield lambda: django_capture_on_commit_callbacks(execute=True)
    app.conf.task_always_eager = before


def test_several_files_on_the_environment_page_one_run_each(
    k6_json, tmp_path, environment, alice_client, tasks_at_commit, settings
):
    other = tmp_path / "second.json"
    other.write_text(k6_json.read_text().replace("17:44:", "17:50:"))
    bad = tmp_path / "notes.txt"
    bad.write_text("not results")
    page = alice_client.get(environment.get_absolute_url()).content.decode()
    assert reverse("runs:import", args=[environment.code]) in page

    # when: three files uploaded; their imports run as background tasks after the request's commit
    with tasks_at_commit():
        response = _upload(alice_client, environment, k6_json, other, bad)

    # then: one run per good file, the bad one's reason on the page, every upload deleted
    assert response.redirect_chain[-1][0] == reverse("runs:import", args=[environment.code])
    assert "3 files queued for import" in response.content.decode()
    runs = list(Run.objects.order_by("number"))
    assert [r.source["file_name"] for r in runs] == ["results.json", "second.json"]
    assert all(r.created_by.username == "alice" for r in runs)
    imports = {i.file_name: i for i in ResultImport.objects.all()}
    assert {n: i.status for n, i in imports.items()} == {
        "results.json": "done",
        "second.json": "done",
        "notes.txt": "failed",
    }
    assert imports["results.json"].bytes_read == imports["results.json"].bytes_total == k6_json.stat().st_size
    assert not any(services.result_upload_path(i).exists() for i in imports.values())
    text = alice_client.get(reverse("runs:import", args=[environment.code])).content.decode()
    assert runs[0].get_absolute_url() in text and runs[1].get_absolute_url() in text
    assert "This is not a result file Plimsoll reads" in text
    assert 'hx-trigger="every 1s"' not in text  # nothing under way: the page stops polling

    # and: the same file again finds its run
    with tasks_at_commit():
        _upload(alice_client, environment, k6_json)
    assert Run.objects.count() == 2
    assert ResultImport.objects.filter(run=runs[0], already_imported=True).count() == 1


def test_an_import_under_way_is_polled_with_its_progress(k6_json, environment, alice_client, settings):
    # given: a file queued (no worker has taken it yet), then read halfway
    response = _upload(alice_client, environment, k6_json)
    item = ResultImport.objects.get()
    stored = settings.VAR_DIR / "result-uploads" / f"{item.code}.upload"
    assert stored.read_bytes() == k6_json.read_bytes() and stored.stat().st_mode & 0o777 == 0o600
    ResultImport.objects.filter(id=item.id).update(status="reading", bytes_read=item.bytes_total // 2)

    # when: the page polls
    part = alice_client.get(reverse("runs:import", args=[environment.code]), headers={"HX-Request": "true"})

    # then: the list alone, still polling, with the bytes read
    text = part.content.decode()
    assert text.lstrip().startswith('<section id="imports"') and 'hx-trigger="every 1s"' in text
    assert 'aria-valuenow="49"' in text or 'aria-valuenow="50"' in text
    assert "Reading" in text and response.status_code == 200

    # and: the worker's task finishes it and deletes the upload
    ResultImport.objects.filter(id=item.id).update(status="queued")
    services.result_import_process(item.id)
    item.refresh_from_db()
    assert item.status == "done" and item.run is not None and not stored.exists()
    services.result_import_process(item.id)  # a second delivery of the task does nothing
    assert Run.objects.count() == 1


def test_a_malformed_line_fails_the_import_with_its_number_and_nothing_imported(
    tmp_path, environment, alice_client, tasks_at_commit
):
    path = tmp_path / "results.jtl"
    path.write_text("timeStamp,elapsed,label,success\n1795543128000,5,Home,true\n1795543128100,five,Home,true\n")
    with tasks_at_commit():
        _upload(alice_client, environment, path)
    item = ResultImport.objects.get()
    assert item.status == "failed" and item.error.startswith("Line 3 is not a JMeter JTL line")
    assert not Run.objects.exists() and not ShardInterval.objects.exists()
    assert (
        "Line 3 is not a JMeter JTL line"
        in alice_client.get(reverse("runs:import", args=[environment.code])).content.decode()
    )


def test_an_import_whose_worker_was_lost_is_failed_by_the_sweep(k6_json, environment, alice_client, settings):
    from datetime import timedelta

    from django.utils import timezone

    _upload(alice_client, environment, k6_json)
    item = ResultImport.objects.get()
    ResultImport.objects.filter(id=item.id).update(status="reading", updated_at=timezone.now() - timedelta(hours=1))
    assert services.result_imports_sweep() == 1
    item.refresh_from_db()
    assert item.status == "failed" and "worker reading it was lost" in item.error
    assert not (settings.VAR_DIR / "result-uploads" / f"{item.code}.upload").exists()


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


def test_an_imported_run_leaves_stream_thresholds_not_judged_and_is_judged_by_the_others(k6_json, plan, alice_client):
    from portal.runs.exports.junit import junit_xml

    # A k6 file carries no streams: the plan's time-to-first-event and HTTP/2 share thresholds cannot be judged
    plan.threshold_ttfe_p95_ms, plan.threshold_min_h2_share_pct = 800, 90
    plan.save()
    _import(k6_json, plan.environment, "--plan", plan.name)
    run = Run.objects.get()
    judged = {t["name"]: t for t in run.summary["thresholds"]}
    assert judged["Time to first event p95"]["passed"] is None and judged["HTTP/2 share"]["passed"] is None
    assert judged["Time to first event p95"]["not_judged"] == "not judged: the imported file has no such figure"
    # only thresholds not judged: no verdict, as an import without thresholds
    assert (run.summary["verdict"], run.status) == (None, "finished")
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'not judged</span> <span class="small muted">the imported file has no such figure' in page
    xml = junit_xml(run)
    assert 'skipped message="Time to first event p95: not judged: the imported file has no such figure"' in xml
    assert "<failure" not in xml
    api = alice_client.get(reverse("api:run-detail", args=[run.code])).json()
    assert {t["name"]: t["passed"] for t in api["thresholds"]}["HTTP/2 share"] is None

    # With a page threshold beside them, the verdict is that threshold's: it held, so the import passed.
    run.delete()
    plan.threshold_apd_ms = 60_000
    plan.save()
    _import(k6_json, plan.environment, "--plan", plan.name)
    run = Run.objects.get()
    assert (run.summary["verdict"], run.status) == ("passed", "passed")


def test_the_upload_form_offers_the_projects_plans(k6_json, plan, alice_client, tasks_at_commit):
    page = alice_client.get(reverse("runs:import", args=[plan.environment.code])).content.decode()
    assert f'<option value="{plan.code}">Smoke</option>' in page
    with tasks_at_commit():
        _upload(alice_client, plan.environment, k6_json, plan=str(plan.code))
    assert Run.objects.get().plan == plan


def test_an_import_whose_process_dies_before_finalize_is_finished_by_the_watchdog(
    k6_json, environment, monkeypatch, settings
):
    from portal.runs import services

    monkeypatch.setattr(services.imports, "_finalize", lambda run_id: None)  # the process "dies" after the rows' commit
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
    assert run.status == Run.Status.FINISHED and run.summary["whole_run"]["hits"] == 13


def _jtl(tmp_path, name: str, start_s: int, elapsed_ms: int):
    rows = ["timeStamp,elapsed,label,responseCode,success"]
    rows += [f"{(start_s + i // 10) * 1000 + i % 10 * 90},{elapsed_ms + i % 7},Home,200,true" for i in range(60)]
    path = tmp_path / name
    path.write_text("\n".join(rows) + "\n")
    return path


def test_imported_runs_make_trial_sets_that_compare_and_show_their_source(tmp_path, plan, alice_client, bob, client):
    # given: six JMeter results of the plan on one configuration, three slow and three fast
    environment = plan.environment
    for i, elapsed in enumerate((300, 310, 305, 100, 104, 98)):
        _import(_jtl(tmp_path, f"week{i}.jtl", 1_795_000_000 + i * 3600, elapsed), environment, "--plan", plan.name)
    runs = list(Run.objects.order_by("number"))
    url = reverse("history:trialset-from-runs", args=[environment.code])

    # when: the first three and the last three become trial sets, from the import page's form
    page = alice_client.get(reverse("runs:import", args=[environment.code])).content.decode()
    assert "#1 Smoke" in page and "JMeter · week0.jtl" in page
    before = alice_client.post(url, {"runs": [r.code for r in runs[:3]], "label": "slow"}, follow=True)
    after = alice_client.post(url, {"runs": [r.code for r in runs[3:]]}, follow=True)

    # then: two done sets of the plan; comparing them says the second is faster, beyond the noise
    slow, fast = TrialSet.objects.order_by("id")
    assert before.redirect_chain[-1][0] == slow.get_absolute_url() and after.status_code == 200
    assert (slow.status, slow.size, slow.plan, slow.label, fast.size) == ("done", 3, plan, "slow", 3)
    assert set(slow.runs.all()) == set(runs[:3])
    compare = alice_client.get(reverse("history:compare", args=[plan.project.code]), {"a": slow.code, "b": fast.code})
    text = compare.content.decode()
    assert compare.status_code == 200 and "better" in text and "JMeter · week3.jtl" in text
    # and: the journey of the plan names each imported run's source
    journey = alice_client.get(reverse("history:environment-journey", args=[environment.code]), {"plan": plan.code})
    assert 'is imported: <span class="badge imported">JMeter · week5.jtl</span>' in journey.content.decode()

    # and: a run already in a set, a single run, or a viewer are refused; nothing changes
    again = alice_client.post(url, {"runs": [runs[0].code, runs[3].code]}, follow=True).content.decode()
    assert "Already in a trial set: #1, #4." in again
    client.force_login(bob)
    assert client.post(url, {"runs": [r.code for r in runs[:2]]}).status_code == 403
    assert TrialSet.objects.count() == 2


def test_a_trial_set_needs_one_configuration(tmp_path, environment, alice):
    from portal.history.services import TrialSetRefused, trialset_from_runs

    _import(_jtl(tmp_path, "a.jtl", 1_795_000_000, 100), environment)
    change = history.change_create(
        environment=environment,
        user=alice,
        edits=[{"key": "search.index", "value": "on"}],
        category=TuningChange.Category.INDEX,
        title="Index",
    )
    history.change_apply(change, user=alice)
    TuningChange.objects.filter(pk=change.pk).update(applied_at="2026-11-24T17:00:00Z")  # between the two files
    _import(_jtl(tmp_path, "b.jtl", 1_900_000_000, 100), environment)
    with pytest.raises(TrialSetRefused, match="different configurations"):
        trialset_from_runs(runs=list(Run.objects.all()), user=alice)
    with pytest.raises(TrialSetRefused, match="at least two runs"):
        trialset_from_runs(runs=[Run.objects.first()], user=alice)


def test_an_import_whose_only_thresholds_are_stream_thresholds_says_everywhere_that_they_were_not_judged(
    k6_json, plan, alice_client
):
    import html
    import json
    import re
    import xml.etree.ElementTree as ET

    from portal.notifications.services import run_events, run_payload
    from tests.portal.sharing.test_share_links import public, share

    # given: a plan whose only thresholds are on streams and HTTP/2, and a k6 file (no such figures) imported for it
    plan.threshold_ttfe_p95_ms, plan.threshold_min_h2_share_pct = 800, 90
    plan.save()
    _import(k6_json, plan.environment, "--plan", plan.name)
    run = Run.objects.get()
    assert (run.status, run.verdict, run.not_judged) == ("finished", None, ["Time to first event p95", "HTTP/2 share"])
    words = (
        "its thresholds (Time to first event p95, HTTP/2 share) were not judged: the imported file has no such "
        "figure (no other tool's result file carries stream, WebSocket or HTTP/2 figures), so there is no pass/fail "
        "verdict."
    )

    # then the share page's sentence says so, and never that the plan sets no thresholds
    _, token = share(alice_client, run.project, kind="run", run=run.code)
    shared = html.unescape(public(token).content.decode())
    headline = re.search(r'id="share-headline">(.*?)</p>', shared, re.S).group(1)
    assert headline.endswith(f"errors: {words}"), headline
    assert "sets no thresholds" not in shared and "every threshold held" not in shared
    # the run page (its header and the report the share page shows too) in the same words
    page = html.unescape(alice_client.get(run.get_absolute_url()).content.decode())
    assert 'id="not-judged-badge"' in page
    sentence = words[:1].upper() + words[1:]
    assert f'<p class="small" id="not-judged">{sentence}</p>' in page
    assert f'<p class="small" id="not-judged">{sentence}</p>' in shared
    assert "sets no thresholds" not in page
    # summary.json and the notification's headline
    data = json.loads(alice_client.get(f"/api/v1/runs/{run.code}/summary.json").content)
    assert (data["status"], data["verdict"], data["verdict_sentence"]) == ("finished", None, sentence)
    assert run_payload(run, run_events(run))["headline"] == f"Run #{run.number} of {plan.name}: finished. {sentence}"
    # JUnit: each threshold a skipped case with the reason, nothing failed, no "no thresholds" case
    junit = ET.fromstring(alice_client.get(f"/api/v1/runs/{run.code}/junit.xml").content)
    skipped = [c.find("skipped").get("message") for c in junit.iter("testcase")]
    assert skipped == [
        "Time to first event p95: not judged: the imported file has no such figure",
        "HTTP/2 share: not judged: the imported file has no such figure",
    ]
    assert junit.get("failures") == "0" and "sets no thresholds" not in ET.tostring(junit, encoding="unicode")


def test_an_import_that_passed_its_page_thresholds_says_which_ones_were_not_judged(k6_json, plan, alice_client):
    import re

    from tests.portal.sharing.test_share_links import public, share

    plan.threshold_apd_ms, plan.threshold_rtt_p95_ms = 60_000, 50
    plan.save()
    _import(k6_json, plan.environment, "--plan", plan.name)
    run = Run.objects.get()
    assert (run.status, run.verdict) == ("passed", "passed")

    _, token = share(alice_client, run.project, kind="run", run=run.code)
    headline = re.search(r'id="share-headline">(.*?)</p>', public(token).content.decode(), re.S).group(1)
    assert headline.endswith(
        "errors: every threshold it could judge held; WebSocket round trip p95 was not judged: "
        "the imported file has no such figure."
    ), headline
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert "thresholds held" in page and 'id="not-judged-badge"' not in page
    assert 'id="not-judged">Every threshold it could judge held; WebSocket round trip p95 was not judged' in page
