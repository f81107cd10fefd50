"""Stop criteria (issue 24 item 7): the rules, their windows over real interval rows, the stop, and every reader."""

import json
from datetime import timedelta
from xml.etree import ElementTree as ET

import pytest
from django.utils import timezone

from portal import client
from portal.projects import services as project_services
from portal.projects.forms import PlanForm
from portal.projects.models import Plan
from portal.projects.services import Invalid
from portal.runs.exports.junit import junit_xml
from portal.runs.exports.summary_json import summary_json
from portal.runs.models import Run, RunShard
from portal.runs.services import criteria, interval_write, run_finalize
from tests.portal.runs.factories import hist_of, plan_run
from workers.engine.plan import Plan as EnginePlan
from workers.engine.plan import PlanError
from workers.engine.stop_criteria import CriteriaError, Rule, first_broken, parse_rules, parse_text, stop_sentence

# -- the rules on plain values -----------------------------------------------------------------------------------


def test_a_rule_reads_and_writes_one_text_form():
    rules = parse_text("error rate > 50 % over 60 s\n\np95 > 3000 ms\npages/s < 1.5 over 30 s\nAPD > 800 over 10s")

    assert [r.text for r in rules] == [
        "error rate > 50 % over 60 s",
        "p95 > 3000 ms over 60 s",  # the window defaults to 60 s
        "pages/s < 1.5 over 30 s",
        "APD > 800 ms over 10 s",
    ]
    assert rules[2].to_dict() == {"metric": "pages_per_s", "below": 1.5, "window_s": 30}
    assert parse_text("\n".join(r.text for r in rules)) == rules


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("error rate < 5 % over 60 s", "line 1: error rate stops a run when it goes above a limit: write error rate >"),
        ("pages/s > 5", "line 1: pages/s stops a run when it goes below a limit: write pages/s <"),
        ("latency > 5", "line 1: unknown figure “latency”"),
        ("p95 is high", "line 1: write a rule as “error rate > 50 % over 60 s”"),
        ("p95 > 300 ms over 2 s", "line 1: the window must be a whole number of seconds within 5..3600"),
        ("error rate > 100 %", "line 1: the limit must be at least 0 and below 100"),
        ("p95 > 300 ms\np95 > 500 ms", "rules[1]: the same figure and window as rules[0]; keep one"),
    ],
)
def test_a_malformed_rule_is_refused_with_its_line_and_reason(text, message):
    with pytest.raises(CriteriaError) as exc:
        parse_text(text)
    assert str(exc.value).startswith(message), str(exc.value)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("error_rate_pct > 5", "stop_criteria: must be a list of rules"),
        ([{"metric": "p97_ms", "above": 3}], "stop_criteria[0].metric: must be one of error_rate_pct, apd_ms"),
        ([{"metric": "pages_per_s", "above": 3}], "stop_criteria[0].above: pages/s stops a run when it falls below"),
        ([{"metric": "p95_ms"}], "stop_criteria[0].above: give the limit p95 must not go above"),
        ([{"metric": "p95_ms", "above": "3"}], "stop_criteria[0].above: must be a number"),
        ([{"metric": "p95_ms", "above": 3, "window_s": 1.5}], "stop_criteria[0].window_s: must be a whole number"),
        ([{"metric": "p95_ms", "above": 3, "for": 5}], "stop_criteria[0]: unknown key 'for'"),
        ([{"metric": "pages_per_s", "below": 0}], "stop_criteria[0].below: must be greater than 0"),
    ],
)
def test_the_plan_document_refuses_a_malformed_rule_naming_its_path(rules, message):
    plan = {
        "base_url": "http://127.0.0.1:8001",
        "test_cases": [{"name": "Browse", "steps": [{"name": "Home", "path": "/"}]}],
        "profile": {"users": 1, "ramp_up": 0, "hold": 60, "ramp_down": 0},
        "stop_criteria": rules,
    }
    with pytest.raises(PlanError) as exc:
        EnginePlan.from_dict(plan)
    assert str(exc.value).startswith(message), str(exc.value)


