"""Looks and the Content-Security-Policy in Chromium, measured (issue 28, items 10–14).

One browser for the module and one live server; each test logs in once and measures what a
person would see: elements inside a 1366 px viewport, contrast of the brand, legend heights,
and no style or script refused by the policy. Screenshots land in the test's tmp_path.
"""

import pytest
from django.urls import reverse

from portal.projects.models import Step, TestCase
from tests.conftest import wait_for_js
from tests.portal.history.test_comparison import make_step_run
from tests.portal.sharing.conftest import story  # noqa: F401 (a fixture: the TFS experiment as rows)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


# Each violation of the policy as a console line, also those Chromium reports without one.
REPORT_VIOLATIONS = """document.addEventListener("securitypolicyviolation", (e) => console.warn(
    "CSP violation: " + e.violatedDirective + " at " + e.sourceFile + ":" + e.lineNumber + " " + (e.sample || "")));"""


def _context(browser, width=1366, height=900, **kw):
    """A fresh browser context and page; page.refused collects every style or script the policy
    refused and every uncaught script error, so each test here also checks the pages it opens."""
    context = browser.new_context(viewport={"width": width, "height": height}, **kw)
    page = context.new_page()
    page.set_default_timeout(10_000)
    refused = []
    page.add_init_script(REPORT_VIOLATIONS)
    page.on(
        "console",
        lambda m: (
            ("Content Security Policy" in m.text or m.text.startswith("CSP violation"))
            and refused.append(f"{page.url}: {m.text}")
        ),
    )
    page.on("pageerror", lambda exc: refused.append(f"{page.url}: {exc}"))
    page.refused = refused
    return context, page


def _log_in(page, live_server, username="alice"):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()


def test_experiment_test_case_step_plan_and_api_docs_pages_break_no_policy(
    browser,
    live_server,
    alice,
    story,  # noqa: F811 (the fixture imported above)
    test_case,
):
    # given: an experiment with its trial sets, and a test case with a step
    step = Step.objects.filter(test_case=test_case).first()
    TestCase.objects.create(project=test_case.project, name="Search")  # not in the plan's mix: its form shows
    context, page = _context(browser)
    refused = page.refused
    try:
        _log_in(page, live_server)
        # when: alice opens each page
        page.goto(f"{live_server.url}{story['experiment'].get_absolute_url()}")
        page.goto(f"{live_server.url}{test_case.get_absolute_url()}")
        page.locator("#steps .step-actions a", has_text="Edit").first.click()  # the step's form, by HTMX
        page.locator("#steps form").first.wait_for()
        page.goto(f"{live_server.url}{reverse('projects:step-edit', args=[step.code])}")
        page.goto(f"{live_server.url}{story['experiment'].plan.get_absolute_url()}")  # the mix's weight field
        page.goto(f"{live_server.url}{reverse('api:docs')}")
        wait_for_js(page, "document.querySelector('.swagger-ui .info')", timeout=15)
        page.wait_for_timeout(300)
    finally:
        context.close()
    # then
    assert refused == []


def _shot(page, tmp_path, name):
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


# The means and the legend of every curve chart: [{legend, legend_h, area_h, canvas_h, means, trials, top}]
CURVES = """() => Object.entries(window.PlimsollCompare.charts).map(([id, c]) => {
    const metas = c.getSortedVisibleDatasetMetas();
    return {
      id: id,
      legend: c.legend.legendItems.map((i) => i.text),
      legend_h: c.legend.height, area_h: c.chartArea.bottom - c.chartArea.top, canvas_h: c.height,
      means: c.data.datasets.filter((d) => d.$mean).map((d) => ({ side: d.side, width: d.borderWidth })),
      trials: c.data.datasets.filter((d) => !d.$mean).map((d) => d.borderWidth),
      top: metas.length ? ((d) => d.side + (d.$mean ? " mean" : ""))(c.data.datasets[metas[0].index]) : null,
    };
})"""

# How many pixels of the chart area carry a colour (r, g, b) within a tolerance.
PIXELS_OF = """([id, rgb]) => {
    const c = window.PlimsollCompare.charts[id], a = c.chartArea, r = window.devicePixelRatio || 1;
    const img = c.ctx.getImageData(a.left * r, a.top * r, (a.right - a.left) * r, (a.bottom - a.top) * r).data;
    let n = 0;
    for (let i = 0; i < img.length; i += 4) {
      if (img[i + 3] > 200 && Math.abs(img[i] - rgb[0]) < 12 && Math.abs(img[i + 1] - rgb[1]) < 12
          && Math.abs(img[i + 2] - rgb[2]) < 12) n++;
    }
    return n;
}"""


