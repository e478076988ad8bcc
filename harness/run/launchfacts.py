"""What one launch measured beyond its rates: its timing on the phone's clock, the sustained
series and its summary, and energy per token (the schema-6 columns), as pure functions.

The launch writes the phone's uptime when it starts (``t0``) and the watcher writes it when the
engine is gone (``t1``); power readings carry the same clock. Windows and series points are
stored in milliseconds since the launch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from harness.cell import Cell
from harness.engines.base import Measurement
from harness.run import energy as power
from harness.run import sustained

# columns a failed trial keeps (the rest only mean something for an ok one)
ALWAYS = frozenset({"launched_at", "launch_uptime_s", "sustained_reps", "throttle_reported_s"})


@dataclass(frozen=True)
class Idle:
    """The phone's draw just before the launch."""

    readings: tuple[power.Reading, ...] = ()  # power_supply
    counters: tuple[power.CounterReading, ...] = ()  # dumpsys battery, when power_supply is not
    unreadable: bool = False


@dataclass(frozen=True)
class Timing:
    t0: float | None  # phone uptime at the launch
    t1: float | None  # phone uptime once the engine was gone
    readings: tuple[power.Reading, ...]
    idle: Idle
    counter_end: power.CounterReading | None = None

    @classmethod
    def read(cls, after: Mapping[str, str], wall_s: float | None, idle: Idle,
             counter_end: power.CounterReading | None = None) -> Timing:
        t0 = _first_float(after.get("t0", ""))
        t1 = _first_float(after.get("t1", ""))
        if t1 is None and t0 is not None and wall_s is not None:
            t1 = t0 + wall_s  # no watcher: the host's measure of the launch
        return cls(t0, t1, tuple(power.parse_readings(after.get("pwr", ""))), idle, counter_end)


def _first_float(text: str) -> float | None:
    words = text.split()
    try:
        value = float(words[0]) if words else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _rates(measurements: Sequence[Measurement], name: str) -> list[float]:
    values = [getattr(m, name) for m in measurements]
    return [v for v in values if v is not None and math.isfinite(v) and v > 0]


def rep_seconds(measurement: Measurement, cell: Cell) -> float:
    """The length of one repetition of the cell, from one repetition's rates."""
    total = 0.0
    if cell.n_gen and measurement.gen_tps:
        total += cell.n_gen / measurement.gen_tps
    if (cell.n_prompt or cell.n_depth) and measurement.prompt_tps:
        total += (cell.n_prompt + cell.n_depth) / measurement.prompt_tps
    return total if total > 0 else float("nan")


def headline(measurements: Sequence[Measurement], cell: Cell) -> Measurement | None:
    """The trial's rates: its one repetition, or a sustained launch's medians."""
    if not measurements:
        return None
    if not cell.sustained_s or len(measurements) == 1:
        return measurements[0]
    pp, tg = _rates(measurements, "prompt_tps"), _rates(measurements, "gen_tps")
    ttft = [m.ttft_s for m in measurements if m.ttft_s is not None]
    return Measurement(0, statistics.median(pp) if pp else None,
                       statistics.median(tg) if tg else None,
                       statistics.median(ttft) if ttft else None)


def _gaps(measurements: Sequence[Measurement], cell: Cell) -> tuple[float, float]:
    """(untimed depth fill before each repetition, the generation test's set-up)."""
    pp, tg = _rates(measurements, "prompt_tps"), _rates(measurements, "gen_tps")
    fill = cell.n_depth / statistics.median(pp) if cell.n_depth and pp else 0.0
    warmup = 1 / statistics.median(tg) if tg else 0.0  # llama-bench's one-token warm-up
    return fill, warmup + fill


def _windows(measurements: Sequence[Measurement], cell: Cell, end: float) -> list[power.Window]:
    fill, gap = _gaps(measurements, cell)
    pp_s = sum(cell.n_prompt / v for v in _rates(measurements, "prompt_tps")) if cell.n_prompt \
        else 0.0
    tg = _rates(measurements, "gen_tps")
    tg_s = sum(cell.n_gen / v for v in tg) + fill * max(len(tg) - 1, 0) if cell.n_gen else 0.0
    pp_tokens = cell.n_prompt * len(_rates(measurements, "prompt_tps"))
    return power.windows_from_timings(end, pp_s, tg_s, pp_tokens, cell.n_gen * len(tg), gap)


def _ms(uptime: float, t0: float) -> int:
    return round((uptime - t0) * 1000)


def measured(cell: Cell, measurements: Sequence[Measurement], timing: Timing,
             launched_at: datetime, energy_enabled: bool, charging: bool | None = None,
             throttle: sustained.Report | None = None,
             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the schema-6 trial columns, extra sample rows as SampleRecord field values);
    ``throttle``: when the phone reported throttling (it dates a sustained series' throttle)."""
    t0, t1 = timing.t0, timing.t1
    columns: dict[str, Any] = {"launched_at": launched_at, "launch_uptime_s": t0,
                               "throttle_reported_s": throttle.at_s if throttle else None}
    rows: list[dict[str, Any]] = []
    if cell.sustained_s:
        columns["sustained_reps"] = len(measurements) or None
        if measurements and t0 is not None and t1 is not None:
            fill, _ = _gaps(measurements, cell)
            rates = [m.gen_tps for m in measurements]
            lengths = [cell.n_gen / r if r and r > 0 and math.isfinite(r) else 0.0
                       for r in rates]
            points = sustained.series(rates, lengths, t1 - t0, fill)
            summary = sustained.summarise(points, throttle)
            columns.update(time_to_throttle_s=summary.time_to_throttle_s,
                           steady_state_ratio=summary.steady_state_ratio,
                           sustained_tg_tps=summary.sustained_tps)
            rows += [{"t_ms": round(p.t_s * 1000), "tg_tps": p.tps} for p in points]
    if not energy_enabled:
        return columns, rows
    if t0 is None or t1 is None or not measurements:
        columns.update(energy_valid=False,
                       energy_invalid_reason="no launch timestamps or no measurement")
        return columns, rows
    windows = _windows(measurements, cell, t1)
    for window in windows:
        key = "pp" if window.name == "prefill" else "tg"
        columns[f"{key}_start_ms"] = _ms(window.start_s, t0)
        columns[f"{key}_end_ms"] = _ms(window.end_s, t0)
    idle = timing.idle
    if idle.readings:
        result = power.from_readings(idle.readings, timing.readings, windows, charging)
        units = power.detect_units([*idle.readings, *timing.readings])
        if units is not None:
            rows += [{"t_ms": _ms(r.uptime_s, t0), "power_w": power.watts(r, units)}
                     for r in (*idle.readings, *timing.readings)]
    elif idle.counters and timing.counter_end is not None:
        result = power.from_counter(idle.counters, (idle.counters[-1], timing.counter_end),
                                    windows)
    else:
        result = power.Energy("none", False, "the battery cannot be read: no power_supply "
                                             "files and no charge counter in dumpsys battery")
    columns.update(
        energy_source=result.source, energy_units=result.units, energy_valid=result.valid,
        energy_invalid_reason=result.reason, idle_power_w=result.idle_w,
        pp_power_w=result.pp_power_w, tg_power_w=result.tg_power_w,
        pp_j_per_token=result.pp_j_per_token, tg_j_per_token=result.tg_j_per_token,
        energy_samples=result.readings)
    return columns, rows
