"""The noise floor of each phone and cell: how noisy it is, and the smallest change it can show.

Pure: functions of a trials frame. A *cell* here is one (device, config_id, engine, metric); a
*sample* is the usable trials (``frames.usable_mask``) of one cell, one build and one night
(``frames.nights``). Builds are kept apart within a night so that two builds run the same night
(the baseline beside the nightly) do not pass their difference off as noise.

Variability, the robust CV. For every sample with at least ``MIN_SAMPLE`` values,
``b_n * 1.4826 * MAD / median``; the cell's CV is the **median over its samples** of the last
``K`` nights it ran (default 7). ``b_n`` is Croux and Rousseeuw's (1992) small-sample factor
(1.495 at n=3, 1.206 at 5, ``n / (n - 0.8)`` above 9): a phone runs 3 to 10 repetitions a
night, and without it the MAD of so few values reads 10-25% low. Why this and not the plain
standard deviation over every trial:

* within a night, one bad repetition (a background job, a thermal blip) moves a standard
  deviation a lot and a MAD hardly at all; 1.4826 makes the MAD estimate the standard deviation
  of a normal sample, so the figure reads like a CV;
* per night and not pooled over nights, so real changes between nights (a new build, a change
  point) are not counted as noise;
* the median over nights, so one noisy night does not set the floor of the whole week.

To first order in the CV, ``1.4826 * MAD / median`` of lognormal values estimates ``sigma``, the
standard deviation of their logarithms, and that is how the formula below uses it.

Minimum detectable change (MDC). A two-sided comparison of n repetitions per side on the log
scale, normal approximation with a known ``sigma``::

    delta = (z[1 - alpha/2] + z[power]) * sigma * sqrt(1/n_a + 1/n_b)
    mdc   = exp(delta) - 1

at the project's default alpha (``compare.Policy.alpha``, 0.05) and 80% or 95% power. So
``mdc_80 = 0.04`` reads "with these repetitions a change below 4% is found less than 80% of the
time". ``delta`` shrinks as ``1/sqrt(n)``. It is a floor, not the verdict's own sensitivity: the
verdict also applies Benjamini-Hochberg and the ±3% noise band, and uses Mann-Whitney (about 95%
as efficient as the t-test on normal data).

Noise grew (``noise_grew``). A cell's noise grew tonight when all of these hold:

* tonight's robust CV is at least ``GREW_MIN_CV`` (0.5%): below that nothing a gate checks is
  affected (memory peaks are often that steady, and a ratio of two tiny CVs means nothing);
* tonight's robust CV is more than ``GREW_RATIO`` (1.5) times the history's (the median CV of
  the cell's samples from other runs of the last ``K`` nights up to tonight);
* an F test says so: the pooled within-sample variance of the log values tonight over the
  pooled one of the history, with ``sum(n_i - 1)`` degrees of freedom each, has a one-sided
  p-value below ``GREW_ALPHA`` (1%).

The ratio rule is robust and says "notably"; the F test (classical, sensitive to outliers, hence
not used alone) says "not by chance with so few repetitions".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.compare import Policy
from harness.analysis.frames import (
    engine_column,
    metric_name,
    nights,
    records,
    usable_mask,
)
from harness.errors import ConfigError
from harness.labels import config_labels
from harness.metrics import DEFAULT_METRICS, METRIC_COLUMNS

DEFAULT_NIGHTS = 7
DEFAULT_ALPHA = Policy(higher_is_better=True).alpha
POWERS = (0.80, 0.95)
MAD_SCALE = 1.4826
MIN_SAMPLE = 3  # values a sample needs for its CV to count
#: Croux & Rousseeuw's small-sample factors of the MAD for n = 2..9; n / (n - 0.8) above.
_SMALL_N = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}
GREW_RATIO = 1.5
GREW_ALPHA = 0.01
GREW_MIN_CV = 0.005

Key = tuple[str, str, str, str]  # device, config_id, engine, metric


@dataclass(frozen=True)
class Sample:
    """One cell's usable values of one build on one night, summarised."""

    night: str
    build: str
    n: int
    cv: float  # robust CV
    ss: float  # sum of squared deviations of the log values from their mean