def test_the_first_rule_its_window_breaks_stops_and_thin_windows_are_not_judged():
    rules = parse_rules(
        [
            {"metric": "p95_ms", "above": 1000, "window_s": 10},
            {"metric": "error_rate_pct", "above": 50, "window_s": 10},
            {"metric": "pages_per_s", "below": 2, "window_s": 30},
        ]
    )
    healthy = {"pages": 100, "errors": 1, "error_rate_pct": 1.0, "p95_ms": 40.0, "pages_per_s": 10.0}
    assert first_broken(rules, {10: healthy, 30: healthy}) is None
    # errors above the limit: the error-rate rule breaks (the p95 of the few successes stays low)
    broken = {**healthy, "errors": 60, "error_rate_pct": 60.0}
    assert first_broken(rules, {10: broken, 30: healthy}) == rules[1]
    # 9 pages: too few to call a rate or a latency, however bad; pages/s is judged on any count
    thin = {"pages": 9, "errors": 9, "error_rate_pct": 100.0, "p95_ms": None, "pages_per_s": 0.3}
    assert first_broken(rules, {10: thin, 30: healthy}) is None
    assert first_broken(rules, {10: thin, 30: thin}) == rules[2]
    # a window that does not lie in the measured part yet has no figures: nothing is judged
    assert first_broken(rules, {}) is None


# -- the windows over interval rows, and the stop -----------------------------------------------------------------


def _running(plan, *, shards=2, started_s_ago=40) -> Run:
    run = plan_run(
        plan,
        status=Run.Status.RUNNING,
        shard_count=shards,
        plan_snapshot=plan.to_engine_dict(),
        start_at=timezone.now() - timedelta(seconds=started_s_ago),
    )
    for n in range(shards):
        RunShard.objects.create(run=run, shard_no=n, user_count=1, status=RunShard.Status.RUNNING)
    return run


def _second(run, shard_no, second, *, ok=10, errors=0, ms=20.0):
    """One second of one shard through the interval writer, as the engine's sink stores it."""
    labels = {
        "Browse: Home": {"pages": ok + errors, "hits": ok + errors, "errors": errors, "hist": hist_of(*[ms] * ok)}
    }
    interval_write(run.id, shard_no, {"second": second, "active_users": 5, "labels": labels})


@pytest.fixture
def guarded(plan):
    plan.ramp_up, plan.hold = 5, 120
    plan.stop_criteria = [{"metric": "error_rate_pct", "above": 50, "window_s": 10}]
    plan.save()
    return plan


def test_a_broken_window_stops_the_run_with_the_rule_and_the_window_figures(guarded):
    run = _running(guarded)
    for s in range(0, 30):
        broken = s >= 18
        for shard in (0, 1):
            _second(run, shard, s, ok=2 if broken else 10, errors=8 if broken else 0)
    _second(run, 0, 30, ok=0, errors=10)  # shard 1 has not flushed second 30 yet: not judged

    assert criteria.criteria_check() == [run.id]

    run.refresh_from_db()
    assert (run.status, run.cancel_requested) == (Run.Status.CANCELLING, True)
    window = run.stopped_by["window"]
    # seconds 20..29 of both shards, as written: 20 rows of 2 successes and 8 errors
    assert (window["from_s"], window["to_s"], window["pages"], window["errors"]) == (20, 30, 200, 160)
    assert window["error_rate_pct"] == 80.0 and window["pages_per_s"] == 20.0 and window["p95_ms"] == 20.0
    assert run.stopped_by["text"] == "error rate > 50 % over 10 s"
    assert run.stopped_by["sentence"] == (
        "error rate 80 % > 50 % over the last 10 s (seconds 20–30: 200 pages, 160 errors, 20 pages/s)"
    )
    # the shards see the Stop at their next flush, as a user's Stop
    assert criteria.criteria_check() == []


def test_a_healthy_run_a_window_in_the_ramp_up_and_a_missing_shard_are_not_stopped(guarded):
    run = _running(guarded)
    for s in range(0, 12):
        for shard in (0, 1):
            _second(run, shard, s, ok=0 if s < 5 else 10, errors=10 if s < 5 else 0)
    # seconds 0-4 were all errors, but in the ramp-up (5 s): the first window is 5..14
    assert criteria.criteria_check() == []
    for s in range(12, 16):
        _second(run, 0, s, ok=0, errors=10)
        _second(run, 1, s, ok=0, errors=10)
    # window 6..15: 40 errors of 140 pages (29 %): below 50 %
    assert criteria.criteria_check() == []
    RunShard.objects.filter(run=run, shard_no=1).update(status=RunShard.Status.PENDING)  # handed on, not resumed
    for s in range(16, 25):
        _second(run, 0, s, ok=0, errors=10)
    assert criteria.criteria_check() == []  # a shard waiting for a worker: nothing judged meanwhile
    # resumed at second 25: until a whole window after its gap has passed, the gap's windows are not judged
    RunShard.objects.filter(run=run, shard_no=1).update(status=RunShard.Status.RUNNING)
    for s in range(25, 27):
        _second(run, 0, s, ok=10)
        _second(run, 1, s, ok=10)
    assert criteria.criteria_check() == []
    assert Run.objects.get(id=run.id).status == Run.Status.RUNNING


