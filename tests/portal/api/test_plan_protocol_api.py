"""A plan's protocol (issue 26): chosen through the API, carried to the engine's plan, refused when unknown."""

import pytest

from portal.projects.models import Plan
from workers.engine.plan import Plan as EnginePlan

from .conftest import session

pytestmark = pytest.mark.django_db


def test_a_plans_protocol_and_tls_choice_reach_the_engine_plan(alice, plan):
    assert "protocol" not in plan.to_engine_dict()  # the default (auto) is left to the engine

    response = session(alice).patch(
        f"/api/v1/plans/{plan.code}/", {"protocol": "h2c", "tls_accept_any": True}, format="json"
    )

    assert response.status_code == 200, response.content
    assert (response.json()["protocol"], response.json()["tls_accept_any"]) == ("h2c", True)
    plan.refresh_from_db()
    snapshot = plan.to_engine_dict()
    assert (snapshot["protocol"], snapshot["tls_verify"]) == ("h2c", False)
    engine = EnginePlan.from_dict(snapshot)
    assert (engine.protocol, engine.tls_verify) == ("h2c", False)


def test_an_unknown_protocol_is_refused_and_nothing_changes(alice, plan):
    response = session(alice).patch(f"/api/v1/plans/{plan.code}/", {"protocol": "h3"}, format="json")

    assert response.status_code == 400
    assert "protocol" in response.json()["fields"]
    assert Plan.objects.get(pk=plan.pk).protocol == Plan.Protocol.ENVIRONMENT


def test_a_patch_without_the_protocol_keeps_it(alice, plan):
    session(alice).patch(f"/api/v1/plans/{plan.code}/", {"protocol": "http1"}, format="json")

    response = session(alice).patch(f"/api/v1/plans/{plan.code}/", {"threshold_apd_ms": 900}, format="json")

    assert response.status_code == 200
    assert Plan.objects.get(pk=plan.pk).protocol == "http1"
