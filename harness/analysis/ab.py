"""Compare two builds over a whole store: every device x config x metric, then the gates.

The statistics are ``compare.compare_many`` (one call per metric, so Benjamini-Hochberg adjusts
across the cells of that metric only) and ``gates.evaluate_gates``; this module only decides
which trials feed them (``frames``) and lays the result out for the CLI, JSON and JUnit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from harness.analysis.compare import Comparison, compare_many, higher_is_better
from harness.analysis.frames import (
    DEFAULT_METRICS,
    CellKey,
    SampleGroup,
    metric_name,
    paired_groups,
)
from harness.analysis.gates import Gate, GateResult, evaluate_gates, parse_gates

SCHEMA_VERSION = 1


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
    baseline: str
    candidate: str
    metrics: tuple[str, ...]
    cells: tuple[CellComparison, ...]
    gates: tuple[GateResult, ...] = ()
    include_throttled: bool = False

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    def verdict_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for cell in self.cells:
            counts[cell.comparison.verdict] = counts.get(cell.comparison.verdict, 0) + 1
        return dict(sorted(counts.items()))

    def failed_gates(self, key: CellKey, metric: str) -> list[GateResult]:
        return [g for g in self.gates
                if not g.passed and g.key == key and g.gate.metric == metric]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "metrics": list(self.metrics),
            "include_throttled": self.include_throttled,
            "verdicts": self.verdict_counts(),
            "cells": [c.to_json() for c in self.cells],
            "gates": [
                {"spec": g.gate.spec, "cell": None if g.key is None else str(g.key),
                 "passed": g.passed, "message": g.message}
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
    baseline: str,
    candidate: str,
    metrics: Sequence[str] = DEFAULT_METRICS,
    gates: Sequence[Gate] = (),
    *,
    include_throttled: bool = False,
    noise: float = 0.03,
) -> BuildComparison:
    """Every cell measured with both builds, per metric, with gate results.

    Metrics named by gates are compared too, so a gate never silently checks nothing.
    """
    names = tuple(dict.fromkeys([*(metric_name(m) for m in metrics), *(g.metric for g in gates)]))
    pairs = paired_groups(trials, baseline, candidate, names, include_throttled=include_throttled)
    cells: list[CellComparison] = []
    by_metric: dict[str, Mapping[Hashable, Comparison]] = {}
    for metric in names:
        groups: dict[CellKey, tuple[np.ndarray, np.ndarray]] = {}
        throttled: dict[CellKey, tuple[int, int]] = {}
        for key, (base, cand) in pairs.items():
            groups[key] = (base.values[metric], cand.values[metric])
            throttled[key] = (base.n_throttled_excluded, cand.n_throttled_excluded)
        results = compare_many(groups, higher_is_better=higher_is_better(metric), noise=noise,
                               throttled=throttled)
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
    return BuildComparison(baseline, candidate, names, tuple(cells), tuple(gate_results),
                           include_throttled)
