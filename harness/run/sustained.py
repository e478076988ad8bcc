"""Sustained runs: one launch that generates back to back, and what its throughput did.

A sustained cell runs the engine once with enough repetitions to fill ``sustained_s`` seconds
(llama-bench runs them without a pause; the count comes from one short calibration launch per
cell and runner). Each repetition is one point of the series: its generation rate, at the time
its repetition ended, counted back from the engine's exit (the last repetition ends there).
From the series:

- **time to throttle**: the end of the first repetition below ``THROTTLE_SHARE`` of the initial
  median from which the median of ``CONFIRM_POINTS`` points is below it too (a slow point or
  two on a noisy host is not a throttle; a phone that throttles stays slow);
- **steady-state ratio**: the median of the last fifth over the initial median;
- **sustained rate**: the median of the last fifth.

The initial median is that of the first ``max(3, 5%)`` points.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

THROTTLE_SHARE = 0.9
CONFIRM_POINTS = 5  # a dip must hold over this many points to count as throttling
MIN_REPS = 5
MAX_REPS = 5000


@dataclass(frozen=True)
class Point:
    t_s: float  # seconds since the launch, at the end of the repetition
    tps: float


@dataclass(frozen=True)
class Summary:
    time_to_throttle_s: float | None
    steady_state_ratio: float | None
    sustained_tps: float | None


def repetitions_for(duration_s: float, rep_s: float) -> int:
    """Repetitions that fill ``duration_s`` when one takes ``rep_s`` (at least MIN_REPS)."""
    if not rep_s > 0 or not math.isfinite(rep_s):
        return MIN_REPS
    return max(MIN_REPS, min(MAX_REPS, math.ceil(duration_s / rep_s)))


def series(rates: Sequence[float | None], durations_s: Sequence[float], end_s: float,
           gap_s: float = 0.0) -> list[Point]:
    """Points of repetitions whose rates and lengths are given in order, the last ending at
    ``end_s``; ``gap_s`` is the untimed work before each repetition (a depth fill)."""
    points: list[Point] = []
    t = end_s
    for rate, seconds in zip(reversed(rates), reversed(durations_s), strict=True):
        if rate is not None and math.isfinite(rate):
            points.append(Point(t, rate))
        t -= seconds + gap_s
    return points[::-1]


def _initial(points: Sequence[Point]) -> float | None:
    head = max(3, math.ceil(0.05 * len(points)))
    first = [p.tps for p in points[:head]]
    return statistics.median(first) if first else None


def summarise(points: Sequence[Point]) -> Summary:
    if len(points) < MIN_REPS:
        return Summary(None, None, None)
    initial = _initial(points)
    if not initial or initial <= 0:
        return Summary(None, None, None)
    tail = [p.tps for p in points[-max(1, len(points) // 5):]]
    sustained = statistics.median(tail)
    throttle_at: float | None = None
    for i in range(len(points) - CONFIRM_POINTS + 1):
        window = [p.tps for p in points[i:i + CONFIRM_POINTS]]
        if points[i].tps < THROTTLE_SHARE * initial and \
                statistics.median(window) < THROTTLE_SHARE * initial:
            throttle_at = points[i].t_s
            break
    return Summary(throttle_at, sustained / initial, sustained)
