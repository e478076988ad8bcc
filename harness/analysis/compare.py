"""A/B comparison of two builds on one cell: numbers first, then one verdict with its reason.

The verdict rule (see docs/statistics.md for the measured trade-off):

* ``unstable`` first, when the data cannot carry a verdict: too few repetitions, too many throttled
  trials, a coefficient of variation over ``max_cv`` on either side, or no usable ratio.
* ``same`` when the whole bootstrap interval of the ratio lies inside ``1 ± noise``.
* ``regression`` / ``improvement`` when all three hold on one side: the Benjamini-Hochberg adjusted
  Mann-Whitney p is below ``alpha``; the interval lies wholly on that side of 1 (the direction is
  established); and the point estimate lies beyond the noise band (the size matters). With
  ``strict=True`` the whole interval must lie beyond the band instead of the point estimate.
* ``unstable`` otherwise, with the reason (not significant, interval straddles the band, ...).

Why not require the whole interval beyond the band by default: at 10 repetitions and 3% CV the
interval of a ratio of medians is about ±3.3% wide, so a real 5% drop clears a 3% band with its
whole interval only about a quarter of the time. The default rule flags it about 85% of the time
while keeping A/A false alarms near 1%; ``strict`` is there for "confirmed beyond the band".
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from harness.analysis import stats
from harness.errors import ConfigError
from harness.metrics import metric
from harness.units import pct

Verdict = Literal["regression", "improvement", "same", "unstable"]
K = TypeVar("K", bound=Hashable)

def higher_is_better(name: str) -> bool:
    """Direction of a known metric (``harness.metrics``); a ConfigError naming the known ones
    otherwise."""
    return metric(name).higher_is_better


@dataclass(frozen=True)
class Policy:
    """Thresholds of the verdict rule; defaults are the ones documented in docs/statistics.md."""

    higher_is_better: bool
    noise: float = 0.03
    min_reps: int = 3
    max_cv: float = 0.10
    alpha: float = 0.05
    max_throttled_fraction: float = 0.5
    strict: bool = False
    confidence: float = 0.95
    resamples: int = stats.DEFAULT_RESAMPLES
    seed: int = stats.DEFAULT_SEED

    def __post_init__(self) -> None:
        if not 0 <= self.noise < 1:
            raise ConfigError(f"noise band {self.noise!r} must be a fraction in [0, 1), e.g. 0.03")
        if self.min_reps < 2:
            raise ConfigError(f"min_reps {self.min_reps!r} must be at least 2")
        if not 0 < self.alpha < 1:
            raise ConfigError(f"alpha {self.alpha!r} must be in (0, 1), e.g. 0.05")


@dataclass(frozen=True)
class PairStatistics:
    """The numbers of one cell's baseline/candidate pair before any decision; ``p_value`` is the
    raw Mann-Whitney p. (Not ``harness.engines.base.Measurement``, one repetition of an engine.)"""

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    cliffs_delta: float
    cv_baseline: float
    cv_candidate: float
    n_baseline: int
    n_candidate: int
    throttled_baseline: int = 0
    throttled_candidate: int = 0


@dataclass(frozen=True)
class Comparison:
    """One cell's A/B result. ``ratio`` is median(candidate) / median(baseline).

    ``causes`` holds machine-readable codes behind an ``unstable`` verdict (``too_few_reps``,
    ``throttled``, ``no_ratio``, ``high_cv``, ``not_significant``, ``straddles_band``)
    so reports and gates need not parse ``reason``.
    """

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    p_adjusted: float
    cliffs_delta: float
    cv_baseline: float
    cv_candidate: float
    n_baseline: int
    n_candidate: int
    throttled_baseline: int
    throttled_candidate: int
    higher_is_better: bool
    noise: float
    verdict: Verdict
    reason: str
    causes: tuple[str, ...] = ()


def measure(
    baseline: ArrayLike,
    candidate: ArrayLike,
    policy: Policy,
    *,
    throttled_baseline: int = 0,
    throttled_candidate: int = 0,
    p_value: float | None = None,
    interval: stats.RatioInterval | None = None,
) -> PairStatistics:
    """Compute every number of one cell (``p_value``: its Mann-Whitney p, when the caller
    computed it with others, ``stats.mann_whitney_p_many``).

    A fresh generator seeded from the policy per cell keeps results independent of cell order.
    """
    base = stats.as_array(baseline)
    cand = stats.as_array(candidate)
    if interval is None:
        interval = stats.ratio_of_medians_ci(
            base,
            cand,
            confidence=policy.confidence,
            resamples=policy.resamples,
            rng=np.random.default_rng(policy.seed),
        )
    return PairStatistics(
        ratio=interval.ratio,
        ci_low=interval.low,
        ci_high=interval.high,
        p_value=stats.mann_whitney_p(base, cand) if p_value is None else p_value,
        cliffs_delta=stats.cliffs_delta(base, cand),
        cv_baseline=stats.coefficient_of_variation(base),
        cv_candidate=stats.coefficient_of_variation(cand),
        n_baseline=int(base.size),
        n_candidate=int(cand.size),
        throttled_baseline=throttled_baseline,
        throttled_candidate=throttled_candidate,
    )


def _summary(m: PairStatistics, p_adjusted: float) -> str:
    return (
        f"ratio {m.ratio:.3f} ({pct(m.ratio)}), 95% CI [{pct(m.ci_low)}, {pct(m.ci_high)}], "
        f"p_adj={p_adjusted:.3g}"
    )


def _throttle_note(m: PairStatistics) -> str:
    if not (m.throttled_baseline or m.throttled_candidate):
        return ""
    return (
        f"; excluded throttled trials: baseline {m.throttled_baseline}, "
        f"candidate {m.throttled_candidate}"
    )


def _data_problems(m: PairStatistics, policy: Policy) -> list[tuple[str, str]]:
    """Reasons the data cannot carry any verdict, as (cause code, sentence)."""
    problems: list[tuple[str, str]] = []
    if min(m.n_baseline, m.n_candidate) < policy.min_reps:
        problems.append(
            (
                "too_few_reps",
                f"too few repetitions (baseline {m.n_baseline}, candidate {m.n_candidate}; "
                f"need {policy.min_reps} on each side)",
            )
        )
    for side, n, throttled in (
        ("baseline", m.n_baseline, m.throttled_baseline),
        ("candidate", m.n_candidate, m.throttled_candidate),
    ):
        total = n + throttled
        if total and throttled / total > policy.max_throttled_fraction:
            problems.append(
                (
                    "throttled",
                    f"{throttled} of {total} {side} trials throttled (over "
                    f"{policy.max_throttled_fraction:.0%}); the rest is not a fair sample",
                )
            )
    if not problems and not math.isfinite(m.ratio):
        problems.append(("no_ratio", "no usable ratio (baseline median is not positive)"))
    low, high = 1.0 - policy.noise, 1.0 + policy.noise
    # Noise widens the interval, which the bootstrap already shows: when even the noisy interval
    # lies wholly beyond the band, the effect outweighs the noise and the CV does not veto it.
    clear = m.ci_high < low or m.ci_low > high
    for side, cv in (("baseline", m.cv_baseline), ("candidate", m.cv_candidate)):
        if math.isfinite(cv) and cv > policy.max_cv and not clear:
            problems.append(
                ("high_cv", f"{side} coefficient of variation {cv:.1%} over {policy.max_cv:.0%}")
            )
    return problems


def decide(m: PairStatistics, p_adjusted: float, policy: Policy) -> Comparison:
    """Turn one cell's numbers and its family-adjusted p-value into a verdict with its reason."""
    verdict: Verdict
    causes: list[str] = []
    problems = _data_problems(m, policy)
    low, high = 1.0 - policy.noise, 1.0 + policy.noise
    if problems:
        verdict = "unstable"
        causes = [code for code, _ in problems]
        reason = "; ".join(text for _, text in problems)
    elif low <= m.ci_low and m.ci_high <= high:
        verdict = "same"
        reason = f"whole interval within ±{policy.noise:.0%}: {_summary(m, p_adjusted)}"
    else:
        verdict, reason, causes = _directional(m, p_adjusted, policy)
        noisy = [f"{side} CV {cv:.0%}" for side, cv in
                 (("baseline", m.cv_baseline), ("candidate", m.cv_candidate))
                 if math.isfinite(cv) and cv > policy.max_cv]
        if noisy:
            reason += f" (noisy: {', '.join(noisy)}; the interval is still beyond the band)"
    return Comparison(
        ratio=m.ratio,
        ci_low=m.ci_low,
        ci_high=m.ci_high,
        p_value=m.p_value,
        p_adjusted=p_adjusted,
        cliffs_delta=m.cliffs_delta,
        cv_baseline=m.cv_baseline,
        cv_candidate=m.cv_candidate,
        n_baseline=m.n_baseline,
        n_candidate=m.n_candidate,
        throttled_baseline=m.throttled_baseline,
        throttled_candidate=m.throttled_candidate,
        higher_is_better=policy.higher_is_better,
        noise=policy.noise,
        verdict=verdict,
        reason=reason + _throttle_note(m),
        causes=tuple(causes),
    )


