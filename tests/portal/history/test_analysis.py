"""The analysis core of the results history: improvement, capacity, degradation."""

import math
import random

import pytest

from portal.stats.analysis import (
    BETTER,
    WITHIN_NOISE,
    WORSE,
    Level,
    Thresholds,
    batch_means,
    capacity,
    compare,
    degradation,
    drift_per_hour,
    format_value,
    headline,
    knee_sentence,
    t_critical,
)

# The TFS trial set (seed 004): field index off vs on, 3 trials each, seconds.
TFS_OFF_MS = [14200.0, 11000.0, 10100.0]
TFS_ON_MS = [3950.0, 3900.0, 4200.0]


# ------------------------------------------------------------------ t quantiles


@pytest.mark.parametrize(
    ("confidence", "df", "expected"),
    [
        (0.95, 1, 12.706),
        (0.95, 2, 4.303),
        (0.95, 4, 2.776),
        (0.95, 10, 2.228),
        (0.95, 30, 2.042),
        (0.95, 1e5, 1.960),
        (0.95, math.inf, 1.960),
        (0.99, 1, 63.657),
        (0.99, 2, 9.925),
        (0.99, 10, 3.169),
        (0.99, 30, 2.750),
        (0.99, math.inf, 2.576),
    ],
)
def test_t_critical_matches_published_tables(confidence, df, expected):
    assert t_critical(confidence, df) == pytest.approx(expected, abs=5e-4)


def test_t_critical_accepts_fractional_df_between_neighbours():
    assert t_critical(0.95, 2) > t_critical(0.95, 2.5) > t_critical(0.95, 3)


@pytest.mark.parametrize(("confidence", "df"), [(0, 3), (1, 3), (0.95, 0), (0.95, -1)])
def test_t_critical_rejects_nonsense(confidence, df):
    with pytest.raises(ValueError):
        t_critical(confidence, df)


# ------------------------------------------------------------------ compare


def test_compare_tfs_trials_is_better_with_welch_interval():
    c = compare(TFS_OFF_MS, TFS_ON_MS, unit="ms")
    assert c.before_mean == pytest.approx(11766.667, abs=1e-3)
    assert c.after_mean == pytest.approx(4016.667, abs=1e-3)
    assert c.speedup == pytest.approx(11766.667 / 4016.667, rel=1e-6)  # 2.93×
    assert c.difference == pytest.approx(-7750.0)
    assert c.method == "welch"
    # Welch–Satterthwaite: the "off" side dominates, so df ≈ n_off − 1 = 2.
    assert c.df == pytest.approx(2.022, abs=1e-3)
    assert c.noise == pytest.approx(t_critical(0.95, c.df) * 1247.5, rel=1e-3)
    assert c.ci_low < c.ci_high < 0
    assert c.ci_high - c.ci_low == pytest.approx(2 * c.noise)
    assert c.verdict == BETTER and c.improved
    assert c.basis == "3 trials each; the difference is 1.5× the spread between trials (±5.31 s at 95 %)"


def test_compare_reduction_pct_and_speedup_for_lower_is_better():
    c = compare([27.0, 28.0, 29.0], [20.0, 21.0, 22.0])
    assert c.reduction_pct == pytest.approx(25.0)
    assert c.speedup == pytest.approx(28 / 21)
    assert c.verdict == BETTER


def test_compare_worse_has_negative_reduction():
    c = compare([20.0, 21.0, 22.0], [27.0, 28.0, 29.0])
    assert c.reduction_pct == pytest.approx(-(28 - 21) / 21 * 100)
    assert c.speedup == pytest.approx(21 / 28)
    assert c.verdict == WORSE and not c.improved


def test_a_side_at_zero_has_no_speedup_not_zero_times():
    # an error rate going 0 % -> 20 % is worse, but not "0.00x" faster; 20 % -> 0 % is not "infinitely" faster
    worse = compare([0.0, 0.0, 0.0], [19.0, 20.0, 21.0])
    assert worse.speedup is None and worse.verdict == WORSE
    better = compare([19.0, 20.0, 21.0], [0.0, 0.0, 0.0])
    assert better.speedup is None and better.verdict == BETTER
    assert compare([0.0, 0.0], [5.0, 6.0], lower_is_better=False).speedup is None


def test_compare_higher_is_better_for_throughput():
    c = compare([40.0, 41.0, 39.0], [52.0, 53.0, 51.0], lower_is_better=False)
    assert c.speedup == pytest.approx(52 / 40)
    assert c.reduction_pct == pytest.approx(30.0)
    assert c.verdict == BETTER
    worse = compare([52.0, 53.0, 51.0], [40.0, 41.0, 39.0], lower_is_better=False)
    assert worse.verdict == WORSE and worse.reduction_pct < 0


