"""Compare two sides over a whole store: every device x config x metric, then the gates.

A side is a build and the engine that ran it (``frames.Side``), so the same function compares two
builds of one engine or two engines on the same configurations. The statistics are
``compare.compare_many`` (one call per metric, so Benjamini-Hochberg adjusts across the cells of
that metric only) and ``gates.evaluate_gates``; this module only decides which trials feed them
(``frames``) and lays the result out for the CLI, the report, JSON and JUnit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from harness import store
from harness.analysis.compare import Comparison, compare_many, higher_is_better
from harness.analysis.frames import (
    CellKey,
    SampleGroup,
    Side,
    metric_name,
    paired_sides,
    resolve_side,
)
from harness.analysis.gates import Gate, GateResult, evaluate_gates, parse_gates
from harness.analysis.noise import (
    POWERS,
    NoiseFloor,
    floor_index,
    min_detectable_change,
    noise_floors,
)
from harness.analysis.samework import differences
from harness.cell import DEFAULT_ENGINE
from harness.metrics import DEFAULT_METRICS

SCHEMA_VERSION = 2  # 2: both sides name their engine (baseline_engine, candidate_engine)
#: The order verdicts are listed in when the worst comes first.
VERDICT_ORDER = ("regression", "unstable", "improvement", "same")


@dataclass(frozen=True)
class CellComparison:
    """One device x config x metric: the comparison plus what identifies it for people."""

    key: CellKey
    label: str
    metric: str
    comparison: Comparison
    median_baseline: float
    median_candidate: float

    def to_json(self) -> dict[str, Any]:
        c = self.comparison
        data = {
            "device": self.key.device,
            "config_id": self.key.config_id,
            "label": self.label,
            "metric": self.metric,
            "median_baseline": _num(self.median_baseline),
            "median_candidate": _num(self.median_candidate),
        }
        data.update({f.name: _num(getattr(c, f.name)) for f in dataclasses.fields(c)})
        data["causes"] = list(c.causes)
        return data


@dataclass(frozen=True)
class BuildComparison:
    """``baseline`` and ``candidate`` are the sides' builds; their engines are beside them."""

    baseline: str
    candidate: str
    metrics: tuple[str, ...]
    cells: tuple[CellComparison, ...]
    gates: tuple[GateResult, ...] = ()
    include_throttled: bool = False
    baseline_engine: str = DEFAULT_ENGINE
    candidate_engine: str = DEFAULT_ENGINE
    recent: int | None = None  # newest usable trials per side and cell; None: all of them
    # what the two engines' trials did not have in common (harness.analysis.samework)
    differences: tuple[str, ...] = ()

    @property
    def baseline_side(self) -> Side:
        return Side(self.baseline, self.baseline_engine)

    @property
    def candidate_side(self) -> Side:
        return Side(self.candidate, self.candidate_engine)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    def verdict_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for cell in self.cells:
            counts[cell.comparison.verdict] = counts.get(cell.comparison.verdict, 0) + 1
        return dict(sorted(counts.items()))

    def counts_by_metric(self) -> dict[str, dict[str, int]]:
        """Per metric, every verdict (worst first) with its number of cells, zeros included."""
        out = {m: dict.fromkeys(VERDICT_ORDER, 0) for m in self.metrics}
        for cell in self.cells:
            out[cell.metric][cell.comparison.verdict] += 1
        return out

    def worst_first(self) -> list[CellComparison]:
        """The cells by verdict (regression first), then by how far the ratio moved the bad way
        (1.0 where there is no ratio)."""
        def badness(cell: CellComparison) -> tuple[int, float]:
            c = cell.comparison
            ratio = c.ratio if math.isfinite(c.ratio) else 1.0
            return VERDICT_ORDER.index(c.verdict), ratio if c.higher_is_better else -ratio

        return sorted(self.cells, key=badness)

    def failed_gates(self, key: CellKey, metric: str) -> list[GateResult]:
        return [g for g in self.gates
                if not g.passed and g.key == key and g.gate.metric == metric]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "baseline": self.baseline,
            "baseline_engine": self.baseline_engine,
            "candidate": self.candidate,
            "candidate_engine": self.candidate_engine,
            "metrics": list(self.metrics),
            "include_throttled": self.include_throttled,
            "recent": self.recent,
            "verdicts": self.verdict_counts(),
            "differences": list(self.differences),
            "cells": [c.to_json() for c in self.cells],
            "gates": [
                {"spec": g.gate.spec, "cell": None if g.key is None else str(g.key),
                 "passed": g.passed, "message": g.message, "note": g.note}
                for g in self.gates
            ],
            "passed": self.passed,
        }


