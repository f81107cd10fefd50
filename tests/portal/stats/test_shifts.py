"""Persistent shifts over a plan's runs, on plain lists (portal/stats/shifts.py)."""

import numpy as np

from portal.stats.shifts import find


def noisy(n, seed, level=100.0, spread=0.05):
    return list(level * (1 + np.random.default_rng(seed).uniform(-spread, spread, n)))


def test_a_step_of_30_percent_is_one_shift_at_its_run():
    for seed in range(20):
        # given: 40 runs with ±5 % noise, 30 % slower from the 20th (index 19)
        values = noisy(40, seed)
        values[19:] = [v * 1.3 for v in values[19:]]
        # when
        found = find(values)
        # then
        assert [s.index for s in found] == [19], seed
        assert 25 < found[0].change_pct < 35 and found[0].p_value < 0.001


def test_a_flat_noisy_history_has_none():
    for seed in range(50):
        assert find(noisy(40, seed)) == [], seed


def test_a_shift_smaller_than_the_bar_is_left_out_however_certain():
    values = [100.0] * 20 + [105.0] * 20
    assert find(values) == []
    assert [s.index for s in find(values, min_change_pct=4)] == [20]


def test_two_steps_are_two_shifts_and_a_short_blip_is_none():
    values = noisy(60, 3)
    steps = [v * (1.0 if i < 20 else 1.4 if i < 40 else 0.9) for i, v in enumerate(values)]
    assert [s.index for s in find(steps)] == [20, 40]
    blip = noisy(40, 4)
    blip[20:23] = [v * 2 for v in blip[20:23]]  # three bad nights, then back: not a new level
    assert find(blip) == []


def test_an_error_rate_from_zero_is_judged_in_points():
    values = [0.0] * 15 + [2.0, 2.2, 1.9, 2.1, 2.0] * 3
    found = find(values, min_change_pct=None, min_change_abs=0.5)
    assert [(s.index, s.change_pct) for s in found] == [(15, None)]
    assert find([0.0] * 15 + [0.2, 0.1, 0.2, 0.3, 0.2] * 3, min_change_pct=None, min_change_abs=0.5) == []


def test_too_few_runs_say_nothing():
    assert find([100.0] * 5 + [200.0] * 4) == []


def test_a_page_four_times_slower_and_four_times_noisier_is_a_shift_on_a_ratio_scale():
    # measured on the demo target under load: the search page without its index, 5 nights each side
    values = [27.46, 26.56, 28.08, 33.94, 30.35, 154.73, 119.79, 110.23, 101.54, 113.51]
    # the after side's runs spread ±25 ms: on a linear scale Welch's p is only 5e-4, near the 1e-3 bar
    assert find(values)[0].p_value > 1e-4
    found = find(values, ratio=True)
    assert [s.index for s in found] == [5] and found[0].p_value < 1e-5