def test_the_check_reads_only_the_window_whatever_the_run_length(guarded):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    guarded.hold = 3600
    guarded.save()
    run = _running(guarded, shards=1, started_s_ago=200)
    for s in range(0, 190):
        _second(run, 0, s)
    with CaptureQueriesContext(connection) as queries:
        assert criteria.criteria_check() == []
    window_reads = [q["sql"] for q in queries.captured_queries if '"second" <=' in q["sql"]]
    assert len(window_reads) == 1 and '"second" >= 180' in window_reads[0], window_reads
    assert len(queries.captured_queries) <= 4


def test_finalize_ends_it_stopped_never_passed_and_out_of_baselines(guarded):
    guarded.threshold_apd_ms = 10_000
    guarded.save()
    run = _running(guarded, shards=1)
    for s in range(0, 30):
        _second(run, 0, s, ok=0 if s >= 15 else 10, errors=10 if s >= 15 else 0)
    assert criteria.criteria_check() == [run.id]
    RunShard.objects.filter(run=run).update(status=RunShard.Status.DONE)

    run_finalize(run.id)

    run.refresh_from_db()
    assert run.status == Run.Status.STOPPED and run.verdict is None
    assert run.summary["stopped_by"] == run.stopped_by
    assert not run.counts and run.doubts == [f"it was stopped by its criteria ({run.stopped_by['sentence']})"]


def test_the_live_page_shows_each_rule_over_its_current_window(guarded, alice_client):
    guarded.stop_criteria = [
        {"metric": "error_rate_pct", "above": 50, "window_s": 10},
        {"metric": "p95_ms", "above": 3000, "window_s": 60},
    ]
    guarded.save()
    run = _running(guarded, shards=1, started_s_ago=25)
    for s in range(0, 20):
        _second(run, 0, s, ok=9, errors=1)

    page = alice_client.get(run.get_absolute_url()).content.decode()

    assert "error rate &gt; 50 % over 10 s: now 10.0" in page
    assert 'p95 &gt; 3000 ms over 60 s: <span class="muted">waits for a full window of the measured part' in page


# -- every reader -------------------------------------------------------------------------------------------------


@pytest.fixture
def stopped(guarded):
    run = _running(guarded, shards=1)
    for s in range(0, 30):
        _second(run, 0, s, ok=0 if s >= 15 else 10, errors=10 if s >= 15 else 0)
    criteria.criteria_check()
    RunShard.objects.filter(run=run).update(status=RunShard.Status.DONE)
    run_finalize(run.id)
    return Run.objects.get(id=run.id)


def test_junit_and_summary_json_name_the_rule_and_its_window(stopped):
    root = ET.fromstring(junit_xml(stopped).split("\n", 1)[1])
    case = next(c for c in root.iter("testcase") if c.get("name") == "stop criteria: error rate > 50 % over 10 s")
    failure = case.find("failure")
    assert failure.get("message") == f"stopped by its criteria: {stopped.stopped_by['sentence']}"
    assert "error_rate_pct=100" in failure.text and "pages=100" in failure.text
    assert json.loads(summary_json(stopped))["stopped_by"]["window"]["errors"] == 100


def test_the_api_and_the_run_page_show_the_rule_and_the_window(stopped, alice_client):
    data = alice_client.get(f"/api/v1/runs/{stopped.code}/").json()
    assert data["status"] == "stopped" and data["stopped_by"]["text"] == "error rate > 50 % over 10 s"
    assert data["stopped_by"]["window"]["pages"] == 100
    page = alice_client.get(stopped.get_absolute_url()).content.decode()
    assert "Stopped by its criteria:" in page and "seconds 20–30: 100 pages, 100 errors" in page


def test_the_ci_client_exits_9_and_says_so(stopped, alice_client):
    data = alice_client.get(f"/api/v1/runs/{stopped.code}/").json()
    data["baseline_verdict"] = {"verdict": "no_baseline", "headline": "Run #1 does not count", "rows": []}
    assert client.outcome(data, {"regression"}) == client.STOPPED == 9
    assert client.outcome(data) == 9
    assert f"🛑 **Stopped by its criteria:** {stopped.stopped_by['sentence']}" in client.summary_markdown(data)


