"""The report's noise floors: ``harness.analysis.noise`` per phone and cell, labelled.

Two uses. The Noise floor section lists, per phone, each cell's robust CV, the nights it rests
on, the repetitions the cell ran a night and the smallest change those repetitions find at 80%
power (``noise_floors``'s own figures). And every compared cell of the Build comparison (and so
of What changed) carries its floor at the repetitions that comparison had, so a verdict of no
change can say the cell could not have seen one. No statistic is made here: CV and MDC are
``noise.noise_floors`` and ``noise.min_detectable_change``; this module only chooses which
floor belongs to which row and says when a cell has too little history (``noise.MIN_NIGHTS``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from harness.analysis.compare import Policy
from harness.analysis.frames import (
    USABLE_COLUMNS,
    metric_name,
    usable_mask,
)
from harness.analysis.noise import (
    DEFAULT_ALPHA,
    DEFAULT_NIGHTS,
    MIN_NIGHTS,
    POWERS,
    NoiseFloor,
    min_detectable_change,
    night_keys,
    noise_floors,
    recent_trials,
)
from harness.labels import CONFIG_COLUMNS
from harness.metrics import DEFAULT_METRICS, METRIC_COLUMNS
from harness.report.model import (
    CellFloor,
    ComparisonSection,
    FloorPhone,
    FloorRow,
    NoiseFloorSection,
)
from harness.report.trends import Labels

Floors = Mapping[tuple[str, str, str, str], NoiseFloor]  # (serial, config_id, engine, metric)
ROWS_PER_PHONE = 40
#: What places a trial in a cell's history (``noise.night_keys``: its night from its run)
KEYS = ("device_serial", "device_model", "config_id", "build_id", "engine", "run_id",
        "started_at")
BAND = Policy(higher_is_better=True).noise


def floors(trials: pd.DataFrame, metrics: Sequence[str] = DEFAULT_METRICS,
           nights_back: int = DEFAULT_NIGHTS) -> dict[tuple[str, str, str, str], NoiseFloor]:
    """``noise_floors`` of the trials (usable, throttled excluded), by cell and metric; read
    from each cell's recent nights only (``noise.recent_trials``), so a farm store's history
    costs a few samples per cell."""
    recent = recent_trials(_narrow(trials, metrics), nights_back)
    if recent.empty:
        return {}
    found = noise_floors(recent, metrics, nights_back=nights_back)
    return {(f.device, f.config_id, f.engine, f.metric): f for f in found}


def _narrow(trials: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Only the columns the noise floors read: a cell's keys, its night, the usable rule, the
    metrics and the configuration (its label); a farm's year is 160 columns of 2 million
    trials, and each selection of usable rows copied them all."""
    wanted = (*KEYS, *USABLE_COLUMNS, *(METRIC_COLUMNS[metric_name(m)] for m in metrics),
              *CONFIG_COLUMNS)
    return trials[[c for c in dict.fromkeys(wanted) if c in trials]]


