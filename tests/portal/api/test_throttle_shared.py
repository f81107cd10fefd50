"""The API's rate limit is one budget per token for the whole site, not per web process.

Each gunicorn worker is a process of its own; with a per-process cache a token could send the
limit to every worker. The counts live in the shared cache (Redis on the real stack, files on
the embedded default): checked here with two independent cache clients, and with a second
Python process that spends part of the budget.
"""

import json
import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.filebased import FileBasedCache
from django.core.cache.backends.redis import RedisCache

from portal.api.throttling import TokenRateThrottle

BASE_DIR = settings.BASE_DIR


def caller(token_pk: int):
    """What the throttle reads of a request: its token (the user only without one)."""
    return SimpleNamespace(auth=SimpleNamespace(pk=token_pk, prefix="plim_test"), user=None)


def throttle(cache, rate: str) -> TokenRateThrottle:
    t = TokenRateThrottle.__new__(TokenRateThrottle)
    t.cache = cache
    t.rate = rate
    t.num_requests, t.duration = t.parse_rate(rate)
    return t


def test_the_configured_cache_is_shared_between_processes():
    backend = caches["default"]
    if settings.CELERY_BROKER_URL.startswith("redis"):
        assert isinstance(backend, RedisCache)
    else:
        assert isinstance(backend, FileBasedCache)


@pytest.fixture
def two_clients(tmp_path):
    """Two cache clients with no state in common but the store itself (as two processes have)."""
    first, second = caches.create_connection("default"), caches.create_connection("default")
    assert first is not second
    return first, second


def test_two_clients_share_one_budget(two_clients):
    first, second = two_clients
    token = caller(uuid.uuid4().int % 10**9)
    a, b = throttle(first, "3/min"), throttle(second, "3/min")
    try:
        # when: the budget is spent through both
        allowed = [a.allow_request(token, None), b.allow_request(token, None), a.allow_request(token, None)]
        # then: either client refuses the fourth, and says how long to wait
        assert allowed == [True, True, True]
        assert b.allow_request(token, None) is False
        assert 0 < b.wait() <= 60
        # another token has its own budget
        assert a.allow_request(caller(token.auth.pk + 1), None) is True
    finally:
        first.delete_many([a.get_cache_key(token, None), a.get_cache_key(caller(token.auth.pk + 1), None)])


def test_another_process_spends_the_same_budget():
    token_pk = uuid.uuid4().int % 10**9
    child = f"""
import json, os, sys
import django
django.setup()
from django.conf import settings
settings.CACHES = json.loads(os.environ["PLIMSOLL_TEST_CACHES"])
from types import SimpleNamespace
from django.core.cache import caches
sys.path.insert(0, os.getcwd())
from tests.portal.api.test_throttle_shared import caller, throttle
t = throttle(caches["default"], "3/min")
print(json.dumps([t.allow_request(caller({token_pk}), None) for _ in range(2)]))
"""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PLIMSOLL_TEST_CACHES": json.dumps(settings.CACHES),
    }
    # when: another process sends two requests of a three-a-minute budget
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, True]

    # then: this process has one left
    here = throttle(caches["default"], "3/min")
    try:
        assert here.allow_request(caller(token_pk), None) is True
        assert here.allow_request(caller(token_pk), None) is False
    finally:
        caches["default"].delete(here.get_cache_key(caller(token_pk), None))


def test_the_embedded_default_shares_through_files(tmp_path):
    """Without Redis, the file cache under var/: two clients on one directory see one budget."""
    params = {"KEY_PREFIX": "t"}
    first, second = FileBasedCache(str(tmp_path), params), FileBasedCache(str(tmp_path), params)
    token = caller(7)
    a, b = throttle(first, "2/min"), throttle(second, "2/min")
    assert [a.allow_request(token, None), b.allow_request(token, None), a.allow_request(token, None)] == [
        True,
        True,
        False,
    ]