def test_notifications_say_it_was_stopped_with_the_window(stopped):
    from portal.notifications.services import run_events, run_payload

    events = run_events(stopped)
    payload = run_payload(stopped, events)
    assert "run_error" in events
    assert payload["headline"] == (
        f"Run #{stopped.number} of {stopped.plan_name} was stopped by its criteria: {stopped.stopped_by['sentence']}."
    )
    assert payload["run"]["stopped_by"]["window"]["error_rate_pct"] == 100.0


# -- bad input: the form and the API -------------------------------------------------------------------------------


def test_the_plan_form_takes_rules_as_text_and_refuses_a_malformed_line(plan, project):
    data = {
        "name": plan.name,
        "environment": str(plan.environment.code),
        "profile_kind": "ramp",
        "users": 5,
        "ramp_up": 1,
        "hold": 120,
        "ramp_down": 0,
        "think_time_mode": "fixed",
        "request_timeout": 30,
        "protocol": "auto",
        "trace_context": "on",
        "trace_sample_rate": 1,
        "stop_criteria": "error rate > 50 % over 60 s\npages/s > 2",
    }
    form = PlanForm(data, instance=plan, project=project)
    assert not form.is_valid()
    assert form.errors["stop_criteria"] == ["line 2: pages/s stops a run when it goes below a limit: write pages/s < …"]
    form = PlanForm(
        {**data, "stop_criteria": "error rate > 50 % over 60 s\npages/s < 2 over 30 s"}, instance=plan, project=project
    )
    assert form.is_valid(), form.errors
    saved = project_services.plan_save(project=project, plan=plan, **form.service_values())
    assert saved.stop_criteria == [
        {"metric": "error_rate_pct", "above": 50.0, "window_s": 60},
        {"metric": "pages_per_s", "below": 2.0, "window_s": 30},
    ]
    assert PlanForm(instance=saved, project=project).initial["stop_criteria"] == (
        "error rate > 50 % over 60 s\npages/s < 2 over 30 s"
    )
    assert saved.to_engine_dict()["stop_criteria"] == saved.stop_criteria


def test_the_plan_page_and_its_form_show_the_rules(guarded, alice_client):
    page = alice_client.get(guarded.get_absolute_url()).content.decode()
    assert "<li>error rate &gt; 50 % over 10 s</li>" in page
    form = alice_client.get(f"/plans/{guarded.code}/edit/").content.decode()
    assert "error rate &gt; 50 % over 10 s</textarea>" in form


def test_a_window_longer_than_the_hold_is_refused_and_nothing_changes(plan, project):
    with pytest.raises(Invalid) as exc:
        project_services.plan_save(
            project=project,
            plan=plan,
            name=plan.name,
            environment=plan.environment,
            values={"stop_criteria": [{"metric": "p95_ms", "above": 3000, "window_s": 60}]},
        )
    assert exc.value.errors["stop_criteria"] == [
        "Rule 1 (“p95 > 3000 ms over 60 s”): its window is longer than the measured part of the profile (5 s), "
        "so it would never be evaluated"
    ]
    assert Plan.objects.get(pk=plan.pk).stop_criteria == []


def test_the_api_takes_rules_and_answers_a_malformed_one_with_400(plan, alice_client):
    url = f"/api/v1/plans/{plan.code}/"
    bad = alice_client.patch(
        url, {"stop_criteria": [{"metric": "pages_per_s", "above": 3}]}, content_type="application/json"
    )
    assert bad.status_code == 400, bad.content
    assert "pages/s stops a run when it falls below a limit: give below" in json.dumps(bad.json())
    assert Plan.objects.get(pk=plan.pk).stop_criteria == []

    good = alice_client.patch(
        url, {"hold": 120, "stop_criteria": [{"metric": "p99_ms", "above": 5000}]}, content_type="application/json"
    )
    assert good.status_code == 200, good.content
    assert good.json()["stop_criteria"] == [{"metric": "p99_ms", "above": 5000.0, "window_s": 60}]


def test_a_rule_as_the_engine_reads_it_round_trips():
    rule = Rule(metric="p95_ms", limit=3000.0, window_s=60)
    assert parse_rules([rule.to_dict()]) == [rule]
    window = {"from_s": 10, "to_s": 70, "pages": 1204, "errors": 3, "pages_per_s": 20.067, "p95_ms": 4100.5}
    assert stop_sentence(rule, window) == (
        "p95 4100.5 ms > 3000 ms over the last 60 s (seconds 10–70: 1,204 pages, 3 errors, 20.067 pages/s)"
    )
