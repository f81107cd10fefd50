"""The API's personas: alice (owner), dave (editor), bob (viewer), charlie (outsider), anonymous,
and alice's tokens: read, run, write, expired and revoked."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken, Membership
from portal.accounts.services import token_create, token_revoke
from portal.runs import analysis
from portal.runs.models import Run
from tests.portal.accounts.conftest import mail_sent_at_commit  # noqa: F401 (a fixture for the invitations API)
from tests.portal.runs.factories import add_second, plan_run
from tests.portal.sharing.conftest import story  # noqa: F401 (a fixture for the share links API)

PERSONAS = ("owner", "editor", "viewer", "outsider", "anonymous", "read_token", "run_token", "expired", "revoked")
READERS = ("owner", "editor", "viewer", "read_token", "run_token")
RUNNERS = ("owner", "editor", "run_token")
UNAUTHENTICATED = ("anonymous", "expired", "revoked")


@pytest.fixture
def dave(django_user_model, team):
    user = django_user_model.objects.create_user("dave", password="dave-password")
    Membership.objects.create(team=team, user=user, role=Membership.Role.EDITOR)
    return user


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def session(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def token_secret(alice, team):
    """A secret of a fresh token of alice's: token_secret("write") → "plim_…"."""

    def make(scope: str, **kwargs) -> str:
        return token_create(user=alice, team=team, name=f"{scope} token", scope=scope, **kwargs)[1]

    return make


@pytest.fixture
def persona(request, alice, bob, charlie, dave, token_secret):
    """An API client acting as the persona named by the test's ``persona`` parameter."""
    name = request.param
    if name == "owner":
        return session(alice)
    if name == "editor":
        return session(dave)
    if name == "viewer":
        return session(bob)
    if name == "outsider":
        return session(charlie)
    if name == "anonymous":
        return APIClient()
    if name in ("read_token", "run_token"):
        return bearer(token_secret(name.split("_")[0]))
    if name == "expired":
        secret = token_secret("write")
        ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        return bearer(secret)
    if name == "revoked":
        secret = token_secret("write")
        token_revoke(token=ApiToken.objects.get())
        return bearer(secret)
    raise ValueError(name)


def expected(persona_name: str, *, ok: int, allowed: tuple) -> int:
    """The status a persona gets: ``ok`` if allowed, 404 for the outsider, 401 without valid credentials, else 403."""
    if persona_name in allowed:
        return ok
    if persona_name == "outsider":
        return 404
    if persona_name in UNAUTHENTICATED:
        return 401
    return 403


@pytest.fixture
def active_run(plan, alice):
    """A running run of ``plan``: what a pipeline long-polls (``?wait=S``) until it ends."""
    return plan_run(
        plan, analysis_settings=plan.analysis_settings(), created_by=alice, status=Run.Status.RUNNING, start_at=None
    )


@pytest.fixture
def finished_run(plan, alice):
    """A finished run of ``plan`` (ramp 1 s, hold 5 s; APD ≤ 100 ms) whose second page broke its threshold."""
    plan.threshold_apd_ms = 100
    plan.threshold_error_rate_pct = 5
    plan.save()
    run = plan_run(
        plan,
        number=1,
        analysis_settings=plan.analysis_settings(),
        created_by=alice,
        status=Run.Status.FINISHING,
        start_at=None,
    )
    for second in range(7):
        add_second(run, second, users=5, labels={"Home": ([50, 60], {}), "Articles": ([300, 310], {"http_500": 1})})
    summary = analysis.summarize(run)
    status = Run.Status.PASSED if summary["verdict"] == "passed" else Run.Status.FAILED
    Run.objects.filter(pk=run.pk).update(summary=summary, status=status, finished_at=timezone.now())
    run.refresh_from_db()
    return run
