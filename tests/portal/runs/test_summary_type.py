"""The run summary's type (portal/runs/summary.py) covers what the analysis writes: a key the analysis
adds without typing it fails here, and the type reads back the stored summary unchanged."""

import typing
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.runs.models import Run, RunShard
from portal.runs.results import drilldown, protocols
from portal.runs.services import criteria, interval_write
from portal.runs.summary import (
    Capacity,
    CapacityLevel,
    ChangePoint,
    Degradation,
    ErrorRow,
    PageRow,
    PerResponse,
    ProtocolLatency,
    ProtocolPage,
    Protocols,
    ProtocolTotals,
    RunSummary,
    ScalabilityModel,
    StoppedBy,
    StopRule,
    StopWindow,
    StreamEvents,
    StreamFigures,
    Threshold,
    Totals,
    WebSocketFigures,
    Window,
)
from tests.portal.runs.factories import hist_of, plan_run
from tests.portal.runs.test_protocols import http1_label, stream_label, ws_label
from tests.portal.runs.test_store import LABELS, PROFILES, _finish, _record

pytestmark = pytest.mark.django_db


def _keys(typed_dict) -> set[str]:
    return set(typing.get_type_hints(typed_dict))


@pytest.mark.parametrize("kind", ["constant", "steps"])
def test_the_type_covers_every_key_the_analysis_writes(run, kind):
    finished = _finish(_record(run, PROFILES[kind]))
    stored = finished.summary
    summary = RunSummary.of(finished)

    fields = {f for f in RunSummary.__dataclass_fields__ if f != "raw"}
    assert set(stored) <= fields, set(stored) - fields
    assert summary.to_json() == stored  # the one serializer gives back what was stored
    assert set(summary.totals) <= _keys(Totals), set(summary.totals) - _keys(Totals)
    assert summary.windows and summary.pages
    for window in summary.windows:
        assert set(window) <= _keys(Window), set(window) - _keys(Window)
        assert set(window["totals"]) <= _keys(Totals)
        for t in window["thresholds"]:
            assert set(t) == _keys(Threshold)
    for row in summary.pages:
        assert set(row) <= _keys(PageRow), set(row) - _keys(PageRow)
    for row in summary.errors:
        assert set(row) == _keys(ErrorRow)
    # the report's capacity chart (steps) and degradation chart (one window) read typed parts too
    assert summary.capacity if kind == "steps" else summary.degradation
    assert set(summary.capacity) <= _keys(Capacity), set(summary.capacity) - _keys(Capacity)
    for level in summary.capacity.get("levels") or []:
        assert set(level) <= _keys(CapacityLevel), set(level) - _keys(CapacityLevel)
    model = summary.capacity.get("model") or {}
    assert set(model) <= _keys(ScalabilityModel), set(model) - _keys(ScalabilityModel)
    assert set(summary.degradation) <= _keys(Degradation), set(summary.degradation) - _keys(Degradation)
    for cp in (summary.degradation.get("change_points") or {}).values():
        assert set(cp) == _keys(ChangePoint)
    assert summary.verdict == finished.verdict
    assert finished.typed_summary == summary  # what the templates read (run.typed_summary.capacity …)
    assert summary.threshold_rows() == [
        {"window": w["label"], **t} for w in stored["windows"] for t in w.get("thresholds") or []
    ]


def test_a_run_without_a_summary_reads_as_empty(run):
    summary = RunSummary.of(run)
    assert not summary and summary.to_json() is None
    assert not run.typed_summary
    assert (summary.totals, summary.windows, summary.pages) == ({}, [], [])
    assert summary.verdict is None and summary.saturated is None


def _declared(typed_dict) -> tuple[set[str], set[str]]:
    """(the keys it requires, every key it declares)."""
    required = set(typed_dict.__required_keys__)
    return required, required | set(typed_dict.__optional_keys__)


def _exactly(value: dict, typed_dict) -> None:
    """``value`` has every key ``typed_dict`` requires and none it does not declare."""
    required, declared = _declared(typed_dict)
    assert set(value) <= declared, f"{typed_dict.__name__} lacks {set(value) - declared}"
    assert required <= set(value), f"{typed_dict.__name__} requires {required - set(value)}, never written"


def _protocol_page(row: dict) -> None:
    _exactly(row, ProtocolPage)
    if row["stream"] is not None:
        _exactly(row["stream"], StreamFigures)
        _exactly(row["stream"]["events"], StreamEvents)
        _exactly(row["stream"]["events"]["per_response"], PerResponse)
        for part in ("ttfe_ms", "gap_ms"):
            _exactly(row["stream"][part], ProtocolLatency)
    if row["websocket"] is not None:
        _exactly(row["websocket"], WebSocketFigures)
        _exactly(row["websocket"]["rtt_ms"], ProtocolLatency)


