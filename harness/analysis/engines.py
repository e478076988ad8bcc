"""Engines side by side: per device and configuration, what each (build, engine) measured, and
the verdict between the engines.

Why a separate view: ``compare`` answers "is this side slower than that one" for two named sides;
a reader with two engines in the store first wants the table of both on every shared
configuration (does llama-cpp-python lose to llama-bench everywhere, or only on long contexts?).
The medians are of ``frames.usable`` trials, and the verdicts are ``ab.compare_builds``'s, so this
table says what ``harness compare --baseline-engine A --candidate-engine B`` says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.analysis.ab import BuildComparison, compare_builds
from harness.analysis.frames import (
    Side,
    medians,
    sides,
    with_engine,
)
from harness.cell import DEFAULT_ENGINE
from harness.labels import config_label
from harness.metrics import DEFAULT_METRICS

#: The figures shown per side, as (metric name, trials column).
#: The peak is the kernel's high-water mark (VmHWM, read on the phone until the engine exits):
#: a sampled PSS misses the peak of a trial shorter than the sampling interval.
FIGURES = (("tg_tps", "tg_tps"), ("pp_tps", "pp_tps"), ("vm_hwm", "vm_hwm_bytes"))
#: At most this many engine comparisons (baseline-engine builds x other-engine builds).
MAX_COMPARISONS = 4
_KEYS = ["device_serial", "config_id", "build_id", "engine"]


@dataclass(frozen=True)
class SideFigures:
    """Medians of one side's usable trials on one cell (None where nothing was measured)."""

    side: Side
    tg_tps: float | None
    pp_tps: float | None
    vm_hwm_bytes: float | None  # peak resident memory (VmHWM)


@dataclass(frozen=True)
class PairVerdict:
    """One metric of one engine comparison on one cell: ``comparison`` indexes
    ``EngineTable.comparisons``."""

    comparison: int
    metric: str
    ratio: float
    verdict: str


@dataclass(frozen=True)
class EngineRow:
    device: str  # serial
    config_id: str
    label: str
    figures: tuple[SideFigures | None, ...]  # one per EngineTable.sides; None: not measured
    verdicts: tuple[PairVerdict, ...] = ()

    def verdict(self, comparison: int, metric: str) -> PairVerdict | None:
        return next((v for v in self.verdicts
                     if v.comparison == comparison and v.metric == metric), None)


@dataclass(frozen=True)
class EngineTable:
    engines: tuple[str, ...]
    sides: tuple[Side, ...]
    rows: tuple[EngineRow, ...]  # cells measured by two engines or more
    comparisons: tuple[BuildComparison, ...] = ()  # baseline engine's side first in each
    notes: tuple[str, ...] = ()

    @property
    def shown(self) -> bool:
        """Whether there is anything to compare: more than one engine in the trials."""
        return len(self.engines) > 1


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _figures(per_cell: pd.DataFrame, all_sides: Sequence[Side]) -> tuple[SideFigures | None, ...]:
    found: dict[Side, SideFigures] = {}
    for (build, engine), row in per_cell.iterrows():
        side = Side(str(build), str(engine))
        found[side] = SideFigures(side, *(_number(row[c]) for _, c in FIGURES))
    return tuple(found.get(s) for s in all_sides)


def _pairs(all_sides: Sequence[Side], engines: Sequence[str]) -> tuple[list[tuple[Side, Side]],
                                                                       list[str]]:
    """(baseline, candidate) side pairs between the two engines, and notes on what was left."""
    if len(engines) != 2:
        return [], ([f"{len(engines)} engines: pass two to `harness compare` "
                     "(--baseline-engine, --candidate-engine) for verdicts"]
                    if len(engines) > 2 else [])
    first = DEFAULT_ENGINE if DEFAULT_ENGINE in engines else engines[0]
    other = next(e for e in engines if e != first)
    pairs = [(a, b) for a in all_sides if a.engine == first
             for b in all_sides if b.engine == other]
    notes = ([f"{len(pairs)} build pairs between the engines: the first {MAX_COMPARISONS} "
              "compared"] if len(pairs) > MAX_COMPARISONS else [])
    return pairs[:MAX_COMPARISONS], notes


def _verdicts(comparisons: Sequence[BuildComparison]) -> dict[tuple[str, str],
                                                              list[PairVerdict]]:
    out: dict[tuple[str, str], list[PairVerdict]] = {}
    for index, result in enumerate(comparisons):
        for cell in result.cells:
            out.setdefault((cell.key.device, cell.key.config_id), []).append(
                PairVerdict(index, cell.metric, cell.comparison.ratio, cell.comparison.verdict))
    return out


def engine_table(trials: pd.DataFrame, metrics: Sequence[str] = DEFAULT_METRICS, *,
                 include_throttled: bool = False, recent: int | None = None) -> EngineTable:
    """Every (device, config) measured by more than one engine, with each side's medians, and
    ``compare_builds`` between the two engines when the trials hold exactly two."""
    frame = with_engine(trials)
    all_sides = sides(frame)
    engines = tuple(sorted({s.engine for s in all_sides}))
    if len(engines) < 2:
        return EngineTable(engines, tuple(all_sides), ())
    pairs, notes = _pairs(all_sides, engines)
    comparisons = tuple(compare_builds(frame, a.build, b.build, metrics,
                                       include_throttled=include_throttled,
                                       baseline_engine=a.engine, candidate_engine=b.engine,
                                       recent=recent)
                        for a, b in pairs)
    verdicts = _verdicts(comparisons)
    figures = medians(frame, _KEYS, [c for _, c in FIGURES], include_throttled=include_throttled)
    shared = frame.groupby(["device_serial", "config_id"], observed=True)["engine"].nunique()
    firsts = frame.drop_duplicates(["device_serial", "config_id"]).set_index(
        ["device_serial", "config_id"])
    rows = []
    for serial, config in shared[shared > 1].index:
        try:
            per_cell = figures.loc[(serial, config)]
        except KeyError:
            per_cell = figures.iloc[:0].droplevel([0, 1])
        rows.append(EngineRow(str(serial), str(config),
                              config_label(firsts.loc[(serial, config)].to_dict()),
                              _figures(per_cell, all_sides),
                              tuple(verdicts.get((str(serial), str(config)), ()))))
    for result in comparisons:  # what the engines did not have in common, said once each
        notes.extend(f"{result.baseline_side} against {result.candidate_side}: not the same "
                     f"work: {line}" for line in result.differences)
    return EngineTable(engines, tuple(all_sides), tuple(rows), comparisons, tuple(notes))
