"""A guard for every URL of the portal: malformed path parameters and query values never answer 5xx.

Walks the URL configuration (so a new route is covered the day it is added), fills each
parameter with a real object's code, a code of nothing, and malformed values (bad codes,
huge numbers, control characters), adds malformed values for every query parameter the
views read, and sends GET, POST, PATCH, PUT and DELETE as the owner (alice), a viewer (bob)
and an outsider (charlie). Django's own admin is left out (its own tests cover it).
"""

import datetime
import fcntl
import json
import re
import traceback
import uuid

import pytest
from django.core.signals import got_request_exception
from django.db import transaction
from django.http import QueryDict
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from portal.api.throttling import TokenRateThrottle
from portal.history import services as history_services
from portal.history.models import ExternalMeasurement
from portal.projects.models import MixEntry
from portal.runs import services as run_services
from tests.portal.history.test_services import make_experiment

pytestmark = pytest.mark.django_db

# Query and form parameters sent to every route: these, and every key a view reads from
# request.GET / request.POST (forms and DRF filters included) while answering a real object's
# page, found by ``_keys_read`` on each run of the test, so that a view added later is covered.
QUERY_KEYS = ["plan", "at", "revert", "change", "run", "a", "b", "include", "page", "limit", "offset", "next"]
BAD_VALUES = ["x", "99999999999999999999999", "-1", "\x00", "%ff", "0" * 300]
BAD_INTS = ["0", "99999999999999999999999"]
BAD_STRS = ["sideways", "%00", "%E2%80%AE" * 50]
# A route's parameters: ``<conv:name>`` in path() routes, ``(?P<name>…)`` in the API router's regexes.
_PARAM = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>|\(\?P<(?P<rname>\w+)>[^)]*\)")
# The API's resource names, as the browser's routes name the same objects.
_HEADS = {"test-cases": "testcases", "tuning-changes": "changes", "trial-sets": "trialsets", "share-links": "links"}


def _routes(resolver=None, prefix=""):
    for pattern in (resolver or get_resolver()).url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if not route.startswith("admin/"):
                yield from _routes(pattern, route)
        elif isinstance(pattern, URLPattern):
            yield re.sub(r"(^|/)\^|\$$", r"\1", route), pattern.name


def _params(route: str) -> list[tuple[str, str, str]]:
    """(converter, name, head) of each parameter; the head is the path segment before it."""
    found = []
    for m in _PARAM.finditer(route):
        head = route[: m.start()].rstrip("/").rsplit("/", 1)[-1]
        conv = m.group("conv") or ("str" if m.group("name") else "re")
        found.append((conv, m.group("name") or m.group("rname"), _HEADS.get(head, head)))
    return found


def _fill(route: str, values: list[str]) -> str:
    it = iter(values)
    return "/" + _PARAM.sub(lambda m: next(it), route)


@pytest.fixture
def world(alice, bob, charlie, plan, monkeypatch, settings):
    """One of each object, so that each parameter in a URL can name a real one."""
    from portal.accounts import services as account_services
    from portal.notifications.services import channel_create
    from portal.runs.models import ResultImport
    from portal.schedules.services import schedule_save
    from portal.sharing.services import share_create

    monkeypatch.setattr(run_services.lifecycle, "_enqueue_start", lambda run_id: None)  # no broker in this test
    # The API's rate limit (600/min) would answer the walk 429 and hide what it looks for.
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"token": None})
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    # Sessions in signed cookies: the walk's ~10,000 requests each read its session from the database
    # otherwise (a quarter of the walk's queries); which store holds a session is not what the walk tests.
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
    experiment = make_experiment(plan, alice, apply_mode="manual")
    environment = plan.environment
    project = plan.project
    team = alice.teams.get()
    run = run_services.run_create(plan=plan, user=alice)
    trial_set = history_services.trialset_start(plan=plan, size=2, user=alice, label="Before")
    measurement = ExternalMeasurement.objects.create(
        environment=environment, name="Backup", value=1, unit="s", measured_at=timezone.now()
    )
    step = plan.mix.first().test_case.steps.first()
    mix = MixEntry.objects.filter(plan=plan).first()
    schedule = schedule_save(
        project=project,
        plan=plan,
        kind="daily",
        at_time=datetime.time(2, 0),
        every_hours=None,
        cron="",
        time_zone="UTC",
        enabled=True,
        ends_on=None,
        busy_wait_minutes=30,
        catch_up_hours=2,
        now=timezone.now(),
    )
    channel = channel_create(
        project=project, name="Ops", kind="webhook", events=["run_finished"], url="http://127.0.0.1:9/"
    )
    link, link_token = share_create(project=project, kind="run", title="Run", user=alice, run=run)
    invitation, invitation_token = account_services.invitation_create(
        team=team, email="dora@example.com", role="viewer", invited_by=alice
    )
    api_token, _secret = account_services.token_create(user=alice, team=team, name="ci", scope="read")
    result_import = ResultImport.objects.create(environment=environment, created_by=alice, file_name="k6.json")
    codes = {
        "projects": project.code,
        "environments": environment.code,
        "testcases": step.test_case.code,
        "steps": step.code,
        "plans": plan.code,
        "runs": run.code,
        "changes": experiment.change.code,
        "measurements": measurement.code,
        "trialsets": trial_set.code,
        "experiments": experiment.code,
        "teams": team.code,
        "schedules": schedule.code,
        "channels": channel.code,
        "links": link.code,
        "shared-links": link.code,
        "result-imports": result_import.code,
    }
    # Parameters that are not codes: by the segment before them (and the parameter's name).
    others = {
        "mix": str(mix.pk),
        "members": str(bob.pk),
        "tokens": str(api_token.pk),
        "invitations": str(invitation.pk),
        "s": link_token,
        "move": "up",
    }
    return {
        "codes": {k: str(v) for k, v in codes.items()},
        "others": others,
        "by_name": {
            "step": str(step.code),
            "run_code": str(run.code),
            "username": bob.username,
            "invitation_id": str(invitation.pk),
        },
        "tokens": {"invitations": invitation_token},
    }


