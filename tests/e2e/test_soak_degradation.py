"""A short soak finds the degradation of the uncapped token cache, and when it began.

The SharePoint story on the demo target: every page adds an entry to a security-token
cache; past 100,000 entries each clean-up stalls every page (demo/tokencache.py), and
throughput falls by half or more. A 90 s soak of 20 users without think time runs
through the portal and a real Celery worker; the run report must call it degraded, with
an onset after the steady state and no earlier than the clean-up stalls the target
itself counted. The control, the same load with the cache capped (``-T4618``), serves
more than 100,000 pages and must not degrade.
"""

import threading
import time

import pytest

from portal.projects.models import Environment, MixEntry, Plan, Step, TestCase
from portal.runs.models import PageInterval, Run
from portal.runs.services import run_create
from tests.processes import DemoTarget, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

USERS = 20
HOLD_S = 90
CONTROL_HOLD_S = 60
STEADY_S = 20
SUSTAIN_S = 10
# demo.tokencache.PRESSURE_ENTRIES: clean-ups start to stall past this many entries.
PRESSURE_ENTRIES = 100_000
# A clean-up that held the lock this long is a stall (below the pressure line one costs microseconds).
STALL_MS = 100


@pytest.fixture(scope="module")
def soak_target(tmp_path_factory):
    """A target of our own: its cache must start empty and nobody else's run may feed it."""
    target = DemoTarget(tmp_path_factory.mktemp("soak-demo"), items=1000)
    yield target
    target.close()


def soak_plan(project, target, *, name: str, hold: float) -> Plan:
    env = Environment.objects.create(project=project, name=f"Demo {name}", base_url=target.base_url)
    home = TestCase.objects.create(project=project, name=f"Home {name}")
    Step.objects.create(test_case=home, position=0, name="Home", path="/", think_time=0)
    plan = Plan.objects.create(
        project=project,
        environment=env,
        name=name,
        profile_kind=Plan.ProfileKind.CONSTANT,
        users=USERS,
        hold=hold,
        degradation_steady_s=STEADY_S,
        degradation_sustain_s=SUSTAIN_S,
    )
    MixEntry.objects.create(plan=plan, test_case=home, weight=1)
    return plan


class CounterWatch:
    """Samples the target's own counters every 0.5 s while a run goes on (wall-clock time, counters)."""

    def __init__(self, target: DemoTarget, *, limit_s: float):
        self.target = target
        self.samples: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._deadline = time.monotonic() + limit_s
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                self.samples.append((time.time(), self.target.counters()))
            except OSError:
                pass
            self._stop.wait(0.5)

    def stop(self) -> list[tuple[float, dict]]:
        self._stop.set()
        self._thread.join(15)
        return self.samples

    def first(self, predicate) -> tuple[float, float] | None:
        """(time of the sample before, time of the first sample) where predicate(counters) became true."""
        before = None
        for t, counters in self.samples:
            if predicate(counters):
                return (before if before is not None else t), t
            before = t
        return None


def run_through_the_portal(plan: Plan, user, target: DemoTarget, *, cap: int) -> tuple[Run, CounterWatch]:
    target.set_knobs(**{"token_cache.cap": cap, "latency_ms": 0})
    target.reset()  # empties the token cache too
    run = run_create(plan=plan, user=user)
    watch = CounterWatch(target, limit_s=plan.duration + 90)
    try:
        wait_until(
            lambda: Run.objects.get(id=run.id).status in Run.FINISHED,
            timeout=plan.duration + 60,
            interval=0.5,
            what=f"run #{run.number} to end",
        )
    finally:
        watch.stop()
    run.refresh_from_db()
    return run, watch


def test_an_uncapped_token_cache_degrades_and_the_report_says_when(project, alice, soak_target, celery_worker):
    # given: 20 users without think time for 90 s; steady state = the first 20 s, a change must last 10 s
    plan = soak_plan(project, soak_target, name="Soak uncapped", hold=HOLD_S)

    # when: the cache has no cap
    run, watch = run_through_the_portal(plan, alice, soak_target, cap=0)

    # then: the run finished, every page the target served was recorded, and the cache kept them all
    assert run.status == Run.Status.PASSED, (run.status, run.error_message, celery_worker.output()[-3000:])
    served = soak_target.counters()
    recorded = sum(PageInterval.objects.filter(run=run).values_list("hits", flat=True))
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

    # and it agrees with the target's own counters: the clean-up stalls began at most a second
    # after the onset (a second is the report's resolution) and the onset followed within 5 s
    start = run.start_at.timestamp()
    stalls = watch.first(lambda c: c["token_cache_cleanup_ms_total"] >= STALL_MS)
    assert stalls is not None, watch.samples[-3:]
    stall_from, stall_seen = stalls[0] - start, stalls[1] - start
    print(f"  the target's first stall between second {stall_from:.1f} and {stall_seen:.1f} of the run")
    assert stall_from <= onset + 1, (stall_from, onset)
    assert onset <= stall_seen + 5, (stall_seen, onset)
    # and no stall at all during the steady state
    assert stall_from >= STEADY_S - 1, stall_from


def test_a_capped_token_cache_does_not_degrade(project, alice, soak_target, celery_worker):
    # given: the same load, with the cache capped at 1,024 entries as -T4618 does
    plan = soak_plan(project, soak_target, name="Soak capped", hold=CONTROL_HOLD_S)

    # when
    run, _ = run_through_the_portal(plan, alice, soak_target, cap=1024)

    # then: more pages than it took the uncapped cache to stall, and no degradation
    assert run.status == Run.Status.PASSED, (run.status, run.error_message)
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