@dataclass(frozen=True)
class NoiseFloor:
    """A cell's measured variability and the smallest change it can detect at ``reps``."""

    device: str
    config_id: str
    label: str
    engine: str
    metric: str
    cv: float  # median robust CV over the samples
    nights: int  # nights the figure rests on
    samples: int  # (build, night) samples
    trials: int  # usable trials in those samples
    first_night: str
    last_night: str
    reps: int  # repetitions per side the MDC assumes
    mdc_80: float  # fraction, at DEFAULT_ALPHA and 80% power
    mdc_95: float
    alpha: float = DEFAULT_ALPHA

    def to_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


@dataclass(frozen=True)
class NoiseGrowth:
    """A cell whose noise tonight is notably above its history's."""

    device: str
    config_id: str
    label: str
    engine: str
    metric: str
    cv_tonight: float
    cv_history: float
    ratio: float | None  # None when the history's CV is 0
    f_statistic: float | None
    p_value: float
    n_tonight: int
    history_nights: int
    history_trials: int


def mad_factor(n: int) -> float:
    """Croux and Rousseeuw's small-sample factor of the MAD for ``n`` values."""
    return _SMALL_N.get(n, n / (n - 0.8)) if n > 1 else float("nan")


def robust_cv(values: Iterable[float] | np.ndarray) -> float:
    """``b_n * 1.4826 * MAD / median`` of the finite values (``mad_factor``); NaN with fewer
    than 2 or a median <= 0."""
    x = np.asarray(list(values) if not isinstance(values, np.ndarray) else values,
                   dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float("nan")
    centre = float(np.median(x))
    if centre <= 0:
        return float("nan")
    mad = float(np.median(np.abs(x - centre)))
    return mad_factor(int(x.size)) * MAD_SCALE * mad / centre


def min_detectable_change(cv: float, n: int, *, n_other: int | None = None,
                          alpha: float = DEFAULT_ALPHA, power: float = 0.80) -> float:
    """The smallest change (a fraction, ``exp(delta) - 1``) a two-sided comparison of ``n``
    against ``n_other`` (default ``n``) repetitions finds with ``power`` at ``alpha``, for a
    cell whose log values have standard deviation ``cv``; see the module docstring."""
    other = n if n_other is None else n_other
    if n < 1 or other < 1:
        raise ConfigError(f"repetitions {n}/{other}: give at least 1 per side")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ConfigError(f"alpha {alpha!r} and power {power!r} must be in (0, 1)")
    if not math.isfinite(cv) or cv < 0:
        return float("nan")
    z = NormalDist().inv_cdf
    delta = (z(1 - alpha / 2) + z(power)) * cv * math.sqrt(1 / n + 1 / other)
    return math.expm1(delta)


def cell_samples(frame: pd.DataFrame, metrics: Sequence[str] = DEFAULT_METRICS, *,
                 include_throttled: bool = False,
                 ) -> tuple[dict[Key, list[Sample]], dict[tuple[str, str, str], str]]:
    """Every sample of at least ``MIN_SAMPLE`` positive values, by cell, oldest night first;
    and the configuration label of each (device, config_id, engine)."""
    names = [metric_name(m) for m in metrics]
    samples: dict[Key, list[Sample]] = {}
    labels: dict[tuple[str, str, str], str] = {}
    if frame.empty:
        return samples, labels
    mask = usable_mask(frame, include_throttled)
    kept = frame[mask]
    if kept.empty:
        return samples, labels
    by = ["device_serial", "config_id", "engine", "_night", "build_id"]
    # only the keys and the metrics are grouped (not the store's hundred-odd columns); each
    # group takes its rows by position, and a cell's label is read from its first trial once
    narrow = kept[["device_serial", "config_id", "build_id"]].reset_index(drop=True).assign(
        engine=engine_column(kept).astype(str).to_numpy(),
        _night=nights(frame).to_numpy()[mask.to_numpy(dtype=bool)])  # runs' nights, unfiltered
    columns = {m: kept[METRIC_COLUMNS[m]].to_numpy(dtype=np.float64, na_value=np.nan)
               for m in names}
    grouped = narrow.groupby(by, sort=True, observed=True)
    firsts: dict[tuple[str, str, str], int] = {}
    for (device, config, engine, night, build), pos in grouped.indices.items():
        pos = np.sort(pos)
        cell = (str(device), str(config), str(engine))
        firsts.setdefault(cell, int(pos[0]))
        for metric in names:
            x = columns[metric][pos]
            x = x[np.isfinite(x) & (x > 0)]
            if x.size < MIN_SAMPLE:
                continue
            logs = np.log(x)
            ss = float(np.sum((logs - logs.mean()) ** 2))
            samples.setdefault((*cell, metric), []).append(
                Sample(str(night), str(build), int(x.size), robust_cv(x), ss))
    rows = kept.iloc[list(firsts.values())]  # each cell's label from its first trial
    labels.update(zip(firsts, config_labels(rows, records(rows)), strict=True))
    return samples, labels


def recent(samples: Sequence[Sample], k: int) -> list[Sample]:
    """The samples of the ``k`` most recent nights among ``samples``."""
    kept = set(sorted({s.night for s in samples})[-k:])
    return [s for s in samples if s.night in kept]


def _median_cv(samples: Sequence[Sample]) -> float:
    cvs = [s.cv for s in samples if math.isfinite(s.cv)]
    return float(np.median(cvs)) if cvs else float("nan")


def _only_device(frame: pd.DataFrame, device: str) -> pd.DataFrame:
    mask = frame["device_serial"].astype(str) == device
    if "device_model" in frame:
        mask |= frame["device_model"].astype(str) == device
    if not mask.any():
        known = ", ".join(sorted(frame["device_serial"].dropna().astype(str).unique())) or "none"
        raise ConfigError(f"--device {device!r}: no trials of that phone (serials: {known})")
    return frame[mask]


def noise_floors(frame: pd.DataFrame, metrics: Sequence[str] = DEFAULT_METRICS, *,
                 nights_back: int = DEFAULT_NIGHTS, reps: int | None = None,
                 alpha: float = DEFAULT_ALPHA, device: str | None = None,
                 include_throttled: bool = False) -> list[NoiseFloor]:
    """The noise floor of every cell over the samples of its ``nights_back`` most recent nights.

    ``reps`` is the repetitions per side the MDC assumes; None takes each cell's own: the median
    number of values of its samples. ``device`` keeps one serial (or device model); an unknown
    one is a ConfigError naming the serials the store holds.
    """
    if nights_back < 1:
        raise ConfigError(f"--nights {nights_back}: give at least 1")
    if reps is not None and reps < 1:
        raise ConfigError(f"--reps {reps}: give at least 1 repetition per side")
    if device is not None:
        frame = _only_device(frame, device)
    samples, labels = cell_samples(frame, metrics, include_throttled=include_throttled)
    out = []
    for key, found in samples.items():
        window = recent(found, nights_back)
        cv = _median_cv(window)
        if not math.isfinite(cv):
            continue
        n = reps if reps is not None else max(1, int(np.median([s.n for s in window])))
        days = sorted({s.night for s in window})
        out.append(NoiseFloor(
            device=key[0], config_id=key[1], label=labels[key[:3]], engine=key[2],
            metric=key[3], cv=cv, nights=len(days), samples=len(window),
            trials=sum(s.n for s in window), first_night=days[0], last_night=days[-1], reps=n,
            mdc_80=min_detectable_change(cv, n, alpha=alpha, power=POWERS[0]),
            mdc_95=min_detectable_change(cv, n, alpha=alpha, power=POWERS[1]), alpha=alpha))
    order = {m: i for i, m in enumerate(metric_name(m) for m in metrics)}
    out.sort(key=lambda f: (f.device, f.label, f.config_id, f.engine, order[f.metric]))
    return out


def _f_test(tonight: Sequence[Sample], history: Sequence[Sample]) -> tuple[float | None, float]:
    """(F, one-sided p) of tonight's pooled log variance over the history's."""
    df_t = sum(s.n - 1 for s in tonight)
    df_h = sum(s.n - 1 for s in history)
    var_t = sum(s.ss for s in tonight) / df_t
    var_h = sum(s.ss for s in history) / df_h
    if var_h <= 0:
        return None, 0.0 if var_t > 0 else 1.0
    f = var_t / var_h
    from scipy import stats  # 0.6 s to import: only the commands that test pay it

    return f, float(stats.f.sf(f, df_t, df_h))


def noise_grew(frame: pd.DataFrame, run_id: str, metrics: Sequence[str] = DEFAULT_METRICS, *,
               nights_back: int = DEFAULT_NIGHTS, ratio: float = GREW_RATIO,
               alpha: float = GREW_ALPHA, min_cv: float = GREW_MIN_CV,
               include_throttled: bool = False) -> tuple[NoiseGrowth, ...]:
    """Cells of run ``run_id`` whose noise is notably above their history's (module docstring).

    The history is the other runs' samples of the cell from its ``nights_back`` most recent
    nights up to tonight's (a later night is never history). A cell without history is not
    listed.
    """
    mine = frame["run_id"] == run_id
    tonight = frame[mine]
    if tonight.empty:
        return ()
    night = str(nights(tonight).max())
    others = frame[~mine]
    others = others[(nights(others) <= night).to_numpy()] if not others.empty else others
    now, labels = cell_samples(tonight, metrics, include_throttled=include_throttled)
    before, _ = cell_samples(others, metrics, include_throttled=include_throttled)
    out = []
    for key, samples in now.items():
        history = recent(before.get(key, []), nights_back)
        if not history:
            continue
        cv_t, cv_h = _median_cv(samples), _median_cv(history)
        if not (math.isfinite(cv_t) and math.isfinite(cv_h)) or cv_t < min_cv:
            continue
        grown = cv_t / cv_h if cv_h > 0 else None
        if grown is not None and grown <= ratio:
            continue
        f, p = _f_test(samples, history)
        if p >= alpha:
            continue
        out.append(NoiseGrowth(
            device=key[0], config_id=key[1], label=labels[key[:3]], engine=key[2],
            metric=key[3], cv_tonight=cv_t, cv_history=cv_h, ratio=grown, f_statistic=f,
            p_value=p, n_tonight=sum(s.n for s in samples),
            history_nights=len({s.night for s in history}),
            history_trials=sum(s.n for s in history)))
    return tuple(sorted(out, key=lambda g: (g.device, g.label, g.config_id, g.engine,
                                            g.metric)))


def floor_index(floors: Iterable[NoiseFloor]) -> dict[Key, NoiseFloor]:
    """Floors by (device, config_id, engine, metric)."""
    return {(f.device, f.config_id, f.engine, f.metric): f for f in floors}


#: Nights of history a cell needs before its noise floor is quoted (the report's rule): with
#: fewer, a median over samples is one or two nights' accident.
MIN_NIGHTS = 3


def night_keys(trials: pd.DataFrame) -> pd.DataFrame:
    """What places each trial in a cell's history: serial, config_id, engine, night and build,
    as plain strings (one row per trial, positions as in ``trials``)."""
    return pd.DataFrame({
        "serial": trials["device_serial"].astype(str).to_numpy(),
        "config_id": trials["config_id"].astype(str).to_numpy(),
        "engine": engine_column(trials).astype(str).to_numpy(),
        "night": nights(trials).to_numpy(),
        "build": trials["build_id"].astype(str).to_numpy(),
    })


def recent_trials(frame: pd.DataFrame, nights_back: int = DEFAULT_NIGHTS, *,
                  include_throttled: bool = False) -> pd.DataFrame:
    """The usable trials of each (device, config_id, engine)'s ``nights_back`` most recent
    nights that hold a sample (a build with at least ``MIN_SAMPLE`` usable trials that night).

    Vectorised, so ``noise_floors`` of a farm store's history costs a few thousand samples rather
    than one per cell and night ever run; ``noise_floors`` of the result equals that of
    ``frame`` whenever every usable trial carries the metric (a metric missing on a recent night
    would otherwise reach further back).
    """
    if nights_back < 1:
        raise ConfigError(f"--nights {nights_back}: give at least 1")
    if frame.empty:
        return frame
    kept = frame[usable_mask(frame, include_throttled).to_numpy()]
    if kept.empty:
        return kept
    keys = night_keys(kept)
    cell_night = ["serial", "config_id", "engine", "night"]
    sizes = keys.groupby([*cell_night, "build"], sort=False).size()
    full = sizes[sizes >= MIN_SAMPLE].reset_index()[cell_night].drop_duplicates()
    full = full.sort_values("night", ascending=False, kind="stable")
    chosen = full[full.groupby(cell_night[:3], sort=False).cumcount() < nights_back]
    mask = pd.MultiIndex.from_frame(keys[cell_night]).isin(
        pd.MultiIndex.from_frame(chosen[cell_night]))
    return kept[mask]
