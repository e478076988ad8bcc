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

from harness.device.base import DeviceFacts
from harness.errors import ConfigError
from harness.virtual.config import (
    AFFINITIES,
    CHARGING,
    DEEP_IDLE_STATES,
    LAYOUT_SERVICES,
    MEMINFO_SWAP_TITLES,
    OOM_VICTIMS,
    READABLE_ALL,
    READABLE_CLASSES,
    THERMAL_HALS,
    AndroidRules,
    BackgroundApp,
    GpuConfig,
    PowerConfig,
    Reply,
    parse_gpu,
)
from harness.virtual.power import PowerParams

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
    android: AndroidRules = field(default_factory=AndroidRules)  # a virtual phone's rules
    power_model: Mapping[str, Any] = field(default_factory=dict)  # virtual/power.py's keys
    # the memory's nominal peak, for the validity gate on decode speed; None: measured on the phone
    memory_bandwidth_gbps: float | None = None
    # storage's read speed (MB/s) as an engine paging weights from it sees it (random reads of
    # readahead-sized chunks), and its class; None: unknown (no paging prediction)
    storage_read_mb_s: float | None = None
    storage_class: str | None = None
    storage_readahead_kb: int | None = None  # the flash's read_ahead_kb (None: 128, Linux's)
    # random reads a second the flash serves at most (a ceiling, as read_mb_s is); None: no limit
    storage_read_iops: int | None = None
    source: str = ""  # the file it came from
    gpu: GpuConfig | None = None  # a virtual phone's GPU (harness.virtual.config.parse_gpu)
    # the phone's zram swap (its disksize, MB of uncompressed pages): Android's default home for
    # anonymous memory under pressure; 0: none (a virtual phone then never swaps)
    zram_mb: int = 0

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
        "clusters", "thermal", "battery_level", "android", "power_model",
        "memory_bandwidth_gbps", "storage", "gpu", "zram_mb",
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
    cores = sum(c.cores for c in clusters)
    android = parse_android(data.get("android", {}), f"{source}: android", cores)
    power_model = data.get("power_model") or {}
    PowerParams.from_profile(power_model, f"{source}: power_model")  # ConfigError if invalid
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
        android=android,
        power_model=dict(power_model),
        memory_bandwidth_gbps=_bandwidth(data.get("memory_bandwidth_gbps"), source),
        **_storage(data.get("storage"), f"{source}: storage"),
        source=source,
        gpu=parse_gpu(data.get("gpu"), f"{source}: gpu"),
        zram_mb=_zram(data.get("zram_mb", 0), source),
    )


def _zram(value: Any, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{source}: zram_mb must be a whole number of MB (0: no zram), got "
                          f"{value!r}")
    return value


STORAGE_CLASSES = ("ufs", "emmc", "nvme", "sd")


def _storage(raw: Any, where: str) -> dict[str, Any]:
    """``storage: {read_mb_s: 1500, class: ufs, readahead_kb: 128, read_iops: 100000}`` (all
    optional)."""
    if raw is None:
        return {}
    data = _known(raw, {"read_mb_s", "class", "readahead_kb", "read_iops"}, where)
    iops = data.get("read_iops")
    if iops is not None and (isinstance(iops, bool) or not isinstance(iops, int) or iops <= 0):
        raise ConfigError(f"{where}.read_iops must be a positive whole number of reads a second, "
                          f"got {iops!r}")
    readahead = data.get("readahead_kb")
    if readahead is not None and (isinstance(readahead, bool) or not isinstance(readahead, int)
                                  or not 4 <= readahead <= 65536):
        raise ConfigError(f"{where}.readahead_kb must be a whole number of KB, 4..65536, got "
                          f"{readahead!r}")
    speed = data.get("read_mb_s")
    if speed is not None and (isinstance(speed, bool) or not isinstance(speed, int | float)
                              or speed <= 0):
        raise ConfigError(f"{where}.read_mb_s must be a positive number of MB/s, got {speed!r}")
    kind = data.get("class")
    if kind is not None and kind not in STORAGE_CLASSES:
        raise ConfigError(f"{where}.class must be one of {', '.join(STORAGE_CLASSES)}, "
                          f"got {kind!r}")
    return {"storage_read_mb_s": float(speed) if speed is not None else None,
            "storage_class": kind, "storage_readahead_kb": readahead, "storage_read_iops": iops}


def _bandwidth(value: Any, source: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{source}: key 'memory_bandwidth_gbps' must be a positive number "
                          f"(GB/s), got {value!r}")
    return float(value)


def _choice(data: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str,
            where: str) -> str:
    value = data.get(key, default)
    if value not in choices:
        raise ConfigError(f"{where}.{key} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _flag(data: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key} must be true or false, got {value!r}")
    return value


def _known(data: Any, known: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping of keys")
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}' "
                          f"(allowed: {', '.join(sorted(known))})")
    return data


def _apps(raw: Any, where: str) -> tuple[BackgroundApp, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where} must be a list of {{name, rss_mb, adj}}")
    apps = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        _known(item, {"name", "rss_mb", "adj"}, at)
        name = _need(item, "name", str, at)
        if not name or any(c.isspace() or c in "'\"" for c in name):
            raise ConfigError(f"{at}.name must be a package name, got {name!r}")
        rss_mb = _need(item, "rss_mb", int, at)
        adj = _need(item, "adj", int, at)
        if rss_mb < 1 or not 0 <= adj <= 1000:
            raise ConfigError(f"{at}: rss_mb must be at least 1 and adj 0..1000")
        apps.append(BackgroundApp(name, rss_mb, adj))
    return tuple(apps)


