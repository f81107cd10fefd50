import uuid

import pytest
from django.urls import reverse

from portal.runs.models import Run
from tests.portal.runs.factories import add_second

pytestmark = pytest.mark.django_db


def test_run_start_creates_a_run_and_redirects_to_it(alice_client, plan):
    response = alice_client.post(reverse("runs:start", args=[plan.code]))
    run = Run.objects.get()
    assert response.status_code == 302 and response.url == run.get_absolute_url()
    assert run.status == Run.Status.QUEUED


def test_run_start_says_why_a_plan_cannot_run(alice_client, plan):
    plan.mix.all().delete()
    response = alice_client.post(reverse("runs:start", args=[plan.code]), follow=True)
    assert "Add at least one test case to the mix." in response.content.decode()
    assert not Run.objects.exists()


def test_a_viewer_cannot_start_or_stop_a_run(bob_client, plan, run):
    assert bob_client.post(reverse("runs:start", args=[plan.code])).status_code == 403
    assert bob_client.post(reverse("runs:stop", args=[run.code])).status_code == 403
    run.refresh_from_db()
    assert Run.objects.count() == 1 and not run.cancel_requested


def test_a_viewer_reads_runs(bob_client, run):
    for url in (
        reverse("runs:detail", args=[run.code]),
        reverse("runs:series", args=[run.code]),
        reverse("runs:list"),
        reverse("runs:project", args=[run.project.code]),
    ):
        assert bob_client.get(url).status_code == 200, url


@pytest.mark.parametrize("name", ["runs:detail", "runs:series", "runs:stop"])
def test_an_outsider_gets_404_for_another_teams_run(charlie_client, run, name):
    url = reverse(name, args=[run.code])
    response = charlie_client.post(url) if name == "runs:stop" else charlie_client.get(url)
    assert response.status_code == 404


def test_an_outsider_gets_404_for_another_teams_plan_and_project(charlie_client, plan):
    assert charlie_client.post(reverse("runs:start", args=[plan.code])).status_code == 404
    assert charlie_client.get(reverse("runs:project", args=[plan.project.code])).status_code == 404
    assert not Run.objects.exists()


def test_the_run_list_shows_only_my_teams_runs(charlie_client, run):
    response = charlie_client.get(reverse("runs:list"))
    assert response.status_code == 200
    assert "No runs yet" in response.content.decode()


def test_an_unknown_run_is_404(alice_client):
    assert alice_client.get(reverse("runs:detail", args=[uuid.uuid4()])).status_code == 404


def test_anonymous_users_are_sent_to_login(client, run):
    response = client.get(reverse("runs:detail", args=[run.code]))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


def test_the_report_shows_the_summary(alice_client, run):
    from portal.runs import services
    from portal.runs.models import RunShard

    run.status = Run.Status.RUNNING
    run.save()
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.DONE)
    add_second(run, 0)  # the ramp's first second: the shard was there, nothing finished yet
    for s in range(1, 6):
        add_second(
            run, s, labels={"Browse: Home": ([12.0, 12.0], {}), "Browse: Articles": ([30.0], {"http_status": 1})}
        )
    services.run_finalize(run.id)

    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    assert "Measurement window" in page
    assert 'data-figure="pages">20<' in page
    assert "Browse: Articles" in page and "http_status" in page and "sample http_status" in page
    assert "Finished" in page  # no thresholds on the plan: no pass/fail verdict (issue 28)


def test_the_report_explains_apd_wherever_it_says_apd(alice_client, run):
    import re

    from portal.runs import services
    from portal.runs.models import RunShard

    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING)
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.DONE)
    for s in range(1, 6):
        add_second(run, s, labels={"Browse: Home": ([12.0, 12.0], {})})
    services.run_finalize(run.id)

    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()

    report = page[page.index('data-figure="apd"') :]
    assert 'id="apd-legend"' in report and "APD</abbr>: average page duration" in report
    # every APD a reader sees is the abbreviation with its expansion (attributes and ids aside)
    text = re.sub(r'"[^"]*"', '""', report.replace('<abbr title="average page duration">APD</abbr>', ""))
    assert "APD" not in text


