"""Energy per token from the battery's own gauge: pure functions over power readings.

The on-device watcher appends one line per reading while the engine runs, and an idle loop
reads the same files just before the launch::

    <uptime s> <current_now> <voltage_now> <status>

read from ``/sys/class/power_supply/battery``. Units and sign conventions differ by vendor:
``current_now`` is in µA on most phones and mA on some, negative while discharging on some
(Pixels) and positive on others; ``voltage_now`` is µV (a few report mV). ``detect_units``
decides from the readings themselves (a phone draws between 20 mW and 30 W) and the result is
recorded with the figures. The idle draw is the median of the idle readings; the energy of a
phase is its mean draw above idle (each reading holding until the next, as a gauge updates in
steps) times its length, so the engine's own cost is what remains.

A figure is only given when it is honest: a phone that is charging (USB power mixes into the
gauge) or a window with too few readings (a gauge that updates slower than the trial) gives an
invalid energy with the reason instead. Where the power_supply files cannot be read, two readings
of ``dumpsys battery``'s charge counter, before and after the launch, give the energy of the
whole launch, valid only when the counter moved by many of its steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from harness.android.battery import is_charging

BATTERY = "/sys/class/power_supply/battery"
POWER_FILES = ("current_now", "voltage_now", "status")
MIN_WINDOW_READINGS = 5  # fewer readings in a window and its mean draw is not a measurement
PLAUSIBLE_W = (0.02, 30.0)  # what a phone can draw: tells µA from mA
MIN_COUNTER_STEPS = 10  # a charge counter must move at least this many of its steps
COARSE_COUNTER_UAH = 1000  # counters that only move in whole mAh (most gauges without µAh)


@dataclass(frozen=True)
class Reading:
    uptime_s: float
    current: float  # as the file says, unit and sign unknown
    voltage: float
    status: str


@dataclass(frozen=True)
class Units:
    current_scale: float  # multiply current_now by this for amperes of draw (sign included)
    voltage_scale: float  # multiply voltage_now by this for volts
    text: str  # e.g. "current_now uA, negative while discharging; voltage_now uV"


@dataclass(frozen=True)
class Window:
    name: str  # "prefill" or "decode"
    start_s: float  # uptime
    end_s: float
    tokens: int

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Energy:
    """What the trial stores; ``valid`` False means ``reason`` replaces the figures (a valid
    result may still name a window too short for its own figure, which is then None)."""

    source: str
    valid: bool
    reason: str | None = None
    units: str | None = None
    idle_w: float | None = None
    pp_power_w: float | None = None
    tg_power_w: float | None = None
    pp_j_per_token: float | None = None
    tg_j_per_token: float | None = None
    readings: int | None = None


def parse_readings(text: str) -> list[Reading]:
    """Lines of ``uptime current voltage status``; anything else (a denied read) is skipped."""
    out: list[Reading] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        try:
            uptime, current, voltage = float(parts[0]), float(parts[1]), float(parts[2])
        except ValueError:
            continue
        if not all(math.isfinite(v) for v in (uptime, current, voltage)):
            continue
        out.append(Reading(uptime, current, voltage, " ".join(parts[3:])))
    return out


def reading_command(count: int, interval_s: float) -> str:
    """A shell loop (mksh builtins and ``sleep``) printing ``count`` readings."""
    files = " ".join(f"{BATTERY}/{name}" for name in POWER_FILES)
    return (f"i=0; while [ $i -lt {int(count)} ]; do read -r u _ < /proc/uptime; "
            f"set -- {files}; read -r c < $1; read -r v < $2; read -r s < $3; "
            f"echo \"$u $c $v $s\"; i=$((i+1)); sleep {interval_s:g}; done")


def detect_units(readings: Sequence[Reading]) -> Units | None:
    """Units and sign from the readings; None when they fit no known convention."""
    if not readings:
        return None
    volts = statistics.median(abs(r.voltage) for r in readings)
    if 2.5e6 <= volts <= 5.5e6:
        v_scale, v_name = 1e-6, "uV"
    elif 2500 <= volts <= 5500:
        v_scale, v_name = 1e-3, "mV"
    elif 2.5 <= volts <= 5.5:
        v_scale, v_name = 1.0, "V"
    else:
        return None
    discharging = [r.current for r in readings if not is_charging(r.status)] or \
        [r.current for r in readings]
    current = statistics.median(discharging)
    sign = -1.0 if current < 0 else 1.0
    amps_if_ua = abs(current) * 1e-6
    low, high = PLAUSIBLE_W
    if low <= amps_if_ua * volts * v_scale <= high:
        c_scale, c_name = 1e-6, "uA"
    elif low <= abs(current) * 1e-3 * volts * v_scale <= high:
        c_scale, c_name = 1e-3, "mA"
    else:
        return None
    direction = "negative" if sign < 0 else "positive"
    return Units(c_scale * sign, v_scale,
                 f"current_now {c_name}, {direction} while discharging; voltage_now {v_name}")


def watts(reading: Reading, units: Units) -> float:
    """The battery's draw in watts (positive: from the battery)."""
    return reading.current * units.current_scale * reading.voltage * units.voltage_scale


