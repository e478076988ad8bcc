"""Sustained runs: one launch that generates back to back, and what its throughput did.

A sustained cell runs the engine once with enough repetitions to fill ``sustained_s`` seconds
(llama-bench runs them without a pause; the count comes from one short calibration launch per
cell and runner). Each repetition is one point of the series: its generation rate, at the time
its repetition ended, counted back from the engine's exit (the last repetition ends there).
From the series:

- **time to throttle**: where the slowdown that lasts begins. A point is *confirmed slow* when it
  and the median of the ``CONFIRM_POINTS`` points from it are below ``THROTTLE_SHARE`` of the
  initial median (a slow point or two is noise). The series' biggest lasting drop is found as
  the best single step in log rate (least squares); the onset is the first confirmed-slow point
  after the last stretch of ``CONFIRM_POINTS`` points back at speed before that step. So a
  second-long stall of a busy host early in the run is passed over when the phone recovered
  from it and throttled later, while a throttle that deepens in stages counts from its first
  stage. No confirmed-slow point: no throttle.
  When the phone itself reported throttling during the launch (a ``Report``: the first of the
  sampler's readings that found its big cores capped or a thermal status of MODERATE and above,
  and the reading before it, which did not), the throttle began between those two readings:
  the onset is the first point ending after the calm reading that is confirmed slow against
  the rate just before it (the median of the last ``max(3, 5%)`` points that ended by then).
  A slowdown the phone did not report, such as the host's load rising before the throttle or
  its burst after it, then moves the onset by at most the readings' interval. When no such
  point follows, or the phone reported throttling from its first reading on, the rule above
  decides;
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
class Report:
    """When the phone said it throttled: seconds since the launch of the first reading that
    said so, and of the reading before it that did not (None: there was none)."""

    at_s: float
    calm_s: float | None = None


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


def _head(points: Sequence[Point]) -> int:
    return max(3, math.ceil(0.05 * len(points)))


def _initial(points: Sequence[Point]) -> float | None:
    first = [p.tps for p in points[:_head(points)]]
    return statistics.median(first) if first else None


def summarise(points: Sequence[Point], report: Report | None = None) -> Summary:
    """The series' summary; ``report``: when the phone reported throttling (None: it did not,
    or it cannot say)."""
    if len(points) < MIN_REPS:
        return Summary(None, None, None)
    initial = _initial(points)
    if not initial or initial <= 0:
        return Summary(None, None, None)
    tail = [p.tps for p in points[-max(1, len(points) // 5):]]
    sustained = statistics.median(tail)
    onset = reported_onset(points, report) if report is not None else None
    if onset is None:
        onset = throttle_onset([p.tps for p in points], THROTTLE_SHARE * initial)
    throttle_at = points[onset].t_s if onset is not None else None
    return Summary(throttle_at, sustained / initial, sustained)


def step_index(rates: Sequence[float]) -> int | None:
    """The first index of the second segment of the best one-step fit to the log rates (least
    squares, O(n) with prefix sums); None with fewer than two points or no drop at the step."""
    logs = [math.log(r) for r in rates]
    n = len(logs)
    if n < 2:
        return None
    total = sum(logs)
    best: tuple[float, int] | None = None
    head = 0.0
    for k in range(1, n):
        head += logs[k - 1]
        tail = total - head
        # the fit's residual sum of squares falls by this much when the step is at k
        gain = head * head / k + tail * tail / (n - k)
        if head / k > tail / (n - k) and (best is None or gain > best[0]):
            best = (gain, k)
    return best[1] if best else None


def throttle_onset(rates: Sequence[float], slow_below: float) -> int | None:
    """The index where the lasting slowdown begins (see the module's docstring), or None."""
    def median_from(i: int) -> float:
        return statistics.median(rates[i:i + CONFIRM_POINTS])

    last = len(rates) - CONFIRM_POINTS + 1
    confirmed = [i for i in range(last) if rates[i] < slow_below and median_from(i) < slow_below]
    if not confirmed:
        return None
    step = step_index(rates)
    if step is None:
        return confirmed[0]
    back_at_speed = [i for i in range(min(step, last)) if median_from(i) >= slow_below]
    after = back_at_speed[-1] if back_at_speed else -1
    later = [i for i in confirmed if i > after]
    return later[0] if later else confirmed[0]


def reported_onset(points: Sequence[Point], report: Report) -> int | None:
    """The onset of the throttle the phone reported (see the module's docstring), or None."""
    if report.calm_s is None:  # throttled from its first reading: not begun during the launch
        return None
    start = next((i for i, p in enumerate(points) if p.t_s > report.calm_s), None)
    if start is None:
        return None
    before = [p.tps for p in points[:start]][-_head(points):]
    level = statistics.median(before) if len(before) >= 3 else _initial(points)
    if not level or level <= 0:
        return None
    slow_below = THROTTLE_SHARE * level
    rates = [p.tps for p in points]
    for i in range(start, len(rates) - CONFIRM_POINTS + 1):
        if rates[i] < slow_below and statistics.median(rates[i:i + CONFIRM_POINTS]) < slow_below:
            return i
    return None
