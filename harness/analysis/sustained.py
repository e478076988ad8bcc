"""Sustained workloads: which trials are sustained, which of them count, and their figures.

A *sustained* trial (``sustained_s`` > 0) keeps the engine generating back to back for that many
seconds; the phone is meant to heat up, so its trials count whether or not they throttled (the
throttling is what they measure). A burst trial keeps ``frames.usable``'s rule: the unthrottled
ones count, all applied ones when every one throttled. ``sustained_s`` is part of the config id,
so a candidate (config, build, engine) is either all sustained or all burst. The figures of one
trial (``sustained_tg_tps``, ``steady_state_ratio``, ``time_to_throttle_s``) are stored by the
runner; here they are only summarised per device and candidate, and the throughput series (the
samples whose ``tg_tps`` is set) is cut into one line per trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.frames import engine_column, usable_mask
from harness.labels import CONFIG_COLUMNS, config_label

#: What identifies a candidate's rows: device, configuration, build, engine.
GROUP = ("device_serial", "config_id", "build_id", "engine")


def candidate_groups(trials: pd.DataFrame, wanted: np.ndarray,
                     ) -> list[tuple[tuple[str, ...], pd.DataFrame]]:
    """The ``wanted`` trials grouped by (device, config, build, engine), keys as text, an
    absent engine read as llama-bench: the rows of the report's per-candidate tables."""
    scope = trials[wanted]
    scope = scope.assign(engine=engine_column(scope).to_numpy())
    return [(tuple(str(k) for k in key), group)
            for key, group in scope.groupby(list(GROUP), sort=True, observed=True)]


def column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column, or all-null when an older frame lacks it."""
    if name in frame:
        return frame[name]
    return pd.Series(None, index=frame.index, dtype=object)


def sustained_mask(frame: pd.DataFrame) -> pd.Series:
    """True for sustained trials (``sustained_s`` > 0; a missing column or value is a burst)."""
    seconds = pd.to_numeric(column(frame, "sustained_s"), errors="coerce")
    return pd.Series((seconds.fillna(0.0) > 0).to_numpy(), index=frame.index)


def counted_mask(frame: pd.DataFrame, by: Sequence[str] = GROUP) -> pd.Series:
    """Which trials a candidate's medians are taken over, per group of ``by`` (the candidates;
    ``()``: the frame is one): every usable sustained trial, throttled or not, and the
    unthrottled usable burst trials (all applied ones when every one of the group throttled)."""
    applied = usable_mask(frame, include_throttled=True).to_numpy()
    sustained = sustained_mask(frame).to_numpy()
    cool = usable_mask(frame).to_numpy() & ~sustained
    if by:
        keys = [engine_column(frame) if c == "engine" else frame[c].astype(object) for c in by]
        any_cool = pd.Series(cool, index=frame.index).groupby(
            keys, sort=False, dropna=False).transform("any").to_numpy(dtype=bool)
    else:
        any_cool = np.full(len(frame), bool(cool.any()))
    mask = (applied & sustained) | cool | (applied & ~sustained & ~any_cool)
    return pd.Series(mask, index=frame.index)


def counted(rows: pd.DataFrame) -> pd.DataFrame:
    """One candidate's counted trials (``counted_mask`` of ``rows`` as one group)."""
    return rows[counted_mask(rows, by=()).to_numpy()]


#: What the per-candidate tables read once the counted trials are chosen.
TABLE_COLUMNS = (*GROUP, *CONFIG_COLUMNS, "started_at", "time_to_throttle_s",
                 "steady_state_ratio", "sustained_tg_tps", "max_thermal_status", "outcome",
                 "valid", "invalid_reason", "energy_valid", "energy_invalid_reason",
                 "energy_source", "energy_units", "pp_j_per_token", "tg_j_per_token",
                 "idle_power_w", "tg_power_w", "tg_tps", "pp_tps")