def test_compare_overlapping_trials_are_within_noise():
    c = compare([400.0, 425.0, 411.0], [390.0, 420.0, 405.0], unit="ms")
    assert c.ci_low < 0 < c.ci_high
    assert c.verdict == WITHIN_NOISE
    assert c.basis.endswith("so it could be noise")


def test_compare_higher_confidence_widens_the_interval():
    c95 = compare(TFS_OFF_MS, TFS_ON_MS)
    c99 = compare(TFS_OFF_MS, TFS_ON_MS, confidence=0.99)
    assert c99.noise > c95.noise
    assert c99.verdict == WITHIN_NOISE  # df ≈ 2: 9.9 × 1247 ms spans 0
    assert "at 99 %" in c99.basis


def test_compare_unequal_counts_and_one_side_without_spread():
    c = compare([100.0, 100.0, 100.0], [80.0, 82.0, 78.0, 81.0, 79.0])
    assert c.method == "welch"
    assert c.df == pytest.approx(4.0)  # only the "after" side has variance
    assert c.basis.startswith("3 trials before, 5 after;")
    assert c.verdict == BETTER


def test_compare_single_runs_use_the_tolerance():
    c = compare([28.0], [21.0])
    assert c.method == "tolerance"
    assert c.noise is None and c.ci_low is None and c.df is None
    assert c.verdict == BETTER
    assert c.reduction_pct == pytest.approx(25.0)
    assert "one value on a side" in c.basis and "5 % tolerance" in c.basis
    small = compare([412.0], [405.0])
    assert small.verdict == WITHIN_NOISE  # 1.7 % < 5 %
    assert compare([412.0], [405.0], tolerance_pct=1).verdict == BETTER


def test_compare_zero_spread_on_both_sides_uses_the_tolerance():
    c = compare([100.0, 100.0], [120.0, 120.0, 120.0])
    assert c.method == "tolerance"
    assert c.verdict == WORSE
    assert "no spread to measure" in c.basis


@pytest.mark.parametrize(("before", "after"), [([], [1.0]), ([1.0], []), ([1.0, math.nan], [1.0])])
def test_compare_rejects_empty_or_non_finite(before, after):
    with pytest.raises(ValueError):
        compare(before, after)


# ------------------------------------------------------------------ batch means


def test_batch_means_splits_evenly_and_drops_none():
    series = [float(i) for i in range(100)]
    series[5] = None
    means = batch_means(series, batches=10)
    assert len(means) == 10
    assert means[-1] == pytest.approx(sum(range(90, 100)) / 10)
    assert sum(means) / len(means) == pytest.approx(sum(v for v in series if v is not None) / 99, rel=1e-2)


def test_batch_means_use_every_value_with_uneven_sizes():
    means = batch_means([1.0] * 7 + [2.0] * 8, batches=3)
    assert len(means) == 3
    assert means[0] == 1.0 and means[-1] == 2.0


@pytest.mark.parametrize(("n", "expected"), [(19, 9), (5, 2), (2, 2), (20, 10)])
def test_batch_means_makes_fewer_batches_for_short_series(n, expected):
    assert len(batch_means([1.0] * n, batches=10)) == expected


def test_batch_means_needs_two_values():
    with pytest.raises(ValueError):
        batch_means([1.0, None])


def test_batch_means_feed_compare_for_two_single_runs():
    rng = random.Random(4)

    def run(level):
        # AR(1) noise: consecutive seconds are correlated, as in a real run.
        out, x = [], 0.0
        for _ in range(600):
            x = 0.9 * x + rng.gauss(0, 20)
            out.append(level + x)
        return out

    faster = compare(batch_means(run(500)), batch_means(run(400)), samples="batches", unit="ms")
    assert faster.verdict == BETTER and faster.n_before == faster.n_after == 10
    assert "between batches" in faster.basis
    same = compare(batch_means(run(500)), batch_means(run(500)), samples="batches")
    assert same.verdict == WITHIN_NOISE


# ------------------------------------------------------------------ headline


def test_headline_well_beyond_noise():
    c = compare([11200.0, 11800.0, 12400.0], [3900.0, 4000.0, 4100.0], unit="ms")
    assert headline("Enable -T1118", "APD", c, "ms") == (
        "Enable -T1118: APD 11.8 s → 4 s (2.95× faster), well beyond the noise between trials (±1.44 s)"
    )