def _directional(
    m: PairStatistics, p_adjusted: float, policy: Policy
) -> tuple[Verdict, str, list[str]]:
    """Regression, improvement or unstable for a cell whose interval is not inside the band."""
    low, high = 1.0 - policy.noise, 1.0 + policy.noise
    summary = _summary(m, p_adjusted)
    significant = math.isfinite(p_adjusted) and p_adjusted < policy.alpha
    if m.ci_high < 1.0:
        side_beyond = (m.ci_high if policy.strict else m.ratio) < low
        direction = "lower"
    elif m.ci_low > 1.0:
        side_beyond = (m.ci_low if policy.strict else m.ratio) > high
        direction = "higher"
    else:
        causes = ["straddles_band"] + ([] if significant else ["not_significant"])
        return "unstable", f"interval includes no change: {summary}", causes
    good = (direction == "higher") == policy.higher_is_better
    causes = []
    if not significant:
        causes.append("not_significant")
    if not side_beyond:
        causes.append("straddles_band")
    if causes:
        what = "interval reaches into" if policy.strict else "estimate is within"
        texts = {
            "not_significant": f"not significant (p_adj ≥ {policy.alpha:g})",
            "straddles_band": f"{direction} but the {what} the ±{policy.noise:.0%} band",
        }
        return "unstable", "; ".join(texts[c] for c in causes) + f": {summary}", causes
    verdict: Verdict = "improvement" if good else "regression"
    return verdict, f"{direction} beyond ±{policy.noise:.0%}: {summary}", []


