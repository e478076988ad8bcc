"""Adaptive repetitions: A/B pairs added to a configuration until its verdict is settled.

With ``adaptive:`` in the matrix, each configuration that has the baseline build and at least one
other build first runs ``min_repetitions`` interleaved rounds, like any matrix; then, after every
round, ``harness.analysis.sequential.next_step`` judges each candidate build against the
baseline on the chosen metric, and another round (the baseline and every candidate still open,
in alternating order) runs until each candidate is settled: a regression, an improvement, "same"
(no change of the chosen size), or ``unstable`` at the cap. Why each one stopped is kept as an
``AdaptiveRecord`` (the store's ``adaptive`` table).

Which values count: a trial that ran and passed (``ok``, valid, configuration applied) gives its
metric; any other outcome is a spent repetition without a value (NaN), so a cell that keeps
failing still reaches the cap. Throttled trials count: the rule's trimmed means treat them as the
slow outliers they are. This module is pure; the runner runs the rounds it asks for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from harness.analysis.frames import usable_mask
from harness.analysis.sequential import Decision, SequentialRule, next_step
from harness.cell import Cell
from harness.matrix import AdaptivePolicy
from harness.metrics import metric as metric_of
from harness.records import AdaptiveRecord, TrialRecord
from harness.run.order import TrialSpec


def rule_of(policy: AdaptivePolicy) -> SequentialRule:
    return SequentialRule(effect=policy.effect, alpha=policy.alpha, beta=policy.beta,
                          min_n=policy.min_repetitions, max_n=policy.max_repetitions)


def value_of(trial: TrialRecord, metric: str) -> float:
    """The trial's metric if it counts, else NaN (a repetition spent without a value)."""
    return values_from_frame(pd.DataFrame([asdict(trial)]), metric)[trial.cell_id][0]


def values_from_frame(trials: pd.DataFrame, metric: str) -> dict[str, list[float]]:
    """Per cell, in the order they started: each trial's metric where it counts (the commands'
    rule, ``frames.usable_mask``, throttled ones included: the rule weighs those itself), and
    NaN where it does not (a repetition spent without a value)."""
    ordered = trials.sort_values("started_at", kind="stable")
    values = pd.to_numeric(ordered[metric_of(metric).column], errors="coerce").astype(float)
    counts = usable_mask(ordered, include_throttled=True).to_numpy() & (values > 0).to_numpy() \
        & np.isfinite(values.to_numpy())
    out: dict[str, list[float]] = {}
    for cell_id, value, good in zip(ordered["cell_id"].astype(str), values, counts,
                                    strict=True):
        out.setdefault(cell_id, []).append(float(value) if good else math.nan)
    return out


def throttled_from_frame(trials: pd.DataFrame) -> dict[str, list[bool]]:
    """Each stored trial's throttle flag per cell, in the order they started."""
    out: dict[str, list[bool]] = {}
    for row in trials.sort_values("started_at").to_dict("records"):
        out.setdefault(str(row["cell_id"]), []).append(row.get("throttled") is True)
    return out


def planned_cells(cells: Sequence[Cell], policy: AdaptivePolicy | None) -> list[Cell]:
    """The cells with the adaptive configurations' first rounds as their repetitions."""
    if policy is None:
        return list(cells)
    compared = {c.config_id for c in cells if c.build == policy.baseline} & \
        {c.config_id for c in cells if c.build != policy.baseline}
    return [replace(c, repetitions=policy.min_repetitions) if c.config_id in compared else c
            for c in cells]


@dataclass(frozen=True)
class Pairing:
    """One configuration's baseline cell and its candidate cells."""

    baseline: Cell
    candidates: tuple[Cell, ...]


