"""The stream and WebSocket thresholds of a plan (issue 26): set through the API and the plan form, carried to the
engine's plan, refused out of range."""

import pytest
from django.urls import reverse

from portal.projects.models import Plan
from workers.engine.plan import Plan as EnginePlan

from .conftest import session

pytestmark = pytest.mark.django_db

NEW = {
    "threshold_ttfe_p95_ms": 800,
    "threshold_gap_p95_ms": 120,
    "threshold_rtt_p95_ms": 50,
    "threshold_min_h2_share_pct": 95.0,
}


def test_the_api_sets_them_and_the_engine_plan_carries_them(alice, plan):
    response = session(alice).patch(f"/api/v1/plans/{plan.code}/", NEW, format="json")

    assert response.status_code == 200, response.content
    assert {k: response.json()[k] for k in NEW} == NEW
    thresholds = EnginePlan.from_dict(Plan.objects.get(pk=plan.pk).to_engine_dict()).thresholds
    assert (thresholds.ttfe_p95_ms, thresholds.gap_p95_ms, thresholds.rtt_p95_ms, thresholds.min_h2_share_pct) == (
        800,
        120,
        50,
        95.0,
    )


def test_a_share_over_100_is_refused_and_nothing_changes(alice, plan):
    response = session(alice).patch(f"/api/v1/plans/{plan.code}/", {"threshold_min_h2_share_pct": 120}, format="json")

    assert response.status_code == 400
    assert "threshold_min_h2_share_pct" in response.json()["fields"]
    assert Plan.objects.get(pk=plan.pk).threshold_min_h2_share_pct is None


def test_the_plan_page_shows_them_and_its_form_offers_them(alice_client, plan):
    Plan.objects.filter(pk=plan.pk).update(threshold_ttfe_p95_ms=800, threshold_min_h2_share_pct=95)

    detail = alice_client.get(plan.get_absolute_url()).content.decode()
    form = alice_client.get(reverse("projects:plan-edit", args=[plan.code])).content.decode()

    assert "Time to first event p95</dt><dd>≤ 800 ms" in detail and "HTTP/2 share</dt><dd>≥ 95.0 %" in detail
    assert 'name="threshold_ttfe_p95_ms"' in form and 'name="threshold_min_h2_share_pct"' in form