def _num(value: Any) -> Any:
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


def canonical_gates(specs: Sequence[str]) -> list[Gate]:
    """Parse gate specs and spell their metric canonically (``peak_pss_bytes`` -> ``peak_pss``)."""
    return [dataclasses.replace(g, metric=metric_name(g.metric)) for g in parse_gates(specs)]


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if values.size else float("nan")


def compare_builds(
    trials: pd.DataFrame,
    baseline: str | None,
    candidate: str | None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    gates: Sequence[Gate] = (),
    *,
    include_throttled: bool = False,
    noise: float = 0.03,
    baseline_engine: str | None = None,
    candidate_engine: str | None = None,
    recent: int | None = None,
    sequential: pd.DataFrame | None = None,
) -> BuildComparison:
    """Every cell measured by both sides, per metric, with gate results.

    A side is a build and an engine (``frames.resolve_side``): an engine None means the only
    engine that build has, a build None the only build that engine has; anything ambiguous is a
    ConfigError naming the flag to pass. Metrics named by gates are compared too, so a gate never
    silently checks nothing. ``recent`` keeps each side's newest trials per cell, up to that
    many usable ones (``frames.recent_window``); None keeps them all.

    ``sequential`` (the store's ``adaptive`` table, ``load_sequential``): where a cell's compared
    trials all come from one adaptive run that settled this pair on this metric, that run's
    sequential verdict replaces the fixed-n one (a fixed-n test after optional stopping would
    not keep its error rates); the reason says so.
    """
    base = resolve_side(trials, baseline, baseline_engine)
    cand = resolve_side(trials, candidate, candidate_engine, build_flag="--candidate",
                        engine_flag="--candidate-engine")
    names = tuple(dict.fromkeys([*(metric_name(m) for m in metrics), *(g.metric for g in gates)]))
    pairs = paired_sides(trials, base, cand, names, include_throttled=include_throttled,
                         recent=recent)
    cells: list[CellComparison] = []
    by_metric: dict[str, Mapping[Hashable, Comparison]] = {}
    for metric in names:
        results, groups = _compare_metric(pairs, metric, noise)
        if sequential is not None and not sequential.empty:
            results = _sequential_verdicts(results, trials, sequential, metric, base, cand)
        by_metric[metric] = cast(Mapping[Hashable, Comparison], results)
        for key, comparison in results.items():
            base_group: SampleGroup = pairs[key][0]
            cells.append(CellComparison(
                key=key, label=base_group.label, metric=metric, comparison=comparison,
                median_baseline=_median(groups[key][0]),
                median_candidate=_median(groups[key][1]),
            ))
    cells.sort(key=lambda c: (c.key.device, c.label, c.key.config_id, names.index(c.metric)))
    gate_results = evaluate_gates(gates, by_metric) if gates else []
    if gate_results:
        gate_results = _noise_notes(trials, gate_results, (base.engine, cand.engine),
                                    include_throttled)
    return BuildComparison(base.build, cand.build, names, tuple(cells), tuple(gate_results),
                           include_throttled, base.engine, cand.engine, recent,
                           differences(trials, base, cand, {k.config_id for k in pairs}))


def load_sequential(root: Path) -> pd.DataFrame | None:
    """The store's ``adaptive`` table (why each adaptive A/B pair stopped), None when absent."""
    if not (root / "adaptive").is_dir():
        return None
    return store.read_table(root, "adaptive")


