"""Long-poll slots (portal/api/longpoll.py) when the shared cache that counts them fails.

A process lets half its threads long-poll. The slots are counted in the process and, per token and per
account, in the shared cache (Redis). A cache error while taking or giving back a slot must not cost
the process a slot for good: a few Redis blips would otherwise leave it answering every long-poll at
once ("capped") until restarted.
"""

import uuid

import pytest

from portal.api import longpoll
from tests.processes import free_port


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


def test_a_cache_error_when_taking_a_slot_answers_at_once_and_costs_the_process_nothing(caches):
    use_live, use_dead = caches
    # given: the shared cache is down
    use_dead()

    # when: more long-polls than the process has slots arrive
    taken = [longpoll.acquire(f"token-{n}", 5) for n in range(5)]

    # then: each answers at once (no slot), and once the cache is back both of the process's slots are free
    assert taken == [None] * 5
    use_live()
    slots = [longpoll.acquire(f"token-{n}", 5) for n in range(3)]
    assert slots[0] is not None and slots[1] is not None and slots[2] is None
    for slot in slots[:2]:
        slot.release()


def test_a_cache_error_when_giving_a_slot_back_still_frees_the_processs_slot(caches):
    use_live, use_dead = caches
    # given: both of the process's slots held
    slots = [longpoll.acquire(f"token-{n}", 5) for n in range(2)]
    assert None not in slots and longpoll.acquire("token-9", 5) is None

    # when: they are given back while the shared cache is down (the shared count expires with its TTL)
    use_dead()
    for slot in slots:
        slot.release()

    # then: the process may long-poll again
    use_live()
    again = [longpoll.acquire(f"token-{n}", 5) for n in (10, 11)]
    assert None not in again
    for slot in again:
        slot.release()