def _real(conv: str, name: str, head: str, world: dict) -> str:
    if name in world["by_name"]:
        return world["by_name"][name]
    if conv in ("str", "re") and head in world["tokens"]:
        return world["tokens"][head]
    if head in world["codes"] and conv in ("uuid", "str", "re"):
        return world["codes"][head]
    return world["others"].get(head, "x")


def _variants(route: str, world: dict):
    """(path, is_real) for a route: real objects first, then, for each parameter in turn, a code of
    nothing and malformed values (a bad code, huge and zero numbers, control and invisible characters)."""
    params = _params(route)
    if not params:
        yield "/" + route, True
        return
    real = [_real(conv, name, head, world) for conv, name, head in params]
    yield _fill(route, real), True
    for i, (conv, _name, _head) in enumerate(params):
        bad = [str(uuid.uuid4()), "not-a-code"]
        if conv == "int":
            bad = BAD_INTS
        elif conv in ("str", "re"):
            bad += BAD_INTS[1:] + BAD_STRS
        for value in bad:
            yield _fill(route, real[:i] + [value] + real[i + 1 :]), False


def _keys_read(routes, world, user) -> dict[tuple[str, str], set[str]]:
    """The keys each view reads from a request's query or form: {(route, method): keys}, while
    ``user`` GETs and POSTs each route with its real objects (forms and DRF filters included).

    What these requests change is rolled back, so the walk starts from the same objects.
    """
    read: set[str] = set()
    originals = {name: getattr(QueryDict, name) for name in ("get", "getlist", "__getitem__", "__contains__")}

    def spy(name):
        def method(self, key, *args, **kwargs):
            read.add(key)
            return originals[name](self, key, *args, **kwargs)

        return method

    keys = {}
    client = Client(raise_request_exception=False)
    client.force_login(user)
    try:
        for name in originals:
            setattr(QueryDict, name, spy(name))
        with transaction.atomic():
            for route, _name in routes:
                if "logout" in route:
                    continue
                path = next(_variants(route, world))[0]
                for method in ("get", "post"):
                    read.clear()
                    getattr(client, method)(path)
                    keys[route, method] = {k for k in read if isinstance(k, str) and k != "csrfmiddlewaretoken"}
            transaction.set_rollback(True)
    finally:
        for name, original in originals.items():
            setattr(QueryDict, name, original)
    return keys


def _requests(path: str, is_real: bool, read: dict, route: str, every_key: list[str], one_by_one: bool):
    """(method, url, data) to send: malformed values in every key at once; with ``one_by_one``, also in
    each key the view reads on its own (one key answered early, DRF's ``format`` say, hides the others)."""
    if not is_real:
        return [("get", path, {}), ("post", path, {}), ("delete", path, {})]
    query = "?" + "&".join(f"{k}=x" for k in every_key)
    sent = [("get", path, {})]
    sent += [("get", path, dict.fromkeys(every_key, bad)) for bad in BAD_VALUES]
    sent += [("post", path + query, dict.fromkeys(every_key, bad)) for bad in BAD_VALUES[:2]]
    # The API's other verbs (what they change is rolled back, see ``_send``): a JSON body of malformed values.
    sent += [("patch", path, dict.fromkeys(every_key, bad)) for bad in BAD_VALUES[:2]]
    sent += [("put", path, dict.fromkeys(every_key, BAD_VALUES[0])), ("delete", path, {})]
    if one_by_one:
        for key in sorted(read.get((route, "get"), ())):
            sent += [("get", path, {key: bad}) for bad in BAD_VALUES]
        for key in sorted(read.get((route, "post"), ())):
            sent += [("post", f"{path}?{key}=x", {key: bad}) for bad in BAD_VALUES[:2]]
    return sent


