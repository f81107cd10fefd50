import random
from collections import Counter

import pytest

from workers.engine.mix import Mix


def test_draws_follow_the_weights():
    mix = Mix(["home", "search", "upload"], [25, 15, 5])
    rng = random.Random(42)

    counts = Counter(mix.choose(rng) for _ in range(30_000))

    for i, name in enumerate(["home", "search", "upload"]):
        assert counts[name] / 30_000 == pytest.approx(mix.share(i), abs=0.02)


def test_a_seed_makes_the_sequence_reproducible():
    mix = Mix("abc", [1, 2, 3])

    first = [mix.choose(random.Random(1)) for _ in range(5)]
    again = [mix.choose(random.Random(1)) for _ in range(5)]

    assert first == again


def test_a_single_item_is_always_chosen():
    assert Mix(["only"], [7]).choose(random.Random()) == "only"


@pytest.mark.parametrize("weights", [[0, 1], [-1, 2], [1.5, 1], [1]])
def test_bad_weights_are_refused(weights):
    with pytest.raises(ValueError, match="mix"):
        Mix(["a", "b"], weights)
