"""Regression gates: short spec strings such as ``tg_tps:-3%`` checked against comparisons.

The sign of a spec names the bad side: ``-`` means "must not drop by more than N%" (throughput),
``+`` means "must not rise by more than N%" (memory, latency). A gate fails on a cell when
either

1. the whole confidence interval of the ratio lies beyond the limit on the bad side (the breach
   is certain whatever the verdict, unless the cell had too few repetitions for an interval to
   mean anything), or
2. the point estimate lies beyond the limit and the cell's verdict is ``regression``.

So a noisy cell whose estimate alone crosses the limit does not fail CI, and a cell that is
certainly beyond the limit fails even if the noise band or significance left it ``unstable``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from harness.analysis.compare import Comparison
from harness.errors import ConfigError

Direction = Literal["decrease", "increase"]
_SPEC = re.compile(r"^(?P<metric>[A-Za-z_][A-Za-z0-9_.]*):(?P<sign>[+-])(?P<pct>\d+(?:\.\d+)?)%$")
_FORM = "METRIC:-N% (must not drop more than N%) or METRIC:+N% (must not rise more than N%)"


@dataclass(frozen=True)
class Gate:
    """One parsed gate; ``limit`` is a fraction (0.03 for 3%)."""

    metric: str
    limit: float
    direction: Direction

    @property
    def spec(self) -> str:
        sign = "-" if self.direction == "decrease" else "+"
        return f"{self.metric}:{sign}{self.limit * 100:g}%"

    @property
    def threshold(self) -> float:
        """The ratio at the limit: 0.97 for ``-3%``, 1.05 for ``+5%``."""
        return 1.0 - self.limit if self.direction == "decrease" else 1.0 + self.limit

    def beyond(self, ratio: float) -> bool:
        """Whether a ratio lies strictly beyond the limit on the bad side."""
        if self.direction == "decrease":
            return ratio < self.threshold
        return ratio > self.threshold


@dataclass(frozen=True)
class GateResult:
    """The outcome of one gate on one cell (``key`` is None when the metric had no cells)."""

    gate: Gate
    key: Hashable | None
    passed: bool
    message: str
    comparison: Comparison | None = None
    # said, not decided: e.g. the limit lies below the cell's noise floor (``ab.compare_builds``)
    note: str | None = None


def parse_gate(spec: str) -> Gate:
    """Parse ``tg_tps:-3%``; a ConfigError naming the spec and the allowed form otherwise."""
    match = _SPEC.match(spec.strip())
    if match is None:
        raise ConfigError(f"bad gate {spec!r}: expected {_FORM}, e.g. tg_tps:-3%")
    limit = float(match["pct"]) / 100.0
    direction: Direction = "decrease" if match["sign"] == "-" else "increase"
    if direction == "decrease" and limit >= 1.0:
        raise ConfigError(f"bad gate {spec!r}: a drop limit must be below 100%, e.g. tg_tps:-3%")
    return Gate(metric=match["metric"], limit=limit, direction=direction)


def parse_gates(specs: Iterable[str]) -> list[Gate]:
    """Parse several specs, failing on the first bad one."""
    return [parse_gate(spec) for spec in specs]


def _check(gate: Gate, key: Hashable, c: Comparison) -> GateResult:
    interval = f"{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]"
    if not math.isfinite(c.ratio):
        return GateResult(gate, key, True, f"{gate.spec} not checked on {key}: no ratio", c)
    bad_bound = c.ci_high if gate.direction == "decrease" else c.ci_low
    interval_beyond = (
        math.isfinite(bad_bound) and gate.beyond(bad_bound) and "too_few_reps" not in c.causes
    )
    if interval_beyond:
        why = f"whole interval beyond {gate.threshold:.3f} ({c.verdict})"
        return GateResult(gate, key, False, f"{gate.spec} failed on {key}: {interval} {why}", c)
    if c.verdict == "regression" and gate.beyond(c.ratio):
        why = f"regression with estimate beyond {gate.threshold:.3f}"
        return GateResult(gate, key, False, f"{gate.spec} failed on {key}: {interval} {why}", c)
    return GateResult(gate, key, True, f"{gate.spec} passed on {key}: {interval} ({c.verdict})", c)


def evaluate_gates(
    gates: Iterable[Gate], comparisons: Mapping[str, Mapping[Hashable, Comparison]]
) -> list[GateResult]:
    """Check every gate on every cell of its metric: one result per gate and cell.

    ``comparisons`` maps a metric name to the output of ``compare_many`` for that metric. A gate
    on a metric that was not compared at all is a ConfigError (most likely a typo that would
    otherwise pass silently); a compared metric with no common cells yields one passing result
    that says so.
    """
    results: list[GateResult] = []
    for gate in gates:
        if gate.metric not in comparisons:
            known = ", ".join(sorted(comparisons)) or "none"
            raise ConfigError(
                f"gate {gate.spec}: metric {gate.metric!r} was not compared (compared: {known})"
            )
        cells = comparisons[gate.metric]
        if not cells:
            results.append(GateResult(gate, None, True, f"{gate.spec}: no cells to check"))
        results.extend(_check(gate, key, c) for key, c in cells.items())
    return results


def all_passed(results: Iterable[GateResult]) -> bool:
    """True when no gate failed; the CLI's exit code is 1 otherwise."""
    return all(r.passed for r in results)
