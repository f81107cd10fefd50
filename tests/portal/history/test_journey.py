"""The journey: a plan's runs across an environment's tuning changes, with what each change bought.

Runs are built with their summaries written directly (known totals), so the figures,
the ordering and the verdicts can be asserted exactly without running load.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from portal.history import journey
from portal.history.models import ExternalMeasurement, TuningChange
from portal.projects.models import Environment, MixEntry, Plan
from portal.runs.models import Run
from tests.portal.runs.factories import plan_run

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def summary(apd, *, p95=None, pages_per_s=20.0, error_rate=0.0, saturated=None, windows=None):
    totals = {
        "apd_ms": apd,
        "p95_ms": p95 if p95 is not None else apd * 2,
        "pages_per_s": pages_per_s,
        "error_rate_pct": error_rate,
    }
    return {
        "totals": totals,
        "windows": windows or [{"label": "Hold", "start": 1, "end": 6, "seconds": 5, "totals": totals}],
        "pages": [],
        "generator": {"loop_lag_p99_ms": None, "cpu_pct_max": None, "saturated": saturated},
        "thresholds": [],
        "verdict": None,
    }


@pytest.fixture
def make_run(alice):
    def make(plan, at, apd=None, *, status=Run.Status.PASSED, change=None, environment=None, **kw):
        include_anyway = kw.pop("include_anyway", False)
        number = (
            Run.objects.filter(project=plan.project).order_by("-number").values_list("number", flat=True).first() or 0
        ) + 1
        return plan_run(
            plan,
            number=number,
            environment=environment or plan.environment,
            environment_name=(environment or plan.environment).name,
            plan_snapshot=kw.pop("snapshot", None) or plan.to_engine_dict(),
            created_by=alice,
            status=status,
            start_at=at,
            finished_at=at + timedelta(minutes=1),
            summary=summary(apd, **kw) if apd is not None else None,
            tuning_change=change,
            include_anyway=include_anyway,
        )

    return make


@pytest.fixture
def make_change(alice):
    def make(environment, number, title, at, *, category=TuningChange.Category.INDEX):
        return TuningChange.objects.create(
            environment=environment,
            number=number,
            title=title,
            category=category,
            edits=[{"key": f"k{number}", "value": "on"}],
            status=TuningChange.Status.APPLIED,
            applied_at=at,
            made_by=alice,
        )

    return make


@pytest.fixture
def story(plan, make_run, make_change):
    """The TFS story: 3 trials at ~412 ms, an index, 3 trials at ~200 ms, then a change not yet measured."""
    env = plan.environment
    before = [make_run(plan, T0 + timedelta(minutes=i), apd) for i, apd in enumerate((412, 405, 420))]
    index = make_change(env, 1, "Add index ix_work_items_area", T0 + timedelta(hours=1))
    after = [
        make_run(plan, T0 + timedelta(hours=2, minutes=i), apd, change=index, pages_per_s=40.0)
        for i, apd in enumerate((200, 205, 198))
    ]
    flag = make_change(env, 2, "Enable -T1118", T0 + timedelta(hours=3), category=TuningChange.Category.TRACE_FLAG)
    return {"before": before, "index": index, "after": after, "flag": flag}


# --------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------


def test_points_are_the_finished_runs_in_start_order(plan, make_run):
    # given: runs numbered in another order than they started, and one still running
    late = make_run(plan, T0 + timedelta(hours=2), 300)
    early = make_run(plan, T0, 100)
    middle = make_run(plan, T0 + timedelta(hours=1), 200)
    make_run(plan, T0 + timedelta(hours=3), None, status=Run.Status.RUNNING)

    data = journey.environment_journey(plan.environment, plan)

    assert [p["number"] for p in data["points"]] == [early.number, middle.number, late.number]
    assert [p["seq"] for p in data["points"]] == [0, 1, 2]
    assert [p["apd_ms"] for p in data["points"]] == [100, 200, 300]
    assert [p["p95_ms"] for p in data["points"]] == [200, 400, 600]
    assert data["points"][0]["x"] == int(T0.timestamp() * 1000)
    assert data["points"][0]["url"] == early.get_absolute_url()
    assert data["points"][0]["status"] == "passed"
    assert all(p["counts"] for p in data["points"]) and data["counting"] == 3
    assert data["has_capacity"] is False


def test_a_long_journey_keeps_the_latest_runs(plan, make_run, monkeypatch):
    monkeypatch.setattr(journey, "MAX_RUNS", 2)
    for i, apd in enumerate((100, 200, 300)):
        make_run(plan, T0 + timedelta(minutes=i), apd)

    data = journey.environment_journey(plan.environment, plan)

    assert [p["apd_ms"] for p in data["points"]] == [200, 300]
    assert data["truncated"] is True


def test_runs_of_another_plan_are_not_points(plan, make_run, project, environment, test_case):
    other = Plan.objects.create(project=project, environment=environment, name="Soak", users=2, hold=5)
    MixEntry.objects.create(plan=other, test_case=test_case, weight=1)
    make_run(plan, T0, 100)
    make_run(other, T0 + timedelta(minutes=5), 900)

    data = journey.environment_journey(environment, plan)

    assert [p["apd_ms"] for p in data["points"]] == [100]


def test_change_markers_sit_between_the_runs_before_and_after(story, plan):
    data = journey.environment_journey(plan.environment, plan)

    markers = data["changes"]
    assert [(m["number"], m["title"]) for m in markers] == [(1, "Add index ix_work_items_area"), (2, "Enable -T1118")]
    # three runs (seq 0–2) before the index, three (3–5) after it, none after the flag
    assert markers[0]["seq"] == pytest.approx(2.5)
    assert markers[1]["seq"] == pytest.approx(5.5)
    assert markers[0]["x"] == int((T0 + timedelta(hours=1)).timestamp() * 1000)
    assert markers[0]["url"] == story["index"].get_absolute_url()
    assert markers[1]["category"] == "trace_flag" and markers[1]["category_display"] == "Trace flag"
    assert [p["change"] for p in data["points"]] == [None, None, None, 1, 1, 1]


def test_two_changes_between_the_same_runs_share_the_gap(plan, make_run, make_change):
    make_run(plan, T0, 100)
    make_change(plan.environment, 1, "One", T0 + timedelta(minutes=10))
    make_change(plan.environment, 2, "Two", T0 + timedelta(minutes=20))
    make_run(plan, T0 + timedelta(minutes=30), 90)

    data = journey.environment_journey(plan.environment, plan)

    assert [m["seq"] for m in data["changes"]] == [pytest.approx(1 / 3), pytest.approx(2 / 3)]


def test_effect_of_a_clearly_better_change(story, plan):
    data = journey.environment_journey(plan.environment, plan)

    index, flag = data["effects"]
    assert index["number"] == 1 and index["measured"] is True
    assert index["before_label"] == "the initial configuration"
    assert (index["n_before"], index["n_after"]) == (3, 3)
    assert index["apd"]["verdict"] == "better"
    assert index["apd"]["before"] == pytest.approx((412 + 405 + 420) / 3)
    assert index["apd"]["after"] == pytest.approx((200 + 205 + 198) / 3)
    assert index["apd"]["speedup"] == pytest.approx(1237 / 603, rel=1e-6)
    assert index["apd"]["speedup_text"] == "2.05×"
    assert index["pages_per_s"]["before"] == pytest.approx(20.0)
    assert index["pages_per_s"]["after"] == pytest.approx(40.0)
    assert index["capacity"] is None
    assert index["headline"].startswith("Add index ix_work_items_area: APD 412 ms → 201 ms (2.05× faster)")
    assert "beyond the noise between trials" in index["headline"]
    assert index["hint"] == ""


def test_a_change_without_runs_after_it_is_not_measured(story, plan):
    data = journey.environment_journey(plan.environment, plan)

    flag = data["effects"][1]
    assert flag["before_label"] == "#1 Add index ix_work_items_area"
    assert flag["before_url"] == story["index"].get_absolute_url()
    assert (flag["n_before"], flag["n_after"]) == (3, 0)
    assert flag["measured"] is False
    assert flag["apd"] is None and flag["headline"] == ""
    assert flag["hint"] == "Run the plan before and after the change, or start an experiment."


def test_a_doubtful_run_is_a_point_but_stays_out_of_the_effect(story, plan, make_run):
    # given: a fourth run after the index whose generator was saturated, at a wild APD
    saturated = make_run(
        plan,
        T0 + timedelta(hours=2, minutes=30),
        900,
        change=story["index"],
        saturated="event-loop lag above 50 ms for 30 s",
    )

    data = journey.environment_journey(plan.environment, plan)

    point = data["points"][-1]
    assert point["number"] == saturated.number and point["apd_ms"] == 900
    assert point["counts"] is False
    assert point["doubts"] == ["the load generator was saturated (event-loop lag above 50 ms for 30 s)"]
    assert data["counting"] == 6
    index = data["effects"][0]
    assert (index["n_after"], index["excluded_after"]) == (3, 1)
    assert index["apd"]["after"] == pytest.approx((200 + 205 + 198) / 3)
    assert index["apd"]["verdict"] == "better"
    assert [(r["number"], r["counts"]) for r in data["doubtful"]] == [(saturated.number, False)]


def test_include_anyway_brings_a_doubtful_run_back(story, plan, make_run):
    cancelled = make_run(
        plan, T0 + timedelta(hours=2, minutes=30), 206, change=story["index"], status=Run.Status.CANCELLED
    )
    cancelled.include_anyway = True
    cancelled.save()

    data = journey.environment_journey(plan.environment, plan)

    point = data["points"][-1]
    assert point["counts"] is True and point["doubts"] == ["it was cancelled"] and point["include_anyway"] is True
    index = data["effects"][0]
    assert (index["n_after"], index["excluded_after"]) == (4, 0)
    assert index["apd"]["after"] == pytest.approx((200 + 205 + 198 + 206) / 4)
    assert data["doubtful"][0]["counts"] is True


def test_a_run_that_ended_in_error_is_listed_in_doubt_but_has_no_point(plan, make_run):
    make_run(plan, T0, 100)
    failed = make_run(plan, T0 + timedelta(minutes=5), None, status=Run.Status.ERROR)

    data = journey.environment_journey(plan.environment, plan)

    assert len(data["points"]) == 1
    assert [(r["number"], r["doubts"]) for r in data["doubtful"]] == [(failed.number, ["it ended in error"])]


def test_measurements_join_the_journey_and_the_effect(story, plan, alice):
    env = plan.environment
    for value, change, minutes in (
        (2490, None, 30),
        (2510, None, 40),
        (38, story["index"], 150),
        (40, story["index"], 160),
    ):
        ExternalMeasurement.objects.create(
            environment=env,
            name="Database backup",
            unit="s",
            value=value,
            measured_at=T0 + timedelta(minutes=minutes),
            tuning_change=change,
            created_by=alice,
        )

    data = journey.environment_journey(env, plan)

    (series,) = data["measurements"]
    assert series["name"] == "Database backup" and series["unit"] == "s" and series["lower_is_better"] is True
    assert [v["value"] for v in series["values"]] == [2490, 2510, 38, 40]
    assert [v["change"] for v in series["values"]] == [None, None, 1, 1]
    (row,) = data["effects"][0]["measurements"]
    assert row["figure"] == "Database backup"
    assert row["before"] == pytest.approx(2500) and row["after"] == pytest.approx(39)
    assert row["verdict"] == "better"
    assert row["change_text"] == "98.4 % less"
    # the flag has no measurement after it: no row
    assert data["effects"][1]["measurements"] == []


def test_capacity_of_step_runs(plan, make_run, make_change):
    # given: a steps plan with APD ≤ 500 ms; levels of 10, 20 and 40 users
    plan.threshold_apd_ms = 500
    plan.profile_kind = Plan.ProfileKind.STEPS
    plan.save()
    for i, users in enumerate((10, 20, 40)):
        plan.levels.create(position=i, users=users, ramp_up=1, hold=5)
    snapshot = plan.to_engine_dict()

    def windows(*apds):
        return [
            {
                "label": f"Level {i + 1}",
                "totals": {"users": u, "apd_ms": a, "p95_ms": a, "pages_per_s": u, "error_rate_pct": 0},
            }
            for i, (u, a) in enumerate(zip((10, 20, 40), apds, strict=True))
        ]

    make_run(plan, T0, 300, snapshot=snapshot, windows=windows(100, 300, 900))
    make_run(plan, T0 + timedelta(minutes=5), 300, snapshot=snapshot, windows=windows(600, 700, 900))
    change = make_change(plan.environment, 1, "More workers", T0 + timedelta(minutes=10))
    make_run(plan, T0 + timedelta(minutes=15), 200, snapshot=snapshot, windows=windows(100, 200, 300), change=change)

    data = journey.environment_journey(plan.environment, plan)

    assert data["has_capacity"] is True
    assert [p["capacity_users"] for p in data["points"]] == [20, None, 40]
    assert [p["capacity_held"] for p in data["points"]] == [True, False, True]
    capacity = data["effects"][0]["capacity"]
    assert capacity["before"] == pytest.approx(10)  # 20 and 0 (no level held)
    assert capacity["after"] == pytest.approx(40)


def test_plan_choices_default_to_the_plan_with_most_finished_runs(plan, make_run, project, environment, test_case):
    soak = Plan.objects.create(project=project, environment=environment, name="Soak", users=2, hold=5)
    MixEntry.objects.create(plan=soak, test_case=test_case, weight=1)
    idle = Plan.objects.create(project=project, environment=environment, name="Idle", users=2, hold=5)
    MixEntry.objects.create(plan=idle, test_case=test_case, weight=1)
    make_run(plan, T0, 100)
    make_run(soak, T0 + timedelta(minutes=1), 100)
    make_run(soak, T0 + timedelta(minutes=2), 100)
    make_run(soak, T0 + timedelta(minutes=3), None, status=Run.Status.RUNNING)

    choices = journey.plan_choices(environment=environment)

    assert [(c["plan"].name, c["finished"]) for c in choices] == [("Soak", 2), ("Smoke", 1), ("Idle", 0)]
    assert journey.default_plan(choices) == soak
    assert journey.default_plan([]) is None


def test_environment_journey_without_a_plan_still_tells_the_changes(environment, make_change):
    make_change(environment, 1, "Add index", T0)

    data = journey.environment_journey(environment, None)

    assert data["plan"] is None and data["points"] == []
    assert [m["seq"] for m in data["changes"]] == [pytest.approx(-0.5)]
    assert data["effects"][0]["measured"] is False


def test_project_journey_sections_and_ledger(story, plan, project, make_change, make_run):
    # given: a second environment with its own change, where the plan also ran once (it was moved)
    prod = Environment.objects.create(project=project, name="Production", base_url="http://127.0.0.1:8002")
    make_change(prod, 1, "Bigger pool", T0 + timedelta(minutes=90))
    make_run(plan, T0 + timedelta(hours=4), 150, environment=prod)

    data = journey.project_journey(project, plan)

    assert [s["environment"]["name"] for s in data["sections"]] == ["Production", "Staging"]
    staging = data["sections"][1]
    assert len(staging["points"]) == 6 and len(data["sections"][0]["points"]) == 1
    assert [(c["environment"], c["number"], c["title"]) for c in data["ledger"]] == [
        ("Staging", 1, "Add index ix_work_items_area"),
        ("Production", 1, "Bigger pool"),
        ("Staging", 2, "Enable -T1118"),
    ]
    assert [c["measured"] for c in data["ledger"]] == [True, False, False]
    assert data["ledger"][0]["verdict"] == "better"
    assert data["ledger"][0]["headline"].startswith("Add index ix_work_items_area: APD 412 ms")


def test_project_journey_of_a_plan_never_run_shows_its_environment(plan, project):
    data = journey.project_journey(project, plan)

    assert [s["environment"]["name"] for s in data["sections"]] == ["Staging"]
    assert data["sections"][0]["points"] == []


# --------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------


def env_url(environment, name="history:environment-journey"):
    return reverse(name, args=[environment.code])


def test_environment_page_for_alice(alice_client, story, plan):
    response = alice_client.get(env_url(plan.environment))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Add index ix_work_items_area: APD 412 ms → 201 ms (2.05× faster)" in html
    assert "Enable -T1118" in html and "not measured" in html
    assert "Run the plan before and after the change, or start an experiment." in html
    assert 'data-panel="apd"' in html and 'data-panel="capacity"' not in html
    assert f'data-url="{env_url(plan.environment, "history:environment-journey-data")}?plan={plan.code}"' in html
    assert "Record a tuning change" in html
    assert response.context["plan"] == plan


def test_environment_page_for_bob_reads_without_write_links(bob_client, story, plan):
    response = bob_client.get(env_url(plan.environment))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Add index ix_work_items_area" in html
    assert "Record a tuning change" not in html


def test_charlie_gets_404_everywhere(charlie_client, story, plan, project):
    for url in (
        env_url(plan.environment),
        env_url(plan.environment, "history:environment-journey-data"),
        reverse("history:project-journey", args=[project.code]),
        reverse("history:project-journey-data", args=[project.code]),
    ):
        assert charlie_client.get(url).status_code == 404, url


def test_environment_json_shape(alice_client, story, plan):
    response = alice_client.get(env_url(plan.environment, "history:environment-journey-data"))

    assert response.status_code == 200
    data = response.json()
    assert data["plan"] == {"name": "Smoke", "code": str(plan.code), "url": plan.get_absolute_url()}
    assert data["plans"] == [{"name": "Smoke", "code": str(plan.code), "finished": 6}]
    assert len(data["points"]) == 6
    point = data["points"][0]
    assert set(point) >= {
        "seq",
        "x",
        "at",
        "number",
        "url",
        "status",
        "apd_ms",
        "p95_ms",
        "pages_per_s",
        "error_rate_pct",
        "capacity_users",
        "counts",
        "doubts",
        "change",
    }
    assert point["at"] == "2026-03-02T09:00:00Z"
    assert [c["number"] for c in data["changes"]] == [1, 2]
    assert data["effects"][0]["apd"]["verdict"] == "better"
    assert data["measurements"] == [] and data["doubtful"] == []


def test_plan_query_selects_and_checks_the_plan(alice_client, plan, make_run, project, environment, test_case):
    soak = Plan.objects.create(project=project, environment=environment, name="Soak", users=2, hold=5)
    MixEntry.objects.create(plan=soak, test_case=test_case, weight=1)
    make_run(plan, T0, 100)
    make_run(plan, T0 + timedelta(minutes=1), 110)
    make_run(soak, T0 + timedelta(minutes=2), 500)
    url = env_url(environment, "history:environment-journey-data")

    assert [p["apd_ms"] for p in alice_client.get(url).json()["points"]] == [100, 110]
    assert [p["apd_ms"] for p in alice_client.get(f"{url}?plan={soak.code}").json()["points"]] == [500]
    assert alice_client.get(f"{url}?plan=not-a-code").status_code == 404
    assert alice_client.get(f"{url}?plan=00000000-0000-0000-0000-000000000000").status_code == 404


def test_a_plan_of_another_team_is_404(alice_client, charlie, plan):
    from portal.projects.models import Project

    theirs = Project.objects.create(team=charlie.teams.get(), name="Theirs")
    env = Environment.objects.create(project=theirs, name="Prod", base_url="http://127.0.0.1:9")
    other = Plan.objects.create(project=theirs, environment=env, name="Smoke", users=1, hold=1)

    response = alice_client.get(f"{env_url(plan.environment)}?plan={other.code}")

    assert response.status_code == 404


def test_empty_states(alice_client, environment, project):
    response = alice_client.get(env_url(environment))

    assert response.status_code == 200
    html = response.content.decode()
    assert "No plan uses this environment yet" in html
    assert "No tuning change applied on Staging yet" in html
    assert "No external measurements on Staging" in html


def test_empty_state_of_a_plan_without_runs(alice_client, plan):
    html = alice_client.get(env_url(plan.environment)).content.decode()

    assert "No finished runs of Smoke on Staging yet" in html
    assert 'data-panel="apd"' not in html


def test_project_page_and_json(alice_client, bob_client, story, plan, project):
    url = reverse("history:project-journey", args=[project.code])

    for client in (alice_client, bob_client):
        response = client.get(url)
        assert response.status_code == 200
        html = response.content.decode()
        assert "All tuning changes of Intranet" in html
        assert "Add index ix_work_items_area: APD 412 ms → 201 ms" in html

    data = alice_client.get(reverse("history:project-journey-data", args=[project.code])).json()
    assert data["project"]["name"] == "Intranet"
    assert [s["environment"]["name"] for s in data["sections"]] == ["Staging"]
    assert len(data["sections"][0]["points"]) == 6
    assert [c["number"] for c in data["ledger"]] == [1, 2]
    assert data["plans"][0]["finished"] == 6


def test_anonymous_is_sent_to_log_in(client, plan):
    response = client.get(env_url(plan.environment))

    assert response.status_code == 302 and "/login/" in response["Location"]


# --------------------------------------------------------------------------------------
# The charts in a real browser (Debian's Chromium; Playwright never downloads a browser)
# --------------------------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_charts_draw_markers_and_open_a_run_on_click(browser, live_server, alice, story, plan, make_run):
    make_run(plan, T0 + timedelta(hours=2, minutes=30), 900, change=story["index"], status=Run.Status.CANCELLED)
    for value, minutes in ((2490, 30), (38, 150)):
        ExternalMeasurement.objects.create(
            environment=plan.environment,
            name="Database backup",
            unit="s",
            value=value,
            measured_at=T0 + timedelta(minutes=minutes),
            created_by=alice,
        )
    # bypass_csp: Playwright's wait_for_function evaluates its predicate with eval, which the
    # page's Content-Security-Policy refuses (tests/portal/runs/test_csp_browser.py runs pages under it).
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors = []
    # (the browser's own request for /favicon.ico is a 404 logged as a console error: not ours)
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type == "error" and "favicon" not in (msg.location or {}).get("url", "")
            else None
        ),
    )
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-password")
        page.click("button[type=submit]")
        page.locator(".mainnav").wait_for()

        page.goto(f"{live_server.url}{env_url(plan.environment)}")
        # APD, pages/s and error rate panels, and the backup's chart
        page.wait_for_function("document.getElementById('journey').dataset.charts === '4'")
        assert errors == []

        found = page.evaluate(
            """() => {
              const chart = Chart.getChart(document.querySelector('canvas[data-panel="apd"]'));
              const sets = chart.data.datasets.map((d) => [d.label, d.data.length, d.showLine !== false]);
              // the change marker #1 sits between the 3rd and 4th run: look for its orange pixels
              const px = Math.round(chart.scales.x.getPixelForValue(2.5));
              const area = chart.chartArea;
              const img = chart.ctx.getImageData(px - 1, area.top, 3, area.bottom - area.top).data;
              let orange = 0;
              for (let i = 0; i < img.length; i += 4) {
                if (img[i] > 190 && img[i + 1] > 100 && img[i + 1] < 160 && img[i + 2] < 90) orange += 1;
              }
              const first = chart.getDatasetMeta(0).data[0];
              return { sets: sets, orange: orange, x: first.x, y: first.y };
            }"""
        )
        # counting APD joined in a line, p95 likewise, the cancelled run apart and unjoined
        assert found["sets"] == [["APD", 6, True], ["p95", 6, True], ["APD (in doubt)", 1, False]]
        assert found["orange"] > 20

        box = page.locator('canvas[data-panel="apd"]').bounding_box()
        page.mouse.click(box["x"] + found["x"], box["y"] + found["y"])
        page.wait_for_url(f"**{story['before'][0].get_absolute_url()}")
    finally:
        context.close()


def test_the_project_page_links_to_its_journey(alice_client, project):
    html = alice_client.get(project.get_absolute_url()).content.decode()

    assert f'href="{reverse("history:project-journey", args=[project.code])}"' in html


def test_a_journey_reads_its_runs_in_a_fixed_number_of_queries(plan, make_run, django_assert_num_queries):
    """Deferred fields are never touched (each would cost a query per run), and no run reads its rows."""
    for i in range(3):
        make_run(plan, T0 + timedelta(hours=i), 100.0 + i)
    with django_assert_num_queries(3) as few:
        journey.environment_journey(plan.environment, plan)
    for i in range(3, 12):
        make_run(plan, T0 + timedelta(hours=i), 100.0 + i)

    with django_assert_num_queries(len(few.captured_queries)):
        data = journey.environment_journey(plan.environment, plan)

    assert len(data["points"]) == 12


# --------------------------------------------------------------------------------------
# Cost (issue 9): a point reads the run's digest, not its summary
# --------------------------------------------------------------------------------------


def _summaries_read(queries) -> list[str]:
    return [q["sql"] for q in queries if '"runs_run"."summary"' in q["sql"]]


def test_points_read_each_runs_digest_not_its_summary(plan, make_run):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.runs.models import run_digest
    from portal.runs.summary import RunSummary

    # given: finished runs saved the usual way (the digest follows the summary), one saturated
    runs = [make_run(plan, T0 + timedelta(minutes=i), apd) for i, apd in enumerate((100, 200))]
    saturated = make_run(plan, T0 + timedelta(minutes=5), 300, saturated="loop lag 900 ms")
    for run in [*runs, saturated]:
        run.refresh_from_db()
        assert run.digest == run_digest(RunSummary.of(run), run.plan_snapshot) and run.digest["totals"]["apd_ms"]

    with CaptureQueriesContext(connection) as queries:
        data = journey.environment_journey(plan.environment, plan)

    # then: the points are the runs' figures and doubts, and no query read a summary
    assert [p["apd_ms"] for p in data["points"]] == [100, 200, 300]
    assert [p["counts"] for p in data["points"]] == [True, True, False]
    assert "saturated" in data["doubtful"][0]["doubts"][0]
    assert _summaries_read(queries.captured_queries) == []


def test_a_run_whose_summary_was_written_around_save_still_has_its_point(plan, make_run):
    # given: a run whose summary an UPDATE wrote (no digest), as older code and imports of old data did
    run = make_run(plan, T0, None, status=Run.Status.RUNNING)
    Run.objects.filter(id=run.id).update(status=Run.Status.PASSED, summary=summary(123), digest=None)

    data = journey.environment_journey(plan.environment, plan)

    assert [p["apd_ms"] for p in data["points"]] == [123]


def test_the_runs_a_change_compares_are_read_whole(story, plan):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        data = journey.environment_journey(plan.environment, plan)

    # the index's effect is computed from the whole runs (one query for all of them)
    (effect, _) = data["effects"]
    assert effect["measured"] and effect["apd"]["verdict"] == "better"
    assert len(_summaries_read(queries.captured_queries)) == 1
