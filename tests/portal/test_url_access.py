"""Every URL of the project is classified, and each class holds its promise to an anonymous visitor.

A new route fails this test until someone says who may reach it: add it to ROUTES.
Tenant data behind each class is tested per view (charlie → 404, bob → 403); this test makes
sure no route is forgotten.
"""

import re
import uuid

import pytest
from django.urls import URLResolver, get_resolver

pytestmark = pytest.mark.django_db

PUBLIC = "public"  # anyone: log in and out, the API's schema and docs
LOGIN = "login"  # the browser's pages: a session of a team member (anonymous → the login page)
API = "api"  # /api/v1/: a bearer token or a session (anonymous → 401 JSON)
ADMIN = "admin"  # Django's admin, staff only
OPERATOR = "operator"  # Plimsoll's own /metrics: a bearer token, or a scrape from an allowed address
TOKEN = "token"  # a secret link (share link, invitation): whoever holds it; an unknown token reveals nothing

UI_TENANT = """
'' projects/ projects/new/ projects/<uuid:code>/ projects/<uuid:code>/edit/ projects/<uuid:code>/delete/
projects/<uuid:code>/environments/new/ projects/<uuid:code>/testcases/new/ projects/<uuid:code>/plans/new/
projects/<uuid:code>/plans/preview/ environments/<uuid:code>/ environments/<uuid:code>/edit/
environments/<uuid:code>/delete/ environments/<uuid:code>/verify/ testcases/<uuid:code>/ testcases/<uuid:code>/edit/
testcases/<uuid:code>/delete/ capacity/
testcases/<uuid:code>/steps/new/ testcases/<uuid:code>/try/ testcases/<uuid:code>/data-set/
testcases/<uuid:code>/data-set/mode/
testcases/<uuid:code>/data-set/delete/ steps/<uuid:code>/edit/ steps/<uuid:code>/delete/
steps/<uuid:code>/move/<str:direction>/ plans/<uuid:code>/ plans/<uuid:code>/edit/ plans/<uuid:code>/delete/
plans/<uuid:code>/mix/add/ mix/<id:pk>/ mix/<id:pk>/delete/ mix/<id:pk>/move/<str:direction>/ runs/
runs/<uuid:code>/ runs/<uuid:code>/series.json runs/<uuid:code>/detail.json runs/<uuid:code>/stop/
projects/<uuid:code>/runs/ projects/<uuid:code>/compare/curves.json
plans/<uuid:code>/run/ environments/<uuid:code>/changes/new/ changes/<uuid:code>/ changes/<uuid:code>/apply/
changes/<uuid:code>/prometheus/
environments/<uuid:code>/measurements/new/ measurements/<uuid:code>/delete/ runs/<uuid:code>/include/
plans/<uuid:code>/trials/ trialsets/<uuid:code>/ trialsets/<uuid:code>/stop/ projects/<uuid:code>/experiments/
projects/<uuid:code>/experiments/new/ experiments/<uuid:code>/ experiments/<uuid:code>/start/
experiments/<uuid:code>/confirm/ experiments/<uuid:code>/stop/ projects/<uuid:code>/compare/
environments/<uuid:code>/journey/ environments/<uuid:code>/journey.json projects/<uuid:code>/journey/
projects/<uuid:code>/journey.json teams/ teams/<uuid:code>/members/add/ teams/<uuid:code>/members/<id:user_id>/role/
teams/<uuid:code>/members/<id:user_id>/remove/ tokens/ tokens/<id:token_id>/revoke/
projects/<uuid:code>/shared-links/ projects/<uuid:code>/shared-links/new/ projects/<uuid:code>/shared-links/setting/
shared-links/<uuid:code>/revoke/ projects/<uuid:code>/testcases/import-har/
projects/<uuid:code>/testcases/import-har/<str:token>/ environments/<uuid:code>/import-results/
environments/<uuid:code>/trialsets/from-runs/
teams/<uuid:code>/invitations/ teams/<uuid:code>/invitations/<id:pk>/revoke/ runs/<uuid:code>/servers.json
projects/<uuid:code>/schedules/ projects/<uuid:code>/schedules/new/ projects/<uuid:code>/schedules/preview/
schedules/<uuid:code>/ schedules/<uuid:code>/toggle/ schedules/<uuid:code>/delete/ schedules/<uuid:code>/baseline/
runs/<uuid:code>/accept/ runs/<uuid:code>/protocols.json
projects/<uuid:code>/notifications/ projects/<uuid:code>/notifications/new/ channels/<uuid:code>/test/
channels/<uuid:code>/delete/ channels/<uuid:code>/edit/
"""
PUBLIC_PAGES = """
password-reset/ password-reset/sent/ password-reset/<uidb64>/<token>/ password-reset/done/ signup/
"""
TOKEN_ROUTES = """
s/<str:token>/ s/<str:token>/runs/<uuid:run_code>/series.json s/<str:token>/runs/<uuid:run_code>/detail.json
s/<str:token>/journey.json s/<str:token>/runs/<uuid:run_code>/protocols.json
invitations/<str:token>/ mail-addresses/confirm/<str:token>/
"""
API_ROUTES = """
api/v1/^experiments/$ api/v1/^experiments/(?P<code>[^/]+)/$ api/v1/^experiments/(?P<code>[^/]+)/start/$
api/v1/^experiments/(?P<code>[^/]+)/confirm/$ api/v1/^experiments/(?P<code>[^/]+)/stop/$
api/v1/^tuning-changes/(?P<code>[^/]+)/revert/$ api/v1/^tuning-changes/(?P<code>[^/]+)/prometheus/$
api/v1/^projects/(?P<code>[^/]+)/compare/$
api/v1/^projects/(?P<code>[^/]+)/journey/$ api/v1/^environments/(?P<code>[^/]+)/journey/$
api/v1/^environments/(?P<code>[^/]+)/verify/$
api/v1/plans/<str:code>/trials/ api/v1/^trial-sets/$ api/v1/^trial-sets/(?P<code>[^/]+)/$
api/v1/^trial-sets/(?P<code>[^/]+)/stop/$
api/v1/^teams/(?P<code>[^/]+)/members/$ api/v1/^teams/(?P<code>[^/]+)/members/(?P<username>[^/]+)/$
api/v1/^tuning-changes/$ api/v1/^tuning-changes/(?P<code>[^/]+)/$ api/v1/^tuning-changes/(?P<code>[^/]+)/apply/$
api/v1/^measurements/$ api/v1/^measurements/(?P<code>[^/]+)/$
api/v1/^projects/$ api/v1/^projects/(?P<code>[^/]+)/$ api/v1/^environments/$ api/v1/^environments/(?P<code>[^/]+)/$
api/v1/^test-cases/$ api/v1/^test-cases/(?P<code>[^/]+)/$ api/v1/^test-cases/(?P<code>[^/]+)/data-set/$
api/v1/^test-cases/(?P<code>[^/]+)/try/$
api/v1/^plans/$ api/v1/^plans/(?P<code>[^/]+)/$
api/v1/plans/<str:code>/runs/ api/v1/plans/<str:code>/baseline/ api/v1/plans/<str:code>/change-points/
api/v1/runs/<str:code>/junit.xml api/v1/runs/<str:code>/protocols.csv api/v1/^runs/(?P<code>[^/]+)/protocols/$
api/v1/runs/<str:code>/pages.csv api/v1/runs/<str:code>/levels.csv
api/v1/runs/<str:code>/series.csv api/v1/runs/<str:code>/summary.json api/v1/^runs/$ api/v1/^runs/(?P<code>[^/]+)/$
api/v1/^runs/(?P<code>[^/]+)/errors/$ api/v1/^runs/(?P<code>[^/]+)/pages/$ api/v1/^runs/(?P<code>[^/]+)/series/$
api/v1/^runs/(?P<code>[^/]+)/shards/$ api/v1/^runs/(?P<code>[^/]+)/stop/$ api/v1/^runs/(?P<code>[^/]+)/accept/$
api/v1/^teams/$
api/v1/^teams/(?P<code>[^/]+)/$ api/v1/^tokens/$ api/v1/^tokens/(?P<id>[^/]+)/$
api/v1/^teams/(?P<code>[^/]+)/invitations/$ api/v1/^teams/(?P<code>[^/]+)/invitations/(?P<invitation_id>[^/]+)/$
api/v1/^share-links/$ api/v1/^share-links/(?P<code>[^/]+)/$
api/v1/^annotations/$ api/v1/grafana/ api/v1/grafana/annotations
api/v1/^schedules/$ api/v1/^schedules/(?P<code>[^/]+)/$ api/v1/^schedules/(?P<code>[^/]+)/fires/$
api/v1/^channels/$ api/v1/^channels/(?P<code>[^/]+)/$ api/v1/^channels/(?P<code>[^/]+)/deliveries/$
api/v1/environments/<str:code>/result-imports/ api/v1/projects/<str:code>/har-import/
api/v1/^result-imports/$ api/v1/^result-imports/(?P<code>[^/]+)/$ api/v1/^har-imports/(?P<code>[^/]+)/$
api/v1/test-cases/<str:code>/steps/ api/v1/test-cases/<str:code>/steps/<str:step>/
api/v1/test-cases/<str:code>/steps/<str:step>/move/ api/v1/runs/<str:code>/include/
"""