def pairing(job: Sequence[TrialSpec], cells: Sequence[Cell], policy: AdaptivePolicy | None,
            runnable: set[str] | None = None) -> Pairing | None:
    """The comparison a job's configuration takes part in, or None (not adaptive). Only cells
    this phone runs (``runnable`` cell ids) take part: a skipped or refused cell has no values
    to add, and rounds of it would only spend the cap."""
    if policy is None or not job:
        return None
    config = job[0].cell.config_id
    group = [c for c in cells if c.config_id == config
             and (runnable is None or c.cell_id in runnable)]
    base = [c for c in group if c.build == policy.baseline]
    others = tuple(c for c in group if c.build != policy.baseline)
    if len(base) != 1 or not others:
        return None
    return Pairing(base[0], others)


def judge(pair: Pairing, values: Mapping[str, Sequence[float]], policy: AdaptivePolicy,
          throttled: Mapping[str, Sequence[bool]] | None = None) -> dict[str, Decision]:
    """The rule's decision for every candidate, from all values so far (run order).

    A verdict is not accepted while more than half of either side's trials were throttled
    (``throttled`` per cell, run order): no trimmed mean survives a majority of outliers, so the
    pair goes on, and ends ``unstable`` at the cap (``compare`` has the same guard).
    """
    rule = rule_of(policy)
    base = values.get(pair.baseline.cell_id, ())
    out = {}
    for cell in pair.candidates:
        decision = next_step(base, values.get(cell.cell_id, ()), rule)
        hot = [name for name, cell_id in (("the baseline's", pair.baseline.cell_id),
                                          (f"{cell.build}'s", cell.cell_id))
               if _majority((throttled or {}).get(cell_id, ()))]
        if decision.step in ("regression", "improvement") and hot:
            spent = max(len(base), len(values.get(cell.cell_id, ())))
            decision = replace(
                decision, step="unstable" if spent >= rule.max_n else "continue",
                reason=f"{decision.reason}; not accepted: more than half of "
                       f"{' and '.join(hot)} trials were throttled")
        out[cell.cell_id] = decision
    return out


def _majority(flags: Sequence[bool]) -> bool:
    return bool(flags) and sum(flags) * 2 > len(flags)


def next_round(pair: Pairing, open_ids: Sequence[str], run_id: str, serial: str,
               rep: int) -> list[TrialSpec]:
    """The next round's trials: the baseline and the open candidates, the order alternating
    with the round's number, so drift lands on both sides alike."""
    cells = [pair.baseline, *(c for c in pair.candidates if c.cell_id in open_ids)]
    if rep % 2:
        cells.reverse()
    return [TrialSpec(run_id, serial, cell, rep) for cell in cells]


def record(pair: Pairing, candidate: Cell, decision: Decision, policy: AdaptivePolicy,
           run_id: str, serial: str, spent: int, now: datetime | None = None) -> AdaptiveRecord:
    def number(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return AdaptiveRecord(
        run_id=run_id, serial=serial, config_id=candidate.config_id, metric=policy.metric,
        baseline_build=pair.baseline.build, candidate_build=candidate.build,
        baseline_cell_id=pair.baseline.cell_id, candidate_cell_id=candidate.cell_id,
        step=decision.step, reason=decision.reason, n_baseline=decision.n_a,
        n_candidate=decision.n_b, repetitions=spent, ratio=number(decision.ratio),
        llr_regression=number(decision.llr_regression),
        llr_improvement=number(decision.llr_improvement),
        effect=policy.effect, alpha=policy.alpha, beta=policy.beta,
        max_repetitions=policy.max_repetitions, decided_at=now or datetime.now(UTC))


def first_free_rep(job: Sequence[TrialSpec], done_ids: Sequence[str] | set[str]) -> int:
    """The repetition index after every one this job's cells already used (run now or stored
    by an earlier session of a resumed run), so an added round never reuses a trial id."""
    prefixes = {f"{spec.run_id}/{spec.serial}/{spec.cell.cell_id}/" for spec in job}
    used = [spec.rep for spec in job]
    for trial_id in done_ids:
        head, _, rep = trial_id.rpartition("/")
        if f"{head}/" in prefixes and rep.isdigit():
            used.append(int(rep))
    return max(used, default=-1) + 1
