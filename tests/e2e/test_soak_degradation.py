"""A short soak finds the degradation of the uncapped token cache, and when it began.

The SharePoint story on the demo target: every page adds an entry to a security-token
cache; past a number of entries (100,000 by default; 10,500 here, the knob
``token_cache.pressure``) each clean-up stalls every page (demo/tokencache.py), and
throughput falls by half or more. A 38 s soak of 20 users without think time runs
through the portal and a real Celery worker (once per session: test_server_metrics_soak.py reads
the same run, tests/e2e/soak.py); the run report must call it degraded, with
an onset after the steady state, in the second the target's first clean-up stall began
(by the target's own clock) or within five seconds after it, and a change point ("began")
whose interval holds that stall. The control, the same load
with the cache capped (``-T4618``), serves more than that many pages and must not degrade.
"""

import pytest

from portal.runs.models import Run
from tests.e2e.soak import (
    CONTROL_HOLD_S,
    HOLD_S,
    PRESSURE_ENTRIES,
    STALL_MS,
    STEADY_S,
    SUSTAIN_S,
    run_through_the_portal,
    soak_plan,
)
from tests.processes import DemoTarget

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def soak_target(tmp_path_factory):
    """The control's target: its cache must start empty and nobody else's run may feed it."""
    target = DemoTarget(tmp_path_factory.mktemp("soak-demo"), items=1000)
    yield target
    target.close()


def test_an_uncapped_token_cache_degrades_and_the_report_says_when(uncapped_soak):
    # given: 20 users without think time for 38 s; steady state = the first 10 s, a change must last 10 s;
    # when: the cache has no cap (tests/e2e/soak.py: the run, shared with test_server_metrics_soak.py)
    run = uncapped_soak

    # then: the run finished, every page the target served was recorded, and the cache kept them all
    assert run.status == Run.Status.FINISHED, (run.status, run.error_message, run.worker_output)
    served = run.served
    recorded = run.recorded
    assert recorded == served["requests"], (recorded, served)
    assert served["requests"] > PRESSURE_ENTRIES, (
        f"the target served only {served['requests']} pages in {HOLD_S} s: too slow a machine to fill the cache "
        f"past {PRESSURE_ENTRIES} entries, so there was nothing to degrade"
    )
    assert served["token_cache_entries"] == served["requests"], served

    # and the report found a sustained throughput drop after the steady state, before the end
    d = run.summary["degradation"]
    print(
        f"soak uncapped: steady {d['steady_pages_per_s']} pages/s over seconds {d['steady_window']}, "
        f"onset {d['onset_s']} s ({d['kind']}; throughput {d['throughput_onset_s']}, APD {d['apd_onset_s']}), "
        f"degraded {d['degraded_pages_per_s']} pages/s, APD {d['steady_apd_ms']} → {d['degraded_apd_ms']} ms, "
        f"excursions {d['excursions']}, drift {d['drift_ms_per_hour']} ms/h; served {served['requests']}, "
        f"clean-up stalls {served['token_cache_cleanup_ms_total']:.0f} ms in all\n  {d['sentence']}"
    )
    assert d["analysed"] is True and d["degraded"] is True, d
    assert d["steady_window"] == [0, STEADY_S]
    onset = d["onset_s"]
    assert STEADY_S <= onset <= HOLD_S - SUSTAIN_S, d
    assert d["throughput_onset_s"] is not None, d
    assert d["time_to_degradation_s"] == onset  # a constant profile has no ramp-up
    assert d["degraded_pages_per_s"] < 0.7 * d["steady_pages_per_s"], d
    assert "Throughput fell" in d["sentence"]

    # and it agrees with the target's own clock: the onset is the second in which the first
    # clean-up stall began, or one of the next five (a second is the report's resolution)
    start = run.start_at.timestamp()
    stall_at = served["token_cache_first_stall_at"]
    assert stall_at is not None, served
    stall_s = stall_at - start
    print(f"  the target's first clean-up stall began {stall_s:.2f} s into the run")
    # the change point: the drift began inside the interval given, which holds the first stall
    # (the interval counts whole seconds: [low, high] covers the instants low ≤ t < high + 1)
    low, high = d["began_interval_s"]
    print(f"  began {d['began_s']} s (between {low} and {high}), crossed {d['crossed_s']} s\n  {d['began_sentence']}")
    assert d["crossed_s"] == onset and low <= d["began_s"] <= high <= onset, d
    # Pages count in the second they complete: a stall that began in the last fifth of a second left that second
    # 80 % or more of its pages, so the change may show from the next one (seen: a stall at 21.93 s, began [22, 22]).
    assert low <= stall_s + 0.2 and stall_s < high + 1, (stall_s, d["began_interval_s"], run.per_second)
    assert int(stall_s) <= onset <= stall_s + 5, (stall_s, onset, run.per_second)
    # and no stall at all during the steady state
    assert stall_s >= STEADY_S, stall_s


def test_a_capped_token_cache_does_not_degrade(project, alice, soak_target, celery_worker):
    # given: the same load, with the cache capped at 1,024 entries as -T4618 does
    plan = soak_plan(project, soak_target, name="Soak capped", hold=CONTROL_HOLD_S)

    # when
    run = run_through_the_portal(plan, alice, soak_target, cap=1024)

    # then: more pages than it took the uncapped cache to stall, and no degradation
    assert run.status == Run.Status.FINISHED, (run.status, run.error_message)
    served = soak_target.counters()
    d = run.summary["degradation"]
    print(
        f"soak capped: steady {d['steady_pages_per_s']} pages/s, served {served['requests']}, "
        f"cache {served['token_cache_entries']} entries, clean-ups {served['token_cache_cleanup_ms_total']:.1f} ms"
        f"\n  {d['sentence']}"
    )
    assert served["requests"] > PRESSURE_ENTRIES, served
    assert served["token_cache_entries"] <= 1024
    assert served["token_cache_cleanup_ms_total"] < STALL_MS, served
    assert d["analysed"] is True and d["degraded"] is False, d
    assert d["onset_s"] is None and d["sentence"].startswith("No degradation")
