"""Adaptive repetitions: a sequential A/B rule with error rates fixed in advance (issue 17).

A fixed number of repetitions cannot meet both targets of issue 9 (95% power on a 5% drop at
3% CV, at most 1% false alarms): at n=10 even the ideal z-test falls short (docs/statistics.md
§2). A sequential rule spends repetitions where they are needed: A/B pairs are added
(interleaved) one at a time, and after each pair :func:`next_step` says ``continue`` or gives a
verdict. Clear cases stop after a handful of pairs, borderline ones go on, and at the cap the
verdict is ``unstable`` with the reason it stopped.

Method: two one-sided Wald sequential probability ratio tests (the Sobel-Wald three-decision
procedure) on ``delta``, the difference of the two sides' robust means of log values, i.e. the
log of the ratio of their typical values:

* the regression SPRT tests H0 ``delta = 0`` against H1 ``delta = log(1 - effect)`` (5% slower
  for a higher-is-better metric), the improvement SPRT H0 against ``delta = -log(1 - effect)``;
* with ``z = D / se`` (D the estimated difference, se its standard error) and ``k = theta / se``
  (theta the effect on the log scale) the log-likelihood ratio of each SPRT is
  ``k * z_bad - k**2 / 2``, where ``z_bad`` is ``z`` signed so that the bad (or good) direction
  is positive: this is the exact LLR of the normal model on the sufficient statistic;
* Wald's bounds: ``upper = log((1 - beta) / alpha)`` (4.55 at alpha 1%, beta 5%) and
  ``lower = log(beta / (1 - alpha))`` (-2.99). ``regression`` when its LLR reaches the upper
  bound; ``improvement`` likewise; ``same`` when both LLRs are at or below the lower bound (the
  data reject a 5% change either way); ``continue`` otherwise, and ``unstable`` at the cap.

Wald's bounds keep the error rates at about alpha and beta (slightly below, because the LLR
overshoots the bound) however many looks are taken, which is why a sequential test can look
after every pair without the inflation of repeated significance tests. A cap truncates the test;
truncation only moves would-be verdicts to ``unstable``, so it cannot raise the false alarm rate.

Why these estimators (robust to throttled trials):

* the centre of each side is the 20% trimmed mean of the log values and its standard error is
  Yuen's, from the 20% winsorised variance: a slow throttled trial at the bottom is trimmed, so
  10% of trials running 20-40% slower barely move the estimate or the variance (a plain mean
  would drift by the outliers' share, a plain variance would explode);
* the variance is estimated, not known, so at small n a lucky small variance would make the
  LLR too large and the false alarms exceed alpha. The standard error is therefore widened by
  ``t_df(p) / z*``: the ratio of Student's to the normal quantile, with Yuen's Welch degrees of
  freedom, at ``z* = sqrt(2 * upper)`` (3.02 with the defaults, a tail of 0.13%), which is the
  smallest normal score that can cross the upper bound at all (``k * z - k**2 / 2 >= upper``
  needs ``z >= upper / k + k / 2 >= sqrt(2 * upper)``). So every look is calibrated where a
  false verdict would happen; the widening is 2.2x at 5 values per side and 1.08x at 30. Each
  side's winsorised standard deviation is also floored at ``min_cv`` (0.5%): no phone is
  quieter, and identical values must not give an infinite statistic;
* on logs, a ratio is a difference and lognormal throughput noise is symmetric.

Why not a group-sequential design with an alpha-spending function: it needs the looks planned in
advance and a maximum information level, i.e. a known variance; the SPRT needs neither and stops
as early as the data allow. The price is that its error rates are Wald's approximations, so
``scripts/bench_detector.py`` measures them (figure 6, docs/statistics.md §9).

Everything here is pure: a decision is a function of the samples and the rule only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats as sps

from harness.errors import ConfigError

Step = Literal["continue", "regression", "improvement", "same", "unstable"]
TRIM = 0.2


@dataclass(frozen=True)
class SequentialRule:
    """Parameters of the sequential rule; defaults are the ones documented in docs/statistics.md."""

    effect: float = 0.05  # minimum change of interest, as a fraction (5%)
    alpha: float = 0.01  # false regression (and, separately, false improvement) rate
    beta: float = 0.05  # missed 5% change rate: power 1 - beta
    min_n: int = 5  # values per side before any verdict
    max_n: int = 30  # cap per side: unstable beyond it
    higher_is_better: bool = True
    min_cv: float = 0.005  # floor of each side's robust standard deviation (log scale)

    def __post_init__(self) -> None:
        if not 0 < self.effect < 1:
            raise ConfigError(f"effect must be in (0, 1), got {self.effect}")
        if not 0 < self.alpha < 0.5 or not 0 < self.beta < 0.5:
            raise ConfigError(f"alpha and beta must be in (0, 0.5), got {self.alpha}, {self.beta}")
        if self.min_n < 3:
            raise ConfigError(f"min_n must be at least 3, got {self.min_n}")
        if self.max_n < self.min_n:
            raise ConfigError(f"max_n ({self.max_n}) must be at least min_n ({self.min_n})")
        if not self.min_cv > 0:
            raise ConfigError(f"min_cv must be positive, got {self.min_cv}")

    @property
    def upper(self) -> float:
        """Wald's upper bound on the LLR: crossing it accepts the change."""
        return math.log((1 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        """Wald's lower bound: both LLRs at or below it accept "no change of that size"."""
        return math.log(self.beta / (1 - self.alpha))


@dataclass(frozen=True)
class Decision:
    """What to do after the latest pair, and why."""

    step: Step
    reason: str
    n_a: int  # usable values of side A (baseline)
    n_b: int  # usable values of side B (candidate)
    ratio: float = float("nan")  # exp(D): B's typical value over A's
    llr_regression: float = float("nan")
    llr_improvement: float = float("nan")

    @property
    def settled(self) -> bool:
        """True once no more pairs are needed (a verdict or ``unstable``)."""
        return self.step != "continue"


def _clean(values: Sequence[float], side: str) -> tuple[np.ndarray, int]:
    """Log values of the finite entries, and how many were dropped (NaN/inf: not a zero)."""
    arr = np.asarray(values, dtype=np.float64).ravel()
    finite = arr[np.isfinite(arr)]
    if np.any(finite <= 0):
        raise ValueError(f"side {side}: values must be positive (a rate or a time), got "
                         f"{float(finite[finite <= 0][0])}")
    return np.log(finite), int(arr.size - finite.size)


def _yuen(x: np.ndarray, min_sd: float) -> tuple[float, float, int]:
    """20% trimmed mean, its squared standard error (Yuen) and the effective size h."""
    n = x.size
    g = math.floor(TRIM * n)
    s = np.sort(x)
    h = n - 2 * g
    trimmed = float(np.mean(s[g:n - g]))
    wins = np.clip(s, s[g], s[n - 1 - g])
    sd = max(float(np.std(wins, ddof=1)), min_sd)
    return trimmed, (n - 1) * sd**2 / (h * (h - 1)), h


def next_step(
    samples_a: Sequence[float], samples_b: Sequence[float], rule: SequentialRule | None = None
) -> Decision:
    """Decide after the latest interleaved pair: ``continue`` or a verdict, with its reason.

    ``samples_a`` is the baseline, ``samples_b`` the candidate, both in run order, every value so
    far (throttled trials may be kept: they are trimmed as slow outliers). Non-finite values are
    dropped and counted in the reason; non-positive ones raise ValueError. The cap counts the
    repetitions spent (the longer side, dropped values included), so a run of failed trials
    still ends. For the runner (issue 17): after each pair call this and stop when
    ``decision.settled``; with the defaults a run spends at most ``2 * rule.max_n`` trials.
    """
    rule = rule or SequentialRule()
    x, dropped_a = _clean(samples_a, "A")
    y, dropped_b = _clean(samples_b, "B")
    spent = max(len(samples_a), len(samples_b))
    at_cap = spent >= rule.max_n
    dropped = (f"; dropped non-finite values: A {dropped_a}, B {dropped_b}"
               if dropped_a or dropped_b else "")
    if min(x.size, y.size) < rule.min_n:
        why = f"need {rule.min_n} usable values per side, have A {x.size}, B {y.size}{dropped}"
        if at_cap:
            return Decision("unstable", f"cap of {rule.max_n} reached: {why}", x.size, y.size)
        return Decision("continue", why, x.size, y.size)

    ma, va, ha = _yuen(x, rule.min_cv)
    mb, vb, hb = _yuen(y, rule.min_cv)
    diff = mb - ma
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (ha - 1) + vb**2 / (hb - 1))
    # Estimated variance: widen se by the t/normal quantile ratio at z* = sqrt(2 * upper), the
    # smallest z that can cross the upper bound (3.02 with the defaults), see the module doc.
    z_star = math.sqrt(2 * rule.upper)
    se *= float(sps.t.isf(sps.norm.sf(z_star), df)) / z_star
    k = -math.log1p(-rule.effect) / se
    bad = (-diff if rule.higher_is_better else diff) / se
    # The alternative is "a change of at least the effect": when the data show a larger one, its
    # likelihood is taken at the estimate (a generalised likelihood ratio), so a drop far beyond
    # the effect ends the test at once instead of being weighed against a 5% one only.
    k_reg, k_imp = max(k, bad), max(k, -bad)
    llr_reg = k_reg * bad - k_reg * k_reg / 2
    llr_imp = -k_imp * bad - k_imp * k_imp / 2
    ratio = math.exp(diff)
    n = f"n={x.size}/{y.size}" if x.size != y.size else f"n={x.size}"
    stats = (f"ratio {ratio:.4f}, log-likelihood ratios: regression {llr_reg:.2f}, "
             f"improvement {llr_imp:.2f}")

    def out(step: Step, why: str) -> Decision:
        return Decision(step, why + dropped, x.size, y.size, ratio, llr_reg, llr_imp)

    if llr_reg >= rule.upper:
        return out("regression", f"stopped at {n}: log-likelihood ratio {llr_reg:.2f} crossed "
                                 f"the upper bound {rule.upper:.2f} (ratio {ratio:.4f})")
    if llr_imp >= rule.upper:
        return out("improvement", f"stopped at {n}: log-likelihood ratio {llr_imp:.2f} crossed "
                                  f"the upper bound {rule.upper:.2f} (ratio {ratio:.4f})")
    if max(llr_reg, llr_imp) <= rule.lower:
        return out("same", f"stopped at {n}: both log-likelihood ratios ({llr_reg:.2f}, "
                           f"{llr_imp:.2f}) at or below the lower bound {rule.lower:.2f}: no "
                           f"{rule.effect:.0%} change (ratio {ratio:.4f})")
    if at_cap:
        return out("unstable", f"cap of {rule.max_n} reached at {n} without crossing a bound "
                               f"({rule.lower:.2f}, {rule.upper:.2f}): {stats}")
    return out("continue", f"{n}: between the bounds ({rule.lower:.2f}, {rule.upper:.2f}): "
                           f"{stats}")
