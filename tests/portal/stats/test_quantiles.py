"""The sampling noise of a percentile (portal.stats.quantiles), shared by the verdicts and the comparisons."""

import math

import pytest

from portal.stats.quantiles import percentile_se


def test_a_p95s_standard_error_is_the_quantile_slope_times_the_binomial_spread_of_its_rank():
    # p90 = 180, p99 = 240 ms: the quantile function rises 60 ms over 0.09, 666.7 ms per unit of probability
    assert percentile_se(180.0, 240.0, 100) == pytest.approx(60 / 0.09 * math.sqrt(0.95 * 0.05 / 100))
    # four times the samples, half the error; a flat top (p99 = p90) has none
    assert percentile_se(180.0, 240.0, 400) == pytest.approx(percentile_se(180.0, 240.0, 100) / 2)
    assert percentile_se(200.0, 200.0, 100) == 0.0


def test_without_the_figures_there_is_no_error_to_give():
    assert percentile_se(None, 240.0, 100) is None
    assert percentile_se(180.0, None, 100) is None
    assert percentile_se(180.0, 240.0, 0) is None
