"""A first-order thermal model of a phone, as pure functions.

Why first order: it is the smallest model in which sustained CPU work heats the phone, idling
cools it toward ambient, and throttling (which lowers the work done) finds an equilibrium, the
three behaviours the harness's cooldown gate and throttle detection must cope with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

# Fraction of each throttle period the phone's processes are stopped, per thermal status.
DUTY_BY_STATUS = (0.0, 0.0, 0.3, 0.5, 0.65, 0.8, 0.9)


@dataclass(frozen=True)
class ThermalParams:
    ambient_c: float = 26.0
    tau_s: float = 40.0  # time constant of cooling toward ambient
    heat_c_per_core_s: float = 0.5  # die heating rate per fully busy core
    skin_ratio: float = 0.6  # skin rises this fraction of the die's rise over ambient
    battery_ratio: float = 0.4
    # skin temperature at which status 1..6 (LIGHT..SHUTDOWN) starts
    thresholds_c: tuple[float, ...] = (38.0, 41.0, 44.0, 47.0, 50.0, 55.0)

    @classmethod
    def from_profile(cls, thermal: Mapping[str, Any]) -> ThermalParams:
        """Profile keys under ``thermal:`` override the defaults (unknown keys are ignored)."""
        params = cls()
        floats = {k: float(thermal[k]) for k in
                  ("ambient_c", "tau_s", "heat_c_per_core_s", "skin_ratio", "battery_ratio")
                  if k in thermal}
        params = replace(params, **floats)  # type: ignore[arg-type]
        if "thresholds_c" in thermal:
            params = replace(params, thresholds_c=tuple(float(v) for v in thermal["thresholds_c"]))
        return params


@dataclass(frozen=True)
class ThermalState:
    die_c: float
    forced_status: int | None = None

    def skin_c(self, params: ThermalParams) -> float:
        return params.ambient_c + params.skin_ratio * (self.die_c - params.ambient_c)

    def battery_c(self, params: ThermalParams) -> float:
        return params.ambient_c + params.battery_ratio * (self.die_c - params.ambient_c)

    def status(self, params: ThermalParams) -> int:
        if self.forced_status is not None:
            return self.forced_status
        return status_for(self.skin_c(params), params.thresholds_c)


def status_for(skin_c: float, thresholds_c: tuple[float, ...]) -> int:
    status = 0
    for level, threshold in enumerate(thresholds_c, start=1):
        if skin_c >= threshold:
            status = level
    return status


def step(state: ThermalState, params: ThermalParams, cpu_seconds: float, dt: float) -> ThermalState:
    """Advance ``dt`` seconds during which the phone's processes burned ``cpu_seconds``."""
    if dt <= 0:
        return state
    busy_cores = cpu_seconds / dt
    heating = params.heat_c_per_core_s * busy_cores * dt
    cooling = (state.die_c - params.ambient_c) * min(1.0, dt / params.tau_s)
    return replace(state, die_c=state.die_c + heating - cooling)


def duty(status: int) -> float:
    """Stopped fraction of each throttle period at this status."""
    return DUTY_BY_STATUS[max(0, min(status, len(DUTY_BY_STATUS) - 1))]


def capped_khz(max_khz: int, min_khz: int, status: int) -> int:
    """The scaling_max_freq a throttled policy reports (steps of 100 MHz, never below min)."""
    scaled = int(max_khz * (1.0 - duty(status)))
    return max(min_khz, scaled // 100_000 * 100_000) if status >= 2 else max_khz