def _sequential_verdicts(results: Mapping[CellKey, Comparison], trials: pd.DataFrame,
                         decisions: pd.DataFrame, metric: str, base: Side, cand: Side,
                         ) -> dict[CellKey, Comparison]:
    chosen = decisions[(decisions["metric"] == metric)
                       & (decisions["baseline_build"] == base.build)
                       & (decisions["candidate_build"] == cand.build)]
    out = dict(results)
    if chosen.empty:
        return out
    latest = chosen.sort_values("decided_at").groupby(["serial", "config_id"]).tail(1)
    found = {(str(r.serial), str(r.config_id)): r for r in latest.itertuples(index=False)}
    sides = trials[trials["build_id"].isin([base.build, cand.build])]
    for key, comparison in results.items():
        record = found.get((key.device, key.config_id))
        if record is None:
            continue
        runs = set(sides[(sides["device_serial"] == key.device)
                         & (sides["config_id"] == key.config_id)]["run_id"])
        if runs != {record.run_id}:
            continue  # other runs' trials are in this comparison: the fixed-n test judges it
        step = "same" if record.step == "same" else str(record.step)
        causes = ("sequential",) + (("cap_reached",) if step == "unstable" else ())
        out[key] = dataclasses.replace(
            comparison, verdict=cast(Any, step), causes=causes,
            reason=f"sequential rule (run {record.run_id}, {record.repetitions} repetitions "
                   f"per side): {record.reason}")
    return out


def _noise_notes(trials: pd.DataFrame, results: Sequence[GateResult], engines: tuple[str, str],
                 include_throttled: bool) -> list[GateResult]:
    """``results`` with a note on each cell whose gate limit lies below its noise floor: the
    smallest change its repetitions can detect (80% power, ``noise.min_detectable_change``), from
    the cell's robust CV over its recent nights in ``trials``. Verdicts and passes are kept."""
    keys = {(g.key.device, g.key.config_id) for g in results if isinstance(g.key, CellKey)}
    if not keys:
        return list(results)
    pairs = pd.MultiIndex.from_frame(trials[["device_serial", "config_id"]].astype(str))
    rows = trials[pairs.isin(list(keys))]
    metrics = sorted({g.gate.metric for g in results})
    floors = floor_index(noise_floors(rows, metrics, include_throttled=include_throttled))
    return [_with_note(g, floors, engines) for g in results]


def _with_note(g: GateResult, floors: Mapping[tuple[str, str, str, str], NoiseFloor],
               engines: tuple[str, str]) -> GateResult:
    c = g.comparison
    if not isinstance(g.key, CellKey) or c is None or min(c.n_baseline, c.n_candidate) < 1:
        return g
    found = [floors[k] for k in ((g.key.device, g.key.config_id, e, g.gate.metric)
                                 for e in dict.fromkeys(engines)) if k in floors]
    if not found:
        return g
    floor = max(found, key=lambda f: f.cv)
    mdc = min_detectable_change(floor.cv, c.n_baseline, n_other=c.n_candidate,
                                alpha=floor.alpha, power=POWERS[0])
    if not mdc > g.gate.limit:
        return g
    note = (f"{g.gate.spec} is below the noise floor of {g.key}: robust CV {floor.cv:.1%} "
            f"over {floor.nights} nights, so {c.n_baseline}/{c.n_candidate} repetitions "
            f"detect changes of {mdc:.1%} or more ({POWERS[0]:.0%} power, "
            f"alpha {floor.alpha:g}); the verdict is unchanged")
    return dataclasses.replace(g, note=note)


def _compare_metric(pairs: Mapping[CellKey, tuple[SampleGroup, SampleGroup]], metric: str,
                    noise: float,
                    ) -> tuple[dict[CellKey, Comparison], dict[CellKey, tuple[np.ndarray,
                                                                            np.ndarray]]]:
    """One metric over every paired cell: one Benjamini-Hochberg family."""
    groups: dict[CellKey, tuple[np.ndarray, np.ndarray]] = {}
    throttled: dict[CellKey, tuple[int, int]] = {}
    for key, (base, cand) in pairs.items():
        groups[key] = (base.values[metric], cand.values[metric])
        throttled[key] = (base.n_throttled_excluded, cand.n_throttled_excluded)
    results = compare_many(groups, higher_is_better=higher_is_better(metric), noise=noise,
                           throttled=throttled)
    return results, groups
