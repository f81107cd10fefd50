"""Long-poll slots (portal/api/longpoll.py): per process, per account, per token, counted in the real cache.

A process lets half its threads long-poll; over the whole site an account holds at most
PLIMSOLL_LONG_POLLS_PER_USER long-polls (tokens are free to make) and a token PLIMSOLL_LONG_POLLS_PER_TOKEN.
A long-poll over a limit is answered at once with the current state. A cache error while taking or giving
back a slot must not cost the process a slot for good: a few Redis blips would otherwise leave it answering
every long-poll at once ("capped") until restarted.
"""

import time
import uuid

import pytest

from portal.accounts.services import token_create
from portal.api import longpoll
from tests.processes import free_port

from .conftest import bearer


@pytest.fixture
def caches(settings):
    """(use_live, use_dead): the tests' own cache (a fresh key prefix), or a Redis nobody listens on."""
    live = {"default": {**settings.CACHES["default"], "KEY_PREFIX": f"slots-{uuid.uuid4().hex[:8]}"}}
    dead = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        }
    }
    settings.PLIMSOLL_LONG_POLLS_PER_PROCESS = 2

    def use(caches):
        settings.CACHES = caches

    use(live)
    return lambda: use(live), lambda: use(dead)


def take(user_id: int, token_id: int | None = None) -> longpoll.Slot | None:
    return longpoll.acquire(user_id=user_id, token_id=token_id, wait_s=5)


def release(slots) -> None:
    for slot in slots:
        if slot is not None:
            slot.release()


def test_an_account_holds_its_cap_however_many_tokens_it_has(caches, settings):
    settings.PLIMSOLL_LONG_POLLS_PER_PROCESS = 8  # the account's cap binds, not the process's
    # when: one account long-polls through five tokens, then another account once
    mine = [take(1, token_id=n) for n in range(5)]
    theirs = take(2, token_id=99)
    try:
        # then: two of the account's wait, the rest answer at once; the other account is not held back
        assert sum(slot is not None for slot in mine) == 2 and theirs is not None
    finally:
        release([*mine, theirs])
    # and the account's slots come back when its long-polls end
    again = [take(1, token_id=7), take(1)]
    assert None not in again
    release(again)


def test_a_token_holds_its_own_cap_within_its_accounts(caches, settings):
    settings.PLIMSOLL_LONG_POLLS_PER_PROCESS = 8
    settings.PLIMSOLL_LONG_POLLS_PER_USER = 5
    slots = [take(1, token_id=1) for _ in range(4)]
    other_token = take(1, token_id=2)
    try:
        assert sum(slot is not None for slot in slots) == 2 and other_token is not None
    finally:
        release([*slots, other_token])


def test_the_sites_total_caps_long_polls_over_every_process_when_set(caches, settings):
    settings.PLIMSOLL_LONG_POLLS_PER_PROCESS = 8
    settings.PLIMSOLL_LONG_POLLS_TOTAL = 3
    # when: five accounts long-poll once each
    slots = [take(n, token_id=n) for n in range(5)]
    try:
        # then: three wait, the others answer at once
        assert sum(slot is not None for slot in slots) == 3
    finally:
        release(slots)
    again = take(9, token_id=9)
    assert again is not None
    release([again])


def test_a_cache_error_when_taking_a_slot_answers_at_once_and_costs_the_process_nothing(caches):
    use_live, use_dead = caches
    # given: the shared cache is down
    use_dead()

    # when: more long-polls than the process has slots arrive
    taken = [take(n, token_id=n) for n in range(5)]

    # then: each answers at once (no slot), and once the cache is back both of the process's slots are free
    assert taken == [None] * 5
    use_live()
    slots = [take(n, token_id=n) for n in range(3)]
    try:
        assert slots[0] is not None and slots[1] is not None and slots[2] is None
    finally:
        release(slots)


def test_a_cache_error_when_giving_a_slot_back_still_frees_the_processs_slot(caches):
    use_live, use_dead = caches
    # given: both of the process's slots held
    slots = [take(n, token_id=n) for n in range(2)]
    assert None not in slots and take(9) is None

    # when: they are given back while the shared cache is down (the shared counts expire with their TTL)
    use_dead()
    release(slots)

    # then: the process may long-poll again
    use_live()
    again = [take(10), take(11)]
    assert None not in again
    release(again)


@pytest.mark.django_db
def test_over_its_accounts_cap_a_token_gets_the_current_state_at_once(caches, settings, alice, team, active_run):
    # given: alice's account holds its two long-polls (through other tokens)
    settings.PLIMSOLL_LONG_POLLS_PER_PROCESS = 8
    held = [take(alice.pk, token_id=-1), take(alice.pk, token_id=-2)]
    secret = token_create(user=alice, team=team, name="pipeline", scope="read")[1]
    try:
        # when: a fresh token of hers long-polls the running run for 30 s
        started = time.monotonic()
        response = bearer(secret).get(f"/api/v1/runs/{active_run.code}/?wait=30")
        took = time.monotonic() - started
    finally:
        release(held)

    # then: the current state at once, marked capped, with when to ask again
    assert response.status_code == 200 and response.json()["status"] == "running"
    assert response["X-Plimsoll-Wait"] == "capped" and response["Retry-After"] == str(longpoll.RETRY_AFTER_S)
    assert took < 5


@pytest.mark.django_db
def test_a_long_poll_reads_only_the_runs_status_while_it_waits(caches, alice, active_run):
    # given: a running run, whose row carries its plan's snapshot (kilobytes of JSON)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from .conftest import session

    # when: a long-poll waits 1.6 s (three reads at 0.5 s) for it
    with CaptureQueriesContext(connection) as queries:
        response = session(alice).get(f"/api/v1/runs/{active_run.code}/?wait=1.6")

    # then: the run's whole row is read twice (to check it, to answer), the waits read its status only
    assert response.status_code == 200 and response.json()["status"] == "running"
    run_reads = [q["sql"] for q in queries if 'FROM "runs_run"' in q["sql"]]
    whole = [sql for sql in run_reads if "plan_snapshot" in sql]
    assert len(whole) == 2, run_reads
    assert len(run_reads) - len(whole) >= 3