ROUTES = {
    "login/": PUBLIC,
    "favicon.ico": PUBLIC,  # a redirect to the static icon
    "logout/": PUBLIC,  # POST only
    "api/v1/schema/": PUBLIC,
    "api/v1/docs/": PUBLIC,
    "admin/…": ADMIN,
    "metrics": OPERATOR,
    **{("" if r == "''" else r): LOGIN for r in UI_TENANT.split()},
    **dict.fromkeys(API_ROUTES.split(), API),
    **dict.fromkeys(PUBLIC_PAGES.split(), PUBLIC),
    **dict.fromkeys(TOKEN_ROUTES.split(), TOKEN),
}


def project_routes(patterns=None, prefix=""):
    for p in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(p, URLResolver):
            if str(p.pattern).startswith("admin/"):
                yield "admin/…"
                continue
            yield from project_routes(p.url_patterns, prefix + str(p.pattern))
        else:
            yield prefix + str(p.pattern)


def concrete(route: str) -> str:
    """A URL for ``route`` with made-up parameters (nothing exists under them)."""
    path = route.replace("^", "").replace("$", "")
    path = re.sub(r"<uuid:\w+>|<str:code>|\(\?P<code>[^)]+\)", str(uuid.uuid4()), path)
    path = re.sub(r"<uuid:\w+>", str(uuid.uuid4()), path)
    path = re.sub(r"<id:\w+>|\(\?P<(?:id|invitation_id)>[^)]+\)", "1", path)
    path = re.sub(r"\(\?P<username>[^)]+\)", "alice", path)
    return "/" + re.sub(r"<str:\w+>", "up", path)


