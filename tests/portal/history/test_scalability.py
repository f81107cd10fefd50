"""The Universal Scalability Law fitted to levels generated from known λ, σ and κ."""

import numpy as np
import pytest

from portal.stats import scalability

USERS = [1, 5, 10, 20, 40, 60, 80, 100]


def noisy(lam, sigma, kappa, *, seed, noise=0.02, users=USERS):
    """Throughput from the model with a 2 % relative noise, as levels of a real run have."""
    rng = np.random.default_rng(seed)
    n = np.asarray(users, dtype=float)
    return list(scalability.usl(n, lam, sigma, kappa) * (1 + rng.normal(0, noise, len(n))))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("lam", "sigma", "kappa"), [(50, 0.08, 0.0002), (20, 0.21, 0.0), (12, 0.02, 0.001)])
def test_known_parameters_are_recovered_within_their_intervals(lam, sigma, kappa, seed):
    m = scalability.fit(USERS, noisy(lam, sigma, kappa, seed=seed))

    assert m.fitted, m.reason
    assert m.lam_ci[0] <= lam <= m.lam_ci[1]
    assert m.sigma_ci[0] <= sigma <= m.sigma_ci[1]
    assert m.kappa_ci[0] <= kappa <= m.kappa_ci[1]
    assert m.r2 > 0.98
    assert len(m.predicted) == len(USERS)


def test_the_peak_is_where_the_law_puts_it():
    m = scalability.fit(USERS, list(scalability.usl(np.asarray(USERS, float), 50, 0.08, 0.0002)))

    assert m.peak_users == pytest.approx(np.sqrt((1 - 0.08) / 0.0002), rel=0.01)  # N* ≈ 67.8
    assert m.peak_throughput == pytest.approx(scalability.usl(m.peak_users, 50, 0.08, 0.0002), rel=0.01)


def test_contention_without_coherency_is_told_in_words():
    m = scalability.fit(USERS, noisy(20, 0.1, 0.0, seed=3))

    sentence = scalability.interpretation(m, USERS[-1])

    assert sentence.startswith(f"Contention σ = {m.sigma:.2g} dominates: a serialized step limits this system")
    assert 0.09 <= m.sigma <= 0.11
    assert f"to about {20 / 0.1 * (0.1 / m.sigma) * (m.lam / 20):,.0f} pages/s" in sentence  # λ/σ, near 200
    assert sentence.endswith("whatever the hardware; coherency κ is negligible.")


def test_coherency_that_dominates_is_told_in_words():
    m = scalability.fit(USERS, noisy(12, 0.0, 0.002, seed=4))

    sentence = scalability.interpretation(m, USERS[-1])

    assert sentence.startswith("Coherency κ = 0.002")
    assert "peak at about" in sentence and "more users make it slower" in sentence


def test_a_poor_fit_reports_no_model():
    # given: throughput that jumps up and down between levels: no curve describes it
    m = scalability.fit([10, 20, 30, 40, 50, 60], [100, 20, 150, 30, 160, 25])

    assert m.fitted is False and m.sigma is None
    assert m.reason.startswith("No model: the scalability curve fits these levels poorly (r² = ")
    assert scalability.interpretation(m, 60) == m.reason
    assert scalability.curve(m, 60) == []


def test_levels_short_of_saturation_say_so_instead_of_guessing():
    m = scalability.fit([5, 10, 20, 40], noisy(50, 0.001, 0.0, seed=1, users=[5, 10, 20, 40], noise=0.005))

    assert m.fitted is False and m.lam is not None
    assert m.sigma < 0.01  # kept only so that a comparison can say "σ fell to about 0"
    assert m.reason.startswith("The levels do not reach saturation: at 40 users the system still delivers")


def test_fewer_than_four_levels_have_no_model():
    m = scalability.fit([10, 20, 40], [50, 100, 190])
    assert m.fitted is False and "at least 4 measured levels" in m.reason


