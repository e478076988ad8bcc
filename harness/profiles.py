"""Device profiles: what a phone class looks like (``devices/*.yaml``).

A profile describes a phone model well enough to plan for it (RAM, cores) and to run a virtual
phone of that class (properties, storage, thermal constants). Loading validates every key and
names the file and key on error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError

REQUIRED_PROPS = (
    "ro.product.model",
    "ro.product.manufacturer",
    "ro.product.name",
    "ro.product.device",
    "ro.soc.model",
    "ro.board.platform",
    "ro.build.version.release",
    "ro.build.version.sdk",
    "ro.product.cpu.abi",
)


@dataclass(frozen=True)
class Cluster:
    """A group of identical cores (one cpufreq policy)."""

    name: str
    cores: int
    max_khz: int
    min_khz: int
    capacity: int  # cpu_capacity, 1024 for the biggest core of the phone
    part: str  # /proc/cpuinfo "CPU part", e.g. 0xd48


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    props: Mapping[str, str]
    ram_mb: int  # total RAM, as "Total RAM" in dumpsys meminfo
    available_mb: int  # what apps can use at idle before the low-memory killer acts
    storage_free_mb: int
    clusters: tuple[Cluster, ...]
    thermal: Mapping[str, Any] = field(default_factory=dict)
    battery_level: int = 80
    source: str = ""  # the file it came from

    @property
    def model(self) -> str:
        return self.props["ro.product.model"]

    @property
    def abi(self) -> str:
        return self.props["ro.product.cpu.abi"]

    @property
    def core_count(self) -> int:
        return sum(c.cores for c in self.clusters)

    @property
    def big_cores(self) -> int:
        """Cores not in the lowest-capacity cluster (the ones worth running threads on)."""
        lowest = min(c.capacity for c in self.clusters)
        big = sum(c.cores for c in self.clusters if c.capacity > lowest)
        return big or self.core_count


def default_devices_dir() -> Path:
    """``./devices`` when it exists, else the one shipped beside the package (source checkout)."""
    here = Path.cwd() / "devices"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parent.parent / "devices"


def _need(data: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in data:
        raise ConfigError(f"{where}: missing key '{key}'")
    value = data[key]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise ConfigError(
            f"{where}: key '{key}' must be {kind.__name__}, got {type(value).__name__} {value!r}"
        )
    return value


def _optional(data: Mapping[str, Any], key: str, default: int, where: str) -> int:
    value: int = _need(data, key, int, where) if key in data else default
    return value


def parse_profile(data: Any, source: str) -> DeviceProfile:
    """Validate a profile mapping (already parsed from YAML)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a device profile must be a mapping of keys")
    known = {
        "name", "description", "props", "ram_mb", "available_mb", "storage_free_mb",
        "clusters", "thermal", "battery_level",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        allowed = ", ".join(sorted(known))
        raise ConfigError(f"{source}: unknown key '{unknown[0]}' (allowed: {allowed})")
    props = _need(data, "props", dict, source)
    for key in REQUIRED_PROPS:
        if key not in props:
            raise ConfigError(f"{source}: props is missing '{key}'")
    clean_props = {str(k): str(v) for k, v in props.items()}
    clusters_raw = _need(data, "clusters", list, source)
    if not clusters_raw:
        raise ConfigError(f"{source}: clusters must list at least one cluster")
    clusters = []
    for i, raw in enumerate(clusters_raw):
        where = f"{source}: clusters[{i}]"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where} must be a mapping")
        clusters.append(
            Cluster(
                name=str(_need(raw, "name", str, where)),
                cores=_need(raw, "cores", int, where),
                max_khz=_need(raw, "max_khz", int, where),
                min_khz=_optional(raw, "min_khz", 300000, where),
                capacity=_need(raw, "capacity", int, where),
                part=str(raw.get("part", "0xd05")),
            )
        )
    ram_mb = _need(data, "ram_mb", int, source)
    available_mb = _need(data, "available_mb", int, source)
    if not 0 < available_mb <= ram_mb:
        raise ConfigError(f"{source}: available_mb must be between 1 and ram_mb ({ram_mb})")
    thermal = data.get("thermal", {})
    if not isinstance(thermal, Mapping):
        raise ConfigError(f"{source}: key 'thermal' must be a mapping")
    return DeviceProfile(
        name=_need(data, "name", str, source),
        description=str(data.get("description", "")),
        props=clean_props,
        ram_mb=ram_mb,
        available_mb=available_mb,
        storage_free_mb=_need(data, "storage_free_mb", int, source),
        clusters=tuple(clusters),
        thermal=dict(thermal),
        battery_level=_optional(data, "battery_level", 80, source),
        source=source,
    )


def load_profile_file(path: Path) -> DeviceProfile:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not a text file ({error.reason})") from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{line} not valid YAML") from error
    return parse_profile(data, str(path))


def list_profiles(devices_dir: Path | None = None) -> list[DeviceProfile]:
    root = devices_dir or default_devices_dir()
    return [load_profile_file(p) for p in sorted(root.glob("*.yaml"))]


def find_profile(name_or_path: str, devices_dir: Path | None = None) -> DeviceProfile:
    """A profile by name (``midrange-8gb``) or by path to its YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return load_profile_file(path)
    root = devices_dir or default_devices_dir()
    candidate = root / f"{name_or_path}.yaml"
    if candidate.is_file():
        return load_profile_file(candidate)
    names = ", ".join(p.stem for p in sorted(root.glob("*.yaml"))) or "none"
    raise ConfigError(f"no device profile '{name_or_path}' in {root} (known: {names})")