def test_headline_beyond_noise_for_tfs():
    c = compare(TFS_OFF_MS, TFS_ON_MS)
    assert headline("Field index on", "APD", c, "ms") == (
        "Field index on: APD 11.8 s → 4.02 s (2.93× faster), beyond the noise between trials (±5.31 s)"
    )


def test_headline_within_noise():
    c = compare([400.0, 425.0, 411.0], [390.0, 420.0, 405.0])
    assert (
        headline("Add index", "APD", c, "ms")
        == "Add index: APD 412 ms → 405 ms, within the noise between trials (±31.7 ms)"
    )


def test_headline_worse_says_slower():
    c = compare([1000.0, 1010.0, 990.0], [1400.0, 1410.0, 1390.0])
    text = headline("New ORM", "APD", c, "ms")
    assert text == "New ORM: APD 1 s → 1.4 s (1.4× slower), well beyond the noise between trials (±0.0227 s)"


def test_headline_throughput_says_higher():
    c = compare([40.0, 41.0, 39.0], [52.0, 53.0, 51.0], lower_is_better=False)
    assert headline("Web garden", "throughput", c, "pages/s") == (
        "Web garden: throughput 40 pages/s → 52 pages/s (1.3× higher), "
        "well beyond the noise between trials (±2.27 pages/s)"
    )


def test_headline_without_noise_names_the_tolerance():
    c = compare([28.0], [21.0])
    assert headline("Cache", "APD", c, "ms") == (
        "Cache: APD 28 ms → 21 ms (1.33× faster), beyond the 5 % tolerance (one value on a side, so no noise estimate)"
    )
    c = compare([412.0], [405.0])
    assert "within the 5 % tolerance" in headline("Add index", "APD", c, "ms")


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (412.0, "ms", "412 ms"),
        (11766.7, "ms", "11.8 s"),
        (4.567, "ms", "4.57 ms"),
        (30.0, "ms", "30 ms"),
        (3.0, "", "3"),
    ],
)
def test_format_value(value, unit, expected):
    assert format_value(value, unit) == expected


# ------------------------------------------------------------------ capacity


def _lv(users, apd, pages, errors=0.0, p95=None):
    return Level(
        users=users, apd_ms=apd, p95_ms=p95 if p95 is not None else apd * 2, pages_per_s=pages, error_rate_pct=errors
    )


def test_capacity_is_last_level_before_the_first_failure():
    levels = [_lv(400, 900, 20), _lv(100, 500, 5), _lv(200, 600, 10), _lv(800, 2500, 24), _lv(1600, 1800, 25)]
    result = capacity(levels, Thresholds(max_apd_ms=2000, max_error_rate_pct=1))
    assert result.capacity_users == 400
    assert result.capacity_level.users == 400
    assert result.first_failure_users == 800
    # 1600 passes the APD threshold again, but it is above a failure: not capacity.
    assert result.broken == {800: ["max_apd_ms"]}


def test_capacity_none_when_the_lowest_level_fails():
    result = capacity([_lv(100, 500, 5, errors=3.0), _lv(200, 600, 10)], Thresholds(max_error_rate_pct=1))
    assert result.capacity_users is None and result.capacity_level is None
    assert result.first_failure_users == 100


def test_capacity_all_levels_hold():
    result = capacity([_lv(100, 500, 5), _lv(200, 600, 10)], Thresholds(max_p95_ms=5000, min_pages_per_s=1))
    assert result.capacity_users == 200 and result.first_failure_users is None and result.broken == {}


def test_capacity_checks_every_threshold():
    level = Level(users=100, apd_ms=300, p95_ms=900, pages_per_s=4, error_rate_pct=2)
    t = Thresholds(max_apd_ms=200, max_p95_ms=800, max_error_rate_pct=1, min_pages_per_s=5)
    assert t.broken(level) == ["max_apd_ms", "max_p95_ms", "max_error_rate_pct", "min_pages_per_s"]
    assert Thresholds().broken(level) == []


