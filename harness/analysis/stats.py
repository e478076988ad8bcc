"""Array-level statistics behind ``compare`` and ``history``.

Why these estimators: phone throughput is skewed and occasionally hit by a slow outlier (a
background task, a thermal dip), so the centre is the median, the test is rank-based
(Mann-Whitney U) and the effect size is Cliff's delta, none of which assume normality. The
interval of the ratio of medians comes from a bootstrap because the median has no simple
closed-form standard error at the small repetition counts (5-20) a phone farm can afford.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20_260_101
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class RatioInterval:
    """Ratio of medians (candidate / baseline) and its bootstrap interval."""

    ratio: float
    low: float
    high: float


def as_array(values: ArrayLike) -> FloatArray:
    """Return a 1-D float array with NaNs dropped (a missing measurement is not a zero)."""
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


def ratio_of_medians_ci(
    baseline: ArrayLike,
    candidate: ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    rng: np.random.Generator | None = None,
) -> RatioInterval:
    """Ratio of medians with a percentile-bootstrap interval, both samples resampled independently.

    The two builds ran as separate trials, so each sample is resampled on its own (no pairing).
    All resamples are drawn at once as an index matrix, which keeps 2000 resamples well under a
    millisecond for the repetition counts in practice. NaN when either side is empty or the
    baseline median is not positive (a ratio to zero means nothing).
    """
    base = as_array(baseline)
    cand = as_array(candidate)
    nan = float("nan")
    if base.size == 0 or cand.size == 0:
        return RatioInterval(nan, nan, nan)
    base_median = float(np.median(base))
    if base_median <= 0:
        return RatioInterval(nan, nan, nan)
    ratio = float(np.median(cand)) / base_median
    gen = rng if rng is not None else np.random.default_rng(DEFAULT_SEED)
    base_boot = resampled_medians(base, gen.integers(0, base.size, size=(resamples, base.size)))
    cand_boot = resampled_medians(cand, gen.integers(0, cand.size, size=(resamples, cand.size)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = cand_boot / base_boot
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return RatioInterval(ratio, nan, nan)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return RatioInterval(ratio, float(low), float(high))


def resampled_medians(values: FloatArray, draws: NDArray[np.int64]) -> FloatArray:
    """``np.median(values[draws], axis=1)``, exactly, without sorting every resample.

    A resample's median is one of ``values``' order statistics (or the mean of two): count how
    often each rank was drawn in each row, and the median is where the running count passes
    the middle. Counting is linear in the draws, where a median per row partitions each row;
    at the 100-odd repetitions a nightly cell holds it is about a third faster, with the same
    numbers to the last bit.
    """
    order = np.argsort(values, kind="stable")
    low, high = _median_positions(draws, order)
    ordered = values[order]
    return (ordered[low] + ordered[high]) / 2.0


def _median_positions(draws: NDArray[np.int64], order: NDArray[np.int64]
                      ) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Per resample, the sorted positions whose mean is its median (``resampled_medians``):
    they depend on the draws and the values' order only, not on the values."""
    rows, n = draws.shape
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    offsets = (np.arange(rows, dtype=np.int64) * n)[:, None]
    counts = np.bincount((rank[draws] + offsets).ravel(), minlength=rows * n).reshape(rows, n)
    running = np.cumsum(counts, axis=1)
    return np.argmax(running > (n - 1) // 2, axis=1), np.argmax(running > n // 2, axis=1)


#: Cells up to this many values share their resamples' median positions by their values'
#: order (3 values have 6 orders, so a night's thousands of cells compute six).
_SHARED_ORDER_MAX = 8


def ratio_of_medians_ci_many(
    pairs: Sequence[tuple[ArrayLike, ArrayLike]],
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[RatioInterval]:
    """``ratio_of_medians_ci`` of every pair with a fresh ``default_rng(seed)`` each, the same
    numbers to the bit, computed in bulk.

    A fresh generator per cell draws the same resample indices for every cell of the same
    sizes, so they are drawn once per sizes; a resample's median is fixed by those draws and the
    values' order (``_median_positions``), shared by small cells of the same order; the
    intervals' quantiles are taken in one call per size.
    """
    nan = float("nan")
    out: list[RatioInterval] = [RatioInterval(nan, nan, nan)] * len(pairs)
    draws: dict[tuple[int, int], tuple[NDArray[np.int64], NDArray[np.int64]]] = {}
    positions: dict[tuple[object, ...], tuple[NDArray[np.intp], NDArray[np.intp]]] = {}
    pending: dict[int, tuple[list[int], list[FloatArray]]] = {}
    ratios_of: dict[int, float] = {}

    def boot(values: FloatArray, side: str, sizes: tuple[int, int],
             drawn: NDArray[np.int64]) -> FloatArray:
        order = np.argsort(values, kind="stable")
        if values.size <= _SHARED_ORDER_MAX:
            key = (sizes, side, order.tobytes())
            if key not in positions:
                positions[key] = _median_positions(drawn, order)
            low, high = positions[key]
        else:
            low, high = _median_positions(drawn, order)
        ordered = values[order]
        result: FloatArray = (ordered[low] + ordered[high]) / 2.0
        return result

    tail = (1.0 - confidence) / 2.0
    for i, (baseline, candidate) in enumerate(pairs):
        base, cand = as_array(baseline), as_array(candidate)
        if base.size == 0 or cand.size == 0:
            continue
        base_median = float(np.median(base))
        if base_median <= 0:
            continue
        ratio = float(np.median(cand)) / base_median
        sizes = (base.size, cand.size)
        if sizes not in draws:
            gen = np.random.default_rng(seed)
            draws[sizes] = (gen.integers(0, base.size, size=(resamples, base.size)),
                            gen.integers(0, cand.size, size=(resamples, cand.size)))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = boot(cand, "c", sizes, draws[sizes][1]) / boot(base, "b", sizes,
                                                                   draws[sizes][0])
        finite = np.isfinite(ratios)
        if finite.all():  # the usual case: quantiles in bulk below
            ratios_of[i] = ratio
            rows, values = pending.setdefault(ratios.size, ([], []))
            rows.append(i)
            values.append(ratios)
            continue
        ratios = ratios[finite]
        if ratios.size == 0:
            out[i] = RatioInterval(ratio, nan, nan)
            continue
        low, high = np.quantile(ratios, [tail, 1.0 - tail])
        out[i] = RatioInterval(ratio, float(low), float(high))
    for rows, values in pending.values():
        bounds = np.quantile(np.stack(values), [tail, 1.0 - tail], axis=1)
        for j, i in enumerate(rows):
            out[i] = RatioInterval(ratios_of[i], float(bounds[0, j]), float(bounds[1, j]))
    return out


def mann_whitney_p(baseline: ArrayLike, candidate: ArrayLike) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when all values tie, NaN when a side is empty.

    scipy returns NaN for an all-ties input (zero variance of U); "no evidence of a difference"
    is the honest answer there, so it becomes 1.0.
    """
    base = as_array(baseline)
    cand = as_array(candidate)
    if base.size == 0 or cand.size == 0:
        return float("nan")
    if np.ptp(np.concatenate([base, cand])) == 0:
        return 1.0
    from scipy import stats as sps  # 0.6 s to import: only the commands that test pay it

    result = sps.mannwhitneyu(cand, base, alternative="two-sided")
    return float(result.pvalue)


def mann_whitney_p_many(pairs: Sequence[tuple[ArrayLike, ArrayLike]]) -> FloatArray:
    """``mann_whitney_p`` of every (baseline, candidate) pair, the same numbers to the bit.

    scipy's per-call overhead (about 1 ms) dominates a night's thousands of three-repetition
    cells, so pairs are stacked into one vectorised call per (sizes, has ties): scipy chooses the
    exact or the asymptotic method from the sizes and from ties anywhere in its input, so rows
    with and without ties never share a call.
    """
    out = np.full(len(pairs), np.nan)
    arrays = [(as_array(b), as_array(c)) for b, c in pairs]
    batches: dict[tuple[int, int, bool], list[int]] = {}
    for i, (base, cand) in enumerate(arrays):
        if base.size == 0 or cand.size == 0:
            continue
        both = np.concatenate([base, cand])
        if np.ptp(both) == 0:
            out[i] = 1.0
            continue
        ties = bool(np.unique(both).size < both.size)
        batches.setdefault((base.size, cand.size, ties), []).append(i)
    from scipy import stats as sps  # 0.6 s to import: only the commands that test pay it

    for rows in batches.values():
        base = np.stack([arrays[i][0] for i in rows])
        cand = np.stack([arrays[i][1] for i in rows])
        result = sps.mannwhitneyu(cand, base, alternative="two-sided", axis=1)
        out[rows] = np.asarray(result.pvalue, dtype=np.float64)
    return out


def benjamini_hochberg(p_values: Sequence[float] | ArrayLike) -> FloatArray:
    """Benjamini-Hochberg adjusted p-values in the input order: monotone, capped at 1.

    NaN entries (cells with no test) are kept as NaN and do not count in the family size, so an
    unmeasured cell neither dilutes nor inflates the correction of the others.
    """
    p = np.asarray(p_values, dtype=np.float64).ravel()
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = finite.size
    if m == 0:
        return out
    order = finite[np.argsort(p[finite], kind="stable")]
    ranked = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    out[order] = np.minimum(adjusted, 1.0)
    return out


def cliffs_delta(baseline: ArrayLike, candidate: ArrayLike) -> float:
    """Cliff's delta P(candidate > baseline) - P(candidate < baseline), in O((n+m) log n).

    Positive means the candidate values tend to be larger. Counts come from ``searchsorted`` on
    the sorted baseline, so ties count as neither greater nor smaller.
    """
    base = np.sort(as_array(baseline))
    cand = as_array(candidate)
    if base.size == 0 or cand.size == 0:
        return float("nan")
    below = np.searchsorted(base, cand, side="left")  # baseline values < each candidate value
    not_above = np.searchsorted(base, cand, side="right")  # baseline values <= candidate value
    above = base.size - not_above
    return float((below.sum() - above.sum()) / (base.size * cand.size))


def coefficient_of_variation(values: ArrayLike) -> float:
    """Sample standard deviation over mean; NaN below two values or for a non-positive mean."""
    arr = as_array(values)
    if arr.size < 2:
        return float("nan")
    mean = float(arr.mean())
    if mean <= 0:
        return float("nan")
    return float(arr.std(ddof=1) / mean)


def welch_t_p(left: ArrayLike, right: ArrayLike) -> float:
    """Two-sided Welch t-test p-value with the zero-variance cases decided explicitly.

    scipy gives NaN when both sides are constant; two constant but different levels are a
    certain change (p = 0), two equal constants none (p = 1).
    """
    a = as_array(left)
    b = as_array(right)
    if a.size < 2 or b.size < 2:
        return float("nan")
    if a.var() == 0 and b.var() == 0:
        return 1.0 if a[0] == b[0] else 0.0
    # scipy.stats.ttest_ind(equal_var=False)'s arithmetic without its wrapper, which cost
    # 0.7 ms a call (the change points of a farm's year ask thousands); the same p-value to
    # about 1e-13 relative (tests/analysis/test_stats.py)
    left, right = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    df = (left + right) ** 2 / (left ** 2 / (a.size - 1) + right ** 2 / (b.size - 1))
    t = (float(a.mean()) - float(b.mean())) / math.sqrt(left + right)
    from scipy import special

    return float(2 * special.stdtr(df, -abs(t)))
