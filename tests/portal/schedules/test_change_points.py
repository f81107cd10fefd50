"""Issue 24.4: change points across a plan's history, attributed to what happened between two runs."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from portal.history.models import TuningChange
from portal.history.services import change_apply, change_create
from portal.schedules.change_points import plan_change_points, run_change_points
from tests.portal.api.conftest import bearer, session, token_secret  # noqa: F401, F811 (a fixture)
from tests.portal.runs.factories import plan_run

pytestmark = pytest.mark.django_db

DAY0 = datetime(2026, 5, 1, 2, tzinfo=UTC)


def figures(apd, pages=500):
    return {"pages": pages, "apd_ms": apd, "p95_ms": apd * 2, "pages_per_s": 20.0, "error_rate_pct": 0.0}


def history(plan, *, n=40, slow_from=None, seed=0, labels=None, status="passed", extra=None):
    """n nightly runs of ``plan``: Home steady, Search ±5 % noisy, 30 % slower from night ``slow_from``."""
    rng = np.random.default_rng(seed)
    runs = []
    for night in range(1, n + 1):
        search = 200 * (1 + rng.uniform(-0.05, 0.05)) * (1.3 if slow_from and night >= slow_from else 1.0)
        home = 50 * (1 + rng.uniform(-0.05, 0.05))
        start = DAY0 + timedelta(days=night)
        runs.append(
            plan_run(
                plan,
                status=status,
                start_at=start,
                finished_at=start + timedelta(minutes=10),
                labels=(labels or {}).get(night, {"build": "a0a0a0"}),
                **(extra(night) if extra else {}),
                summary={
                    "totals": figures((search + home) / 2, pages=1000),
                    "pages": [{"label": "Home", **figures(home)}, {"label": "Search", **figures(search)}],
                },
            )
        )
    return runs


def applied_change(environment, alice, title, at):
    change = change_create(
        environment=environment, user=alice, edits=[{"key": "db.pool", "value": "20"}], title=title, category="other"
    )
    change_apply(change, user=alice, call_hook_first=False)
    TuningChange.objects.filter(id=change.id).update(applied_at=at)
    return change


def test_a_step_in_one_page_is_one_change_point_attributed_to_the_change_and_the_build(plan, environment, alice):
    # given: Search 30 % slower from run 20 of 40; build 3f2a1c from run 20; the pool changed between 19 and 20
    runs = history(plan, slow_from=20, labels={n: {"build": "3f2a1c" if n >= 20 else "a0a0a0"} for n in range(1, 41)})
    between = DAY0 + timedelta(days=19, hours=12)
    applied_change(environment, alice, "connection pool 50 → 20", between)
    applied_change(environment, alice, "earlier change", DAY0 + timedelta(days=5, hours=12))

    # when
    found = plan_change_points(plan=plan)

    # then: Search's APD and p95 moved at run 20 (the totals too: they average Search in); Home did not
    assert {(c.page, c.figure) for c in found} == {("Search", "APD"), ("Search", "p95"), (None, "APD"), (None, "p95")}
    search_apd = next(c for c in found if c.page == "Search" and c.figure == "APD")
    assert search_apd.run_number == runs[19].number and search_apd.previous_run_number == runs[18].number
    assert 25 < search_apd.change_pct < 35
    assert search_apd.labels == {"build": "3f2a1c"}
    assert [c.title for c in search_apd.changes] == ["connection pool 50 → 20"]
    assert search_apd.text.startswith(f"Search APD +{search_apd.change_pct:.0f} % since run #{runs[19].number} (")
    assert search_apd.text.endswith("(build 3f2a1c; after the change ‘connection pool 50 → 20’)")
    # the run page lists the shifts that begin at its run, and no other run's
    assert {c.run_number for c in run_change_points(runs[19])} == {runs[19].number}
    assert run_change_points(runs[25]) == []


def test_a_flat_noisy_history_has_no_change_point(plan):
    history(plan, seed=7)
    assert plan_change_points(plan=plan) == []


def test_runs_that_do_not_count_are_left_out(plan):
    # given: the slow nights ended in error or were cancelled: they are not the plan's level
    history(plan, n=20)
    history(plan, n=20, slow_from=1, status="cancelled")
    assert plan_change_points(plan=plan) == []


def test_the_cost_is_bounded_to_the_last_runs(plan):
    # given: a shift at run 20 of 40, read over the last 15 runs only: both sides are not there
    history(plan, slow_from=20)
    assert plan_change_points(plan=plan, last=15) == []
    assert plan_change_points(plan=plan, last=40) != []


def test_the_api_lists_them_typed_to_a_read_token_and_hides_another_teams_plan(
    plan,
    environment,
    alice,
    charlie,
    token_secret,  # noqa: F811
):
    runs = history(plan, slow_from=20, labels={n: {"build": "3f2a1c" if n >= 20 else "a0a0a0"} for n in range(1, 41)})
    applied_change(environment, alice, "connection pool 50 → 20", DAY0 + timedelta(days=19, hours=12))
    url = f"/api/v1/plans/{plan.code}/change-points/"

    response = bearer(token_secret("read")).get(url)

    assert response.status_code == 200, response.content
    body = response.json()
    search = next(c for c in body if c["page"] == "Search" and c["figure"] == "APD")
    assert search["run_number"] == runs[19].number and search["run_code"] == str(runs[19].code)
    assert search["labels"] == {"build": "3f2a1c"}
    assert [c["title"] for c in search["changes"]] == ["connection pool 50 → 20"]
    assert search["text"].endswith("(build 3f2a1c; after the change ‘connection pool 50 → 20’)")
    assert session(charlie).get(url).status_code == 404
    refused = session(alice).get(url + "?last=5000")
    assert refused.status_code == 400 and "last" in refused.content.decode()
    assert session(alice).get(url + "?color=red").status_code == 400
    assert session(alice).get(url + "?last=15").json() == []


def test_the_run_page_and_the_morning_view_list_them(plan, environment, alice, client, nightly):
    runs = history(plan, slow_from=20, labels={n: {"build": "3f2a1c" if n >= 20 else "a0a0a0"} for n in range(1, 41)})
    change = applied_change(environment, alice, "connection pool 50 → 20", DAY0 + timedelta(days=19, hours=12))
    client.force_login(alice)

    # the run where the level moved lists its shifts, with the build and a link to the change
    html = client.get(runs[19].get_absolute_url()).content.decode()
    assert 'id="change-points"' in html
    assert f'data-page="Search" data-since="{runs[19].number}"' in html
    assert "<code>build 3f2a1c</code>" in html and f"/changes/{change.code}/" in html
    # a run at the same level lists none
    assert 'id="change-points"' not in client.get(runs[25].get_absolute_url()).content.decode()
    # the morning view: the plan's latest shifts under its schedule
    morning = client.get(f"/projects/{nightly.project.code}/schedules/").content.decode()
    assert f'id="change-points-{nightly.code}"' in morning and "‘connection pool 50 → 20’" in morning


def test_the_journey_lists_the_plans_change_points(plan, environment, alice, client):
    runs = history(plan, slow_from=20)
    client.force_login(alice)
    for url in (f"/environments/{environment.code}/journey/", f"/projects/{plan.project.code}/journey/"):
        html = client.get(f"{url}?plan={plan.code}").content.decode()
        assert 'id="change-points"' in html and f'data-page="Search" data-since="{runs[19].number}"' in html, url


def test_with_nothing_in_the_ledger_the_plan_and_configuration_edits_are_named(plan):
    # given: from run 20 the plan had more users and the run's configuration another pool, with no change recorded
    engine = plan.to_engine_dict()
    assert engine["profile"]["users"] == 5

    def edited(night):
        later = night >= 20
        return {
            "plan_snapshot": {**engine, "profile": {**engine["profile"], "users": 50 if later else 5}},
            "config_snapshot": [{"key": "db.pool", "value": "20" if later else "50"}],
        }

    runs = history(plan, slow_from=20, extra=edited)
    search = next(c for c in plan_change_points(plan=plan) if c.page == "Search" and c.figure == "APD")
    assert search.run_number == runs[19].number and search.changes == [] and search.labels == {}
    assert search.plan_edits == ["profile.users"] and search.config_edits == ["db.pool"]
    assert search.text.endswith("(the plan was edited (profile.users); the configuration differed (db.pool))")


def soak_history(plan, *, n=12, early_from=None, seed=0):
    """n nightly soaks: degrading after ~2 h ±5 % and APD drifting ±0.5 ms/h; from night ``early_from`` on,
    degrading after ~40 min and drifting +20 ms/h (a leak)."""
    rng = np.random.default_rng(seed)
    runs = []
    for night in range(1, n + 1):
        leak = bool(early_from and night >= early_from)
        onset = (2400 if leak else 7200) * (1 + rng.uniform(-0.05, 0.05))
        drift = (20.0 if leak else 0.0) + rng.uniform(-0.5, 0.5)
        start = DAY0 + timedelta(days=night)
        degradation = {
            "analysed": True,
            "degraded": True,
            "time_to_degradation_s": onset,
            "window": [60, 60 + 4 * 3600],
            "drift_ms_per_hour": drift,
            "pages_per_s_drift_per_hour": rng.uniform(-0.05, 0.05),
            "steady_apd_ms": 100.0,
            "steady_pages_per_s": 50.0,
        }
        runs.append(
            plan_run(
                plan,
                status="passed",
                start_at=start,
                finished_at=start + timedelta(hours=4),
                labels={"build": "b2b2b2" if leak else "a0a0a0"},
                summary={"totals": figures(100.0, pages=1000), "pages": [], "degradation": degradation},
            )
        )
    return runs


def test_a_soak_degrading_earlier_and_drifting_is_a_change_point_of_its_onset_and_drift(plan):
    # given: 12 nightly soaks; from night 7 on (build b2b2b2) they degrade after 40 min instead of 2 h, APD +20 ms/h
    runs = soak_history(plan, early_from=7)

    found = {c.figure: c for c in plan_change_points(plan=plan)}

    onset, drift = found["Degradation onset"], found["APD drift per hour"]
    assert onset.run_number == runs[6].number and onset.previous_run_number == runs[5].number
    assert -70 < onset.change_pct < -60 and onset.labels == {"build": "b2b2b2"}
    assert onset.text.startswith("Degradation onset -6") and onset.text.endswith(
        f"since run #{runs[6].number} (build b2b2b2)"
    )
    assert drift.run_number == runs[6].number and drift.after > 19
    assert drift.text.startswith("APD drift per hour +") and "ms/h since run" in drift.text
    assert "Pages/s drift per hour" not in found  # ±0.05 pages/s/h: under 10 % of the steady 50 pages/s per hour


def test_soaks_that_hold_their_level_have_no_soak_change_point(plan):
    soak_history(plan)
    assert not [c for c in plan_change_points(plan=plan) if c.key in ("time_to_degradation_s", "drift_ms_per_hour")]