def test_capacity_breaks_on_the_stream_websocket_and_protocol_thresholds_and_on_their_absence():
    level = Level(users=100, apd_ms=300, p95_ms=900, pages_per_s=4, error_rate_pct=0, ttfe_p95_ms=850, rtt_p95_ms=40)
    t = Thresholds(max_ttfe_p95_ms=800, max_rtt_p95_ms=50, max_gap_p95_ms=100, min_h2_share_pct=90)
    # TTFE over its limit; no gap and no h2 share measured: a limit cannot hold on nothing; the round trip holds
    assert t.broken(level) == ["max_ttfe_p95_ms", "max_gap_p95_ms", "min_h2_share_pct"]
    assert Thresholds(max_ttfe_p95_ms=900, max_rtt_p95_ms=40).broken(level) == []
    levels = [
        Level(users=u, apd_ms=100, p95_ms=200, pages_per_s=u, error_rate_pct=0, ttfe_p95_ms=ttfe)
        for u, ttfe in ((10, 90), (20, 150), (40, 300))
    ]
    result = capacity(levels, Thresholds(max_apd_ms=1000, max_ttfe_p95_ms=200))
    assert (result.capacity_users, result.first_failure_users) == (20, 40)
    assert result.broken == {40: ["max_ttfe_p95_ms"]}


def test_knee_where_throughput_stops_growing():
    # ×2 users: pages ×2, ×1.9, then ×1.2 (gain 0.2 / 1.0 = 0.2 < 0.5): knee at 400.
    levels = [_lv(100, 500, 10), _lv(200, 500, 20), _lv(400, 550, 38), _lv(800, 1200, 45.6)]
    assert capacity(levels, Thresholds()).knee_users == 400


def test_no_knee_while_throughput_keeps_growing():
    levels = [_lv(100, 500, 10), _lv(200, 500, 19), _lv(300, 500, 26)]  # gains 0.9/1.0 and 0.37/0.5
    assert capacity(levels, Thresholds()).knee_users is None


def test_knee_gain_is_adjustable_and_needs_two_levels():
    levels = [_lv(100, 500, 10), _lv(200, 500, 16)]  # gain 0.6 of proportional
    assert capacity(levels, Thresholds()).knee_users is None
    assert capacity(levels, Thresholds(), knee_gain=0.8).knee_users == 100
    assert capacity([_lv(100, 500, 10)], Thresholds()).knee_users is None
    assert capacity([], Thresholds()).capacity_users is None


def test_throughput_falling_is_a_knee():
    assert capacity([_lv(100, 500, 10), _lv(200, 900, 8)], Thresholds()).knee_users == 100


def test_the_knee_sentence_says_what_the_rule_measured():
    # given: issue 28's figures: +30 % from 8 to 16 users, +4.5 % more to 24 (the model put the peak at 22)
    pages = {4: 5.5, 8: 10.0, 16: 13.0, 24: 13.585}
    levels = [_lv(u, 500, x) for u, x in pages.items()]

    knee = capacity(levels, Thresholds()).knee_users
    sentence = knee_sentence(list(pages.items()), knee)

    # then: 8 users is the knee by the rule (30 % < half of +100 %), and the words say that, not "stops growing"
    assert knee == 8
    assert sentence == (
        "After 8 users (the knee) throughput grows less than half as fast as the users: "
        "+30 % from 8 to 16 users (+100 % users)."
    )
    assert "stops growing" not in sentence


def test_the_knee_sentence_says_stops_growing_only_when_it_did():
    assert knee_sentence([(100, 10.0), (200, 9.8)], 100) == (
        "Throughput stops growing after 100 users (the knee): −2 % from 100 to 200 users."
    )
    assert knee_sentence([(100, 10.0), (200, 19.0), (300, 26.0)], None) == (
        "Throughput grows at least half as fast as the users up to 300 users: no knee within these levels."
    )


def test_capacity_rejects_duplicate_levels():
    with pytest.raises(ValueError):
        capacity([_lv(100, 500, 10), _lv(100, 600, 11)], Thresholds())


# ------------------------------------------------------------------ degradation

RAMP_S = 120
RUN_S = 7200


def _noisy(rng, level, n, sd):
    return [level + rng.gauss(0, sd) for _ in range(n)]


def _run(seed, *, drop_at=None, apd_rise_at=None):
    """A 2 h run: 2 min ramp, 100 pages/s at ±3, APD 300 ms at ±15."""
    rng = random.Random(seed)
    tp = [100.0 * t / RAMP_S for t in range(RAMP_S)] + _noisy(rng, 100, RUN_S - RAMP_S, 3)
    apd = [50.0 + 250.0 * t / RAMP_S for t in range(RAMP_S)] + _noisy(rng, 300, RUN_S - RAMP_S, 15)
    if drop_at is not None:
        for t in range(drop_at, RUN_S):
            tp[t] = 50 + rng.gauss(0, 3)
    if apd_rise_at is not None:
        for t in range(apd_rise_at, RUN_S):
            apd[t] = 600 + rng.gauss(0, 15)
    return tp, apd


