"""A stakeholder opens shared links in Chromium, without an account, on a desktop, a phone and paper.

The figures on each shared page are compared with the logged-in portal page of the same object,
and the charts must really be drawn (pixels on the canvas), from the link's own data URLs.
"""

import io

import pytest
from pypdf import PdfReader

from portal.sharing import services
from tests.conftest import wait_for_js
from tests.portal.history.test_comparison import make_run

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# True when the canvas has at least one painted pixel.
DRAWN = """(c) => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 0) return true; return false; }"""


@pytest.fixture
def pages(browser):
    """An anonymous context (the stakeholder) and alice's logged-in one."""
    contexts = []

    def new(viewport=(1280, 900)):
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        return page

    yield new
    for context in contexts:
        context.close()


def login(page, live_server):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password")
    page.click("button[type=submit]")
    page.locator(".mainnav").wait_for()  # logged in


def link(project, alice, kind, **target):
    _, token = services.share_create(project=project, kind=kind, title=f"A {kind}", user=alice, **target)
    return token


def assert_public(page):
    """No way into the portal: no link, no form, no navigation; noindex in the page."""
    assert page.locator("a[href]").count() == 0
    assert page.locator("form, nav, .mainnav").count() == 0
    assert page.locator('meta[name="robots"]').get_attribute("content") == "noindex, nofollow"


def test_a_shared_run_shows_the_portal_figures_draws_its_charts_and_prints(pages, live_server, alice, plan):
    run = make_run(plan, 40, seconds=range(0, 8))
    token = link(plan.project, alice, "run", run=run)
    portal = pages()
    login(portal, live_server)
    portal.goto(f"{live_server.url}{run.get_absolute_url()}")
    portal_figures = portal.locator("#summary").inner_text()

    # when: the stakeholder opens the link
    page = pages()
    response = page.goto(f"{live_server.url}/s/{token}/")

    # then: the same figures, the headline first, the four charts drawn, nothing leading elsewhere
    assert response.headers["referrer-policy"] == "no-referrer" and "noindex" in response.headers["x-robots-tag"]
    assert page.locator("#summary").inner_text() == portal_figures
    assert page.locator("main > *").first.get_attribute("id") == "share-headline"
    assert "40 ms" in page.locator("#share-headline").inner_text()
    wait_for_js(page, "document.getElementById('charts').dataset.points > 0")
    for chart in ("users", "latency", "throughput", "errors"):
        assert page.locator(f"#chart-{chart}").evaluate(DRAWN), chart
    assert_public(page)

    # and printed (Save as PDF): a clean A4 document with the headline, the figures and the charts as images
    pdf = PdfReader(io.BytesIO(page.pdf(format="A4", print_background=True)))
    text = " ".join(p.extract_text() for p in pdf.pages)
    assert 1 <= len(pdf.pages) <= 4
    assert "Smoke on Staging" in text and "APD" in text and "Pages" in text
    assert "Log out" not in text and "Projects" not in text
    assert sum(len(p.images) for p in pdf.pages) >= 4  # the four canvases printed as pictures


def test_a_shared_comparison_and_experiment_have_the_portal_headline_and_a_drawn_chart(
    pages, live_server, alice, story
):
    baseline, after, experiment = story["baseline"], story["after_set"], story["experiment"]
    project = experiment.project
    portal = pages()
    login(portal, live_server)
    portal.goto(f"{live_server.url}/projects/{project.code}/compare/?a={baseline.code}&b={after.code}")
    compare_headline = portal.locator("#headline").inner_text()
    compare_total = portal.locator("#compare-total").inner_text()
    portal.goto(f"{live_server.url}{experiment.get_absolute_url()}")
    experiment_headline = portal.locator("#headline").inner_text()

    page = pages()
    for kind, target, headline in (
        ("comparison", {"before_code": baseline.code, "after_code": after.code}, compare_headline),
        ("experiment", {"experiment": experiment}, experiment_headline),
    ):
        page.goto(f"{live_server.url}/s/{link(project, alice, kind, **target)}/")
        assert page.locator("#share-headline").inner_text() == headline, kind
        assert page.locator("#compare-total").inner_text() == compare_total, kind
        assert "search.index went from off to on" in page.locator("#differences").inner_text()
        wait_for_js(page, "document.getElementById('chart-compare').dataset.points > 0")
        assert page.locator("#chart-compare").evaluate(DRAWN)
        assert_public(page)


