"""Which trials a ``--device`` name means (a phone), and how much memory that phone has free.

The figure comes from ``harness.budget.available_memory``, the rule plan and run use too: the
user's ``--memory``, else the phone's own reading (the median ``MemAvailable`` its trials stored
when they started), else the device profile's ``available_mb`` (a name that is not a serial in
the store is looked up as a profile, and its trials are those whose ``device_model`` is the
profile's ``ro.product.model``; a serial whose model matches a profile uses it too), else a share
of the trials' total RAM, said so in the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.budget import AVAILABLE_FRACTION, available_memory
from harness.errors import ConfigError
from harness.profiles import find_profile, profile_for_model

__all__ = ["AVAILABLE_FRACTION", "PhoneMemory", "resolve_device"]


@dataclass(frozen=True)
class PhoneMemory:
    device: str  # what recommend() filters trials by: a serial or a device_model
    available_bytes: int | None
    source: str  # one line saying where the figure came from


def _recorded(rows: pd.DataFrame, column: str, how: str) -> int | None:
    if column not in rows:
        return None
    values = rows[column].dropna()
    return int(values.agg(how)) if not values.empty else None


def resolve_device(trials: pd.DataFrame, name: str, memory_bytes: int | None = None,
                   devices_dir: Path | None = None) -> PhoneMemory:
    serials = set(trials["device_serial"].dropna().unique())  # not one value at a time
    if name in serials:
        rows = trials[trials["device_serial"] == name]
        models = rows["device_model"].dropna()
        model = str(models.iloc[0]) if not models.empty else None
        profile = profile_for_model(model, devices_dir)
        found = available_memory(
            given=memory_bytes, live=_recorded(rows, "start_mem_available_bytes", "median"),
            live_from=f"{name} when its trials started",
            profile_mb=profile.available_mb if profile else None,
            profile=f"{profile.name} (model {profile.model})" if profile else None,
            ram_bytes=_recorded(rows, "device_ram_bytes", "max"))
        return PhoneMemory(name, found.bytes, found.source)
    try:
        profile = find_profile(name, devices_dir)
    except ConfigError:
        known = ", ".join(sorted(serials)[:10]) or "none"
        raise ConfigError(f"--device {name!r} is neither a serial in the store (serials: "
                          f"{known}) nor a device profile in devices/") from None
    found = available_memory(given=memory_bytes, profile_mb=profile.available_mb,
                             profile=profile.name)
    return PhoneMemory(profile.model, found.bytes, found.source)