def test_throughput_drop_after_80_minutes_is_found():
    tp, apd = _run(1, drop_at=4800)
    d = degradation(tp, apd, start=RAMP_S)
    assert d.degraded and d.kind == "throughput drop"
    assert abs(d.onset_s - 4800) <= 10
    assert d.throughput_onset_s == d.onset_s and d.apd_onset_s is None
    assert d.steady_throughput == pytest.approx(100, abs=1)
    assert d.steady_apd_ms == pytest.approx(300, abs=5)
    assert d.steady_window == (RAMP_S, RAMP_S + 300)
    assert not d.oscillation  # one sustained drop is one excursion


def test_apd_rise_is_found_and_the_earliest_kind_wins():
    tp, apd = _run(2, drop_at=5000, apd_rise_at=3000)
    d = degradation(tp, apd, start=RAMP_S)
    assert d.kind == "APD rise"
    assert abs(d.onset_s - 3000) <= 10
    assert abs(d.throughput_onset_s - 5000) <= 10


def test_single_second_dips_and_short_stalls_are_not_degradation():
    tp, apd = _run(3)
    for t in range(RAMP_S + 400, RUN_S, 37):
        tp[t] = 0.0
        apd[t] = 5000.0
    for t in range(3000, 3040):  # a 40 s stall: shorter than sustain_s
        tp[t] = 10.0
    d = degradation(tp, apd, start=RAMP_S)
    assert not d.degraded and d.onset_s is None and d.kind is None


def test_flat_noisy_run_has_no_degradation_or_oscillation():
    tp, apd = _run(4)
    d = degradation(tp, apd, start=RAMP_S)
    assert not d.degraded
    assert not d.oscillation and d.excursions == 0
    assert abs(d.drift_ms_per_hour) < 1


def test_missing_seconds_are_ignored():
    tp, apd = _run(5, drop_at=4800)
    for t in range(1000, 1100):
        tp[t] = None
        apd[t] = None
    d = degradation(tp, apd, start=RAMP_S)
    assert abs(d.onset_s - 4800) <= 10


def test_square_wave_throughput_oscillates():
    # 30 s at 130 pages/s, 30 s at 70: 20 excursions per 10 min.
    tp = [130.0 if (t // 30) % 2 == 0 else 70.0 for t in range(3600)]
    apd = [300.0] * 3600
    d = degradation(tp, apd, start=0)
    assert d.oscillation
    assert d.excursions_per_10_min > 4


def test_slow_square_wave_is_not_oscillation():
    # One swing every 10 min: a slow cycle, not oscillation.
    tp = [100.0 if (t // 600) % 2 == 0 else 60.0 for t in range(3600)]
    d = degradation(tp, [300.0] * 3600, start=0)
    assert not d.oscillation
    assert d.degraded and d.kind == "throughput drop" and d.onset_s == 600


def test_short_run_uses_the_first_third_as_steady_state():
    rng = random.Random(6)
    tp = _noisy(rng, 100, 300, 2) + _noisy(rng, 40, 300, 2)
    d = degradation(tp, [300.0] * 600, start=0)
    assert d.steady_window == (0, 200)
    assert d.steady_throughput == pytest.approx(100, abs=1)
    assert abs(d.onset_s - 300) <= 10


def test_degradation_rejects_negative_start():
    with pytest.raises(ValueError):
        degradation([1.0], [1.0], start=-1)


def test_drift_per_hour_recovers_the_slope():
    rng = random.Random(7)
    ramp = [None] * RAMP_S
    apd = ramp + [200 + 0.01 * t + rng.gauss(0, 5) for t in range(RAMP_S, 4 * 3600)]  # +36 ms/h
    for t in range(2000, 2100):
        apd[t] = None
    assert drift_per_hour(apd, RAMP_S) == pytest.approx(36.0, rel=0.01)
    d = degradation([100.0] * len(apd), apd, start=RAMP_S)
    assert d.drift_ms_per_hour == pytest.approx(36.0, rel=0.01)


def test_drift_per_hour_needs_two_points():
    assert drift_per_hour([None, 5.0], 0) is None
    assert drift_per_hour([], 0) is None
    assert drift_per_hour([1.0, 3.0], 0) == pytest.approx(7200.0)


def test_a_knee_at_one_user_reads_in_the_singular():
    from portal.stats.analysis import knee_sentence

    flat = knee_sentence([(1, 10.0), (2, 10.0), (4, 10.0)], 1)
    grows = knee_sentence([(1, 10.0), (2, 12.0), (4, 13.0)], 1)

    assert flat.startswith("Throughput stops growing after 1 user (the knee)")
    assert grows.startswith("After 1 user (the knee) throughput")
    assert "1 users" not in flat + grows