def _send(client, method: str, url: str, data: dict):
    if method in ("get", "post"):
        return getattr(client, method)(url, data)
    # PATCH, PUT, DELETE: in a transaction rolled back after, so the walk goes on over the same objects.
    with transaction.atomic():
        response = getattr(client, method)(url, data, content_type="application/json")
        transaction.set_rollback(True)
    return response


# The walk in four parts (every fourth route, in the order below), four tests that together send every
# request: one test of it all took minutes on one xdist process while the other finished early. Each
# part starts from the same objects; the keys the views read are found once per run (``_keys_once``).
PARTS = 4
_KEYS: dict = {}


def _keys_once(routes, world, user, tmp_path_factory, worker_id) -> dict[tuple[str, str], set[str]]:
    """``_keys_read``, once per process, and under xdist once per run: the first process to need them
    finds them and writes them where the run's other processes read them (pytest-xdist's recipe for a
    session's shared data). Each process found them again before: ~13 s of CPU each, on up to three."""
    if "read" in _KEYS:
        return _KEYS["read"]
    if worker_id == "master":
        _KEYS["read"] = _keys_read(routes, world, user)
        return _KEYS["read"]
    shared = tmp_path_factory.getbasetemp().parent / "malformed-keys-read.json"
    with open(shared.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process finding them: wait, then read them
        if shared.exists():
            _KEYS["read"] = {(route, method): set(keys) for route, method, keys in json.loads(shared.read_text())}
        else:
            _KEYS["read"] = _keys_read(routes, world, user)
            found = [[route, method, sorted(keys)] for (route, method), keys in _KEYS["read"].items()]
            shared.write_text(json.dumps(found))
    return _KEYS["read"]


def _all_routes():
    return sorted(_routes(), key=lambda r: ("delete" in r[0] or "remove" in r[0], "logout" in r[0]))


@pytest.mark.parametrize("part", range(PARTS))
def test_no_url_answers_5xx_to_malformed_requests(part, world, alice, bob, charlie, tmp_path_factory, worker_id):
    # given
    errors = []

    def record(sender, request, **kwargs):
        errors.append(f"{request.method} {request.get_full_path()}: {traceback.format_exc(limit=-3)}")

    got_request_exception.connect(record)
    routes = _all_routes()
    assert len(routes) > 50  # the walk found the URL configuration
    read = _keys_once(routes, world, alice, tmp_path_factory, worker_id)
    every_key = sorted(set(QUERY_KEYS).union(*read.values()))
    assert {"since", "from", "to", "only", "state"} <= set(every_key)  # keys views added later read
    assert read["api/v1/teams/(?P<code>[^/]+)/invitations/", "get"] >= {"state"}  # the API's routes are walked
    failures = []
    # when: each persona, every route of this part; the owner last, as its POSTs may delete what the others
    # would read. The owner's requests reach the views' code: they also try each key the view reads on its own.
    try:
        for user in (charlie, bob, alice):
            client = Client(raise_request_exception=False)
            for route, _name in routes[part::PARTS]:
                client.force_login(user)
                for path, is_real in _variants(route, world):
                    for method, url, data in _requests(path, is_real, read, route, every_key, user == alice):
                        response = _send(client, method, url, data)
                        # 429 too: a rate limit answering the walk would hide what it looks for
                        if response.status_code >= 500 or response.status_code == 429:
                            failures.append(
                                f"{user.username} {method.upper()} {url} {data!r} -> {response.status_code}"
                            )
    finally:
        got_request_exception.disconnect(record)
    # then
    assert not failures, "\n".join(failures[:30] + errors[:5])


def test_the_parts_of_the_walk_cover_every_route_once():
    routes = _all_routes()
    parts = [routes[part::PARTS] for part in range(PARTS)]
    assert sorted(r for p in parts for r in p) == sorted(routes) and all(parts)


def test_a_malformed_plan_code_in_the_query_is_a_404(alice_client, project, plan):
    # The probe's case: ?plan=x raised ValidationError, which the access helper let through.
    response = alice_client.get(f"/projects/{project.code}/experiments/new/", {"plan": "x"})
    assert response.status_code == 404