def _invalid(source: str, reason: str, units: Units | None = None,
             idle: float | None = None, readings: int | None = None) -> Energy:
    return Energy(source, False, reason, units.text if units else None, idle, readings=readings)


def from_readings(idle: Sequence[Reading], during: Sequence[Reading], windows: Sequence[Window],
                  charging_before: bool | None = None) -> Energy:
    """Joules per token of each window, idle subtracted, from the power_supply readings."""
    source = "power_supply"
    if charging_before or any(is_charging(r.status) for r in [*idle, *during]):
        return _invalid(source, "the phone was charging: USB power contaminates the battery "
                                "reading (unplug it, or use a phone that can stop charging)")
    units = detect_units([*idle, *during])
    if units is None:
        return _invalid(source, "current_now/voltage_now fit no known unit (uA/mA, uV/mV)")
    if len(idle) < 2:
        return _invalid(source, f"{len(idle)} idle reading(s) before the launch (need 2)", units)
    idle_w = statistics.median(watts(r, units) for r in idle)
    return figures(source, units.text, idle_w,
                   [(r.uptime_s, watts(r, units)) for r in during], windows)


def figures(source: str, units: str | None, idle_w: float,
            timed_w: Sequence[tuple[float, float]], windows: Sequence[Window]) -> Energy:
    """Each window's mean draw above ``idle_w`` and joules per token, from (time, watts) pairs
    on the windows' clock; a window with too few readings has no figure and says why."""
    found: dict[str, tuple[float, float]] = {}
    short: list[str] = []
    counted = 0
    for window in windows:
        if window.tokens <= 0 or window.seconds <= 0:
            continue
        inside = [w for t, w in timed_w if window.start_s <= t <= window.end_s]
        counted += len(inside)
        mean = time_average(timed_w, window.start_s, window.end_s)
        if len(inside) < MIN_WINDOW_READINGS or mean is None:
            short.append(f"the {window.name} window ({window.seconds:.2f} s) holds {len(inside)} "
                         f"power reading(s) (need {MIN_WINDOW_READINGS}): too short for the gauge")
            continue
        above = mean - idle_w
        found[window.name] = (above, above * window.seconds / window.tokens)
    reason = "; ".join(short) or None
    if not found:
        return Energy(source, False, reason or "no prefill or decode window to measure", units,
                      idle_w, readings=counted)
    pp = found.get("prefill")
    tg = found.get("decode")
    return Energy(source, True, reason, units, idle_w,
                  pp_power_w=pp[0] if pp else None, tg_power_w=tg[0] if tg else None,
                  pp_j_per_token=pp[1] if pp else None, tg_j_per_token=tg[1] if tg else None,
                  readings=counted)


