"""Change points in a nightly series: E-divisive-means style split search, t-test acceptance.

Why this shape (after MongoDB's and DataStax Hunter's performance CI): a split search over the
whole series finds where the level moved without a window length to tune; recursive bisection
finds several moves; and accepting a split only when a Welch t-test between the two sides gives
p < 0.001 *and* the level moved by at least 3% keeps both noise and tiny real drifts out of the
report. Because a split separates two whole segments, one level shift is one change point, not
one alarm per night after it. A single outlier night cannot be a segment on its own
(``min_size``) and barely moves the mean of a segment, so it is not reported.

Everything here is a pure function over a 1-D float array of one value per night (a median of
that night's trials), oldest first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from harness.analysis.stats import welch_t_p

Statistic = Literal["energy", "mean"]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class ChangePoint:
    """A level shift that starts at night ``index`` (the first night of the new level).

    ``magnitude`` is relative: (after_mean - before_mean) / before_mean, so -0.05 is a 5% drop.
    The means and the p-value compare the two adjacent segments between neighbouring change
    points.
    """

    index: int
    before_mean: float
    after_mean: float
    magnitude: float
    p_value: float


def _energy_prefix(x: FloatArray) -> FloatArray:
    """2-D prefix sums of |x_i - x_j| so any block sum is four lookups."""
    distances = np.abs(x[:, None] - x[None, :])
    prefix = np.zeros((x.size + 1, x.size + 1))
    prefix[1:, 1:] = distances.cumsum(axis=0).cumsum(axis=1)
    return prefix


Index = int | NDArray[np.int64]


def _block(p: FloatArray, a: Index, b: Index, c: Index, d: Index) -> FloatArray:
    """Sum of the distance block rows [a, b) x columns [c, d), vectorised over array bounds."""
    return np.asarray(p[b, d] - p[a, d] - p[b, c] + p[a, c], dtype=np.float64)


def split_statistics(
    x: FloatArray,
    start: int,
    end: int,
    min_size: int,
    statistic: Statistic = "energy",
    prefix: FloatArray | None = None,
) -> tuple[NDArray[np.int64], FloatArray]:
    """Candidate split points in [start, end) and the divergence statistic at each.

    ``energy`` is the E-divisive q-statistic with exponent 1 (scaled energy distance between the
    two sides), robust to outliers; ``mean`` is the scaled squared difference of means, the
    most powerful choice for a pure level shift in Gaussian noise. ``prefix`` (from
    ``_energy_prefix`` of the whole series) saves recomputing it for every segment.
    """
    taus = np.arange(start + min_size, end - min_size + 1)
    if taus.size == 0:
        return taus, np.zeros(0)
    n = (taus - start).astype(np.float64)
    m = (end - taus).astype(np.float64)
    if statistic == "mean":
        csum = np.concatenate([[0.0], np.cumsum(x[start:end])])
        left = csum[taus - start] / n
        right = (csum[-1] - csum[taus - start]) / m
        return taus, n * m / (n + m) * (left - right) ** 2
    p = _energy_prefix(x) if prefix is None else prefix
    between = _block(p, start, taus, taus, end)
    within_left = _block(p, start, taus, start, taus)
    within_right = _block(p, taus, end, taus, end)
    energy = 2 * between / (n * m) - within_left / (n * (n - 1)) - within_right / (m * (m - 1))
    return taus, n * m / (n + m) * energy


def _relative(before: float, after: float) -> float:
    return (after - before) / before if before > 0 else float("nan")


def _accept(
    left: FloatArray, right: FloatArray, p_value: float, min_magnitude: float
) -> tuple[bool, float]:
    p = welch_t_p(left, right)
    magnitude = _relative(float(left.mean()), float(right.mean()))
    ok = bool(np.isfinite(p) and p < p_value and abs(magnitude) >= min_magnitude)
    return ok, p


def detect_change_points(
    series: ArrayLike,
    *,
    p_value: float = 0.001,
    min_magnitude: float = 0.03,
    min_size: int = 3,
    statistic: Statistic = "energy",
) -> list[ChangePoint]:
    """Find level shifts in a nightly series; see the module docstring for the method.

    Recursive bisection: split a segment at its best candidate if the split passes the t-test,
    then recurse into both halves. The magnitude floor is not applied while searching: the first
    split of a series with a dip and a recovery compares the level before the dip with a mix of
    the dip and the recovery, which can be significant yet under 3%, and stopping there would
    hide both steps. A final pass re-tests every change point against its neighbouring segments
    with both criteria and drops the weakest failing one until all pass, so everything reported
    meets the t-test and the magnitude floor against the levels actually around it.
    """
    x = np.asarray(series, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("series must be finite: drop nights without a measurement first")
    if min_size < 2:
        raise ValueError("min_size must be at least 2 (a t-test needs two values per side)")
    prefix = _energy_prefix(x) if statistic == "energy" else None
    found: list[int] = []
    stack = [(0, x.size)]
    while stack:
        start, end = stack.pop()
        taus, q = split_statistics(x, start, end, min_size, statistic, prefix)
        if taus.size == 0:
            continue
        tau = int(taus[int(np.argmax(q))])
        ok, _ = _accept(x[start:tau], x[tau:end], p_value, 0.0)
        if ok:
            found.append(tau)
            stack.extend([(start, tau), (tau, end)])
    return _prune(x, sorted(found), p_value, min_magnitude)


def _prune(
    x: FloatArray, found: list[int], p_value: float, min_magnitude: float
) -> list[ChangePoint]:
    while True:
        bounds = [0, *found, x.size]
        tested = []
        for i, tau in enumerate(found):
            left, right = x[bounds[i] : tau], x[tau : bounds[i + 2]]
            ok, p = _accept(left, right, p_value, min_magnitude)
            tested.append((ok, p, tau, left, right))
        failing = [t for t in tested if not t[0]]
        if not failing:
            return [
                ChangePoint(
                    index=tau,
                    before_mean=float(left.mean()),
                    after_mean=float(right.mean()),
                    magnitude=_relative(float(left.mean()), float(right.mean())),
                    p_value=p,
                )
                for _, p, tau, left, right in tested
            ]
        weakest = max(failing, key=lambda t: t[1] if np.isfinite(t[1]) else np.inf)
        found.remove(weakest[2])


def segment_means(
    series: ArrayLike, change_points: list[ChangePoint]
) -> list[tuple[int, int, float]]:
    """(start, end, mean) of each level between change points, for plotting the fitted steps."""
    x = np.asarray(series, dtype=np.float64).ravel()
    bounds = [0, *(c.index for c in change_points), x.size]
    return [(a, b, float(x[a:b].mean())) for a, b in itertools.pairwise(bounds) if b > a]