def test_trial_set_curves_group_the_legend_by_side_with_bold_means(
    browser,
    live_server,
    alice,
    story,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    # given: the TFS experiment, 3 trials before and 3 after (12 legend entries and the after line
    # drawn under the before one, until the legend listed each side's means)
    project = story["experiment"].project
    url = reverse("history:compare", args=[project.code]) + f"?a={story['baseline'].code}&b={story['after_set'].code}"
    context, page = _context(browser)
    try:
        _log_in(page, live_server)
        # when
        page.goto(f"{live_server.url}{url}")
        wait_for_js(page, "document.getElementById('compare-curves').dataset.drawn === '1'")
        page.locator("#compare-curves").scroll_into_view_if_needed()
        charts = {c["id"]: c for c in page.evaluate(CURVES)}
        after_pixels = page.evaluate(PIXELS_OF, ["chart-compare-duration", [0x1F, 0x5F, 0xBF]])
        _shot(page, tmp_path, "compare-curves")
    finally:
        context.close()
    # then: one legend entry per side (and per series), the plot keeps most of the canvas
    assert page.refused == []
    duration = charts["chart-compare-duration"]
    assert duration["legend"] == [
        "Before, mean APD",
        "Before, mean p95",
        "After, mean APD",
        "After, mean p95",
    ], duration["legend"]
    for chart in charts.values():
        assert chart["legend_h"] <= 40, chart  # one line (each line is ~22 px over 10 of padding)
        assert chart["area_h"] >= 0.5 * chart["canvas_h"], chart  # was 45 of 280 px with 12 entries
        # trials thin, each side's mean bold, and an after mean drawn on top
        assert max(chart["trials"]) < min(m["width"] for m in chart["means"]), chart
        assert chart["top"] == "after mean", chart
    # the after mean's colour is on the canvas
    assert after_pixels > 200


# Every cell of a table inside the viewport and inside the box that holds the table (no cut, no
# sideways scroll); the tallest cell of a column in lines of text.
TABLE_FIT = """([selector, column]) => {
    const table = document.querySelector(selector);
    const box = table.parentElement;
    const cells = Array.from(table.querySelectorAll("th, td"));
    const right = Math.max(...cells.map((c) => c.getBoundingClientRect().right));
    const boxRight = box.getBoundingClientRect().right;
    let lines = 0;
    if (column !== null) {
      for (const row of table.tBodies[0].rows) {
        const cell = row.cells[column];
        const range = document.createRange();  // the text's own box: the cell is as tall as its row
        range.selectNodeContents(cell);
        lines = Math.max(lines, Math.round(range.getBoundingClientRect().height
          / parseFloat(getComputedStyle(cell).lineHeight)));
      }
    }
    return { right: right, viewport: window.innerWidth, box_right: boxRight,
             scroll: box.scrollWidth - box.clientWidth, lines: lines };
}"""


def _fits(fit):
    return fit["right"] <= fit["viewport"] and fit["right"] <= fit["box_right"] + 0.5 and fit["scroll"] <= 0


def test_wide_tables_fit_1366_px(browser, live_server, alice, story, tmp_path):  # noqa: F811
    from django.utils import timezone

    from portal.runs.models import Run
    from portal.schedules.models import Schedule, ScheduleFire

    # given: six runs of a plan with a long name on an environment with a long one, three under a
    # change with a long title, in trial sets; by alice, one through a token, one fired by a
    # schedule, one a steps run (the cells that pushed Started and By off-screen)
    plan, change = story["experiment"].plan, story["change"]
    plan.name = "Soak: token cache, 20 users for 15 min"
    plan.save(update_fields=["name"])
    plan.environment.name = "Staging EU west (4 vCPU, 16 GB)"
    plan.environment.save(update_fields=["name"])
    change.title = "Add covering index ix_work_items_area_state on work_items"
    change.save(update_fields=["title"])
    Run.objects.filter(plan=plan).update(plan_name=plan.name, environment_name=plan.environment.name, created_by=alice)
    first, second, third = story["before"]
    Run.objects.filter(pk=first.pk).update(api_token_label="ci-gate-main-branch")
    steps = {"kind": "steps", "levels": [{"users": u, "hold": 60} for u in (5, 10, 20, 50, 200)]}
    Run.objects.filter(pk=second.pk).update(plan_snapshot={**second.plan_snapshot, "profile": steps})
    schedule = Schedule.objects.create(
        project=plan.project, plan=plan, plan_name=plan.name, kind="cron", cron="15 2 * * 1-5",
        time_zone="Europe/Amsterdam", last_due_at=timezone.now(),
    )  # fmt: skip
    ScheduleFire.objects.create(schedule=schedule, due_at=timezone.now(), run=third)
    project = plan.project
    compare = (
        reverse("history:compare", args=[project.code]) + f"?a={story['baseline'].code}&b={story['after_set'].code}"
    )
    several = compare + "".join(f"&b={run.code}" for run in story["after"])  # 4 against the baseline
    context, page = _context(browser, width=1366)
    try:
        _log_in(page, live_server)
        # when
        page.goto(f"{live_server.url}{reverse('runs:list')}")
        runs = page.evaluate(TABLE_FIT, ["#runs", 2])
        _shot(page, tmp_path, "runs-1366")
        page.goto(f"{live_server.url}{compare}")
        pages = page.evaluate(TABLE_FIT, ["#compare-pages", None])
        _shot(page, tmp_path, "compare-1366")
        page.goto(f"{live_server.url}{several}")
        multi = page.evaluate(TABLE_FIT, ["#compare-multi", None])
        _shot(page, tmp_path, "compare-several-1366")
    finally:
        context.close()
    # then
    assert page.refused == []
    assert _fits(runs), runs
    assert runs["lines"] <= 2, runs  # the plan's name
    assert _fits(pages), pages
    assert _fits(multi), multi  # it had 13 columns (16 with capacity), 300 px too wide


# WCAG contrast ratio of an element's text against the first opaque background behind it.
CONTRAST = """(selector) => {
    const el = document.querySelector(selector);
    const rgb = (s) => s.match(/[\\d.]+/g).map(Number);
    let bg = null;
    for (let n = el; n; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c.length < 4 || c[3] > 0) { bg = c; break; }
    }
    bg = bg || [255, 255, 255];
    const lum = (c) => { const [r, g, b] = c.slice(0, 3).map((v) => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
      return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
    const a = lum(rgb(getComputedStyle(el).color)), b = lum(bg);
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""

# Where the first page's verdicts are, the right edge of the All pages table's verdicts and cells,
# and whether the page itself scrolls sideways.
PHONE = """() => {
    const badges = Array.from(document.querySelectorAll("#compare-pages tbody tr:first-child [data-verdict]"));
    const table = document.querySelector("#compare-pages");
    const box = table.closest(".table-scroll") || table;
    const right = (els) => Math.max(...Array.from(els).map((e) => e.getBoundingClientRect().right));
    return { first_right: badges.length ? badges[0].getBoundingClientRect().right : null, badges: badges.length,
             total_verdicts: document.querySelectorAll("#compare-total tbody [data-verdict]").length,
             total_verdict_right: right(document.querySelectorAll("#compare-total tbody [data-verdict]")),
             total_right: right(document.querySelectorAll("#compare-total tbody td")),
             viewport: window.innerWidth, page_scroll: document.documentElement.scrollWidth - window.innerWidth,
             table_scrolls: box.scrollWidth > box.clientWidth && getComputedStyle(box).overflowX === "auto" };
}"""

# The shared comparison's chart: its legend, its lines' widths per side and which is drawn on top.
SHARE_CHART = """() => {
    const c = window.PlimsollShareCompare, ds = c.data.datasets;
    const metas = c.getSortedVisibleDatasetMetas();
    return { legend: c.legend.legendItems.map((i) => i.text),
             means: ds.filter((d) => d.$mean).map((d) => d.borderWidth),
             trials: ds.filter((d) => !d.$mean).map((d) => d.side),
             trial_widths: ds.filter((d) => !d.$mean).map((d) => d.borderWidth),
             top: ((d) => d.side + (d.$mean ? " mean" : ""))(ds[metas[0].index]) };
}"""


def test_a_shared_experiment_and_journey_read_well_at_1366_px_and_on_a_phone(
    browser,
    live_server,
    alice,
    story,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    from portal.sharing import services

    # given: an experiment whose description holds the team's instruction, shared
    experiment = story["experiment"]
    experiment.description = "Press Start: three baseline trials, the index built, three trials after."
    experiment.save(update_fields=["description"])
    _, token = services.share_create(
        project=experiment.project, kind="experiment", title="Index", user=alice, experiment=experiment
    )
    url = f"{live_server.url}/s/{token}/"
    _, token = services.share_create(
        project=experiment.project, kind="journey", title="Journey", user=alice,
        environment=experiment.environment, plan=experiment.plan,
    )  # fmt: skip
    journey = f"{live_server.url}/s/{token}/"
    steps = make_step_run(experiment.plan, apds=[100, 300, 900], pages=[10, 20, 22])  # 40 users break 500 ms
    _, token = services.share_create(project=experiment.project, kind="run", title="Steps", user=alice, run=steps)
    steps_url = f"{live_server.url}/s/{token}/"
    # when: a stakeholder opens it on a laptop
    context, page = _context(browser, width=1366)
    refused = page.refused
    try:
        page.goto(url)
        brand = page.evaluate(CONTRAST, ".share-top .brand")
        text = page.locator("main").inner_text()
        pages = page.evaluate(TABLE_FIT, ["#compare-pages", None])
        wait_for_js(page, "document.getElementById('chart-compare').dataset.points > 0")
        chart = page.evaluate(SHARE_CHART)
        _shot(page, tmp_path, "share-1366")
    finally:
        context.close()
    # and on a phone
    context, page = _context(browser, width=390, height=844, is_mobile=True, has_touch=True)
    try:
        page.goto(url)
        page.locator("#compare-pages").scroll_into_view_if_needed()
        phone = page.evaluate(PHONE)
        _shot(page, tmp_path, "share-phone")
        # and the journey: what each change bought
        page.goto(journey)
        changes = page.locator("#effects").evaluate(
            "(t) => ({ verdict: t.querySelector('tbody [class~=badge]').getBoundingClientRect().right,"
            " cells: Math.max(...Array.from(t.querySelectorAll('td')).map((c) => c.getBoundingClientRect().right)) })"
        )
        _shot(page, tmp_path, "share-journey-phone")
        # and a steps run: each level's verdict
        page.goto(steps_url)
        levels = page.locator("#levels").evaluate(
            "(t) => ({ verdicts: Array.from(t.querySelectorAll('tbody .verdict .badge')).map((b) => b.textContent),"
            " right: Math.max(...Array.from(t.querySelectorAll('td')).map((c) => c.getBoundingClientRect().right)) })"
        )
        _shot(page, tmp_path, "share-steps-phone")
    finally:
        context.close()
    # then
    assert refused + page.refused == []
    assert brand >= 4.5, brand  # WCAG AA for text; it was white on the near-white bar (1.1)
    assert "Press Start" not in text
    assert _fits(pages), pages
    assert phone["badges"] == 4 and phone["first_right"] <= phone["viewport"], phone  # APD's verdict on screen
    assert phone["page_scroll"] <= 0, phone  # the table scrolls, not the page
    # the All pages table: every figure's verdict and number on screen (it was 400 px past the edge)
    assert phone["total_verdicts"] == 4 and phone["total_verdict_right"] <= phone["viewport"], phone
    assert phone["total_right"] <= phone["viewport"], phone
    # the journey's changes: the verdict and every figure on screen (the verdict was 920 px off it)
    assert changes["verdict"] <= 390 and changes["cells"] <= 390, changes
    # the steps run's levels: each verdict and figure on screen (the verdicts were the 9th column)
    assert levels["verdicts"] == ["held ✓", "held ✓", "broken: APD"] and levels["right"] <= 390, levels
    # the chart draws every trial of each side thin and each side's mean bold, the after side on top
    # (it drew one run per side, the third trial of each, as if a trial set were one run)
    assert chart["legend"] == ["Before, mean of 3 trials", "After, mean of 3 trials"], chart
    assert sorted(chart["trials"]) == ["after"] * 3 + ["before"] * 3, chart
    assert max(chart["trial_widths"]) < min(chart["means"]), chart
    assert chart["top"] == "after mean", chart


def _styled(page, selector):
    """The computed look of a form control: an unstyled one keeps the browser's 2 px inset border."""
    return page.locator(selector).evaluate(
        "(el) => { const s = getComputedStyle(el); return { radius: parseFloat(s.borderTopLeftRadius),"
        " border: s.borderTopColor, font: s.fontSize, width: el.getBoundingClientRect().width }; }"
    )


def test_the_invite_form_is_styled_and_the_schedule_form_shows_its_kinds_fields(
    browser, live_server, alice, team, plan, tmp_path
):
    context, page = _context(browser)
    try:
        _log_in(page, live_server)
        # when: the Teams page
        page.goto(f"{live_server.url}{reverse('accounts:teams')}")
        email = _styled(page, ".invite-form input[type=email]")
        username = _styled(page, "#member-username")
        _shot(page, tmp_path, "teams")
        # and the schedule form, kind by kind
        page.goto(f"{live_server.url}{reverse('schedules:project', args=[plan.project.code])}")
        shown = {}
        for kind in ("daily", "hours", "cron"):
            page.select_option("#schedule-form [name=kind]", kind)
            shown[kind] = sorted(
                name
                for name in ("at_time", "every_hours", "cron")
                if page.locator(f"#schedule-form [name={name}]").is_visible()
            )
        # and saves one that runs every 6 hours
        page.select_option("#schedule-form [name=plan]", str(plan.id))
        page.select_option("#schedule-form [name=kind]", "hours")
        page.fill("#schedule-form [name=every_hours]", "6")
        page.fill("#schedule-form [name=at_time]", "00:15")
        page.get_by_role("button", name="Save schedule").click()
        page.locator(".messages, .alert, [role=status]").first.wait_for()  # saved, back on the list
        next_fire = page.locator("[data-next-fire]").inner_text()
        _shot(page, tmp_path, "schedules")
    finally:
        context.close()
    # then: the e-mail field looks like the username field beside it
    assert page.refused == []
    assert email == {**username, "width": email["width"]}, (email, username)
    assert shown == {"daily": ["at_time"], "hours": ["at_time", "every_hours"], "cron": ["cron"]}
    assert next_fire.startswith("Next fire: ") and ":15 UTC" in next_fire, next_fire


def test_portal_pages_do_not_scroll_sideways_on_a_phone(browser, live_server, alice, team, plan):
    """The bar wraps on a 390 px phone: the Projects, Runs, Teams and Tokens pages and a project's page
    fit its width (a wide table scrolls inside its own box, not the page)."""
    context, page = _context(browser, width=390, height=844)
    widths = {}
    try:
        _log_in(page, live_server)
        for name, args in (
            ("projects:list", []),
            ("runs:list", []),
            ("accounts:teams", []),
            ("accounts:tokens", []),
            ("projects:detail", [plan.project.code]),
        ):
            page.goto(f"{live_server.url}{reverse(name, args=args)}")
            widths[name] = page.evaluate(
                """() => ({scroll: document.documentElement.scrollWidth, viewport: window.innerWidth,
                   nav_right: document.querySelector('.mainnav').getBoundingClientRect().right})"""
            )
    finally:
        context.close()
    assert page.refused == []
    for name, w in widths.items():
        assert w["scroll"] <= w["viewport"] and w["nav_right"] <= w["viewport"], (name, w)


def test_try_it_runs_one_iteration_and_shows_each_exchange(browser, live_server, alice, test_case, demo_target):
    # given: an environment on the demo target
    from portal.projects.models import Environment

    env = Environment.objects.create(project=test_case.project, name="Demo", base_url=demo_target.base_url)
    context, page = _context(browser)
    refused = []
    page.on("console", lambda m: "Content Security Policy" in m.text and refused.append(m.text))
    page.on("pageerror", lambda exc: refused.append(str(exc)))
    try:
        _log_in(page, live_server)
        # when: alice tries the test case once on it
        page.goto(f"{live_server.url}{test_case.get_absolute_url()}")
        page.select_option("#try-environment", str(env.code))
        page.get_by_role("button", name="Try one iteration").click()
        page.locator("#try-outcome").wait_for(timeout=20_000)
        outcome = page.locator("#try-outcome").get_attribute("data-outcome")
        exchanges = page.locator("#try-exchanges > li")
        statuses = [exchanges.nth(i).get_attribute("data-status") for i in range(exchanges.count())]
        # and opens the first response
        exchanges.first.locator("summary", has_text="Response").click()
        body_shown = exchanges.first.locator("pre").nth(1).is_visible()
    finally:
        context.close()
    # then: both steps went out and came back, swapped into the page without a reload or a refused style
    assert outcome == "passed" and statuses == ["200", "200"], (outcome, statuses)
    assert body_shown and refused == []