def compare_samples(
    baseline: ArrayLike,
    candidate: ArrayLike,
    *,
    higher_is_better: bool,
    noise: float = 0.03,
    min_reps: int = 3,
    max_cv: float = 0.10,
    alpha: float = 0.05,
    strict: bool = False,
    throttled_baseline: int = 0,
    throttled_candidate: int = 0,
    seed: int = stats.DEFAULT_SEED,
) -> Comparison:
    """Compare one cell on its own; with a family of one, the adjusted p equals the raw p.

    Throttled trials must already be excluded by the caller; their counts only explain the
    verdict (and make it ``unstable`` when more than half of a side was throttled).
    """
    policy = Policy(
        higher_is_better=higher_is_better,
        noise=noise,
        min_reps=min_reps,
        max_cv=max_cv,
        alpha=alpha,
        strict=strict,
        seed=seed,
    )
    m = measure(
        baseline,
        candidate,
        policy,
        throttled_baseline=throttled_baseline,
        throttled_candidate=throttled_candidate,
    )
    return decide(m, m.p_value, policy)


def compare_many(
    groups: Mapping[K, tuple[ArrayLike, ArrayLike]],
    *,
    higher_is_better: bool,
    noise: float = 0.03,
    min_reps: int = 3,
    max_cv: float = 0.10,
    alpha: float = 0.05,
    strict: bool = False,
    throttled: Mapping[K, tuple[int, int]] | None = None,
    seed: int = stats.DEFAULT_SEED,
) -> dict[K, Comparison]:
    """Compare every cell of one metric, Benjamini-Hochberg adjusting p across the cells given.

    The family is exactly the mapping passed in: call once per metric so that adding a metric
    does not change another metric's verdicts. ``throttled`` maps a key to the (baseline,
    candidate) counts of trials excluded for throttling.
    """
    policy = Policy(
        higher_is_better=higher_is_better,
        noise=noise,
        min_reps=min_reps,
        max_cv=max_cv,
        alpha=alpha,
        strict=strict,
        seed=seed,
    )
    counts = throttled or {}
    measured: dict[K, PairStatistics] = {}
    pairs = list(groups.values())
    p_values = stats.mann_whitney_p_many(pairs)
    intervals = stats.ratio_of_medians_ci_many(pairs, confidence=policy.confidence,
                                               resamples=policy.resamples, seed=policy.seed)
    for (key, (base, cand)), p_value, interval in zip(groups.items(), p_values, intervals,
                                                      strict=True):
        throttled_base, throttled_cand = _pair(counts.get(key))
        measured[key] = measure(
            base,
            cand,
            policy,
            throttled_baseline=throttled_base,
            throttled_candidate=throttled_cand,
            p_value=float(p_value),
            interval=interval,
        )
    keys = list(measured)
    adjusted = stats.benjamini_hochberg([measured[k].p_value for k in keys])
    return {k: decide(measured[k], float(p), policy) for k, p in zip(keys, adjusted, strict=True)}


def _pair(counts: tuple[int, int] | None) -> tuple[int, int]:
    return (0, 0) if counts is None else (int(counts[0]), int(counts[1]))