def time_average(timed_w: Sequence[tuple[float, float]], start: float, end: float
                 ) -> float | None:
    """The mean of a gauge over [start, end], each reading holding until the next (a gauge
    updates in steps, and readings come when the phone lets the reader run, not evenly)."""
    points = sorted(timed_w)
    before = [p for p in points if p[0] <= start]
    steps = ([(start, before[-1][1])] if before else []) + \
        [p for p in points if start < p[0] <= end]
    if not steps or end <= steps[0][0]:
        return None
    ends = [t for t, _ in steps[1:]] + [end]
    total = sum(w * (stop - t) for (t, w), stop in zip(steps, ends, strict=True))
    return total / (end - steps[0][0])


def windows_from_timings(end_s: float, pp_s: float, tg_s: float, n_prompt: int, n_gen: int,
                         gap_s: float) -> list[Window]:
    """The prefill and decode windows (uptime), counted back from the engine's exit.

    llama-bench runs its prompt test, then its generation test; each repetition's time is in
    its record, and the end of the last generation repetition is the engine's exit. Between
    the two tests lie the generation test's own set-up: a one-token warm-up and, with a depth,
    the untimed fill of the context (``gap_s``, estimated by the caller).
    """
    out = []
    tg_start = end_s - tg_s
    if n_gen > 0 and tg_s > 0:
        out.append(Window("decode", tg_start, end_s, n_gen))
    if n_prompt > 0 and pp_s > 0:
        pp_end = (tg_start - gap_s) if n_gen > 0 else end_s
        out.append(Window("prefill", pp_end - pp_s, pp_end, n_prompt))
    return out


@dataclass(frozen=True)
class CounterReading:
    uptime_s: float
    charge_uah: int
    voltage_mv: int
    charging: bool


def from_counter(idle: Sequence[CounterReading], launch: Sequence[CounterReading],
                 windows: Sequence[Window]) -> Energy:
    """Energy from ``dumpsys battery``'s charge counter, before and after the idle wait and the
    launch: the launch's charge above the idle rate, shared among the windows by their length.
    """
    source = "dumpsys"
    everything = [*idle, *launch]
    if any(r.charging for r in everything):
        return _invalid(source, "the phone was charging: USB power contaminates the battery "
                                "reading (unplug it, or use a phone that can stop charging)")
    if len(idle) < 2 or len(launch) < 2:
        return _invalid(source, "too few charge counter readings")
    fine = any(r.charge_uah % COARSE_COUNTER_UAH for r in everything)
    step = 1 if fine else COARSE_COUNTER_UAH
    used_uah = launch[0].charge_uah - launch[-1].charge_uah
    seconds = launch[-1].uptime_s - launch[0].uptime_s
    if used_uah < MIN_COUNTER_STEPS * step or seconds <= 0:
        return _invalid(source, f"the charge counter moved {used_uah} uAh in {seconds:.1f} s "
                                f"(steps of {step} uAh; need {MIN_COUNTER_STEPS} steps): too "
                                "coarse for this trial's length")
    idle_s = idle[-1].uptime_s - idle[0].uptime_s
    idle_uah = idle[0].charge_uah - idle[-1].charge_uah
    volts = statistics.median(r.voltage_mv for r in everything) / 1000
    to_w = 3.6e-3 * volts  # µAh per second -> W: 1 µAh = 3.6e-3 C
    idle_w = idle_uah / idle_s * to_w if idle_s > 0 else 0.0
    above = used_uah / seconds * to_w - idle_w
    figures = {w.name: above * w.seconds / w.tokens for w in windows if w.tokens > 0}
    return Energy(source, True, None, f"charge counter steps of {step} uAh; voltage mV",
                  idle_w, pp_power_w=above if "prefill" in figures else None,
                  tg_power_w=above if "decode" in figures else None,
                  pp_j_per_token=figures.get("prefill"), tg_j_per_token=figures.get("decode"),
                  readings=len(everything))
