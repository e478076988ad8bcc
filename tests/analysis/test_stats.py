"""The statistics primitives against known answers and brute-force references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.analysis import stats


def lognormal(rng: np.random.Generator, n: int, median: float, cv: float) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv**2))
    return median * np.exp(rng.normal(0.0, sigma, n))


def test_ratio_of_exact_scaling_is_the_scale_and_inside_its_interval() -> None:
    base = lognormal(np.random.default_rng(1), 15, 100.0, 0.03)
    result = stats.ratio_of_medians_ci(base, 0.9 * base)
    assert result.ratio == pytest.approx(0.9)
    assert result.low <= 0.9 <= result.high
    assert result.high - result.low > 0


def test_bootstrap_is_reproducible_with_a_seed_and_varies_without_the_same_seed() -> None:
    rng = np.random.default_rng(2)
    base, cand = lognormal(rng, 10, 100.0, 0.05), lognormal(rng, 10, 95.0, 0.05)
    first = stats.ratio_of_medians_ci(base, cand, rng=np.random.default_rng(7))
    again = stats.ratio_of_medians_ci(base, cand, rng=np.random.default_rng(7))
    other = stats.ratio_of_medians_ci(base, cand, rng=np.random.default_rng(8))
    assert first == again
    assert (first.low, first.high) != (other.low, other.high)


def test_bootstrap_interval_covers_the_true_ratio_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(3)
    trials = 300
    covered = 0
    for _ in range(trials):
        ci = stats.ratio_of_medians_ci(
            lognormal(rng, 20, 100.0, 0.05), lognormal(rng, 20, 93.0, 0.05), rng=rng, resamples=1000
        )
        covered += ci.low <= 0.93 <= ci.high
    # The percentile bootstrap of a median slightly under-covers at n=20; it must not be far off.
    assert 0.88 <= covered / trials <= 0.99


def test_ratio_is_nan_for_an_empty_side_or_a_zero_baseline() -> None:
    assert math.isnan(stats.ratio_of_medians_ci([], [1.0, 2.0]).ratio)
    assert math.isnan(stats.ratio_of_medians_ci([0.0, 0.0, 0.0], [1.0, 2.0]).ratio)
    assert stats.ratio_of_medians_ci([1.0, float("nan"), 1.0], [2.0, 2.0]).ratio == 2.0


def test_mann_whitney_matches_scipy_and_handles_ties_and_empties() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, 12), rng.normal(1, 1, 9)
    assert stats.mann_whitney_p(a, b) == pytest.approx(sps.mannwhitneyu(b, a).pvalue)
    assert stats.mann_whitney_p(a, b) == pytest.approx(stats.mann_whitney_p(b, a))
    assert stats.mann_whitney_p([5.0] * 4, [5.0] * 6) == 1.0
    assert math.isnan(stats.mann_whitney_p([], [1.0]))
    assert stats.mann_whitney_p(np.arange(10.0), np.arange(10.0) + 100) < 0.001


def test_benjamini_hochberg_known_example() -> None:
    adjusted = stats.benjamini_hochberg([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adjusted, [0.02, 0.04, 0.04, 0.02])


def test_benjamini_hochberg_matches_scipy_is_monotone_and_capped() -> None:
    p = np.random.default_rng(5).uniform(0, 1, 50) ** 2
    adjusted = stats.benjamini_hochberg(p)
    np.testing.assert_allclose(adjusted, sps.false_discovery_control(p, method="bh"))
    order = np.argsort(p)
    assert np.all(np.diff(adjusted[order]) >= 0)
    assert np.all(adjusted >= p)
    assert stats.benjamini_hochberg([0.9, 0.95, 0.99]).max() <= 1.0


def test_benjamini_hochberg_keeps_nan_out_of_the_family() -> None:
    adjusted = stats.benjamini_hochberg([0.01, float("nan"), 0.02])
    assert math.isnan(adjusted[1])
    np.testing.assert_allclose(adjusted[[0, 2]], [0.02, 0.02])
    assert np.all(np.isnan(stats.benjamini_hochberg([float("nan")])))


def test_cliffs_delta_matches_brute_force_with_ties() -> None:
    rng = np.random.default_rng(6)
    a, b = rng.integers(0, 6, 17).astype(float), rng.integers(1, 7, 11).astype(float)
    brute = np.sign(b[:, None] - a[None, :]).mean()
    assert stats.cliffs_delta(a, b) == pytest.approx(brute)


def test_cliffs_delta_extremes() -> None:
    assert stats.cliffs_delta([1.0, 2.0], [3.0, 4.0]) == 1.0
    assert stats.cliffs_delta([3.0, 4.0], [1.0, 2.0]) == -1.0
    assert stats.cliffs_delta([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert math.isnan(stats.cliffs_delta([], [1.0]))


def test_coefficient_of_variation() -> None:
    assert stats.coefficient_of_variation([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert stats.coefficient_of_variation([4.0, 4.0]) == 0.0
    assert math.isnan(stats.coefficient_of_variation([4.0]))
    assert math.isnan(stats.coefficient_of_variation([-1.0, 1.0]))


def test_welch_decides_constant_sides_explicitly() -> None:
    assert stats.welch_t_p([1.0, 1.0], [1.0, 1.0, 1.0]) == 1.0
    assert stats.welch_t_p([1.0, 1.0], [2.0, 2.0]) == 0.0
    assert math.isnan(stats.welch_t_p([1.0], [2.0, 3.0]))
    a, b = [1.0, 2.0, 3.0, 4.0], [2.5, 3.5, 4.5, 6.0]
    assert stats.welch_t_p(a, b) == pytest.approx(sps.ttest_ind(a, b, equal_var=False).pvalue)


def test_welch_is_scipys_welch_test_on_random_samples() -> None:
    """welch_t_p does scipy's arithmetic itself (scipy's wrapper cost 0.7 ms a call)."""
    rng = np.random.default_rng(7)
    for i in range(300):
        a = rng.normal(10, rng.random() * 2 + 0.01, int(rng.integers(2, 300)))
        b = rng.normal(10 + rng.random(), rng.random() + 0.01, int(rng.integers(2, 300)))
        if i % 3 == 0:
            b = np.round(b, 1)
        if i % 7 == 0:
            a = np.full(a.size, 10.0)  # one side constant
        want = float(sps.ttest_ind(a, b, equal_var=False).pvalue)
        assert stats.welch_t_p(a, b) == pytest.approx(want, rel=1e-11, abs=1e-300), i


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 24, 125, 126])
def test_resampled_medians_are_numpys_medians_to_the_bit(n: int) -> None:
    from harness.analysis.stats import resampled_medians

    rng = np.random.default_rng(n)
    for values in (rng.normal(10.0, 1.0, n), np.round(rng.normal(10.0, 1.0, n))):  # ties too
        draws = rng.integers(0, n, size=(300, n))
        assert np.array_equal(resampled_medians(values, draws),
                              np.median(values[draws], axis=1))


def test_batched_mann_whitney_p_values_are_the_one_by_one_values_to_the_bit() -> None:
    """Pairs of many sizes (the exact method up to 8, the asymptotic beyond), with and without
    ties, all-tied and empty sides, in one batch: each p is what a call of its own gives."""
    rng = np.random.default_rng(5)
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    for n_base, n_cand in ((3, 3), (3, 5), (8, 8), (9, 9), (12, 40), (1, 4)):
        for _ in range(20):
            pairs.append((rng.normal(10.0, 1.0, n_base), rng.normal(10.3, 1.0, n_cand)))
            pairs.append((np.round(rng.normal(10.0, 1.0, n_base)),  # ties in some rows
                          np.round(rng.normal(10.0, 1.0, n_cand))))
    pairs += [(np.full(3, 5.0), np.full(3, 5.0)), (np.array([]), np.ones(3)),
              (np.array([1.0, np.nan, 2.0]), np.array([3.0, 4.0, np.nan]))]
    batched = stats.mann_whitney_p_many(pairs)
    alone = np.array([stats.mann_whitney_p(b, c) for b, c in pairs])
    assert np.array_equal(batched, alone, equal_nan=True)
    assert np.isfinite(batched).sum() == len(pairs) - 1  # only the empty side has no p


def test_bulk_ratio_intervals_are_the_one_by_one_intervals_to_the_bit() -> None:
    """Cells of three to forty values, tied and untied, with a zero baseline, an empty side
    and a zero in some resamples' baselines: each interval is what its own call gives with a
    fresh generator, as ``compare.measure`` makes one."""
    rng = np.random.default_rng(9)
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    for n_base, n_cand in ((3, 3), (3, 3), (2, 5), (8, 8), (9, 12), (21, 21), (40, 7)):
        for _ in range(15):
            pairs.append((rng.normal(10.0, 1.0, n_base), rng.normal(10.3, 1.0, n_cand)))
            pairs.append((np.round(rng.normal(10.0, 1.0, n_base)),
                          np.round(rng.normal(10.0, 1.0, n_cand))))
    pairs += [(np.zeros(3), np.ones(3)), (np.array([]), np.ones(3)),
              (np.array([0.0, 0.0, 5.0, 6.0, 7.0]), np.ones(4))]
    bulk = stats.ratio_of_medians_ci_many(pairs, seed=3)
    for (base, cand), got in zip(pairs, bulk, strict=True):
        want = stats.ratio_of_medians_ci(base, cand, rng=np.random.default_rng(3))
        assert np.array_equal([got.ratio, got.low, got.high], [want.ratio, want.low, want.high],
                              equal_nan=True), (base, cand)
