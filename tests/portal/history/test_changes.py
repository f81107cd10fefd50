"""Tuning changes, the environment's ledger, external measurements and the run's include toggle.

Hooks go to a real HTTP server on 127.0.0.1 started by the test, which records what it
received, so "no request was sent" is something the test can see.
"""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from portal.history import services
from portal.history.forms import ChangeForm, MeasurementForm
from portal.history.models import Experiment, ExternalMeasurement, TuningChange
from portal.history.selectors import configuration_at
from portal.projects.models import Environment
from portal.runs.models import Run
from tests.portal.runs.factories import plan_run

pytestmark = pytest.mark.django_db

CONFIG = [
    {"key": "search.index", "value": "off"},
    {"key": "compression", "value": "off"},
    {"key": "latency_ms", "value": "0"},
]


# --------------------------------------------------------------------------------------
# A real hook target
# --------------------------------------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        self.server.received.append(
            {
                "method": self.command,
                "path": self.path,
                "body": body,
                "content_type": self.headers.get("Content-Type"),
            }
        )
        status, payload = self.server.answer
        data = payload.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, *args):
        pass


@pytest.fixture
def hook_server():
    """A knobs endpoint on 127.0.0.1: ``.received`` lists the requests, ``.answer`` is (status, body)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.received = []
    server.answer = (200, '{"search.index": "on"}')
    server.url = f"http://127.0.0.1:{server.server_address[1]}/_demo/knobs"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture(autouse=True)
def loopback_only(settings):
    settings.PLIMSOLL_OUTBOUND_ALLOWED = "127.0.0.0/8,::1/128,localhost"


@pytest.fixture
def env(environment):
    environment.configuration = [dict(item) for item in CONFIG]
    environment.save()
    return environment


def _form_data(configuration: str = "search.index = on", **fields) -> dict:
    data = {
        "title": "Index the area field",
        "category": "index",
        "reason": "Searches scan every work item",
        "reference": "https://learn.microsoft.com/kb/123",
        "configuration": configuration,
        "hook_method": "POST",
        "hook_url": "",
        "hook_body": "",
        "hook_content_type": "application/json",
    }
    data.update(fields)
    return data


def _apply(environment, title, edits, *, user=None, at=None, call_hook=True, **fields) -> TuningChange:
    change = services.change_create(environment=environment, user=user, edits=edits, title=title, **fields)
    services.change_apply(change, user=user, call_hook_first=call_hook)
    if at is not None:
        TuningChange.objects.filter(pk=change.pk).update(applied_at=at)
        change.refresh_from_db()
    return change


def _run(plan, status=Run.Status.PASSED, **fields) -> Run:
    defaults = {"config_snapshot": plan.environment.configuration, "status": status, "start_at": None}
    return plan_run(plan, **{**defaults, **fields})


def _new_url(environment):
    return reverse("history:change-new", args=[environment.code])


# --------------------------------------------------------------------------------------
# The change form
# --------------------------------------------------------------------------------------


def test_form_turns_the_text_into_edits(env):
    # given: search.index changed, compression removed, workers added
    form = ChangeForm(_form_data("search.index = on\nlatency_ms = 0\nworkers = 4"), environment=env)
    # when
    valid = form.is_valid()
    # then
    assert valid, form.errors
    assert form.edits == [
        {"key": "search.index", "value": "on"},
        {"key": "workers", "value": "4"},
        {"key": "compression", "value": None},
    ]
    change = form.save(commit=False)
    assert change.pk is None
    assert change.environment == env
    assert change.edits == form.edits
    assert change.status == TuningChange.Status.PLANNED


def test_form_starts_from_the_current_configuration(env):
    # when
    form = ChangeForm(environment=env)
    # then
    assert form["configuration"].value() == "search.index = off\ncompression = off\nlatency_ms = 0"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"configuration": "search.index = off\n\nno equals sign here"},
            "configuration",
            "line 3: expected key = value",
        ),
        (
            {"configuration": "search.index = on\nlatency_ms = 0\nsearch.index = off"},
            "configuration",
            "line 3: key search.index appears twice (first on line 1)",
        ),
        (
            {"configuration": "# same values, other order\nlatency_ms = 0\nsearch.index = off\ncompression = off"},
            "configuration",
            "The configuration is unchanged: edit a value, add or remove a key.",
        ),
        (
            {"hook_url": "http://127.0.0.1:8001/_demo/knobs", "hook_body": "{search.index: on}"},
            "hook_body",
            "This is not valid JSON",
        ),
        (
            {"hook_url": "http://127.0.0.1:8001/_demo/knobs", "hook_method": "GET", "hook_body": "{}"},
            "hook_body",
            "A GET request carries no body",
        ),
        ({"hook_url": "http://192.0.2.1/apply"}, "hook_url", "PLIMSOLL_OUTBOUND_ALLOWED setting allows (127.0.0.0/8"),
        ({"hook_url": "http://127.0.0.1%09@127.0.0.2:18080/x"}, "hook_url", "contains credentials (user@host)"),
        ({"hook_url": "http://127.0.0.1%00@127.0.0.2:18080/x"}, "hook_url", "contains credentials (user@host)"),
        ({"hook_url": "http://[127.0.0.1]:18081"}, "hook_url", "An IPv4 address cannot be in brackets"),
        ({"hook_url": "http://127.0.0.1:99999/x"}, "hook_url", "bad port"),
    ],
)
def test_form_errors_are_next_to_their_field(env, fields, field, message):
    # given
    data = _form_data(**{"configuration": "search.index = on", **fields})
    # when
    form = ChangeForm(data, environment=env)
    # then
    assert not form.is_valid()
    assert any(message in error for error in form.errors[field]), form.errors


def test_a_non_json_body_is_fine_with_another_content_type(env):
    # when
    form = ChangeForm(
        _form_data(
            "search.index = on",
            hook_url="http://127.0.0.1:8001/apply",
            hook_body="search.index=on",
            hook_content_type="application/x-www-form-urlencoded",
        ),
        environment=env,
    )
    # then
    assert form.is_valid(), form.errors


def test_a_change_applied_meanwhile_is_noticed_not_undone(env, alice):
    # given: the form was opened, then someone else applied a change
    opened = ChangeForm(environment=env)
    data = _form_data("search.index = on\ncompression = off\nlatency_ms = 0", based_on=opened["based_on"].value())
    _apply(env, "Compress pages", [{"key": "compression", "value": "gzip"}], user=alice)
    env.refresh_from_db()
    # when
    form = ChangeForm(data, environment=env)
    # then: refused once, with the fresh fingerprint offered so that saving again goes through
    assert not form.is_valid()
    assert "changed while you were editing (change #1 “Compress pages”)" in " ".join(form.errors["configuration"])
    again = ChangeForm(form.data, environment=env)
    assert again.is_valid(), again.errors
    assert again.edits == [{"key": "search.index", "value": "on"}, {"key": "compression", "value": "off"}]


# --------------------------------------------------------------------------------------
# Recording and applying a change
# --------------------------------------------------------------------------------------


def test_change_with_added_changed_and_removed_keys(alice_client, alice, env):
    # when
    response = alice_client.post(_new_url(env), _form_data("search.index = on\nlatency_ms = 0\nworkers = 4"))
    # then
    change = TuningChange.objects.get()
    assert response.status_code == 302
    assert response.url == change.get_absolute_url()
    assert (change.number, change.status, change.made_by, change.category) == (1, "applied", alice, "index")
    assert change.diff == [
        {"key": "search.index", "before": "off", "after": "on"},
        {"key": "workers", "before": None, "after": "4"},
        {"key": "compression", "before": "off", "after": None},
    ]
    env.refresh_from_db()
    assert env.configuration == [
        {"key": "search.index", "value": "on"},
        {"key": "latency_ms", "value": "0"},
        {"key": "workers", "value": "4"},
    ]
    assert change.config_before == CONFIG
    assert change.config_after == env.configuration


def test_change_detail_shows_the_diff_and_the_configuration_after(alice_client, alice, env, plan):
    # given
    change = _apply(
        env,
        "Index the area field",
        [
            {"key": "search.index", "value": "on"},
            {"key": "workers", "value": "4"},
            {"key": "compression", "value": None},
        ],
        user=alice,
        category="index",
        reason="Searches scan every work item",
        reference="https://learn.microsoft.com/kb/123",
    )
    run = _run(plan, tuning_change=change)
    # when
    page = alice_client.get(change.get_absolute_url()).content.decode()
    # then
    diff = page[page.index('id="diff"') : page.index('id="configuration"')]
    assert "<code>off</code></td>\n        <td>→</td>\n        <td><code>on</code>" in diff
    assert 'badge ok">added</span>' in diff and 'badge failed">removed</span>' in diff
    after = page[page.index('id="configuration"') : page.index('id="runs"')]
    assert "<code>workers</code></td><td><code>4</code>" in after
    assert "compression" not in after
    assert "#1 Index the area field" in page and ">Index</span>" in page
    assert "https://learn.microsoft.com/kb/123" in page and "Searches scan every work item" in page
    assert run.get_absolute_url() in page
    assert f"{_new_url(env)}?revert={change.code}" in page


def test_hook_is_sent_and_its_response_recorded(alice_client, env, hook_server):
    # given
    data = _form_data("search.index = on\ncompression = off\nlatency_ms = 0", hook_url=hook_server.url)
    data["hook_body"] = '{"search.index": "on"}'
    # when
    response = alice_client.post(_new_url(env), data)
    # then
    change = TuningChange.objects.get()
    assert response.status_code == 302
    assert hook_server.received == [
        {"method": "POST", "path": "/_demo/knobs", "body": '{"search.index": "on"}', "content_type": "application/json"}
    ]
    assert change.status == "applied"
    assert change.hook_response["status"] == 200
    assert change.hook_response["body"] == '{"search.index": "on"}'
    assert change.hook_response["elapsed_ms"] >= 0
    page = alice_client.get(change.get_absolute_url()).content.decode()
    assert escape('{"search.index": "on"}') in page
    assert 'badge ok">200</span> OK' in page


def test_hook_answering_500_leaves_a_failed_change_and_the_configuration(alice_client, env, hook_server):
    # given
    hook_server.answer = (500, '{"error": "knob search.index is locked"}')
    data = _form_data("search.index = on\ncompression = off\nlatency_ms = 0", hook_url=hook_server.url)
    data["hook_body"] = '{"search.index": "on"}'
    # when
    response = alice_client.post(_new_url(env), data)
    # then: the form page again, with the answer and the user's input
    page = response.content.decode()
    change = TuningChange.objects.get()
    assert response.status_code == 200
    assert len(hook_server.received) == 1
    assert (change.status, change.number) == ("failed", None)
    assert change.hook_response["status"] == 500
    assert change.hook_response["body"] == '{"error": "knob search.index is locked"}'
    assert change.error_message == "The hook answered 500 Internal Server Error"
    env.refresh_from_db()
    assert env.configuration == CONFIG
    assert "The change was not applied: The hook answered 500 Internal Server Error." in page
    assert escape('{"error": "knob search.index is locked"}') in page
    assert change.get_absolute_url() in page
    assert "search.index = on\ncompression = off" in page  # the text as typed
    ledger = alice_client.get(env.get_absolute_url()).content.decode()
    assert 'class="failed"' in ledger and ">Failed</span>" in ledger


def test_a_failed_change_can_be_applied_again(alice_client, alice, env, hook_server):
    # given
    hook_server.answer = (503, "busy")
    change = services.change_create(
        environment=env,
        user=alice,
        edits=[{"key": "search.index", "value": "on"}],
        title="Index",
        hook_url=hook_server.url,
        hook_body='{"search.index": "on"}',
    )
    with pytest.raises(services.ChangeError):
        services.change_apply(change, user=alice)
    detail = alice_client.get(change.get_absolute_url()).content.decode()
    hook_server.answer = (200, "{}")
    # when
    response = alice_client.post(reverse("history:change-apply", args=[change.code]))
    # then
    change.refresh_from_db()
    assert "Apply again" in detail and 'badge failed">503</span>' in detail
    assert response.status_code == 302
    assert (change.status, change.number, change.hook_response["status"]) == ("applied", 1, 200)
    assert len(hook_server.received) == 2
    env.refresh_from_db()
    assert env.configuration[0] == {"key": "search.index", "value": "on"}


@pytest.mark.parametrize("url", ["http://127.0.0.1%09@127.0.0.2:18080/x", "http://127.0.0.1%00@127.0.0.2:18080/x"])
def test_a_malformed_hook_url_is_a_form_error_not_a_500(alice_client, env, url):
    # when
    response = alice_client.post(_new_url(env), _form_data("search.index = on", hook_url=url, hook_body="{}"))
    # then
    assert response.status_code == 200
    assert "contains credentials (user@host); leave them out of the URL." in response.content.decode()
    assert not TuningChange.objects.exists()


def test_hook_outside_the_allowlist_is_refused_by_the_form(alice_client, env):
    # when
    response = alice_client.post(
        _new_url(env), _form_data("search.index = on", hook_url="http://192.0.2.1/apply", hook_body="{}")
    )
    # then
    page = response.content.decode()
    assert response.status_code == 200
    assert "192.0.2.1" in page and "PLIMSOLL_OUTBOUND_ALLOWED" in page
    assert not TuningChange.objects.exists()
    env.refresh_from_db()
    assert env.configuration == CONFIG


def test_hook_outside_the_allowlist_is_refused_by_the_service_without_a_request(settings, alice, env, hook_server):
    # given: a change written while loopback was allowed, applied after the setting changed
    change = services.change_create(
        environment=env,
        user=alice,
        edits=[{"key": "search.index", "value": "on"}],
        title="Index",
        hook_url=hook_server.url,
    )
    settings.PLIMSOLL_OUTBOUND_ALLOWED = "10.0.0.0/8"
    # when
    with pytest.raises(services.ChangeError) as refused:
        services.change_apply(change, user=alice)
    # then
    change.refresh_from_db()
    assert "Hook refused, no request was sent" in str(refused.value)
    assert hook_server.received == []
    assert change.status == "failed"
    assert change.hook_response["error"].startswith("Hook refused, no request was sent")
    env.refresh_from_db()
    assert env.configuration == CONFIG


def test_busy_environment_refuses_the_change_and_keeps_the_input(alice_client, env, plan, hook_server):
    # given
    _run(plan, status=Run.Status.RUNNING)
    data = _form_data("search.index = on\ncompression = off\nlatency_ms = 0", hook_url=hook_server.url)
    # when
    response = alice_client.post(_new_url(env), data)
    # then
    page = response.content.decode()
    assert response.status_code == 200
    assert "Run #1 is on this environment now" in page
    assert "Nothing was recorded" in page
    assert "search.index = on\ncompression = off" in page
    assert not TuningChange.objects.exists()
    assert hook_server.received == []
    env.refresh_from_db()
    assert env.configuration == CONFIG


def test_a_change_of_an_experiment_is_applied_by_the_experiment(alice_client, alice, env, plan):
    # given
    change = services.change_create(environment=env, user=alice, edits=[{"key": "a", "value": "1"}], title="A")
    Experiment.objects.create(
        project=env.project, environment=env, plan=plan, title="Does A help?", change=change, apply_mode="manual"
    )
    detail = alice_client.get(change.get_absolute_url()).content.decode()
    # when
    response = alice_client.post(reverse("history:change-apply", args=[change.code]), follow=True)
    # then
    change.refresh_from_db()
    assert reverse("history:change-apply", args=[change.code]) not in detail
    assert escape("belongs to the experiment “Does A help?”") in response.content.decode()
    assert change.status == "planned"


# --------------------------------------------------------------------------------------
# Revert and the configuration at a past change
# --------------------------------------------------------------------------------------


def test_revert_prefills_the_form_to_undo_the_change(alice_client, alice, env):
    # given: #1 turns the index on and adds workers (with a hook), #2 then compresses pages
    first = _apply(
        env,
        "Index and workers",
        [{"key": "search.index", "value": "on"}, {"key": "workers", "value": "4"}],
        user=alice,
        category="index",
        hook_url="http://127.0.0.1:1/_demo/knobs",
        hook_body='{"search.index": "on"}',
        call_hook=False,  # made by hand; the hook is only there to be copied
    )
    _apply(env, "Compress", [{"key": "compression", "value": "gzip"}], user=alice)
    # when
    form = alice_client.get(f"{_new_url(env)}?revert={first.code}").context["form"]
    # then
    assert form["configuration"].value() == "search.index = off\ncompression = gzip\nlatency_ms = 0"
    assert form["title"].value() == "Revert: Index and workers"
    assert form["category"].value() == "index"
    assert form["hook_url"].value() == "http://127.0.0.1:1/_demo/knobs"
    assert json.loads(form["hook_body"].value()) == {"search.index": "off"}


def test_reverting_restores_the_keys(alice_client, alice, env):
    # given
    first = _apply(env, "Index and workers", [{"key": "search.index", "value": "on"}, {"key": "workers", "value": "4"}])
    form = alice_client.get(f"{_new_url(env)}?revert={first.code}").context["form"]
    data = _form_data(form["configuration"].value(), title=form["title"].value(), based_on=form["based_on"].value())
    # when
    response = alice_client.post(_new_url(env), data)
    # then
    env.refresh_from_db()
    revert = TuningChange.objects.get(number=2)
    assert response.status_code == 302
    assert env.configuration == CONFIG
    assert revert.diff == [
        {"key": "search.index", "before": "on", "after": "off"},
        {"key": "workers", "before": "4", "after": None},
    ]


def test_revert_of_a_change_of_another_environment_is_404(alice_client, alice, env, project):
    # given
    other = Environment.objects.create(project=project, name="Other", base_url="http://127.0.0.1:9", configuration=[])
    change = _apply(other, "Elsewhere", [{"key": "a", "value": "1"}])
    # when
    response = alice_client.get(f"{_new_url(env)}?revert={change.code}")
    # then
    assert response.status_code == 404


def test_configuration_at_a_past_change(alice_client, env):
    # given
    first = _apply(env, "Index", [{"key": "search.index", "value": "on"}])
    second = _apply(
        env, "Compress, drop latency", [{"key": "compression", "value": "gzip"}, {"key": "latency_ms", "value": None}]
    )
    env.refresh_from_db()
    # when
    at_first = configuration_at(env, str(first.code))
    at_initial = configuration_at(env, "initial")
    page = alice_client.get(env.get_absolute_url(), {"at": str(first.code)}).content.decode()
    fragment = alice_client.get(env.get_absolute_url(), {"at": "initial"}, HTTP_HX_REQUEST="true").content.decode()
    # then
    assert at_first["rows"] == [
        {"key": "search.index", "then": "on", "now": "on", "same": True},
        {"key": "compression", "then": "off", "now": "gzip", "same": False},
        {"key": "latency_ms", "then": "0", "now": None, "same": False},
    ]
    assert [(r["key"], r["then"]) for r in at_initial["rows"]] == [(i["key"], i["value"]) for i in CONFIG]
    assert at_initial["change"] is None
    assert configuration_at(env, str(second.code))["differs"] is False
    assert f'<option value="{first.code}" selected>' in page
    assert fragment.startswith('\n<div id="config-at">') or fragment.lstrip().startswith('<div id="config-at">')
    assert "<html" not in fragment
    assert 'value="initial" selected' in fragment


def test_no_past_configuration_without_a_change(env):
    # then
    assert configuration_at(env, None) is None


def test_environment_page_shows_the_ledger(alice_client, alice, env):
    # given
    _apply(env, "Enable -T1118", [{"key": "sql.flags", "value": "-T1118"}], user=alice, category="trace_flag")
    _apply(env, "Add -T4618", [{"key": "sql.flags", "value": "-T1118 -T4618"}], user=alice, category="trace_flag")
    # when
    page = alice_client.get(env.get_absolute_url()).content.decode()
    # then
    ledger = page[page.index('id="ledger"') :]
    assert ledger.index("Add -T4618") < ledger.index("Enable -T1118")  # newest first
    assert "<code>sql.flags</code>: -T1118 → -T1118 -T4618" in ledger
    assert ">Trace flag</span>" in ledger
    assert _new_url(env) in page
    assert reverse("history:measurement-new", args=[env.code]) in page
    assert reverse("history:environment-journey", args=[env.code]) in page


def test_environment_edit_no_longer_changes_the_configuration(alice_client, env):
    # given
    data = {
        "name": "Staging",
        "base_url": "http://127.0.0.1:8001",
        "description": "",
        "configuration_text": "search.index = on",
        "servers-TOTAL_FORMS": "0",
        "servers-INITIAL_FORMS": "0",
        "servers-MIN_NUM_FORMS": "0",
        "servers-MAX_NUM_FORMS": "1000",
    }
    # when
    response = alice_client.post(reverse("projects:environment-edit", args=[env.code]), data)
    # then
    env.refresh_from_db()
    assert response.status_code == 302
    assert env.configuration == CONFIG


# --------------------------------------------------------------------------------------
# External measurements
# --------------------------------------------------------------------------------------


def _local(dt) -> str:
    return timezone.localtime(dt).strftime("%Y-%m-%dT%H:%M")


def _measurement_data(**fields) -> dict:
    data = {
        "name": "Database backup",
        "unit": "min",
        "value": "42.5",
        "measured_at": _local(timezone.now()),
        "lower_is_better": "on",
        "tuning_change": "",
        "run": "",
        "note": "",
    }
    data.update(fields)
    return data


def test_measurement_picks_the_change_in_effect(alice_client, alice, env):
    # given
    now = timezone.now()
    first = _apply(env, "Index", [{"key": "search.index", "value": "on"}], at=now - timedelta(hours=2))
    _apply(env, "Compress", [{"key": "compression", "value": "gzip"}], at=now - timedelta(hours=1))
    # when
    response = alice_client.post(
        reverse("history:measurement-new", args=[env.code]),
        _measurement_data(measured_at=_local(now - timedelta(minutes=90))),
    )
    alice_client.post(
        reverse("history:measurement-new", args=[env.code]),
        _measurement_data(measured_at=_local(now - timedelta(hours=3)), value="50"),
    )
    # then
    during_first, before_any = (
        ExternalMeasurement.objects.order_by("-value")[1],
        ExternalMeasurement.objects.get(value=50),
    )
    assert response.status_code == 302
    assert response.url == env.get_absolute_url() + "#measurements"
    assert (during_first.name, during_first.value, during_first.unit) == ("Database backup", 42.5, "min")
    assert during_first.tuning_change == first
    assert during_first.created_by == alice
    assert before_any.tuning_change is None
    page = alice_client.get(env.get_absolute_url()).content.decode()
    assert "42.5 min" in page and "#1 Index" in page


def test_measurement_for_a_run_takes_the_runs_change(alice_client, env, plan):
    # given
    change = _apply(env, "Index", [{"key": "search.index", "value": "on"}])
    _apply(env, "Compress", [{"key": "compression", "value": "gzip"}])
    run = _run(plan, tuning_change=change)
    # when
    alice_client.post(reverse("history:measurement-new", args=[env.code]), _measurement_data(run=str(run.code)))
    # then
    measurement = ExternalMeasurement.objects.get()
    assert measurement.run == run
    assert measurement.tuning_change == change


def test_measurement_name_is_spelled_once(alice_client, alice, env):
    # given
    services.measurement_record(
        environment=env, user=alice, name="Database backup", unit="min", value=40, measured_at=timezone.now()
    )
    form_page = alice_client.get(reverse("history:measurement-new", args=[env.code])).content.decode()
    # when
    alice_client.post(
        reverse("history:measurement-new", args=[env.code]), _measurement_data(name="  database   BACKUP ")
    )
    # then
    assert '<datalist id="measurement-names"><option value="Database backup"></datalist>' in form_page
    assert list(ExternalMeasurement.objects.values_list("name", flat=True)) == ["Database backup", "Database backup"]


def test_measurement_choices_are_the_environments_own(alice, env, project, plan):
    # given
    other = Environment.objects.create(project=project, name="Other", base_url="http://127.0.0.1:9", configuration=[])
    foreign = _apply(other, "Elsewhere", [{"key": "a", "value": "1"}])
    mine = _apply(env, "Index", [{"key": "search.index", "value": "on"}])
    unfinished = _run(plan, status=Run.Status.RUNNING)
    # when
    form = MeasurementForm(
        _measurement_data(tuning_change=str(foreign.code), run=str(unfinished.code)), environment=env
    )
    # then
    assert not form.is_valid()
    assert set(form.errors) == {"tuning_change", "run"}
    assert list(form.fields["tuning_change"].queryset) == [mine]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"measured_at": _local(timezone.now() + timedelta(days=2))}, "measured_at", "That is in the future"),
        ({"value": "lots"}, "value", "Enter a number."),
        ({"name": ""}, "name", "This field is required."),
        ({"unit": "min", "value": "-3"}, "value", "A measurement in min cannot be negative"),
        ({"unit": "GB", "value": "-0.5"}, "value", "A measurement in GB cannot be negative"),
    ],
)
def test_measurement_errors(env, fields, field, message):
    # when
    form = MeasurementForm(_measurement_data(**fields), environment=env)
    # then
    assert not form.is_valid()
    assert message in " ".join(form.errors[field])


def test_a_negative_measurement_is_fine_where_the_unit_allows_it(env):
    assert MeasurementForm(_measurement_data(unit="%", value="-12.5"), environment=env).is_valid()


def test_measurement_delete(alice_client, alice, env):
    # given
    measurement = services.measurement_record(
        environment=env, user=alice, name="Database size", unit="GB", value=120, measured_at=timezone.now()
    )
    # when
    response = alice_client.post(reverse("history:measurement-delete", args=[measurement.code]))
    # then
    assert response.status_code == 302
    assert response.url == env.get_absolute_url() + "#measurements"
    assert not ExternalMeasurement.objects.exists()


# --------------------------------------------------------------------------------------
# Runs: the change they ran under, and doubtful runs
# --------------------------------------------------------------------------------------


def test_run_page_shows_the_change_it_ran_under(alice_client, env, plan):
    # given
    change = _apply(env, "Enable -T1118", [{"key": "sql.flags", "value": "-T1118"}])
    under_change, initial = _run(plan, tuning_change=change), _run(plan)
    # when
    page = alice_client.get(under_change.get_absolute_url()).content.decode()
    initial_page = alice_client.get(initial.get_absolute_url()).content.decode()
    # then
    assert f'Ran under: <a href="{change.get_absolute_url()}">#1 Enable -T1118</a>' in page
    assert "Ran under: the initial configuration" in initial_page


def test_a_doubtful_run_can_be_included_and_left_out_again(alice_client, plan):
    # given
    run = _run(plan, status=Run.Status.CANCELLED, summary={"verdict": None, "totals": {}})
    page = alice_client.get(run.get_absolute_url()).content.decode()
    url = reverse("history:run-include", args=[run.code])
    # when
    alice_client.post(url, {"include": "1"})
    alice_client.post(url, {"include": "1"})  # a double submit does not undo it
    run.refresh_from_db()
    included = (run.include_anyway, run.counts)
    included_page = alice_client.get(run.get_absolute_url()).content.decode()
    alice_client.post(url, {"include": "0"})
    run.refresh_from_db()
    # then
    assert "Left out of trends and verdicts:</strong> it was cancelled." in page
    assert "Include in trends and verdicts anyway" in page
    assert included == (True, True)
    assert "Leave out again" in included_page
    assert (run.include_anyway, run.counts) == (False, False)


def test_an_active_run_cannot_be_included(alice_client, plan):
    # given
    run = _run(plan, status=Run.Status.RUNNING)
    # when
    alice_client.post(reverse("history:run-include", args=[run.code]), {"include": "1"})
    # then
    run.refresh_from_db()
    assert run.include_anyway is False


# --------------------------------------------------------------------------------------
# Who may do what
# --------------------------------------------------------------------------------------


@pytest.fixture
def objects(alice, env, plan):
    change = _apply(env, "Index", [{"key": "search.index", "value": "on"}], user=alice)
    planned = services.change_create(environment=env, user=alice, edits=[{"key": "a", "value": "1"}], title="A")
    measurement = services.measurement_record(
        environment=env, user=alice, name="Database size", unit="GB", value=120, measured_at=timezone.now()
    )
    run = _run(plan, status=Run.Status.CANCELLED, summary={"totals": {}})
    return {"env": env, "change": change, "planned": planned, "measurement": measurement, "run": run}


def _writes(o):
    return [
        ("get", reverse("history:change-new", args=[o["env"].code]), {}),
        ("post", reverse("history:change-new", args=[o["env"].code]), _form_data("search.index = off")),
        ("post", reverse("history:change-apply", args=[o["planned"].code]), {}),
        ("get", reverse("history:measurement-new", args=[o["env"].code]), {}),
        ("post", reverse("history:measurement-new", args=[o["env"].code]), _measurement_data()),
        ("post", reverse("history:measurement-delete", args=[o["measurement"].code]), {}),
        ("post", reverse("history:run-include", args=[o["run"].code]), {"include": "1"}),
    ]


def _assert_nothing_changed(o):
    o["env"].refresh_from_db()
    o["planned"].refresh_from_db()
    o["run"].refresh_from_db()
    assert o["env"].configuration[0] == {"key": "search.index", "value": "on"}
    assert TuningChange.objects.count() == 2
    assert o["planned"].status == "planned"
    assert ExternalMeasurement.objects.count() == 1
    assert o["run"].include_anyway is False


def test_viewer_reads_but_cannot_write(bob_client, objects):
    # when
    reads = [
        bob_client.get(objects["change"].get_absolute_url()),
        bob_client.get(objects["env"].get_absolute_url()),
    ]
    writes = [getattr(bob_client, method)(url, data) for method, url, data in _writes(objects)]
    # then
    assert [r.status_code for r in reads] == [200, 200]
    detail, env_page = (r.content.decode() for r in reads)
    assert "?revert=" not in detail
    assert _new_url(objects["env"]) not in env_page
    assert reverse("history:measurement-delete", args=[objects["measurement"].code]) not in env_page
    assert (
        "Include in trends and verdicts anyway"
        not in bob_client.get(objects["run"].get_absolute_url()).content.decode()
    )
    assert [r.status_code for r in writes] == [403] * len(writes)
    _assert_nothing_changed(objects)


def test_outsider_gets_404_everywhere(charlie_client, objects):
    # when
    reads = [charlie_client.get(objects["change"].get_absolute_url())]
    writes = [getattr(charlie_client, method)(url, data) for method, url, data in _writes(objects)]
    # then
    assert [r.status_code for r in reads + writes] == [404] * (1 + len(writes))
    _assert_nothing_changed(objects)


def test_anonymous_is_sent_to_log_in(client, objects):
    # when
    response = client.get(_new_url(objects["env"]))
    # then
    assert response.status_code == 302
    assert "login" in response.url


def test_a_planned_change_never_tried_shows_no_tried_date_in_the_ledger(alice_client, alice, env):
    # given: a change recorded but never applied
    services.change_create(
        environment=env, user=alice, title="Maybe -T1118", edits=[{"key": "sql.flags", "value": "-T1118"}]
    )
    # when
    page = alice_client.get(env.get_absolute_url()).content.decode()
    # then
    ledger = page[page.index('id="ledger"') :]
    assert "Maybe -T1118" in ledger
    assert "tried 2" not in ledger
    assert "not tried yet" in ledger
