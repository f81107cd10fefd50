"""The change point of a per-second series: a known break (a step or a slope) inside the interval."""

import numpy as np
import pytest

from portal.stats import changepoint

N, BREAK = 300, 150


def series(kind, *, seed, noise, ar=0.0, level=20.0):
    """Seconds 0–299: flat at `level`, then a step of +10 or a slope of +0.3 a second from BREAK, with noise.

    `ar` makes the noise autocorrelated (a slow second is followed by slow seconds), as real runs are.
    """
    rng = np.random.default_rng(seed)
    e = np.zeros(N)
    for i, z in enumerate(rng.normal(0, noise, N)):
        e[i] = (ar * e[i - 1] if i else 0.0) + z
    t = np.arange(N)
    drift = np.where(t >= BREAK, 10.0, 0.0) if kind == "step" else np.where(t >= BREAK, 0.3 * (t - BREAK), 0.0)
    return list(level + drift + e)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize(("kind", "noise", "ar"), [("step", 3.0, 0.0), ("slope", 3.0, 0.0), ("slope", 3.0, 0.5)])
def test_a_known_break_lies_inside_the_interval(kind, noise, ar, seed):
    cp = changepoint.find(range(N), series(kind, seed=seed, noise=noise, ar=ar))

    assert cp.low_s <= BREAK <= cp.high_s, cp
    assert cp.low_s <= cp.began_s <= cp.high_s
    assert cp.shape == kind
    assert abs(cp.began_s - BREAK) <= 30


def test_a_clean_step_is_placed_to_the_second():
    cp = changepoint.find(range(N), series("step", seed=0, noise=0.5))
    assert (cp.began_s, cp.low_s, cp.high_s, cp.shape) == (BREAK, BREAK, BREAK, "step")
    assert cp.before == pytest.approx(20, abs=0.2) and cp.after_start == pytest.approx(30, abs=0.3)


def test_a_drop_is_found_as_well_as_a_rise():
    values = [100 - v for v in series("step", seed=1, noise=3.0)]
    cp = changepoint.find(range(N), values)
    assert cp.low_s <= BREAK <= cp.high_s and cp.after_start < cp.before


def test_the_break_is_not_searched_after_the_limit_was_crossed():
    values = series("step", seed=2, noise=1.0)
    cp = changepoint.find(range(N), values, last_break=120)
    assert cp.began_s <= 120


def test_seconds_without_data_are_skipped_and_keep_their_time():
    values = series("step", seed=3, noise=1.0)
    for s in range(100, 140):
        values[s] = None
    cp = changepoint.find(range(N), values)
    assert cp.low_s <= BREAK <= cp.high_s


def test_too_few_seconds_have_no_change_point():
    assert changepoint.find(range(6), [1.0] * 6) is None


def test_the_cost_is_linear_in_the_seconds_of_a_48_hour_run():
    # 172,800 per-second points: vectorised prefix and suffix sums, no loop over candidates
    n = 48 * 3600
    values = np.random.default_rng(0).normal(100.0, 5.0, n)
    values[100_000:] -= 20.0
    cp = changepoint.find(range(n), values.tolist())
    assert cp.low_s <= 100_000 <= cp.high_s and cp.shape == "step"
