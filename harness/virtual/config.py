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

from harness.errors import ConfigError

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
    abi: str = "arm64-v8a"  # what the phone executes (ro.product.cpu.abi)
    shell: str = "mksh"  # /system/bin/sh: mksh as on Android, or dash to compare

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
            abi=str(data.get("abi", data["props"].get("ro.product.cpu.abi", "arm64-v8a"))),
            shell=str(data.get("shell", "mksh")),
        )

    @classmethod
    def load(cls, path: Path) -> PhoneConfig:
        return cls.from_mapping(json.loads(path.read_text()))


def config_from_profile(profile: DeviceProfile, name: str, ram_mb: int | None = None,
                        storage_mb: int | None = None, abi: str | None = None,
                        shell: str = "mksh") -> PhoneConfig:
    """``ram_mb`` overrides the memory the low-memory killer allows (tests use small values).

    ``abi`` makes a variant of the profile's phone with another CPU ABI (an x86_64 phone runs
    host builds natively, as Android's emulator images do); a phone whose ABI is not the host's
    runs its binaries in qemu-user and says so in ``ro.harness.emulated_cpu``.
    """
    from harness.virtual.userland import ABI_LISTS, ABI_MACHINES, ABI_QEMU, SHELLS, host_abi

    abi = abi or profile.abi
    if abi not in ABI_MACHINES:
        raise ConfigError(f"{profile.source or profile.name}: a virtual phone's ABI must be one "
                          f"of {', '.join(ABI_MACHINES)}, not '{abi}' (use --abi)")
    if shell not in SHELLS:
        raise ConfigError(f"unknown phone shell '{shell}' (known: {', '.join(SHELLS)})")
    props = dict(profile.props)
    if abi != profile.abi:
        props["ro.product.cpu.abi"] = abi
        props["ro.product.cpu.abilist"] = ABI_LISTS[abi]
    if abi != host_abi():
        props["ro.harness.emulated_cpu"] = ABI_QEMU[abi]
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
        abi=abi, shell=shell,
    )