def test_the_live_fragment_polls_while_active_and_refreshes_when_done(alice_client, run):
    url = reverse("runs:detail", args=[run.code])
    live = alice_client.get(url, headers={"HX-Request": "true"})
    assert 'hx-trigger="every 2s"' in live.content.decode()
    assert "topbar" not in live.content.decode()  # only the fragment
    assert "HX-Refresh" not in live

    Run.objects.filter(id=run.id).update(status=Run.Status.CANCELLED)
    done = alice_client.get(url, headers={"HX-Request": "true"})
    assert done["HX-Refresh"] == "true"


def test_series_json_has_the_window_and_points(alice_client, run):
    add_second(run, 0, users=3, labels={"Browse: Home": ([10.0], {})})
    data = alice_client.get(reverse("runs:series", args=[run.code])).json()
    assert data["users"] == [3]
    assert data["windows"] == [[1.0, 6.0, "Hold"]]
    assert data["active"] is True


def test_stop_asks_a_running_run_to_stop(alice_client, run):
    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING)
    alice_client.post(reverse("runs:stop", args=[run.code]))
    run.refresh_from_db()
    assert run.cancel_requested and run.status == Run.Status.CANCELLING


def test_a_queued_run_page_already_has_the_live_charts(alice_client, run):
    # The page is rendered once and only #live is polled afterwards, so the charts must be there from the start.
    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()
    assert 'id="charts"' in page and 'data-live="1"' in page
    assert "js/charts/run-charts.js" in page


def test_a_run_refused_before_start_has_no_charts(alice_client, run):
    Run.objects.filter(id=run.id).update(status=Run.Status.ERROR, error_message="Target refused")
    page = alice_client.get(reverse("runs:detail", args=[run.code])).content.decode()
    assert 'id="charts"' not in page
    assert "Target refused" in page


def test_the_run_list_pages_through_every_run_in_constant_queries(alice_client, run, django_assert_max_num_queries):
    from portal.runs.models import Run
    from portal.runs.views import RUNS_PER_PAGE

    fields = {f.name: getattr(run, f.name) for f in Run._meta.concrete_fields if f.name not in ("id", "code", "number")}
    Run.objects.bulk_create([Run(**fields, number=n) for n in range(2, RUNS_PER_PAGE + 31)])
    url = reverse("runs:project", args=[run.project.code])

    with django_assert_max_num_queries(12):
        first = alice_client.get(url).content.decode()
    with django_assert_max_num_queries(12):
        second = alice_client.get(url, {"page": 2}).content.decode()

    assert f"Page 1 of 2 ({RUNS_PER_PAGE + 30} runs)" in first and ">#130<" in first and ">#30<" not in first
    assert ">#30<" in second and ">#1<" in second and 'rel="prev"' in second
    assert alice_client.get(url, {"page": "x"}).status_code == 200  # a bad page number shows the first


def test_the_run_list_reads_only_the_figures_it_shows(alice_client, run):
    """A soak's summary is large (windows, degradation, page table): the list reads four figures of it."""
    from portal.runs.models import Run
    from portal.runs.templatetags.plimsoll import ms, pct, rate

    totals = {"apd_ms": 123.45, "p95_ms": 456.7, "pages_per_s": 98.5, "error_rate_pct": 1.25}
    big = [{"label": f"Page {i}", "p95_ms": 1.0} for i in range(500)]
    Run.objects.filter(id=run.id).update(status=Run.Status.PASSED, summary={"totals": totals, "pages": big})

    for url in (reverse("runs:list"), reverse("runs:project", args=[run.project.code])):
        response = alice_client.get(url)
        shown = response.context["runs"][0]
        page = response.content.decode()
        assert {"summary", "plan_snapshot"} <= shown.get_deferred_fields()
        cells = [f'<td class="num">{value}</td>' for value in (ms(123.45), ms(456.7), rate(98.5), pct(1.25))]
        assert all(cell in page for cell in cells), cells
        assert "Page 499" not in page


@pytest.mark.django_db
def test_the_run_page_names_each_test_cases_weight_and_steps_in_words(alice_client, run):
    # given: a mix of one test case of one step
    snapshot = run.plan_snapshot
    snapshot["test_cases"] = [{**snapshot["test_cases"][0], "weight": 1}]
    snapshot["test_cases"][0]["steps"] = snapshot["test_cases"][0]["steps"][:1]
    Run.objects.filter(id=run.id).update(plan_snapshot=snapshot)
    # when
    page = alice_client.get(run.get_absolute_url()).content.decode()
    # then: not "(1, 1 steps)"
    assert f"{snapshot['test_cases'][0]['name']} (weight 1, 1 step)" in page