def test_the_curve_runs_past_the_last_level_marked_as_extrapolation():
    m = scalability.fit(USERS, noisy(50, 0.08, 0.0002, seed=0))

    curve = scalability.curve(m, 100)

    assert curve[0]["n"] == 1 and curve[-1]["n"] == 125
    assert all(p["extrapolated"] == (p["n"] > 100) for p in curve)
    assert any(p["extrapolated"] for p in curve) and not curve[0]["extrapolated"]


def test_littles_law_gives_the_concurrency_of_an_open_system():
    assert scalability.littles_law(200.0, 0.25) == 50.0


def test_a_change_that_removes_contention_is_named():
    before = {"sigma": 0.21, "kappa": 0.0001, "sigma_ci": [0.18, 0.24], "kappa_ci": [0.0, 0.0003]}
    after = {"sigma": 0.03, "kappa": 0.0001, "sigma_ci": [0.01, 0.05], "kappa_ci": [0.0, 0.0003]}

    assert scalability.change_in_words(before, after) == "σ fell from 0.21 to 0.03: the change removed contention."
    assert scalability.change_in_words(after, before) == "σ rose from 0.03 to 0.21: the change added contention."
    assert "within the models' uncertainty" in scalability.change_in_words(before, before)


# Issue 28 item 1: a resource with a fixed number of slots (a hard ceiling near 190 pages/s) over five levels.
CEILING_USERS = [2, 4, 6, 8, 10]
CEILING = [48.0, 97.0, 147.0, 191.0, 193.0]


def test_a_hard_ceiling_no_model_fits_prints_no_limit():
    m = scalability.fit(CEILING_USERS, CEILING)

    assert m.fitted is False and m.sigma is None and m.peak_throughput is None
    assert m.reason.startswith(
        "No model: throughput grows with the users up to about 192 pages/s, reached at 8 users, and stays there "
        "(191 to 193 pages/s) up to 10 users: a sharp ceiling, such as a pool or a fixed number of slots"
    )
    assert (m.ceiling, m.ceiling_users) == (192.0, 8.0)
    sentence = scalability.interpretation(m, CEILING_USERS[-1])
    assert sentence == m.reason and "serialized step limits" not in sentence
    assert scalability.curve(m, 10) == []


def test_the_summary_of_a_hard_ceiling_has_no_sigma_and_no_limit_but_the_measured_ceiling():
    from portal.runs.analysis import scalability_model

    m = scalability_model(
        [{"users": u, "pages_per_s": x, "apd_ms": 20.0} for u, x in zip(CEILING_USERS, CEILING, strict=True)]
    )

    assert m["fitted"] is False and m["linear"] is False
    assert m["sigma"] is None and m["peak_pages_per_s"] is None and m["predicted_pages_per_s"] == []
    assert (m["ceiling_pages_per_s"], m["ceiling_users"]) == (192.0, 8.0)
    assert m["sentence"] == m["reason"] and m["sentence"].startswith("No model:")


@pytest.mark.parametrize(
    ("users", "pages", "reached"),
    [
        ([2, 4, 6, 8, 10], [95.0, 190.0, 191.0, 190.0, 189.0], 4),  # read as κ: "more users make it slower"
        ([1, 3, 5, 7, 9], [48.0, 142.0, 191.0, 190.0, 189.0], 5),
        ([1, 2, 3, 4, 5, 6, 8, 10], [48.0, 95.0, 143.0, 190.0, 189.0, 191.0, 192.0, 192.0], 4),
    ],
)
def test_a_four_slot_ceiling_is_no_coherency_peak_that_falls(users, pages, reached):
    # given: 47.5 pages/s per slot, four slots: throughput rises to 4 users and stays flat after
    m = scalability.fit(users, pages)

    assert m.fitted is False and m.kappa is None and m.peak_users is None
    assert m.ceiling == pytest.approx(190.5, abs=1.5) and m.ceiling_users == reached, m.reason
    assert f"reached at {reached} users, and stays there" in m.reason
    assert "slower" not in scalability.interpretation(m, users[-1])


