"""The whole API, tested from its own schema by schemathesis against a live server.

Every operation gets generated requests (valid and invalid); every answer must be below 500,
have a documented status and content type, and match its documented schema.
"""

import http.cookiejar
import socket
import zlib

import pytest
import requests
import schemathesis
from django.test.testcases import QuietWSGIRequestHandler
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi import checks as openapi_checks

from portal.accounts.services import token_create

CHECKS = [
    schemathesis.checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
]


@pytest.fixture(autouse=True)
def no_throttling(monkeypatch):
    """Hundreds of requests a minute from one token: every operation must be reached, not answered 429.

    No rate at all (as in the malformed-request walk): a rate that is never reached still counted each of the
    walk's ~5,000 requests in the cache (a locked file read and written, or a Redis script), a tenth of the
    live server's time; the limit itself is tested in tests/portal/api/test_throttle_shared.py and test_tokens.py."""
    from portal.api.throttling import TokenRateThrottle

    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"token": None})


@pytest.fixture
def api_schema(live_server, transactional_db):
    return schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema/?format=json")


@pytest.fixture
def write_token(alice, team, finished_run):
    """A write token of the team that has a finished run (so lists are not empty)."""
    return token_create(user=alice, team=team, name="schemathesis", scope="write")[1]


@pytest.fixture
def api_session(monkeypatch):
    """One HTTP session for a test's requests, its connections kept alive: schemathesis otherwise makes a new
    session and connection for each of its thousands (connecting, closing, reading the environment's proxy
    settings again). The live server's handler writes an answer's headers and body apart: without TCP_NODELAY
    each answer after a connection's first waited for the client's delayed ACK (~40 ms; part 1 took 227 s
    instead of 123), so its connections get it; and a buffer (``wbufsize``) so that an answer's status line,
    headers and body leave in one write, not in about eight (each a system call, a packet and a wake-up of
    this thread, which parses what arrived and waits again). ``trust_env`` off: loopback only, never a proxy.
    It keeps no cookie from an answer, so each request carries only what its case sends, as before."""
    handle = QuietWSGIRequestHandler.setup

    def setup(self):
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        handle(self)

    monkeypatch.setattr(QuietWSGIRequestHandler, "setup", setup)
    monkeypatch.setattr(QuietWSGIRequestHandler, "wbufsize", 1 << 16)  # flushed by wsgiref after each answer
    with requests.Session() as session:
        session.trust_env = False
        session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        yield session


schema = schemathesis.pytest.from_fixture("api_schema")
# The operations in four disjoint parts (by a stable hash of "METHOD /path"), four tests that cover
# every operation together: one test of them all took minutes on one xdist process while the other
# finished early; four parts share that work out.
PARTS = 4


def part(index):
    return schema.include(lambda ctx: zlib.crc32(ctx.operation.label.encode()) % PARTS == index).parametrize()


def check(case, live_server, write_token, session):
    case.call_and_validate(
        base_url=live_server.url, session=session, headers={"Authorization": f"Bearer {write_token}"}, checks=CHECKS
    )


@part(0)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_matches_its_schema_part_1(case, live_server, write_token, api_session):
    check(case, live_server, write_token, api_session)


@part(1)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_matches_its_schema_part_2(case, live_server, write_token, api_session):
    check(case, live_server, write_token, api_session)


@part(2)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_matches_its_schema_part_3(case, live_server, write_token, api_session):
    check(case, live_server, write_token, api_session)


@part(3)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_matches_its_schema_part_4(case, live_server, write_token, api_session):
    check(case, live_server, write_token, api_session)
