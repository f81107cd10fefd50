"""Trace context in the portal: the slowest requests' trace ids stored from the engine's reports, listed in the
drill-down with links built from the environment's trace URL template, and the plan's switch reaching the engine."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from portal.projects.models import Environment, Plan
from portal.runs.models import SlowTrace
from portal.runs.results import drilldown
from portal.runs.results.sink import interval_write
from workers.engine.plan import Plan as EnginePlan

from .factories import add_second, hist_of

pytestmark = pytest.mark.django_db

TEMPO = "https://tempo.example/trace/{trace_id}"


def session(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def _tid(n: int) -> str:
    return f"{n:032x}"


def _report(second, slowest_by_label):
    return {
        "second": second,
        "active_users": 2,
        "labels": {
            label: {"pages": 3, "hits": 3, "errors": 0, "hist": hist_of(10, 20, 30), **extra}
            for label, extra in slowest_by_label.items()
        },
    }


def test_the_interval_writer_keeps_each_labels_slowest_trace_once(run):
    report = _report(
        4,
        {
            "Home": {"slowest": {"ms": 30.5, "trace_id": _tid(7)}},
            "Search": {"slowest": {"ms": 12.0, "trace_id": "not-a-trace-id"}},  # malformed: not kept
            "About": {},  # no trace context
        },
    )
    interval_write(run.id, 0, report)
    interval_write(run.id, 0, report)  # a retried write replaces itself

    rows = list(SlowTrace.objects.filter(run=run).values_list("second", "label", "ms", "trace_id"))
    assert rows == [(4, "Home", 30.5, _tid(7))]


def _record(run, seconds=30):
    for s in range(seconds):
        add_second(run, s, labels={"Home": ([10.0, 20.0 + s], {}), "Search": ([15.0], {})})
        SlowTrace.objects.create(run=run, shard_no=0, second=s, label="Home", ms=20.0 + s, trace_id=_tid(1000 + s))
        SlowTrace.objects.create(run=run, shard_no=0, second=s, label="Search", ms=15.0, trace_id=_tid(2000 + s))


def test_the_drilldown_lists_the_slowest_requests_with_links(alice_client, run):
    _record(run)
    Environment.objects.filter(pk=run.environment_id).update(trace_url_template=TEMPO)
    url = reverse("runs:detail-data", args=[run.code])

    data = alice_client.get(url, {"page": "Home", "from": 5, "to": 15}).json()

    slowest = data["slowest"]
    assert [r["second"] for r in slowest] == list(range(14, 4, -1))  # slowest first, only the range's seconds
    assert slowest[0] == {
        "second": 14,
        "page": "Home",
        "ms": 34.0,
        "trace_id": _tid(1014),
        "url": f"https://tempo.example/trace/{_tid(1014)}",
    }
    assert {r["page"] for r in slowest} == {"Home"}
    # the whole measurement window: at most SLOWEST_SHOWN, the run's maximum first
    whole = alice_client.get(url, {"page": "Home"}).json()
    in_windows = [s for s in range(30) if any(a <= s < b for a, b in whole["windows"])]
    assert in_windows  # the plan's measurement window covers some of the 30 seconds
    expected = sorted(in_windows, reverse=True)[: drilldown.SLOWEST_SHOWN]
    assert [r["second"] for r in whole["slowest"]] == expected


def test_without_a_template_the_ids_have_no_link(alice_client, run):
    _record(run, seconds=3)
    data = alice_client.get(reverse("runs:detail-data", args=[run.code]), {"page": "Search"}).json()
    assert data["slowest"] and all(r["url"] == "" and r["page"] == "Search" for r in data["slowest"])


def test_an_outsider_gets_no_trace_ids(charlie_client, run):
    _record(run, seconds=3)
    response = charlie_client.get(reverse("runs:detail-data", args=[run.code]), {"page": "Home"})
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("https://tempo.example/trace/", "Put {trace_id} once"),
        ("https://tempo.example/{trace_id}/{trace_id}", "Put {trace_id} once"),
        ("ftp://tempo.example/{trace_id}", "http:// or https://"),
        ("https://tempo.example/{span}/{trace_id}", "Only {trace_id}"),
    ],
)
def test_a_bad_trace_url_template_is_refused_with_its_reason(alice, environment, template, message):
    response = session(alice).patch(
        f"/api/v1/environments/{environment.code}/", {"trace_url_template": template}, format="json"
    )
    assert response.status_code == 400
    assert message in str(response.json()["fields"]["trace_url_template"])
    assert Environment.objects.get(pk=environment.pk).trace_url_template == ""


def test_a_trace_url_template_is_saved_through_the_api(alice, environment):
    response = session(alice).patch(
        f"/api/v1/environments/{environment.code}/", {"trace_url_template": TEMPO}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["trace_url_template"] == TEMPO
    assert Environment.objects.get(pk=environment.pk).trace_url_template == TEMPO


def test_the_plans_trace_switch_and_sample_rate_reach_the_engine_plan(alice, plan):
    default = EnginePlan.from_dict(plan.to_engine_dict())
    assert default.trace_context is True and default.trace_sample_rate == 1.0

    response = session(alice).patch(
        f"/api/v1/plans/{plan.code}/", {"trace_context": False, "trace_sample_rate": 0.25}, format="json"
    )

    assert response.status_code == 200, response.content
    assert (response.json()["trace_context"], response.json()["trace_sample_rate"]) == (False, 0.25)
    engine = EnginePlan.from_dict(Plan.objects.get(pk=plan.pk).to_engine_dict())
    assert (engine.trace_context, engine.trace_sample_rate) == (False, 0.25)


def test_a_sample_rate_out_of_range_is_refused(alice, plan):
    response = session(alice).patch(f"/api/v1/plans/{plan.code}/", {"trace_sample_rate": 1.5}, format="json")
    assert response.status_code == 400 and "trace_sample_rate" in response.json()["fields"]
    assert Plan.objects.get(pk=plan.pk).trace_sample_rate == 1.0


def test_the_roll_up_keeps_each_labels_slowest_traces_per_span_and_the_runs_slowest(run):
    import random

    from portal.runs.models import PageRollup, Run, RunFigures
    from portal.runs.results.rollup import TRACES_PER_SPAN
    from portal.runs.services import run_rollup

    rng = random.Random(5)
    written = []
    for s in range(150):  # three roll-up spans of 60 s (the last one partial)
        add_second(run, s, labels={"Home": ([10.0], {}), "Search": ([15.0], {})})
        for label in ("Home", "Search"):
            for shard in (0, 1):
                ms = round(rng.uniform(5, 500), 3)
                SlowTrace.objects.create(
                    run=run, shard_no=shard, second=s, label=label, ms=ms, trace_id=_tid(len(written) + 1)
                )
                written.append((s // PageRollup.ROLLUP_S, label, ms, _tid(len(written) + 1)))
    Run.objects.filter(id=run.id).update(status=Run.Status.PASSED)
    RunFigures.objects.create(run=run, series={}, batches=[])

    assert run_rollup(run.id) > 0

    kept = sorted(SlowTrace.objects.filter(run=run).values_list("second", "label", "ms", "trace_id"))
    expected = []
    for span in range(3):
        for label in ("Home", "Search"):
            cell = sorted((w for w in written if w[0] == span and w[1] == label), key=lambda w: -w[2])
            expected += [(label, ms, tid) for _, _, ms, tid in cell[:TRACES_PER_SPAN]]
    assert sorted((label, ms, tid) for _, label, ms, tid in kept) == sorted(expected)
    assert len(kept) == 3 * 2 * TRACES_PER_SPAN  # from 600 rows
    slowest = max(written, key=lambda w: w[2])
    assert any(tid == slowest[3] for *_, tid in kept)  # the run's slowest request keeps its trace id
