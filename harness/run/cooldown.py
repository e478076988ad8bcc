"""The cooldown gate: wait before a trial until the phone is cool and charged enough.

The decision is a pure function of a state and a policy; the waiting loop takes the clock and the
sleep as arguments so it is tested without waiting.

Heat is judged on the thermal status and on the skin/battery temperature (``surface_temp_c``),
not on the status alone: many builds report status 0 whatever the heat, and a thermal HAL that is
not ready reports no temperatures at all. Which source decided is recorded with the trial
(``COOLDOWN_SOURCES``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from harness.run.state import DeviceState


class CooldownPolicy(Protocol):
    @property
    def max_thermal_status(self) -> int: ...
    @property
    def max_temperature_c(self) -> float | None: ...
    @property
    def min_battery_pct(self) -> int | None: ...
    @property
    def max_wait_s(self) -> float: ...


# What a gate decision rests on: the reported status, the skin/battery temperature from the
# thermal HAL, the sysfs zones or dumpsys battery, the HAL's hottest sensor (a HAL without skin
# or battery sensors), and the battery level.
COOLDOWN_SOURCES = ("thermal_status", "hal", "sysfs", "dumpsys_battery", "hal_hottest",
                    "battery_level")


@dataclass(frozen=True)
class GateResult:
    ready: bool
    waited_s: float
    state: DeviceState  # the state the trial starts in
    reason: str | None  # why it was not ready when the wait ran out
    source: str | None = None  # what decided (COOLDOWN_SOURCES); None when nothing was known


@dataclass(frozen=True)
class Assessment:
    reason: str | None  # None: ready
    source: str | None  # the failing check's source, or the temperature source a pass used


def gate_temperature(state: DeviceState) -> tuple[float | None, str | None]:
    """The temperature the gate compares with its limit, and its source."""
    if state.surface_temp_c is not None:
        return state.surface_temp_c, state.surface_source
    if state.max_temp_c is not None:
        return state.max_temp_c, "hal_hottest"
    return None, None


def assess(state: DeviceState, policy: CooldownPolicy) -> Assessment:
    """Ready or not, and on what: the first unmet condition, else the heat source it trusted."""
    if state.thermal_status is not None and state.thermal_status > policy.max_thermal_status:
        return Assessment(f"thermal status {state.thermal_status} > {policy.max_thermal_status}",
                          "thermal_status")
    temperature, source = gate_temperature(state)
    if (policy.max_temperature_c is not None and temperature is not None
            and temperature > policy.max_temperature_c):
        what = "temperature" if source == "hal_hottest" else "skin/battery temperature"
        return Assessment(f"{what} {temperature:.1f} °C > {policy.max_temperature_c:.1f} °C "
                          f"({source})", source)
    if (policy.min_battery_pct is not None and state.battery_level is not None
            and state.battery_level < policy.min_battery_pct):
        return Assessment(f"battery {state.battery_level}% < {policy.min_battery_pct}%",
                          "battery_level")
    if source is None and state.thermal_status is not None:
        source = "thermal_status"
    return Assessment(None, source)


def not_ready_reason(state: DeviceState, policy: CooldownPolicy) -> str | None:
    return assess(state, policy).reason


def wait_until_ready(
    read_state: Callable[[], DeviceState],
    policy: CooldownPolicy,
    *,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> GateResult:
    start = clock()
    while True:
        state = read_state()
        verdict = assess(state, policy)
        waited = clock() - start
        if verdict.reason is None:
            return GateResult(True, waited, state, None, verdict.source)
        if waited >= policy.max_wait_s:
            return GateResult(False, waited, state, verdict.reason, verdict.source)
        sleep(min(poll_s, max(policy.max_wait_s - waited, 0.0)))
