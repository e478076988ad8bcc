"""Which trials a ``--device`` name means, and how much memory that device has available.

``recommend`` needs the memory an app may use before the low-memory killer acts, which the
trials do not store (they store total RAM). The choice, in order (docs/analysis.md):

1. ``--memory SIZE``, when given: the user knows best.
2. A device profile (``devices/NAME.yaml``): its ``available_mb``. A name that is not a serial
   in the store is looked up as a profile, and its trials are those whose ``device_model`` is
   the profile's ``ro.product.model``. A serial whose ``device_model`` matches a profile's
   model uses that profile's figure too.
3. Otherwise ``AVAILABLE_FRACTION`` of the trials' ``device_ram_bytes``: the share of RAM the
   shipped profiles leave to apps at idle (budget 47%, mid-range 60%, flagship 69%), taken at
   the middle, and said so in the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.errors import ConfigError
from harness.profiles import DeviceProfile, find_profile, list_profiles

AVAILABLE_FRACTION = 0.6
MB = 1024 * 1024


@dataclass(frozen=True)
class DeviceMemory:
    device: str  # what recommend() filters trials by: a serial or a device_model
    available_bytes: int | None
    source: str  # one line saying where the figure came from


def _profile_for_model(model: str | None, devices_dir: Path | None) -> DeviceProfile | None:
    if not model:
        return None
    try:
        profiles = list_profiles(devices_dir)
    except ConfigError:
        return None
    return next((p for p in profiles if p.model == model), None)


def resolve_device(trials: pd.DataFrame, name: str, memory_bytes: int | None = None,
                   devices_dir: Path | None = None) -> DeviceMemory:
    serials = set(trials["device_serial"].dropna())
    if name in serials:
        rows = trials[trials["device_serial"] == name]
        models = rows["device_model"].dropna()
        model = str(models.iloc[0]) if not models.empty else None
        if memory_bytes is not None:
            return DeviceMemory(name, memory_bytes, "available memory from --memory")
        profile = _profile_for_model(model, devices_dir)
        if profile is not None:
            return DeviceMemory(name, profile.available_mb * MB,
                                f"available memory from profile {profile.name} "
                                f"(model {profile.model})")
        ram = rows["device_ram_bytes"].dropna()
        if not ram.empty:
            total = int(ram.max())
            return DeviceMemory(name, int(total * AVAILABLE_FRACTION),
                                f"available memory estimated as {AVAILABLE_FRACTION:.0%} of "
                                f"total RAM {total / 2**30:.1f} GiB (pass --memory to set it)")
        return DeviceMemory(name, None, "available memory unknown (pass --memory to set it)")
    try:
        profile = find_profile(name, devices_dir)
    except ConfigError:
        known = ", ".join(sorted(serials)[:10]) or "none"
        raise ConfigError(f"--device {name!r} is neither a serial in the store (serials: "
                          f"{known}) nor a device profile in devices/") from None
    available = memory_bytes if memory_bytes is not None else profile.available_mb * MB
    source = ("available memory from --memory" if memory_bytes is not None
              else f"available memory from profile {profile.name}")
    return DeviceMemory(profile.model, available, source)
