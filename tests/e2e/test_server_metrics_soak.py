"""The token-cache story seen from the server: a soak with the cache uncapped, and the hint that names it.

The run is the uncapped soak of test_soak_degradation.py (tests/e2e/soak.py), run once per
session on a demo target of its own, whose cache starts empty and is fed by that run alone:
20 users without think time for 38 s, with the target's /metrics scraped every 3 s, so the
cache passes 10,500 entries (the pressure set there) and its clean-ups stall the pages
part-way through.
"""

import pytest

from portal.runs.models import Run
from tests.e2e.soak import PRESSURE_ENTRIES

pytestmark = [pytest.mark.e2e]


def test_an_uncapped_token_cache_is_named_by_the_hint(uncapped_soak):
    run = uncapped_soak
    assert run.status == Run.Status.FINISHED, (run.status, run.error_message)
    assert run.served["token_cache_entries"] > PRESSURE_ENTRIES  # the story happened

    hints = run.servers["hints"]
    print(hints)
    growing = [h for h in hints if h["kind"] == "growing"]
    assert any(h["text"].startswith("demo: Token cache entries grew from") for h in growing), hints
    assert "software" not in [h["kind"] for h in hints] and "hardware" not in [h["kind"] for h in hints]
