"""The stream and WebSocket figures in the baseline verdict (issue 26.4): a page whose time to first event
regressed is called regressed; a run without streams gets no such rows."""

import random

import pytest

from portal.runs import analysis
from portal.runs.models import Run
from portal.schedules import baselines, noise
from portal.schedules.baselines import run_judge
from tests.portal.runs.factories import plan_run
from tests.portal.runs.test_protocols import stream_label, write

pytestmark = pytest.mark.django_db

ASK = "Ask: Stream"
TTFE = "Time to first event p95"


@pytest.fixture
def sse_plan(plan):
    plan.profile_kind, plan.users, plan.hold, plan.ramp_up = "constant", 6, 20, 0
    plan.save()
    return plan


def sse_run(plan, seed: int, *, factor: float = 1.0):
    """A finished run of 20 s with 6 streams a second (120 in all) whose first events took about 200 ms ×
    ``factor`` (±5 %, random)."""
    rng = random.Random(seed)
    run = plan_run(plan, status="passed")
    for second in range(20):
        ttfe = [max(1, round(rng.gauss(200 * factor, 10 * factor))) for _ in range(6)]
        write(run, second, {ASK: stream_label(ttfe)})
    run.summary = analysis.summarize(run)
    run.save(update_fields=["summary"])
    return run


def rows_of(verdict) -> dict:
    return {(r["page"], r["figure"]): r for r in verdict.rows}


@pytest.mark.parametrize("factor", [0.97, 1.03])
def test_a_time_to_first_event_within_three_percent_is_within_noise(sse_plan, factor):
    for seed in (1, 2, 3):
        sse_run(sse_plan, seed)
    run = sse_run(sse_plan, 4, factor=factor)

    verdict = run_judge(run_id=run.id)

    rows = rows_of(verdict)
    assert rows[(ASK, TTFE)]["verdict"] == "within_noise", rows[(ASK, TTFE)]
    assert rows[(None, TTFE)]["verdict"] == "within_noise"
    assert "order statistic over its 120 streams" in rows[(ASK, TTFE)]["basis"]
    assert verdict.verdict == "within_noise", verdict.headline


def test_a_time_to_first_event_half_as_slow_again_is_regressed(sse_plan):
    for seed in (1, 2, 3):
        sse_run(sse_plan, seed)
    run = sse_run(sse_plan, 4, factor=1.5)

    verdict = run_judge(run_id=run.id)

    rows = rows_of(verdict)
    assert rows[(ASK, TTFE)]["verdict"] == "regressed", rows[(ASK, TTFE)]
    assert rows[(ASK, TTFE)]["change"].endswith("% more")
    assert verdict.verdict == "regressed"
    assert f"{ASK} {TTFE} " in verdict.headline
    # the gaps between events did not move
    assert rows[(ASK, "Gap between events p95")]["verdict"] == "within_noise"


def test_too_few_streams_are_not_judged(sse_plan):
    cell = noise.Cell(
        page=ASK,
        key="ttfe_p95_ms",
        lower_is_better=True,
        baseline=[200.0, 201.0, 199.0],
        value=400.0,
        baseline_batches=[[], [], []],
        batches=[],
        baseline_pages=[120, 120, 120],
        pages=40,
        baseline_v=[1e-4] * 3,
        v=1e-4,
        samples="streams",
    )
    judged = noise.judge_cells([cell], tolerance_pct=10).rows[0]
    assert judged.verdict == "none"
    assert judged.note == "too few streams to judge (40 < 100 in a run)"


def test_the_noise_of_a_p95_shrinks_with_the_streams_behind_it():
    few = noise.percentile_var(180.0, 200.0, 240.0, 100)
    many = noise.percentile_var(180.0, 200.0, 240.0, 10_000)
    assert few == pytest.approx(100 * many)
    # 100 streams, quantile slope 60/0.09 ms: se = 666.7 × √(0.0475/100) = 14.5 ms, 7.3 % of 200 ms
    assert few**0.5 == pytest.approx(0.0727, abs=0.001)
    assert noise.percentile_var(None, 200.0, 240.0, 100) is None


def test_a_run_without_streams_gets_no_stream_rows(plan):
    from tests.portal.schedules.test_baselines import make_run

    plan.hold = 20
    plan.save()
    for seed in (1, 2, 3):
        make_run(plan, seed)
    run = make_run(plan, 4)

    verdict = run_judge(run_id=run.id)

    assert not baselines.protocol_cells(list(Run.objects.exclude(id=run.id)), run)
    figures = {r["figure"] for r in verdict.rows}
    assert figures == {"APD", "p95", "pages/s", "error rate"}
    assert verdict.verdict == "within_noise"
