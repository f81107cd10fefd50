"""What a finished run may claim (issue 28, items 5 and 6).

A run that no threshold judged (none on the plan, or an import no plan's thresholds apply to)
ends *finished*, not *passed*: the API, the exports, the share page and the notifications say
the same. A cancelled run claims no verdict either (no green "thresholds held"), and the
"Stopping…" banner lives only while the run is cancelling.
"""

import re
import xml.etree.ElementTree as ET

import pytest
from django.urls import reverse

from portal import client as ci_client
from portal.notifications.services import run_events, run_payload
from portal.runs import services
from portal.runs.models import Run, RunShard
from tests.portal.runs.factories import add_second, plan_run
from tests.portal.sharing.test_share_links import public, share

pytestmark = pytest.mark.django_db


def _with_thresholds(run, **limits):
    run.plan_snapshot["thresholds"] = {"apd_ms": None, "p95_ms": None, "error_rate_pct": None, **limits}
    run.save()
    return run


def _finalize(run, *, cancel=False):
    """A one-shard run with 25 % errors in its hold (6 pages a second, 2 of them errors), finalized."""
    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING, cancel_requested=cancel)
    RunShard.objects.create(run=run, shard_no=0, user_count=5, status=RunShard.Status.DONE)
    add_second(run, 0)  # the ramp-up second: the whole planned load ran (else the run is incomplete)
    for second in range(1, 6):
        add_second(run, second, labels={"Browse: Home": ([40.0] * 6, {"HTTP 500": 2})})
    services.run_finalize(run.id)
    run.refresh_from_db()
    return run


def test_a_run_no_threshold_judged_is_finished_not_passed_everywhere(alice_client, run):
    # given: a plan without thresholds, and a run with 25 % errors
    run = _finalize(run)

    # then: finished, with no verdict, and every output says so in the same words
    assert run.status == Run.Status.FINISHED and run.verdict is None
    assert run.summary["totals"]["error_rate_pct"] == pytest.approx(25.0)
    api = alice_client.get(f"/api/v1/runs/{run.code}/").json()
    assert (api["status"], api["verdict"]) == ("finished", None)
    assert alice_client.get(f"/api/v1/runs/{run.code}/summary.json").json()["status"] == "finished"
    junit = ET.fromstring(alice_client.get(f"/api/v1/runs/{run.code}/junit.xml").content)
    case = junit.find(".//testcase")
    assert case.get("name") == "run completed" and case.find("skipped") is not None
    assert "no pass/fail verdict" in case.find("skipped").get("message")
    assert junit.get("skipped") == "1" and junit.get("failures") == junit.get("errors") == "0"

    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'data-status="finished">Finished<' in page and "thresholds held" not in page

    _, token = share(alice_client, run.project, kind="run", run=run.code)
    headline = re.search(r'id="share-headline">(.*?)</p>', public(token).content.decode(), re.S).group(1)
    assert "the plan sets no thresholds, so there is no pass/fail verdict." in headline
    assert "every threshold held" not in headline

    payload = run_payload(run, run_events(run))
    assert payload["run"]["status"] == "finished" and payload["run"]["thresholds"] is None
    assert payload["headline"] == (
        f"Run #{run.number} of {run.plan_name}: finished. The plan sets no thresholds, so it has no pass/fail verdict."
    )
    # the CI client: nothing failed, so the build goes on, and it says there was nothing to pass
    assert ci_client.outcome(api) == ci_client.PASSED


def test_the_same_run_with_an_error_rate_threshold_fails_and_one_it_holds_passes(run, plan):
    assert _finalize(_with_thresholds(run, error_rate_pct=1.0)).status == Run.Status.FAILED
    other = plan_run(plan, number=2, start_at=None)
    held = _finalize(_with_thresholds(other, error_rate_pct=30.0))
    assert (held.status, held.verdict) == (Run.Status.PASSED, "passed")


def test_a_cancelled_run_claims_no_verdict_and_the_stopping_banner_goes_with_the_run(alice_client, run):
    # given: a running run whose thresholds would hold, stopped from its page (HTMX)
    run = _with_thresholds(run, apd_ms=1000)
    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING)
    stopped = alice_client.post(reverse("runs:stop", args=[run.code]), headers={"HX-Request": "true"})
    assert 'id="stopping"' in stopped.content.decode()  # said while it is cancelling

    # when: its workers end, and the run is finalized
    run = _finalize(run, cancel=True)

    # then: cancelled, no verdict, no green badge, and no "Stopping" left over on the next page
    assert run.status == Run.Status.CANCELLED and run.verdict is None and run.summary["verdict"] is None
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert "thresholds held" not in page and "Stopping" not in page
    assert 'id="cancelled-no-verdict"' in page
    listing = alice_client.get(reverse("runs:list")).content.decode()
    assert "thresholds held" not in listing


def test_a_cancelled_run_finalized_before_the_fix_shows_no_green_badge(alice_client, run):
    # given: a cancelled run whose stored summary still says "passed" (finalized before issue 28)
    run = _finalize(_with_thresholds(run, apd_ms=1000))
    assert run.summary["verdict"] == "passed"
    Run.objects.filter(id=run.id).update(status=Run.Status.CANCELLED)
    run.refresh_from_db()

    page = alice_client.get(run.get_absolute_url()).content.decode()
    listing = alice_client.get(reverse("runs:list")).content.decode()

    assert run.verdict is None
    assert "thresholds held" not in page and "thresholds held" not in listing