def test_a_shared_journey_on_a_phone(pages, live_server, alice, story):
    experiment = story["experiment"]
    env, plan = experiment.environment, experiment.plan
    portal = pages()
    login(portal, live_server)
    portal.goto(f"{live_server.url}/environments/{env.code}/journey/?plan={plan.code}")
    portal_effect = portal.locator("#effect-1 td").nth(4).inner_text()  # APD before → after

    page = pages(viewport=(390, 844))
    page.goto(f"{live_server.url}/s/{link(env.project, alice, 'journey', environment=env, plan=plan)}/")

    assert "the largest gain was Add index ix_work_items_area" in page.locator("#share-headline").inner_text()
    assert page.locator("#effect-1 td").nth(3).inner_text() == portal_effect
    wait_for_js(page, "document.getElementById('journey').dataset.charts > 0")
    for canvas in page.locator("canvas[data-panel]").all():
        assert canvas.evaluate(DRAWN)
    assert_public(page)
    # readable on a phone: nothing wider than the screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_a_revoked_link_stops_at_once_in_the_open_browser(pages, live_server, alice, plan):
    run = make_run(plan, 40)
    token = link(plan.project, alice, "run", run=run)
    page = pages()
    page.goto(f"{live_server.url}/s/{token}/")
    assert "40 ms" in page.locator("#share-headline").inner_text()

    from portal.sharing.models import ShareLink

    services.share_revoke(link=ShareLink.objects.get(), user=alice)
    response = page.reload()

    assert response.status == 410
    assert page.locator("h1").inner_text() == "This link has expired or was revoked"
    assert "40 ms" not in page.content() and "Smoke" not in page.content()


@pytest.fixture
def bare_run(plan, alice):
    from tests.portal.runs.factories import plan_run

    return plan_run(plan, config_snapshot=plan.environment.configuration, created_by=alice, start_at=None)


def test_capacity_and_degradation_charts_draw_from_their_static_files_in_the_portal_and_shared(
    pages, live_server, alice, plan, bare_run
):
    from tests.portal.runs import test_capacity_degradation as cd

    # given: a steps run with a knee, and a soak whose throughput halves after 200 s
    steps = cd.steps_run(bare_run, [10, 20, 40, 60], thresholds={"apd_ms": 1000})
    cd.fill_levels(steps, cd.KNEE_AT_40)
    cd.finished(steps)
    soak = make_run(plan, 10)
    soak = cd.long_run(soak)
    from portal.runs.models import PageInterval, ShardInterval

    # make_run's seconds give way to the soak's 310
    PageInterval.objects.filter(run=soak).delete()
    ShardInterval.objects.filter(run=soak).delete()
    cd.fill(soak, range(cd.RAMP_UP + cd.HOLD), pages=cd.shape(lambda s: 100 if s < 200 else 50), apd_ms=lambda s: 20.0)
    cd.finished(soak)

    portal = pages()
    login(portal, live_server)
    stakeholder = pages()
    for page, url in (
        (portal, steps.get_absolute_url()),
        (stakeholder, f"/s/{link(plan.project, alice, 'run', run=steps)}/"),
    ):
        page.goto(f"{live_server.url}{url}")
        wait_for_js(page, "document.getElementById('chart-capacity').dataset.levels === '4'")
        assert page.locator("#chart-capacity").evaluate(DRAWN)
    for page, url in (
        (portal, soak.get_absolute_url()),
        (stakeholder, f"/s/{link(plan.project, alice, 'run', run=soak)}/"),
    ):
        page.goto(f"{live_server.url}{url}")
        assert page.locator("#charts").get_attribute("data-degradation-marker") == "1"
        wait_for_js(page, "document.getElementById('charts').dataset.points > 0")