def narrow(trials: pd.DataFrame, rows: pd.Series) -> pd.DataFrame:
    """The ``rows`` of ``trials`` with only ``TABLE_COLUMNS`` (missing ones null) and the
    engine filled: cheap to group after the selection was made on the whole frame."""
    picked = trials[[c for c in TABLE_COLUMNS if c in trials]][rows.to_numpy()]  # columns first
    out = pd.DataFrame({c: column(picked, c) for c in TABLE_COLUMNS}, index=picked.index)
    out["engine"] = engine_column(picked).to_numpy()
    return out


def median(values: pd.Series) -> float | None:
    arr = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=np.float64)
    return float(np.median(arr)) if arr.size else None


def _max_int(values: pd.Series) -> int | None:
    arr = pd.to_numeric(values, errors="coerce").dropna()
    return int(arr.max()) if not arr.empty else None


@dataclass(frozen=True)
class SustainedFigures:
    """One device and candidate's sustained trials, summarised (medians over ``counted``)."""

    device: str  # serial
    config_id: str
    build_id: str
    engine: str
    label: str
    sustained_s: float
    trials: int  # counted trials
    sustained_tg_tps: float | None  # median of the trials' last-fifth medians
    steady_state_ratio: float | None
    throttled_trials: int  # trials whose series fell below 90% of its initial median
    time_to_throttle_s: float | None  # median over the trials that throttled
    max_thermal_status: int | None  # the highest any trial reached


def figures(key: Sequence[str], rows: pd.DataFrame) -> SustainedFigures | None:
    """The figures of one candidate's sustained trials (``rows``: already ``counted``)."""
    mask = sustained_mask(rows).to_numpy()
    if not mask.any():  # a burst candidate: nothing to select
        return None
    rows = rows[mask]
    first = rows.iloc[0].to_dict()
    seconds = float(pd.to_numeric(rows["sustained_s"]).max())
    throttle = pd.to_numeric(column(rows, "time_to_throttle_s"), errors="coerce").dropna()
    return SustainedFigures(
        device=str(key[0]), config_id=str(key[1]), build_id=str(key[2]), engine=str(key[3]),
        label=config_label(first), sustained_s=seconds,
        trials=len(rows), sustained_tg_tps=median(column(rows, "sustained_tg_tps")),
        steady_state_ratio=median(column(rows, "steady_state_ratio")),
        throttled_trials=len(throttle), time_to_throttle_s=median(throttle),
        max_thermal_status=_max_int(column(rows, "max_thermal_status")))


def sustained_table(trials: pd.DataFrame) -> tuple[SustainedFigures, ...]:
    """Per device and (config, build, engine) with sustained trials: their figures, sorted."""
    sustained = sustained_mask(trials)
    if not sustained.any():
        return ()
    rows = narrow(trials, sustained & counted_mask(trials))
    out = []
    for key, group in rows.groupby(list(GROUP), sort=True, observed=True):
        found = figures([str(k) for k in key], group)
        if found is not None:
            out.append(found)
    return tuple(out)


@dataclass(frozen=True)
class SustainedSeries:
    """One sustained trial's throughput series: a point per repetition, seconds since launch."""

    trial_id: str
    t_s: tuple[float, ...]
    tg_tps: tuple[float, ...]


def series(samples: pd.DataFrame, trial_ids: Sequence[str]) -> tuple[SustainedSeries, ...]:
    """The ``tg_tps`` series of each named trial (in that order; trials without one left out)."""
    if samples.empty or "tg_tps" not in samples:
        return ()
    points = samples[samples["tg_tps"].notna()]
    ids = points["trial_id"].astype(str)
    out = []
    for trial_id in trial_ids:
        mine = points[ids == str(trial_id)].sort_values("t_ms", kind="stable")
        if mine.empty:
            continue
        out.append(SustainedSeries(str(trial_id),
                                   tuple(float(t) / 1000 for t in mine["t_ms"]),
                                   tuple(float(v) for v in mine["tg_tps"])))
    return tuple(out)
