"""The snapshot of a profile a virtual phone runs with (``state/config.json``).

The daemon and the phone's own tools read this JSON rather than the YAML profile, so they start
fast, need no yaml import and keep running the profile they were started with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # keep the phone's tools from importing yaml at every call
    from harness.profiles import DeviceProfile


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    cores: int
    max_khz: int
    min_khz: int
    capacity: int
    part: str


@dataclass(frozen=True)
class PhoneConfig:
    name: str  # the phone's slot name, e.g. midrange-8gb-1
    profile: str
    props: Mapping[str, str]
    ram_mb: int  # MemTotal
    limit_mb: int  # footprint at which the low-memory killer acts
    storage_mb: int  # virtual disk size for data/ and sdcard/
    clusters: tuple[ClusterConfig, ...]
    thermal: Mapping[str, Any] = field(default_factory=dict)
    battery_level: int = 80

    @property
    def sdk(self) -> int:
        try:
            return int(self.props.get("ro.build.version.sdk", "34"))
        except ValueError:
            return 34

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PhoneConfig:
        return cls(
            name=str(data["name"]), profile=str(data["profile"]),
            props={str(k): str(v) for k, v in data["props"].items()},
            ram_mb=int(data["ram_mb"]), limit_mb=int(data["limit_mb"]),
            storage_mb=int(data["storage_mb"]),
            clusters=tuple(ClusterConfig(**c) for c in data["clusters"]),
            thermal=dict(data.get("thermal", {})),
            battery_level=int(data.get("battery_level", 80)),
        )

    @classmethod
    def load(cls, path: Path) -> PhoneConfig:
        return cls.from_mapping(json.loads(path.read_text()))


def config_from_profile(profile: DeviceProfile, name: str, ram_mb: int | None = None,
                        storage_mb: int | None = None) -> PhoneConfig:
    """``ram_mb`` overrides the memory the low-memory killer allows (tests use small values)."""
    props = dict(profile.props)
    props.setdefault("ro.serialno", name)
    props.setdefault("sys.boot_completed", "1")
    props.setdefault("ro.build.type", "user")
    props.setdefault("ro.kernel.qemu", "0")
    return PhoneConfig(
        name=name, profile=profile.name, props=props,
        ram_mb=max(profile.ram_mb, ram_mb or 0),
        limit_mb=ram_mb if ram_mb is not None else profile.available_mb,
        storage_mb=storage_mb if storage_mb is not None else profile.storage_free_mb,
        clusters=tuple(ClusterConfig(c.name, c.cores, c.max_khz, c.min_khz, c.capacity, c.part)
                       for c in profile.clusters),
        thermal=dict(profile.thermal), battery_level=profile.battery_level,
    )
