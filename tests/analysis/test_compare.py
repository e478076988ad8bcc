"""Verdicts of the A/B comparison on data whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.compare import Policy, compare_many, compare_samples, higher_is_better
from harness.errors import ConfigError

# Ten repetitions spread evenly over ±4.5%: a coefficient of variation of 3.0%.
SPREAD = 1 + np.linspace(-0.045, 0.045, 10)


def lognormal(seed: int, n: int, median: float, cv: float) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv**2))
    return median * np.exp(np.random.default_rng(seed).normal(0.0, sigma, n))


def test_a_clear_throughput_drop_is_a_regression() -> None:
    c = compare_samples(
        lognormal(1, 10, 100, 0.02), lognormal(2, 10, 90, 0.02), higher_is_better=True
    )
    assert c.verdict == "regression"
    assert c.ratio == pytest.approx(0.9, abs=0.02)
    assert c.ci_high < 0.97
    assert c.p_value < 0.001
    assert c.p_adjusted == c.p_value
    assert c.cliffs_delta == -1.0
    assert (c.n_baseline, c.n_candidate) == (10, 10)
    assert c.causes == ()
    assert "lower beyond ±3%" in c.reason


def test_a_clear_throughput_gain_is_an_improvement() -> None:
    c = compare_samples(100 * SPREAD, 110 * SPREAD[::-1], higher_is_better=True)
    assert c.verdict == "improvement"
    assert c.ratio == pytest.approx(1.1)


@pytest.mark.parametrize(("factor", "verdict"), [(1.10, "regression"), (0.90, "improvement")])
def test_lower_is_better_flips_the_direction(factor: float, verdict: str) -> None:
    c = compare_samples(1000 * SPREAD, factor * 1000 * SPREAD[::-1], higher_is_better=False)
    assert c.verdict == verdict


def test_two_samples_of_one_tight_distribution_are_the_same() -> None:
    c = compare_samples(
        lognormal(3, 30, 100, 0.01), lognormal(4, 30, 100, 0.01), higher_is_better=True
    )
    assert c.verdict == "same"
    assert 0.97 <= c.ci_low <= c.ci_high <= 1.03


def test_too_few_repetitions_is_unstable_and_says_how_many() -> None:
    c = compare_samples([100.0, 101.0], [80.0, 81.0, 79.0], higher_is_better=True)
    assert c.verdict == "unstable"
    assert c.causes == ("too_few_reps",)
    assert "baseline 2, candidate 3" in c.reason


def test_an_empty_side_is_unstable_not_an_error() -> None:
    c = compare_samples([], [80.0, 81.0, 79.0], higher_is_better=True)
    assert c.verdict == "unstable"
    assert "too_few_reps" in c.causes
    assert math.isnan(c.ratio)


def test_high_coefficient_of_variation_is_unstable() -> None:
    c = compare_samples(
        lognormal(5, 10, 100, 0.2), lognormal(6, 10, 95, 0.02), higher_is_better=True
    )
    assert c.verdict == "unstable"
    assert "high_cv" in c.causes
    assert "baseline coefficient of variation" in c.reason


def test_an_effect_larger_than_the_noise_is_not_vetoed_by_a_high_cv() -> None:
    c = compare_samples(
        lognormal(5, 10, 100, 0.2), lognormal(6, 10, 30, 0.02), higher_is_better=True
    )
    assert c.ci_high < 0.97
    assert c.verdict == "regression"
    assert "noisy: baseline CV" in c.reason
    assert c.causes == ()


def test_mostly_throttled_side_is_unstable_and_a_few_throttled_are_only_explained() -> None:
    base, cand = 100 * SPREAD, 90 * SPREAD[::-1]
    mostly = compare_samples(base, cand, higher_is_better=True, throttled_candidate=11)
    assert mostly.verdict == "unstable"
    assert "throttled" in mostly.causes
    few = compare_samples(base, cand, higher_is_better=True, throttled_baseline=1)
    assert few.verdict == "regression"
    assert "excluded throttled trials: baseline 1, candidate 0" in few.reason


def test_a_small_change_in_wide_noise_is_unstable_not_significant() -> None:
    base = 100 * (1 + np.linspace(-0.04, 0.04, 10))
    c = compare_samples(base, 0.98 * base[::-1], higher_is_better=True)
    assert c.verdict == "unstable"
    assert c.ci_low < 1 < c.ci_high
    assert set(c.causes) == {"straddles_band", "not_significant"}


def test_strict_rule_needs_the_whole_interval_beyond_the_band() -> None:
    base, cand = 100 * SPREAD, 95 * SPREAD[::-1]
    default = compare_samples(base, cand, higher_is_better=True)
    strict = compare_samples(base, cand, higher_is_better=True, strict=True)
    assert default.verdict == "regression"
    assert default.ci_high > 0.97  # the interval reaches into the band ...
    assert strict.verdict == "unstable"  # ... so the strict rule does not call it
    assert strict.causes == ("straddles_band",)
    assert "interval reaches into" in strict.reason


def test_estimate_inside_the_band_is_not_a_regression_even_if_significant() -> None:
    base = 100 * (1 + np.linspace(-0.02, 0.02, 10))
    c = compare_samples(base, 0.975 * base[::-1], higher_is_better=True)
    assert c.p_value < 0.05
    assert c.ci_low < 0.97 < c.ci_high < 1.0
    assert c.verdict == "unstable"
    assert c.causes == ("straddles_band",)


def test_compare_many_adjusts_p_across_cells_and_can_demote_a_verdict() -> None:
    base = 100 * (1 + np.linspace(-0.03, 0.03, 8))
    mild = (base, 0.96 * base)
    alone = compare_samples(*mild, higher_is_better=True)
    assert alone.verdict == "regression"
    groups: dict[str, tuple[np.ndarray, np.ndarray]] = {"mild": mild}
    groups.update({f"null{i}": (base, base.copy()) for i in range(19)})
    family = compare_many(groups, higher_is_better=True)
    assert family["mild"].p_value == pytest.approx(alone.p_value)
    assert family["mild"].p_adjusted == pytest.approx(min(1.0, alone.p_value * 20))
    assert family["mild"].verdict == "unstable"
    assert "not_significant" in family["mild"].causes
    assert all(family[f"null{i}"].p_adjusted <= 1.0 for i in range(19))


def test_compare_many_results_do_not_depend_on_cell_order() -> None:
    cells = {k: (lognormal(10 + k, 8, 100, 0.04), lognormal(30 + k, 8, 97, 0.04)) for k in range(5)}
    forward = compare_many(cells, higher_is_better=True)
    backward = compare_many(dict(reversed(list(cells.items()))), higher_is_better=True)
    assert forward == backward


def test_compare_many_passes_throttled_counts_per_cell() -> None:
    cells = {"a": (100 * SPREAD, 90 * SPREAD), "b": (100 * SPREAD, 90 * SPREAD)}
    out = compare_many(cells, higher_is_better=True, throttled={"b": (0, 2)})
    assert (out["a"].throttled_candidate, out["b"].throttled_candidate) == (0, 2)
    assert "candidate 2" in out["b"].reason


def test_bad_policy_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="noise band"):
        Policy(higher_is_better=True, noise=3)
    with pytest.raises(ConfigError, match="min_reps"):
        Policy(higher_is_better=True, min_reps=1)
    with pytest.raises(ConfigError, match="alpha"):
        Policy(higher_is_better=True, alpha=0)


def test_metric_direction_lookup() -> None:
    assert higher_is_better("tg_tps") is True
    assert higher_is_better("peak_pss") is False
    with pytest.raises(ConfigError, match="unknown metric 'tps'"):
        higher_is_better("tps")
