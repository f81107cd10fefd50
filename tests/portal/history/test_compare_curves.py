"""The comparison's curves, its per-page table and several runs against one baseline (issue 15)."""

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.runs import analysis, selectors
from portal.runs.models import Run
from tests.conftest import wait_for_js
from tests.portal.runs.factories import add_second, plan_run


def _finished(plan, alice, number, *, slow_ms, seconds=40):
    run = plan_run(plan, number=number, config_snapshot=plan.environment.configuration, created_by=alice, start_at=None)
    for s in range(seconds):
        jitter = (s * 7 + number) % 5
        add_second(
            run,
            s,
            labels={
                "Home": ([slow_ms + jitter, slow_ms * 2 + jitter, 15.0], {}),
                "Search": ([30.0 + jitter, 31.0], {}),
                "Login": ([12.0 + jitter], {}),
            },
        )
    Run.objects.filter(id=run.id).update(
        status=Run.Status.PASSED,
        start_at=timezone.now(),
        finished_at=timezone.now(),
        summary=analysis.summarize(run),
    )
    return Run.objects.get(id=run.id)


def _url(project, a, *bs):
    return reverse("history:compare", args=[project.code]) + f"?a={a.code}" + "".join(f"&b={b.code}" for b in bs)


@pytest.mark.django_db
def test_several_runs_against_one_baseline(alice_client, plan, alice):
    base = _finished(plan, alice, 1, slow_ms=20.0)
    same = _finished(plan, alice, 2, slow_ms=20.0)
    slower = _finished(plan, alice, 3, slow_ms=80.0)

    page = alice_client.get(_url(plan.project, base, same, slower)).content.decode()

    table = page[page.index('id="compare-multi"') :]
    table = table[: table.index("</table>")]
    assert 'class="baseline-row"' in table
    rows = re.findall(r'<tr data-code="([0-9a-f-]+)">(.*?)</tr>', table, re.S)
    assert [code for code, _ in rows] == [str(same.code), str(slower.code)]
    verdicts = {code: re.findall(r'data-verdict="([^"]+)"', body) for code, body in rows}
    assert verdicts[str(slower.code)][0] == "worse"  # its APD, against the baseline
    assert verdicts[str(same.code)][0] != "worse"
    assert 'id="compare-curves"' in page


@pytest.mark.django_db
def test_more_than_five_are_refused_with_a_reason_and_curves_are_scoped(client, plan, alice, charlie):
    runs = [_finished(plan, alice, n, slow_ms=20.0, seconds=8) for n in range(1, 8)]
    client.force_login(alice)

    page = client.get(_url(plan.project, runs[0], *runs[1:])).content.decode()

    assert "At most 5 runs or trial sets are compared against a baseline" in page
    assert len(re.findall(r'<tr data-code="', page)) == 5
    curves = reverse("history:compare-curves", args=[plan.project.code])
    assert client.get(curves, {"a": str(runs[0].code)}).status_code == 400
    client.force_login(charlie)
    assert client.get(curves, {"a": str(runs[0].code), "b": str(runs[1].code)}).status_code == 404


@pytest.mark.django_db
def test_every_page_is_listed_worst_first(alice_client, plan, alice):
    before = _finished(plan, alice, 1, slow_ms=20.0)
    after = _finished(plan, alice, 2, slow_ms=60.0)

    page = alice_client.get(_url(plan.project, before, after)).content.decode()

    assert '<details class="compare-page' not in page  # not collapsed
    order = re.findall(r'<tr class="compare-page" data-page="([^"]+)">', page)
    assert sorted(order) == ["Home", "Login", "Search"]
    assert order[0] == "Home"  # its APD grew most (20 → 60 ms)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_overlaid_curves_are_each_runs_own_series(browser, live_server, alice, plan):
    before = _finished(plan, alice, 1, slow_ms=20.0)
    after = _finished(plan, alice, 2, slow_ms=60.0)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    problems = []
    page.on("console", lambda m: m.type == "error" and problems.append(m.text))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()

    page.goto(f"{live_server.url}{_url(plan.project, before, after)}")
    wait_for_js(page, "document.getElementById('compare-curves').dataset.drawn === '1'")

    drawn = page.evaluate(
        """() => Object.fromEntries(Object.entries(window.PlimsollCompare.charts).map(([id, c]) =>
             [id, c.data.datasets.map(d => ({code: d.code, label: d.label, points: d.data.map(p => [p.x, p.y])}))]))"""
    )
    for run in (before, after):
        own = selectors.run_series(run)
        start, end = run.summary["window"]["start"], run.summary["window"]["end"]
        window = [i for i, t in enumerate(own["t"]) if start <= t < end]
        apd = next(
            d for d in drawn["chart-compare-duration"] if d["code"] == str(run.code) and d["label"].endswith("APD")
        )
        assert apd["points"] == [[own["t"][i] - start, own["apd_ms"][i]] for i in window]
        rate = next(d for d in drawn["chart-compare-throughput"] if d["code"] == str(run.code))
        assert rate["points"] == [[own["t"][i] - start, own["pages_per_s"][i]] for i in window]
        dist = next(d for d in drawn["chart-compare-distribution"] if d["code"] == str(run.code))
        assert dist["points"][0][0] == 2  # p50
        assert dist["points"][0][1] == pytest.approx(run.summary["totals"]["p50_ms"], abs=0.01)
        assert dist["points"][6][1] == pytest.approx(run.summary["totals"]["p90_ms"], abs=0.01)
    assert page.locator("#compare-levels-box").is_hidden()

    # the per-page table sorts by a change column
    page.click("#compare-pages th.sortable[data-column='1'] button")
    first = page.locator("#compare-pages tbody tr").first.get_attribute("data-page")
    page.click("#compare-pages th.sortable[data-column='1'] button")
    last = page.locator("#compare-pages tbody tr").last.get_attribute("data-page")
    context.close()
    assert first == "Home" and last == "Home"
    assert problems == []


@pytest.mark.django_db
def test_a_steps_runs_curves_give_pages_per_s_and_apd_against_users(plan, alice):
    from portal.history import curves
    from tests.portal.runs.test_capacity_degradation import fill_levels, steps_run

    run = plan_run(plan, number=1, created_by=alice, start_at=None)
    run = steps_run(run, [10, 20, 40], thresholds={"apd_ms": 1000})
    fill_levels(run, [(50, 20.0), (100, 22.0), (150, 60.0)])
    Run.objects.filter(id=run.id).update(status=Run.Status.PASSED, summary=analysis.summarize(run))
    run = Run.objects.get(id=run.id)

    data = curves.run_curves(run)

    assert [lv["users"] for lv in data["levels"]] == [10, 20, 40]
    assert [lv["pages_per_s"] for lv in data["levels"]] == pytest.approx([50, 100, 150])
    assert [lv["apd_ms"] for lv in data["levels"]] == pytest.approx([20.0, 22.0, 60.0])
    # the series starts at the first window's start, shifted to 0
    assert data["series"]["t"][0] == 0 and data["series"]["window_start"] == run.summary["window"]["start"]