def _cells(trials: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Per (serial, config_id, engine) with usable trials: the median trials a (night, build)
    and, per metric, the number of usable trials carrying it."""
    trials = _narrow(trials, metrics)
    kept = trials[usable_mask(trials).to_numpy()]
    columns = [METRIC_COLUMNS[metric_name(m)] for m in metrics]
    keys = night_keys(kept).assign(**{c: kept[c].to_numpy() for c in columns if c in kept})
    cell = ["serial", "config_id", "engine"]
    if keys.empty:
        return pd.DataFrame(columns=[*cell, "reps", *columns])
    per_night = keys.groupby([*cell, "night", "build"], sort=False).size()
    reps = per_night.groupby(level=[0, 1, 2], sort=False).median().rename("reps")
    present = [c for c in columns if c in keys]
    counts = keys.groupby(cell, sort=False)[present].count()
    return pd.concat([reps, counts], axis=1).reset_index()


def section(trials: pd.DataFrame, labels: Labels, found: Floors, several_engines: bool,
            metrics: Sequence[str] = DEFAULT_METRICS, nights_back: int = DEFAULT_NIGHTS,
            shown: int = ROWS_PER_PHONE) -> NoiseFloorSection:
    """Every phone's cells with usable trials, each metric they carry: its floor when it rests
    on at least ``MIN_NIGHTS`` nights, else a row that says how many it has."""
    names = [metric_name(m) for m in metrics]
    by_phone: dict[str, list[FloorRow]] = {}
    for r in _cells(trials, names).itertuples(index=False):
        serial, config_id, engine = str(r.serial), str(r.config_id), str(r.engine)
        config = labels.config(config_id)
        if several_engines:
            config = f"{config} · {engine}"
        for metric in names:
            f = found.get((serial, config_id, engine, metric))
            if f is None and not getattr(r, METRIC_COLUMNS[metric], 0):
                continue  # the cell never measured this metric
            enough = f is not None and f.nights >= MIN_NIGHTS
            by_phone.setdefault(serial, []).append(FloorRow(
                config=config, metric=metric, cv=f.cv if enough and f else None,
                nights=f.nights if f else 0, trials=f.trials if f else 0,
                reps=f.reps if f else max(1, int(r.reps)),
                mdc=f.mdc_80 if enough and f else None, mdc_95=f.mdc_95 if enough and f else None,
                serial=serial, config_id=config_id, engine=engine))
    order = {m: i for i, m in enumerate(names)}
    phones = tuple(
        FloorPhone(labels.device(serial),
                   tuple(sorted(rows, key=lambda x: (x.config, x.config_id, order[x.metric]))),
                   serial)
        for serial, rows in sorted(by_phone.items(), key=lambda p: labels.device(p[0])))
    return NoiseFloorSection(phones, nights_back, MIN_NIGHTS, POWERS[0], DEFAULT_ALPHA, shown)


def cell_floor(found: Floors, serial: str, config_id: str, engines: Sequence[str], metric: str,
               n_baseline: int, n_candidate: int, verdict: str) -> CellFloor:
    """A compared cell's floor at its repetitions: the noisier engine's side counts (as the gate
    notes of ``compare_builds`` have it); too little history when no side has ``MIN_NIGHTS``."""
    sides = [f for e in dict.fromkeys(engines)
             if (f := found.get((serial, config_id, e, metric))) is not None]
    enough = [f for f in sides if f.nights >= MIN_NIGHTS]
    nights_seen = max((f.nights for f in sides), default=0)
    if not enough or min(n_baseline, n_candidate) < 1:
        return CellFloor(None, nights_seen, None, n_baseline, n_candidate, POWERS[0],
                         DEFAULT_ALPHA, MIN_NIGHTS, BAND, verdict)
    floor = max(enough, key=lambda f: f.cv)
    mdc = min_detectable_change(floor.cv, n_baseline, n_other=n_candidate, alpha=floor.alpha,
                                power=POWERS[0])
    return CellFloor(floor.cv, floor.nights, mdc if np.isfinite(mdc) else None, n_baseline,
                     n_candidate, POWERS[0], floor.alpha, MIN_NIGHTS, BAND, verdict)


def with_floors(comparison: ComparisonSection, found: Floors) -> ComparisonSection:
    """The comparison with each row's ``floor`` set."""
    if not comparison.rows:
        return comparison
    engines = tuple(e for e in (comparison.baseline_engine, comparison.candidate_engine) if e)
    rows = tuple(dataclasses.replace(r, floor=cell_floor(
        found, r.serial, r.config_id, engines, r.metric, r.n_baseline, r.n_candidate,
        r.verdict)) for r in comparison.rows)
    return dataclasses.replace(comparison, rows=rows)


def by_cell(comparison: ComparisonSection) -> dict[tuple[str, str, str], CellFloor]:
    """The comparison rows' floors by (serial, config_id, metric)."""
    return {(r.serial, r.config_id, r.metric): r.floor for r in comparison.rows
            if r.floor is not None}
