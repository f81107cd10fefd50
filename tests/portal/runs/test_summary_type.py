"""The run summary's type (portal/runs/summary.py) covers what the analysis writes: a key the analysis
adds without typing it fails here, and the type reads back the stored summary unchanged."""

import typing

import pytest

from portal.runs.summary import (
    Capacity,
    CapacityLevel,
    ChangePoint,
    Degradation,
    ErrorRow,
    PageRow,
    RunSummary,
    ScalabilityModel,
    Threshold,
    Totals,
    Window,
)
from tests.portal.runs.test_store import PROFILES, _finish, _record

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