def test_every_route_is_classified():
    routes = list(dict.fromkeys(project_routes()))
    unclassified = [r for r in routes if r not in ROUTES]
    assert not unclassified, f"classify these routes in {__name__}.ROUTES: {unclassified}"
    gone = set(ROUTES) - set(routes)
    assert not gone, f"routes classified but gone: {gone}"


@pytest.mark.parametrize("route", [r for r, kind in ROUTES.items() if kind == LOGIN])
def test_browser_pages_send_anonymous_visitors_to_log_in(client, route):
    response = client.get(concrete(route))
    assert response.status_code == 302 and response["Location"].startswith("/login/"), route


@pytest.mark.parametrize("route", [r for r, kind in ROUTES.items() if kind == API])
@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_api_routes_answer_anonymous_callers_401_or_405(client, route, method):
    response = getattr(client, method)(concrete(route))
    # 405 for a method the route does not have; never data, never a redirect to an HTML page
    assert response.status_code in (401, 405), (route, method, response.status_code)
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize("route", [r for r, kind in ROUTES.items() if kind == PUBLIC])
def test_public_pages_answer_anonymous_visitors(client, route, settings):
    settings.PLIMSOLL_SIGNUP = True  # off by default unless DEBUG (issue 30)
    assert client.get(concrete(route)).status_code in ((301, 200, 405) if route == "favicon.ico" else (200, 405))


@pytest.mark.parametrize("route", [r for r, kind in ROUTES.items() if kind == OPERATOR])
def test_operator_routes_refuse_a_visitor_from_elsewhere(client, route):
    response = client.get(concrete(route), REMOTE_ADDR="192.0.2.7")
    assert response.status_code == 403, (route, response.status_code)
    assert b"plimsoll_" not in response.content


@pytest.mark.parametrize("route", [r for r, kind in ROUTES.items() if kind == TOKEN])
def test_secret_links_with_an_unknown_token_reveal_nothing(client, route):
    response = client.get(concrete(route))
    # gone (share links: the same page for unknown, expired and revoked) or not found (invitations)
    assert response.status_code in (404, 410), (route, response.status_code)
    assert b"Intranet" not in response.content and b"alice" not in response.content