def parse_android(data: Any, where: str, cores: int) -> AndroidRules:
    """The ``android:`` mapping of a profile: which stock-phone rules vary (all optional)."""
    known = {"background_apps", "oom_victim", "smaps_rollup", "unreadable", "offline_cpus",
             "dumpsys_meminfo_native", "thermal_hal", "thermal_status_stuck",
             "logcat_ring_lines", "affinity", "power", "replies", "readable",
             "layouts", "meminfo_swap"}
    data = _known(data, known, where)
    replies = data.get("replies", [])
    if not isinstance(replies, list) or not all(
            isinstance(r, Mapping) and isinstance(r.get("command"), str)
            and isinstance(r.get("stdout"), str) and isinstance(r.get("stderr", ""), str)
            and isinstance(r.get("exit", 0), int) for r in replies):
        raise ConfigError(f"{where}.replies must list {{command, stdout, stderr, exit}} "
                          "mappings (as harness sim start --from-capture writes them)")
    layouts = data.get("layouts", {})
    if not isinstance(layouts, Mapping) or not all(
            k in LAYOUT_SERVICES and isinstance(v, str) for k, v in layouts.items()):
        raise ConfigError(f"{where}.layouts must map {' or '.join(LAYOUT_SERVICES)} to the text "
                          "a phone printed (as harness sim start --from-capture writes it)")
    stock = AndroidRules()
    unreadable = data.get("unreadable", [])
    if not isinstance(unreadable, list) or not all(
            isinstance(g, str) and g.startswith("/") for g in unreadable):
        raise ConfigError(f"{where}.unreadable must be a list of absolute device-path globs")
    readable = data.get("readable", [])
    if readable == READABLE_ALL:
        readable = [READABLE_ALL]
    if not isinstance(readable, list) or not all(
            c in READABLE_CLASSES or c == READABLE_ALL for c in readable):
        raise ConfigError(f"{where}.readable must be 'all' or a list of "
                          f"{', '.join(READABLE_CLASSES)} (the classes the vendor opens)")
    offline = data.get("offline_cpus", [])
    if not isinstance(offline, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c < cores for c in offline):
        raise ConfigError(f"{where}.offline_cpus must list cpu numbers 0..{cores - 1}")
    if len(set(offline)) >= cores:
        raise ConfigError(f"{where}.offline_cpus must leave at least one cpu online")
    ring = _optional(data, "logcat_ring_lines", stock.logcat_ring_lines, where)
    if ring < 1:
        raise ConfigError(f"{where}.logcat_ring_lines must be at least 1")
    power_where = f"{where}.power"
    power = _known(data.get("power", {}), {"screen_on", "stay_awake", "charging",
                                           "battery_saver", "doze"}, power_where)
    default = PowerConfig()
    return AndroidRules(
        background_apps=(_apps(data["background_apps"], f"{where}.background_apps")
                         if "background_apps" in data else None),
        oom_victim=_choice(data, "oom_victim", OOM_VICTIMS, stock.oom_victim, where),
        smaps_rollup=_flag(data, "smaps_rollup", stock.smaps_rollup, where),
        unreadable=tuple(unreadable),
        readable=tuple(readable),
        offline_cpus=tuple(sorted(set(offline))),
        dumpsys_meminfo_native=_flag(data, "dumpsys_meminfo_native", True, where),
        thermal_hal=_choice(data, "thermal_hal", THERMAL_HALS, stock.thermal_hal, where),
        meminfo_swap=_choice(data, "meminfo_swap", MEMINFO_SWAP_TITLES, stock.meminfo_swap,
                             where),
        thermal_status_stuck=_flag(data, "thermal_status_stuck", False, where),
        logcat_ring_lines=ring,
        affinity=_choice(data, "affinity", AFFINITIES, stock.affinity, where),
        power=PowerConfig(
            screen_on=_flag(power, "screen_on", default.screen_on, power_where),
            stay_awake=_flag(power, "stay_awake", default.stay_awake, power_where),
            charging=_choice(power, "charging", CHARGING, default.charging, power_where),
            battery_saver=_flag(power, "battery_saver", default.battery_saver, power_where),
            doze=_choice(power, "doze", DEEP_IDLE_STATES, default.doze, power_where),
        ),
        replies=tuple(Reply(r["command"], r["stdout"], r.get("stderr", ""), r.get("exit", 0))
                      for r in replies),
        layouts=dict(layouts),
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


def profile_for_model(model: str | None, devices_dir: Path | None = None) -> DeviceProfile | None:
    """The profile whose ``ro.product.model`` is ``model`` (a phone's own), or None."""
    if not model:
        return None
    try:
        profiles = list_profiles(devices_dir)
    except ConfigError:
        return None
    return next((p for p in profiles if p.model == model), None)


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


def storage_speed(facts: DeviceFacts) -> float | None:
    """The phone's storage read speed (MB/s): a virtual phone says it (None: unthrottled, the
    host's disk); a real phone's comes from its profile (devices/*.yaml), if one matches."""
    if facts.memory_model is not None:
        return facts.storage_read_mb_s
    profile = profile_for_model(facts.model)
    return profile.storage_read_mb_s if profile is not None else None
