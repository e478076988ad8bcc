"""The snapshot of a profile a virtual phone runs with (``state/config.json``).

The daemon and the phone's own tools read this JSON rather than the YAML profile, so they start
fast, need no yaml import and keep running the profile they were started with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    cores: int
    max_khz: int
    min_khz: int
    capacity: int
    part: str


OOM_VICTIMS = ("engine", "system_server")
# How the phone's memory is enforced: by the host kernel in a cgroup (page cache reclaimed, file
# pages read back from throttled storage), or simulated by the daemon (every resident page
# counts). "auto" takes the cgroup where the host allows it (harness.virtual.cgroups).
MEMORY_MODELS = ("cgroup", "simulated")
MEMORY_MODEL_CHOICES = ("auto", *MEMORY_MODELS)
THERMAL_HALS = ("2.0", "1.0", "not_ready")
# how dumpsys meminfo titles its swap column: SwapPss (Android 10+ on kernels with SwapPss),
# Swap (10+ without it), Swapped (before 10)
MEMINFO_SWAP_TITLES = ("SwapPss", "Swap", "Swapped")
AFFINITIES = ("honoured", "ignored")
CHARGING = ("none", "usb", "ac")
PLUG_TYPES = {"none": 0, "ac": 1, "usb": 2}  # BatteryManager.BATTERY_PLUGGED_*
DEEP_IDLE_STATES = ("ACTIVE", "INACTIVE", "IDLE_PENDING", "SENSING", "LOCATING",
                    "IDLE_MAINTENANCE", "IDLE")
STAY_ON_ALL = 7  # stay_on_while_plugged_in: AC | USB | wireless
# What a stock phone keeps cached in the background (name, MB, oom_score_adj), scaled down so
# they never hold more than STOCK_APPS_SHARE of a small phone's memory limit.
STOCK_APPS = (("com.android.chrome", 180, 700), ("com.google.android.youtube", 150, 800),
              ("com.whatsapp", 120, 900))
STOCK_APPS_SHARE = 0.2
# What SELinux's shell domain (uid 2000, u:r:shell:s0) may not read on a stock Android 12-15
# phone, by class of node, as the device-path globs the phone then answers with EACCES
# (docs/real-phones.md gives the policy lines). A vendor that labels a class readable lists it
# under ``android.readable``; "all" is the permissive view, every node open.
POLICY_CLASSES: dict[str, tuple[str, ...]] = {
    "psi": ("/proc/pressure/*",),  # proc_pressure_mem: no shell rule
    "thermal_zones": ("/sys/class/thermal/thermal_zone*", "/sys/devices/virtual/thermal/*"),
    "devfreq": ("/sys/class/devfreq/*",),  # sysfs_devfreq: vendor-labelled, most deny
    "cpuinfo_cur_freq": ("/sys/devices/system/cpu/cpu*/cpufreq/cpuinfo_cur_freq",),  # 0400
    "kgsl": ("/sys/class/kgsl/*",),  # vendor-labelled: Qualcomm phones that open it say so
}
# another process's smaps_rollup, smaps and io: the shell lacks ptrace read access to them
OTHER_PROCESSES = "other_processes"
READABLE_CLASSES = (*POLICY_CLASSES, OTHER_PROCESSES)
READABLE_ALL = "all"
# services a captured phone's own layout can be kept for, live values filled in
LAYOUT_SERVICES = ("thermalservice", "battery")


@dataclass(frozen=True)
class BackgroundApp:
    """A cached app: simulated (no host process), it holds memory until lmkd kills it."""

    name: str  # package name
    rss_mb: int
    adj: int  # oom_score_adj; lmkd kills the highest first


@dataclass(frozen=True)
class Reply:
    """A captured phone's answer to a command this phone has no model for, given verbatim
    (profile key ``android.replies``, written by ``harness sim start --from-capture``)."""

    command: str  # the whole command line, e.g. "dumpsys gpu --gpumem"
    stdout: str
    stderr: str = ""
    exit: int = 0


@dataclass(frozen=True)
class PowerConfig:
    screen_on: bool = True
    stay_awake: bool = False  # Developer options "Stay awake": stay_on_while_plugged_in 7
    charging: str = "usb"  # none | usb | ac
    battery_saver: bool = False
    doze: str = "ACTIVE"  # deviceidle's deep state

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PowerConfig:
        return cls(**{k: data[k] for k in ("screen_on", "stay_awake", "charging",
                                           "battery_saver", "doze") if k in data})


@dataclass(frozen=True)
class AndroidRules:
    """How strictly the phone follows a stock phone's rules (profile key ``android:``).

    The defaults are a stock Android 12-15 phone; the variants are what real phones also do.
    ``background_apps`` None means the stock apps, scaled to the phone's memory limit.
    """

    background_apps: tuple[BackgroundApp, ...] | None = None
    oom_victim: str = "engine"  # or system_server: the phone reboots instead
    smaps_rollup: bool = True  # false: a 4.9 kernel without /proc/<pid>/smaps_rollup
    unreadable: tuple[str, ...] = ()  # device-path globs the shell cannot read (EACCES)
    readable: tuple[str, ...] = ()  # POLICY_CLASSES the vendor opens to the shell, or "all"
    offline_cpus: tuple[int, ...] = ()
    dumpsys_meminfo_native: bool = True  # false: "No process found for: <pid>"
    thermal_hal: str = "2.0"  # 2.0 | 1.0 | not_ready
    meminfo_swap: str = "SwapPss"  # MEMINFO_SWAP_TITLES: dumpsys meminfo's swap column
    thermal_status_stuck: bool = False  # Thermal Status stays 0 whatever the heat
    logcat_ring_lines: int = 4000  # per buffer
    affinity: str = "honoured"  # or ignored: the engine's own affinity calls change nothing
    power: PowerConfig = field(default_factory=PowerConfig)
    replies: tuple[Reply, ...] = ()  # services it does not model, answered as a capture did
    layouts: Mapping[str, str] = field(default_factory=dict)  # LAYOUT_SERVICES as captured

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AndroidRules:
        apps = data.get("background_apps")
        return cls(
            background_apps=None if apps is None else tuple(
                BackgroundApp(str(a["name"]), int(a["rss_mb"]), int(a["adj"])) for a in apps),
            oom_victim=str(data.get("oom_victim", "engine")),
            smaps_rollup=bool(data.get("smaps_rollup", True)),
            unreadable=tuple(str(g) for g in data.get("unreadable", ())),
            readable=tuple(str(c) for c in data.get("readable", ())),
            offline_cpus=tuple(int(c) for c in data.get("offline_cpus", ())),
            dumpsys_meminfo_native=bool(data.get("dumpsys_meminfo_native", True)),
            thermal_hal=str(data.get("thermal_hal", "2.0")),
            meminfo_swap=str(data.get("meminfo_swap", "SwapPss")),
            thermal_status_stuck=bool(data.get("thermal_status_stuck", False)),
            logcat_ring_lines=int(data.get("logcat_ring_lines", 4000)),
            affinity=str(data.get("affinity", "honoured")),
            power=PowerConfig.from_mapping(data.get("power", {})),
            replies=tuple(Reply(str(r["command"]), str(r["stdout"]), str(r.get("stderr", "")),
                                int(r.get("exit", 0))) for r in data.get("replies", ())),
            layouts={str(k): str(v) for k, v in dict(data.get("layouts", {})).items()},
        )

    def denied(self) -> tuple[str, ...]:
        """Every device-path glob the shell reads EACCES from: the profile's own and those of
        the policy classes its vendor did not open."""
        opened = set(POLICY_CLASSES) if READABLE_ALL in self.readable else set(self.readable)
        return (*self.unreadable, *(glob for name, globs in POLICY_CLASSES.items()
                                    if name not in opened for glob in globs))

    def others_denied(self) -> bool:
        return not ({OTHER_PROCESSES, READABLE_ALL} & set(self.readable))

    def apps(self, limit_mb: int) -> tuple[BackgroundApp, ...]:
        """The background apps of a phone whose memory limit is ``limit_mb``."""
        if self.background_apps is not None:
            return self.background_apps
        total = sum(mb for _, mb, _ in STOCK_APPS)
        scale = min(1.0, limit_mb * STOCK_APPS_SHARE / total)
        return tuple(BackgroundApp(name, max(1, int(mb * scale)), adj)
                     for name, mb, adj in STOCK_APPS)


GPU_VENDORS = ("qualcomm", "arm", "imagination", "other")
GPU_KEYS = ("name", "vendor", "max_khz", "min_khz", "readable", "gpumem", "drop_dispatches")


@dataclass(frozen=True)
class GpuConfig:
    """The phone's GPU (profile key ``gpu:``), run on Mesa's lavapipe (harness.virtual.gpu).

    ``readable`` false: the GPU's driver tells the shell nothing, as on Mali phones (no
    ``/sys/class/kgsl``, no memtrack HAL: ``dumpsys meminfo`` shows no GPU memory).
    ``gpumem`` false: no ``dumpsys gpu --gpumem`` either (a kernel without the ``gpu_mem_total``
    tracepoint, before Android 12: GpuService says it failed to initialise its eBPF map).
    """

    name: str  # e.g. "Adreno (TM) 740"
    vendor: str  # qualcomm | arm | imagination | other
    max_khz: int
    min_khz: int
    readable: bool = True
    gpumem: bool = True
    # a faulty driver, for tests of the output check: every Nth compute dispatch is dropped
    # (the Vulkan layer's HARNESS_GPU_FAULT), so the GPU runs fast and computes wrong; 0: none
    drop_dispatches: int = 0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GpuConfig:
        return cls(name=str(data["name"]), vendor=str(data["vendor"]),
                   max_khz=int(data["max_khz"]), min_khz=int(data["min_khz"]),
                   readable=bool(data.get("readable", True)),
                   gpumem=bool(data.get("gpumem", True)),
                   drop_dispatches=int(data.get("drop_dispatches", 0)))


def parse_gpu(data: Any, where: str) -> GpuConfig | None:
    """A profile's ``gpu:`` mapping, checked (None when the profile has none); errors name
    ``where`` and the key, as the other profile keys' do."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping of keys ({', '.join(GPU_KEYS)})")
    unknown = sorted(set(data) - set(GPU_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}' (allowed: "
                          f"{', '.join(sorted(GPU_KEYS))})")
    for key in ("name", "vendor", "max_khz", "min_khz"):
        if key not in data:
            raise ConfigError(f"{where}: missing key '{key}'")
    name = data["name"]
    if not isinstance(name, str) or not name.strip() or "\n" in name:
        raise ConfigError(f"{where}.name must be the GPU's name on one line, got {name!r}")
    vendor = data["vendor"]
    if vendor not in GPU_VENDORS:
        raise ConfigError(f"{where}.vendor must be one of {', '.join(GPU_VENDORS)}, "
                          f"got {vendor!r}")
    clocks = {k: data[k] for k in ("max_khz", "min_khz")}
    for key, value in clocks.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{where}.{key} must be a positive whole number of kHz, "
                              f"got {value!r}")
    if clocks["min_khz"] > clocks["max_khz"]:
        raise ConfigError(f"{where}: min_khz ({clocks['min_khz']}) must not be above max_khz "
                          f"({clocks['max_khz']})")
    readable = data.get("readable", True)
    if not isinstance(readable, bool):
        raise ConfigError(f"{where}.readable must be true or false, got {readable!r}")
    gpumem = data.get("gpumem", True)
    if not isinstance(gpumem, bool):
        raise ConfigError(f"{where}.gpumem must be true or false, got {gpumem!r}")
    drop = data.get("drop_dispatches", 0)
    if isinstance(drop, bool) or not isinstance(drop, int) or not (drop == 0 or 2 <= drop <= 1000):
        raise ConfigError(f"{where}.drop_dispatches must be 0 (no fault) or a whole number "
                          f"from 2 to 1000 (drop every Nth dispatch), got {drop!r}")
    return GpuConfig(name=name, vendor=vendor, max_khz=clocks["max_khz"],
                     min_khz=clocks["min_khz"], readable=readable, gpumem=gpumem,
                     drop_dispatches=drop)


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
    android: AndroidRules = field(default_factory=AndroidRules)  # background_apps resolved
    python: bool = False  # a Python at /data/local/tmp/python (llama-cpp-python cells)
    power_model: Mapping[str, Any] = field(default_factory=dict)  # see power.PowerParams
    memory_model: str = "simulated"  # as resolved at start: cgroup or simulated
    memory_note: str = ""  # why the model is simulated, or what the cgroup leaves out
    cgroups: Mapping[str, Any] | None = None  # PhoneCgroups.to_json() when memory_model cgroup
    storage_read_mb_s: float | None = None  # the storage's read speed (MB/s); None: the host's
    storage_note: str = ""  # why the storage speed is not what the profile asks
    storage_readahead_kb: int = 128  # the phone's own disk's read_ahead_kb
    storage_read_iops: int | None = None  # the storage's random reads a second; None: no limit
    disk: Mapping[str, Any] | None = None  # disk.PhoneDisk.to_json(): /data on its own device
    disk_note: str = ""  # why /data is on the host's disk instead
    gpu: GpuConfig | None = None  # the profile's GPU, run on lavapipe (harness.virtual.gpu)
    gpu_layer_dir: str = ""  # the compiled memory-counting layer (gpulayer.ensure_gpu_layer)
    vulkan_icd: str = ""  # lavapipe's ICD manifest, the phone's only Vulkan driver
    zram_mb: int = 0  # the profile's zram swap; 0: none
    zram: Mapping[str, Any] | None = None  # zram.ZramSwap.to_json(): the swap device it made
    cpu_nice: int | None = None  # the nice its daemon runs at (harness.virtual.cpu); None: 0
    cpu_note: str = ""  # cpu.note(): its CPUs own or shared, and why

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
            android=AndroidRules.from_mapping(data.get("android", {})),
            python=bool(data.get("python", False)),
            power_model=dict(data.get("power_model", {})),
            memory_model=str(data.get("memory_model", "simulated")),
            memory_note=str(data.get("memory_note", "")),
            cgroups=dict(data["cgroups"]) if data.get("cgroups") else None,
            storage_read_mb_s=(float(data["storage_read_mb_s"])
                               if data.get("storage_read_mb_s") is not None else None),
            storage_note=str(data.get("storage_note", "")),
            storage_readahead_kb=int(data.get("storage_readahead_kb", 128)),
            storage_read_iops=(int(data["storage_read_iops"])
                               if data.get("storage_read_iops") is not None else None),
            disk=dict(data["disk"]) if data.get("disk") else None,
            disk_note=str(data.get("disk_note", "")),
            cpu_nice=int(data["cpu_nice"]) if data.get("cpu_nice") is not None else None,
            cpu_note=str(data.get("cpu_note", "")),
            gpu=GpuConfig.from_mapping(data["gpu"]) if data.get("gpu") else None,
            gpu_layer_dir=str(data.get("gpu_layer_dir", "")),
            vulkan_icd=str(data.get("vulkan_icd", "")),
            zram_mb=int(data.get("zram_mb", 0)),
            zram=dict(data["zram"]) if data.get("zram") else None,
        )

    @classmethod
    def load(cls, path: Path) -> PhoneConfig:
        return cls.from_mapping(json.loads(path.read_text()))
