"""The statistics (evolm.stats) against published or hand-computed values (and statsmodels / SciPy when installed)."""

from __future__ import annotations

import math

import pytest

from evolm.stats import mean_interval, newcombe_difference, sample_interval, t95, welch_difference, wilson


def test_wilson_known_values():
    assert wilson(0.8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)  # 8/10
    assert wilson(0.0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)  # never collapses to a point at 0
    lo, hi = wilson(1.0, 5)
    assert hi == 1.0 and lo == pytest.approx(0.5655, abs=1e-4)


def test_wilson_matches_statsmodels():
    sm = pytest.importorskip("statsmodels.stats.proportion")
    for k, n in ((8, 10), (15, 41), (3.5, 7)):  # k may be fractional: a tie counts 1/2
        assert wilson(k / n, n) == pytest.approx(sm.proportion_confint(k, n, method="wilson"), abs=1e-9)


def test_no_interval_for_unusable_inputs():
    assert wilson(1.2, 10) is None and wilson(0.5, 0) is None and wilson(math.nan, 5) is None
    assert mean_interval(0.5, 0.1, 1) is None and mean_interval(0.5, -0.1, 10) is None
    assert sample_interval([0.4]) == (0.4, None) and math.isnan(sample_interval([])[0])
    assert newcombe_difference(0.5, 10, 0.7, 0) is None and welch_difference(0.1, 0.1, 1, 0.2, 0.1, 10) is None


def test_t_quantiles():
    assert t95(1) == pytest.approx(12.7062, abs=1e-4) and t95(9) == pytest.approx(2.2622, abs=1e-4)
    assert t95(30) == pytest.approx(2.0423, abs=1e-4)
    assert t95(60) == pytest.approx(2.0003, abs=1e-4) and t95(1e6) == pytest.approx(1.95996, abs=1e-5)
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 17, 30, 31, 45, 200):
        assert t95(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-4)


def test_mean_intervals_by_hand():
    # 0.5 ± t(9) * 0.2 / sqrt(10) = 0.5 ± 2.2622 * 0.063246
    assert mean_interval(0.5, 0.2, 10) == pytest.approx((0.35693, 0.64307), abs=1e-5)
    # [1, 2, 3]: mean 2, sample sd 1, t(2) = 4.3027: 2 ± 4.3027 / sqrt(3)
    mean, ci = sample_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and ci == pytest.approx((2 - 2.48417, 2 + 2.48417), abs=1e-4)


def test_differences():
    # Newcombe (1998), Statistics in Medicine 17:873, table II example (a): 56/70 - 48/80, method 10
    assert newcombe_difference(48 / 80, 80, 56 / 70, 70) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    # equal stds and n: Welch df = 18, t = 2.1009, se = sqrt(2 * 0.04 / 10)
    assert welch_difference(0.4, 0.2, 10, 0.6, 0.2, 10) == pytest.approx((0.2 - 0.18791, 0.2 + 0.18791), abs=1e-4)
    assert welch_difference(0.4, 0.0, 10, 0.6, 0.0, 10) == pytest.approx((0.2, 0.2))


def test_sign_tests_against_hand_computed_binomial_tails():
    from evolm.stats import sign_p, sign_p_worse, sign_test

    # 12 of 15 pairs one way: P(X >= 12) = (C(15,12) + C(15,13) + C(15,14) + C(15,15)) / 2**15 = 576 / 32768
    assert sign_p_worse(12, 3) == pytest.approx(576 / 32768)
    assert sign_p(12, 3) == pytest.approx(2 * 576 / 32768)  # two-sided: both tails of a symmetric binomial
    assert sign_p(3, 12) == sign_p(12, 3) and sign_p(0, 0) == 1.0 and sign_p(2, 2) == 1.0
    assert sign_test([3, 2, 5, 1, 7], [1, 1, 4, 1, 9]) == (3, 1, pytest.approx(0.625))  # the tie (1, 1) dropped


def test_bootstrap_interval_of_a_mean_is_seeded_and_covers_it():
    from evolm.stats import bootstrap_mean

    xs = [0.0, 0.5, 1.0, 1.0, 0.0, 1.0, 0.5, 1.0, 0.0, 1.0]
    lo, hi = bootstrap_mean(xs)
    assert lo < sum(xs) / len(xs) < hi and 0.0 <= lo and hi <= 1.0
    assert bootstrap_mean(xs) == (lo, hi) and bootstrap_mean(xs, seed=1) != (lo, hi)  # the seed decides the draws
    assert bootstrap_mean([0.5] * 4) == (0.5, 0.5) and all(math.isnan(v) for v in bootstrap_mean([]))