@pytest.mark.parametrize("kind", ["constant", "steps"])
def test_the_type_covers_every_key_the_protocol_figures_write(run, kind):
    """Streams, WebSocket sessions and HTTP/2 hits, stored by the protocol rows' writer beside the page rows, give
    the summary's ``protocols`` section, the windows' (and the capacity levels') protocol figures and the drill-down's
    rows exactly the keys their types declare."""
    run = _record(run, PROFILES[kind])
    ask, chat, home = LABELS[:3]
    for second in range(int(run.planned_duration)):
        protocols.write(
            run.id,
            second % 2,
            second,
            {
                ask: stream_label([40 + second % 7, 60]),
                chat: ws_label([5, 15 + second % 3], sent=2, received=3),
                home: http1_label(2) | {"protocols": {"h2": 1, "http/1.1": 1}},
            },
        )
    finished = _finish(run)
    summary = RunSummary.of(finished)

    assert summary.to_json() == finished.summary
    _exactly(summary.protocols, Protocols)
    _exactly(summary.protocols["totals"], ProtocolTotals)
    assert set(summary.protocols["totals"]) > set(protocols.TOTAL_KEYS)  # the optional figures are all written here
    for part in ("ttfe_ms", "gap_ms", "rtt_ms"):
        _exactly(summary.protocols["totals"][part], ProtocolLatency)
    assert {p["label"] for p in summary.protocol_pages} == {ask, chat, home}
    for row in summary.protocol_pages:
        _protocol_page(row)
    # the typed readers (baselines, comparisons, protocols.csv) find what the writer wrote
    measured = summary.window["seconds"]  # two responses, and two round trips, a second
    assert summary.protocol_page(ask)["stream"]["responses"] == summary.ws_round_trips == 2 * measured
    assert summary.protocol_totals is summary.protocols["totals"]

    # a window's protocol figures join its totals, and a steps run's capacity levels (ProtocolFigures)
    _, totals_keys = _declared(Totals)
    assert set(summary.totals) <= totals_keys and set(protocols.TOTAL_KEYS) <= set(summary.totals)
    for window in summary.windows:
        assert set(window["totals"]) <= totals_keys, set(window["totals"]) - totals_keys
        assert "ws_messages_per_s" in window["totals"]
    for level in summary.capacity.get("levels") or []:
        assert set(level) <= _declared(CapacityLevel)[1], set(level) - _declared(CapacityLevel)[1]
    assert summary.capacity.get("levels") if kind == "steps" else not summary.capacity

    # the drill-down's rows are the same type (payloads.RunDetail.protocols)
    detail = drilldown.page_detail(finished, label=None, since=None, until=None)
    assert detail["protocols"]
    for row in detail["protocols"]:
        _protocol_page(row)


def test_the_type_covers_every_key_a_stop_writes(plan):
    """A run stopped by its criteria over real interval rows: ``stopped_by``, as the evaluator records it and the
    summary copies it, has exactly the keys of ``StoppedBy``."""
    plan.ramp_up, plan.hold = 5, 120
    plan.stop_criteria = [{"metric": "error_rate_pct", "above": 50, "window_s": 10}]
    plan.save()
    run = plan_run(
        plan,
        status=Run.Status.RUNNING,
        shard_count=1,
        plan_snapshot=plan.to_engine_dict(),
        start_at=timezone.now() - timedelta(seconds=40),
    )
    RunShard.objects.create(run=run, shard_no=0, user_count=1, status=RunShard.Status.RUNNING)
    for s in range(30):
        ok, errors = (0, 10) if s >= 15 else (10, 0)
        labels = {
            "Browse: Home": {"pages": ok + errors, "hits": ok + errors, "errors": errors, "hist": hist_of(*[20.0] * ok)}
        }
        interval_write(run.id, 0, {"second": s, "active_users": 5, "labels": labels})
    assert criteria.criteria_check() == [run.id]
    finished = _finish(run)

    summary = RunSummary.of(finished)
    assert finished.status == Run.Status.STOPPED and summary.stopped_by == finished.stopped_by
    assert summary.to_json() == finished.summary
    _exactly(summary.stopped_by, StoppedBy)
    _exactly(summary.stopped_by["window"], StopWindow)
    _exactly(summary.stopped_by["rule"], StopRule)
    assert summary.stopped_by["window"]["timed_pages"] is not None  # the durations' figures are read for the record
