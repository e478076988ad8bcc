"""The cooldown gate: wait before a trial until the phone is cool and charged enough.

The decision is a pure function of a state and a policy; the waiting loop takes the clock and the
sleep as arguments so it is tested without waiting.
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


@dataclass(frozen=True)
class GateResult:
    ready: bool
    waited_s: float
    state: DeviceState  # the state the trial starts in
    reason: str | None  # why it was not ready when the wait ran out


def not_ready_reason(state: DeviceState, policy: CooldownPolicy) -> str | None:
    if state.thermal_status is not None and state.thermal_status > policy.max_thermal_status:
        return f"thermal status {state.thermal_status} > {policy.max_thermal_status}"
    if (policy.max_temperature_c is not None and state.max_temp_c is not None
            and state.max_temp_c > policy.max_temperature_c):
        return f"temperature {state.max_temp_c:.1f} °C > {policy.max_temperature_c:.1f} °C"
    if (policy.min_battery_pct is not None and state.battery_level is not None
            and state.battery_level < policy.min_battery_pct):
        return f"battery {state.battery_level}% < {policy.min_battery_pct}%"
    return None


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
        reason = not_ready_reason(state, policy)
        waited = clock() - start
        if reason is None:
            return GateResult(True, waited, state, None)
        if waited >= policy.max_wait_s:
            return GateResult(False, waited, state, reason)
        sleep(min(poll_s, max(policy.max_wait_s - waited, 0.0)))
