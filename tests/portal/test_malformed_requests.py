"""A guard for every URL of the portal: malformed path parameters and query values never answer 5xx.

Walks the URL configuration (so a new route is covered the day it is added), fills each
parameter with a real object's code, a code of nothing, and malformed values (bad codes,
huge numbers, control characters), adds malformed values for every query parameter the
views read, and sends GET and POST as the owner (alice), a viewer (bob) and an outsider
(charlie). Django's own admin is left out (its own tests cover it).
"""

import re
import traceback
import uuid

import pytest
from django.core.signals import got_request_exception
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from portal.history import services as history_services
from portal.history.models import ExternalMeasurement
from portal.projects.models import MixEntry
from portal.runs import services as run_services
from tests.portal.history.test_services import make_experiment

pytestmark = pytest.mark.django_db

# Every query or form parameter a view reads (grep request.GET / request.POST), and pagination.
QUERY_KEYS = ["plan", "at", "revert", "change", "run", "a", "b", "include", "page", "limit", "offset", "next"]
BAD_VALUES = ["x", "99999999999999999999999", "-1", "\x00", "%ff", "0" * 300]
BAD_INTS = ["0", "99999999999999999999999"]
BAD_STRS = ["sideways", "%00", "%E2%80%AE" * 50]
_PARAM = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>")


def _routes(resolver=None, prefix=""):
    for pattern in (resolver or get_resolver()).url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if not route.startswith("admin/"):
                yield from _routes(pattern, route)
        elif isinstance(pattern, URLPattern):
            yield route, pattern.name


def _fill(route: str, values: dict) -> str:
    return "/" + _PARAM.sub(lambda m: values[(m.group("conv") or "str", route.split("/")[0])], route)


@pytest.fixture
def world(alice, bob, charlie, plan, monkeypatch):
    """One of each object, so that each code in a URL can name a real one."""
    monkeypatch.setattr(run_services, "_enqueue_start", lambda run_id: None)  # no broker in this test
    experiment = make_experiment(plan, alice, apply_mode="manual")
    environment = plan.environment
    run = run_services.run_create(plan=plan, user=alice)
    trial_set = history_services.trialset_start(plan=plan, size=2, user=alice, label="Before")
    measurement = ExternalMeasurement.objects.create(
        environment=environment, name="Backup", value=1, unit="s", measured_at=timezone.now()
    )
    step = plan.mix.first().test_case.steps.first()
    mix = MixEntry.objects.filter(plan=plan).first()
    codes = {
        "projects": plan.project.code,
        "environments": environment.code,
        "testcases": step.test_case.code,
        "steps": step.code,
        "plans": plan.code,
        "runs": run.code,
        "changes": experiment.change.code,
        "measurements": measurement.code,
        "trialsets": trial_set.code,
        "experiments": experiment.code,
        "teams": alice.teams.get().code,
    }
    return {"codes": codes, "mix": mix.pk, "user": bob.pk}


def _variants(route: str, world: dict):
    """(path, is_real) for a route: real objects first, then codes of nothing and malformed values."""
    head = route.split("/")[0]
    if "<" not in route:
        yield "/" + route, True
        return
    real = {
        ("uuid", head): str(world["codes"].get(head, uuid.uuid4())),
        ("int", head): str(world["mix"] if head == "mix" else world["user"]),
        ("str", head): "up",
        ("path", head): "x",
        ("slug", head): "x",
    }
    yield _fill(route, real), True
    yield _fill(route, {**real, ("uuid", head): str(uuid.uuid4())}), False
    yield _fill(route, {**real, ("uuid", head): "not-a-code"}), False
    if "<int:" in route:
        for bad in BAD_INTS:
            yield _fill(route, {**real, ("int", head): bad}), False
    if "<str:" in route:
        for bad in BAD_STRS:
            yield _fill(route, {**real, ("str", head): bad}), False


def test_no_url_answers_5xx_to_malformed_requests(world, alice, bob, charlie):
    # given
    errors = []

    def record(sender, request, **kwargs):
        errors.append(f"{request.method} {request.get_full_path()}: {traceback.format_exc(limit=-3)}")

    got_request_exception.connect(record)
    routes = sorted(_routes(), key=lambda r: ("delete" in r[0] or "remove" in r[0], "logout" in r[0]))
    assert len(routes) > 50  # the walk found the URL configuration
    failures = []
    # when: each persona, every route; the owner last, as its POSTs may delete what the others would read
    try:
        for user in (charlie, bob, alice):
            client = Client(raise_request_exception=False)
            for route, _name in routes:
                client.force_login(user)
                for path, is_real in _variants(route, world):
                    requests = [("get", path, {})]
                    if is_real:
                        requests += [("get", path, dict.fromkeys(QUERY_KEYS, bad)) for bad in BAD_VALUES]
                        requests += [("post", path, dict.fromkeys(QUERY_KEYS, bad)) for bad in BAD_VALUES[:2]]
                    else:
                        requests.append(("post", path, {}))
                    for method, url, data in requests:
                        if method == "get":
                            response = client.get(url, data)
                        else:
                            response = client.post(url + "?" + "&".join(f"{k}=x" for k in QUERY_KEYS), data)
                        if response.status_code >= 500:
                            failures.append(
                                f"{user.username} {method.upper()} {url} {data!r} -> {response.status_code}"
                            )
    finally:
        got_request_exception.disconnect(record)
    # then
    assert not failures, "\n".join(failures[:30] + errors[:5])


def test_a_malformed_plan_code_in_the_query_is_a_404(alice_client, project, plan):
    # The probe's case: ?plan=x raised ValidationError, which the access helper let through.
    response = alice_client.get(f"/projects/{project.code}/experiments/new/", {"plan": "x"})
    assert response.status_code == 404