def test_flat_levels_above_one_user_are_a_ceiling_reached_before_them_not_sigma_1():
    # given: every level already past saturation: throughput flat at ~189 pages/s, noise only (r² ≈ 0)
    users, pages = [4, 8, 12, 16, 20], [191.0, 189.0, 190.0, 188.0, 188.0]

    m = scalability.fit(users, pages)

    assert m.fitted is False and m.sigma is None and m.r2 is None
    assert m.reason == (
        "No model: throughput is flat at about 189 pages/s (188 to 191 pages/s) from the lowest level, 4 users, "
        "to the highest, 20 users: every level was already at the system's ceiling, so the levels measure the "
        "ceiling but not what sets it (σ, κ). Add levels below 4 users to see where throughput stops growing."
    )
    assert "dominates" not in scalability.interpretation(m, 20)


def test_flat_levels_from_one_user_are_a_serialized_step_and_say_why_r2_is_low():
    # given: the demo's tempdb with one file: one user already keeps the one lock busy
    users, pages = [1, 2, 3, 4, 6, 8], [159.0, 165.0, 171.0, 168.0, 163.0, 170.0]

    m = scalability.fit(users, pages)

    assert m.fitted is True and m.sigma > 0.9 and m.r2 < scalability.MIN_R2
    assert 0.0 <= m.sigma_ci[0] <= m.sigma_ci[1] <= 1.0
    sentence = scalability.interpretation(m, users[-1])
    assert sentence.startswith(f"Contention σ = {m.sigma:.2g}: one user already gets most of what more users get")
    assert "limits this system to about 170 pages/s whatever the hardware" in sentence
    assert "dominates" not in sentence and f"r² is low ({m.r2:.2f}) because levels this close to flat" in sentence


def test_a_single_lock_that_one_user_nearly_fills_stays_a_serialized_step():
    # given: one user gets 150 pages/s of a 170 pages/s lock (its other work outside the lock)
    m = scalability.fit([1, 2, 3, 4, 6, 8], [150.0, 170.0, 171.0, 168.0, 169.0, 170.0])

    assert m.fitted is True and m.sigma > 0.8 and m.ceiling is None
    assert "a serialized step (one request at a time) limits" in scalability.interpretation(m, 8)


def test_a_jump_from_one_user_to_a_ceiling_is_the_measured_ceiling_not_a_limit_above_it():
    # given: 120 pages/s with one user, 170 from two up: the law's λ/σ would put the limit at 186
    m = scalability.fit([1, 2, 3, 4, 6, 8], [120.0, 170.0, 171.0, 168.0, 169.0, 170.0])

    assert m.fitted is False and (m.ceiling, m.ceiling_users) == (pytest.approx(169.6), 2.0)
    assert m.reason.startswith("No model: throughput grows with the users up to about 170 pages/s, reached at 2")


def test_growth_on_a_busy_machine_is_no_ceiling():
    # given: the demo's tempdb with 8 files on a busy machine (one e2e run): growing, unevenly, up to the top level
    m = scalability.fit([1, 2, 3, 4, 6, 8], [146.3, 240.3, 274.3, 281.3, 672.7, 807.3])

    assert m.ceiling is None and m.reason.startswith("The levels do not reach saturation")


def test_a_limit_in_words_is_the_peak_the_summary_gives():
    # given: σ dominates, and a κ told from 0 but negligible puts a peak past the last level
    m = scalability.fit(USERS, [19.8, 70.5, 104.9, 138.1, 164.1, 172.3, 176.3, 178.8])

    assert m.fitted and m.peak_users > 100 and m.lam / m.sigma > 200
    sentence = scalability.interpretation(m, 100)
    assert f"limits this system to about {m.peak_throughput:.0f} pages/s" in sentence  # 179, not λ/σ ≈ 207
    assert sentence.endswith("coherency κ is negligible.")


def test_a_coefficient_at_its_bound_reads_0_not_an_exponent():
    assert scalability._coefficient(8.4e-17) == "0"
    assert scalability._coefficient(0.00049) == "0.00049"
