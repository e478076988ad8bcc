"""What a virtual phone knows about a trial that the harness had to measure: the energy its
power model drew and the moment its thermal model started throttling (tests and benches).

Both come from the phone's own logs in its state folder (``power.log``, ``thermal.log``, on the
clock its /proc/uptime shows) and the trial's ``launch_uptime_s`` and windows.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.virtual import power

THROTTLING_STATUS = 2  # the model's status from which it stops the phone's processes
IDLE_GUARD_S = 0.1  # the idle readings end this long before the launch


def decode_j_per_token(state: Path, trial: Mapping[str, Any], idle_s: float = 2.0) -> float:
    """Joules per generated token the phone's model drew above its idle draw, over the decode
    window the trial stored (the idle draw over the ``idle_s`` before the launch)."""
    entries = power.read_power_log(state / "power.log")
    t0 = float(trial["launch_uptime_s"])
    start = t0 + float(trial["tg_start_ms"]) / 1000
    end = t0 + float(trial["tg_end_ms"]) / 1000
    idle_span = idle_s - IDLE_GUARD_S
    idle_w = power.truth_energy_j(entries, t0 - idle_s, t0 - IDLE_GUARD_S) / idle_span
    used = power.truth_energy_j(entries, start, end) - idle_w * (end - start)
    reps = trial.get("sustained_reps")
    tokens = int(trial["n_gen"]) * (int(reps) if reps and reps == reps else 1)
    return used / tokens


def throttled_after_s(state: Path, trial: Mapping[str, Any], within_s: float) -> float | None:
    """Seconds from the launch to the model's first throttling status, or None."""
    t0 = float(trial["launch_uptime_s"])
    for uptime, status in power.read_status_log(state / "thermal.log"):
        if status >= THROTTLING_STATUS and t0 <= uptime <= t0 + within_s:
            return uptime - t0
    return None
