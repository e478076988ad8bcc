"""Text the virtual phone prints, formatted as Android prints it (see ANDROID_FORMATS.md).

Pure functions from numbers to text, so the formats are tested without a phone and the other
helper's parsers can be checked against exactly what the phone emits.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

STATUS_NAMES = ("NONE", "LIGHT", "MODERATE", "SEVERE", "CRITICAL", "EMERGENCY", "SHUTDOWN")


def kb_fields(text: str) -> dict[str, int]:
    """``Key:  N kB`` lines (smaps_rollup, /proc/<pid>/status) → {Key: N}; other lines skipped."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        words = rest.split()
        if sep and words and words[0].isdigit():
            fields[key.strip()] = int(words[0])
    return fields


def getprop_listing(props: Mapping[str, str]) -> str:
    return "".join(f"[{k}]: [{v}]\n" for k, v in sorted(props.items()))


def proc_meminfo(total_kb: int, available_kb: int) -> str:
    free = max(0, available_kb * 3 // 5)
    cached = max(0, available_kb - free)
    used = max(0, total_kb - available_kb)
    rows = [
        ("MemTotal", total_kb), ("MemFree", free), ("MemAvailable", available_kb),
        ("Buffers", cached // 50), ("Cached", cached), ("SwapCached", 0),
        ("Active", used // 2), ("Inactive", used // 4 + cached // 2),
        ("AnonPages", used // 2), ("Mapped", used // 8), ("Shmem", 4096),
        ("SwapTotal", 0), ("SwapFree", 0), ("Dirty", 0), ("Writeback", 0),
    ]
    return "".join(f"{k + ':':<16}{v:>8} kB\n" for k, v in rows)


@dataclass(frozen=True)
class CpuCore:
    index: int
    part: str
    capacity: int


def cpuinfo(cores: Sequence[CpuCore]) -> str:
    blocks = []
    for core in cores:
        blocks.append(
            f"processor\t: {core.index}\nBogoMIPS\t: 38.40\n"
            "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
            "asimdrdm lrcpc dcpop asimddp\n"
            f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\n"
            f"CPU part\t: {core.part}\nCPU revision\t: 0\n"
        )
    return "\n".join(blocks) + "\n"


def _row(label: str, values: Iterable[int | None]) -> str:
    cells = "".join(" " * 9 if v is None else f"{v:>9}" for v in values)
    return f"{label:>13}{cells}"


@dataclass(frozen=True)
class _Columns:
    """One native process's ``dumpsys meminfo`` figures (kB), GPU memory moved out of its heap."""

    pss: int
    rss_not_anon: int
    pss_file: int
    priv_clean: int
    stack: int
    swap: int
    graphics: int
    heap: int
    heap_dirty: int
    heap_rss: int
    other: int
    system: int
    pss_total: int
    rss_total: int
    dirty_total: int


def _columns(rollup: Mapping[str, int], status: Mapping[str, int], graphics_kb: int) -> _Columns:
    rss = rollup.get("Rss", 0)
    pss = rollup.get("Pss", 0)
    anon = rollup.get("Anonymous", 0)
    pss_anon = rollup.get("Pss_Anon", min(pss, anon))
    pss_file = rollup.get("Pss_File", max(0, pss - pss_anon))
    stack = min(status.get("VmStk", 0), pss_anon)
    priv_dirty = rollup.get("Private_Dirty", 0)
    graphics = max(0, graphics_kb)
    heap_in_smaps = max(0, pss_anon - stack)
    heap_dirty_in_smaps = max(0, priv_dirty - stack)
    heap_rss_in_smaps = max(0, anon - stack)
    # the GPU's share of each column, taken out of the native heap where it is counted
    moved, moved_dirty, moved_rss = (min(graphics, heap_in_smaps),
                                     min(graphics, heap_dirty_in_smaps),
                                     min(graphics, heap_rss_in_smaps))
    return _Columns(
        pss=pss, rss_not_anon=max(0, rss - anon), pss_file=pss_file,
        priv_clean=rollup.get("Private_Clean", 0), stack=stack,
        swap=rollup.get("SwapPss", rollup.get("Swap", 0)), graphics=graphics,
        heap=heap_in_smaps - moved, heap_dirty=heap_dirty_in_smaps - moved_dirty,
        heap_rss=heap_rss_in_smaps - moved_rss, other=max(0, pss - pss_anon - pss_file),
        system=max(0, pss - heap_in_smaps - pss_file - stack),
        pss_total=pss - moved + graphics, rss_total=rss - moved_rss + graphics,
        dirty_total=priv_dirty - moved_dirty + graphics)


def _category_table(c: _Columns, swap_title: str, with_rss: bool) -> list[str]:
    """The per-category rows of ``dumpsys meminfo <pid>``, headings to TOTAL."""
    # label, pss, private dirty, private clean, swap, rss
    table = [
        ("Native Heap", c.heap, c.heap_dirty, 0, c.swap, c.heap_rss),
        ("Dalvik Heap", 0, 0, 0, 0, 0),
        ("Stack", c.stack, c.stack, 0, 0, c.stack),
        (".so mmap", c.pss_file, 0, c.priv_clean, 0, c.rss_not_anon),
    ]
    if c.graphics:  # dumpsys leaves out the rows that are all zero
        table.append(("GL mtrack", c.graphics, c.graphics, 0, 0, c.graphics))
    table.append(("Unknown", c.other, 0, 0, 0, 0))
    heads = [("Pss", "Total"), ("Private", "Dirty"), ("Private", "Clean"), (swap_title, "Dirty")]
    if with_rss:
        heads.append(("Rss", "Total"))
    heads += [("Heap", "Size"), ("Heap", "Alloc"), ("Heap", "Free")]
    lines = [" " * 13 + "".join(f"{a:>9}" for a, _ in heads),
             " " * 13 + "".join(f"{b:>9}" for _, b in heads),
             " " * 13 + "   ------" * len(heads)]
    for label, p, pd, pc, sw, r in table:
        values: list[int | None] = [p, pd, pc, sw]
        if with_rss:
            values.append(r)
        if label in ("Native Heap", "Dalvik Heap"):
            lines.append(_row(label, [*values, 0, 0, 0]))
        else:
            lines.append(_row(label, values).rstrip())
    totals: list[int | None] = [c.pss_total, c.dirty_total, c.priv_clean, c.swap]
    if with_rss:
        totals.append(c.rss_total)
    lines.append(_row("TOTAL", [*totals, 0, 0, 0]))
    return lines


def _app_summary(c: _Columns, with_rss: bool) -> list[str]:
    """The ``App Summary`` block: Pss and, from Android 11 (SDK 30), Rss."""
    if with_rss:
        return [
            " ", " App Summary",
            "                       Pss(KB)                        Rss(KB)",
            "                        ------                         ------",
            f"           Java Heap:{0:>9}{0:>31}",
            f"         Native Heap:{c.heap:>9}{c.heap_rss:>31}",
            f"                Code:{c.pss_file:>9}{c.rss_not_anon:>31}",
            f"               Stack:{c.stack:>9}{c.stack:>31}",
            f"            Graphics:{c.graphics:>9}{c.graphics:>31}",
            f"       Private Other:{0:>9}",
            f"              System:{c.system:>9}",
            f"             Unknown:{'':>9}{0:>31}",
            " ",
            f"           TOTAL PSS:{c.pss_total:>9}            TOTAL RSS:{c.rss_total:>9}"
            f"       TOTAL SWAP PSS:{c.swap:>9}",
        ]
    return [
        " ", " App Summary",
        "                       Pss(KB)",
        "                        ------",
        f"           Java Heap:{0:>9}",
        f"         Native Heap:{c.heap:>9}",
        f"                Code:{c.pss_file:>9}",
        f"               Stack:{c.stack:>9}",
        f"            Graphics:{c.graphics:>9}",
        f"       Private Other:{0:>9}",
        f"              System:{c.system:>9}",
        " ",
        f"               TOTAL:{c.pss_total:>9}       TOTAL SWAP PSS:{c.swap:>9}",
    ]


def meminfo_process(pid: int, name: str, rollup: Mapping[str, int], status: Mapping[str, int],
                    sdk: int, uptime_ms: int, graphics_kb: int = 0,
                    swap_title: str = "SwapPss") -> str:
    """``dumpsys meminfo <pid>`` of a native process, numbers from its smaps_rollup/status.

    ``swap_title`` heads the swap column (``SwapPss``, ``Swap`` or ``Swapped`` Dirty, as the
    phone's release and kernel print it). ``graphics_kb`` is the process's GPU memory as a
    memtrack HAL reports it (0: none, or no memtrack HAL): a ``GL mtrack`` row (Pss Total,
    Private Dirty and Rss Total) and the App Summary's ``Graphics:``. A phone's GPU memory is
    outside smaps, and its TOTAL is smaps' Pss plus memtrack's graphics. A virtual phone's GPU
    (lavapipe) allocates it in the process's own heap, already inside smaps' Pss: it is taken
    out of Native Heap (never below 0), so TOTAL stays smaps' Pss while the GPU memory is
    resident, and counts what is not resident yet on top (a phone's driver gives the pages at
    allocation).
    """
    columns = _columns(rollup, status, graphics_kb)
    with_rss = sdk >= 30
    lines = [
        "Applications Memory Usage (in Kilobytes):",
        f"Uptime: {uptime_ms} Realtime: {uptime_ms}",
        "",
        f"** MEMINFO in pid {pid} [{name[:15]}] **",
        *_category_table(columns, swap_title, with_rss),
        *_app_summary(columns, with_rss),
    ]
    return "\n".join(lines) + "\n \n"


def meminfo_summary(processes: Sequence[tuple[str, int, int]], total_kb: int, free_kb: int,
                    uptime_ms: int, cached: Sequence[tuple[str, int, int]] = ()) -> str:
    """``dumpsys meminfo`` (no args): native processes and cached apps are (name, pid, pss_kb)."""
    native_pss = sum(p for _, _, p in processes)
    cached_pss = sum(p for _, _, p in cached)
    used_pss = native_pss + cached_pss
    kernel = 180_000
    used = max(0, total_kb - free_kb)
    lost = used - used_pss - kernel
    lines = ["Applications Memory Usage (in Kilobytes):",
             f"Uptime: {uptime_ms} Realtime: {uptime_ms}", "", "Total PSS by process:"]
    for name, pid, pss in sorted([*processes, *cached], key=lambda p: -p[2]):
        lines.append(f"{pss:>12,}K: {name} (pid {pid})")
    lines += ["", "Total PSS by OOM adjustment:", f"{native_pss:>12,}K: Native"]
    if cached:
        lines.append(f"{cached_pss:>12,}K: Cached")
        lines += [f"{pss:>16,}K: {name} (pid {pid})"
                  for name, pid, pss in sorted(cached, key=lambda p: -p[2])]
    lines.append("")
    status = ("normal" if free_kb > total_kb // 5
              else "low" if free_kb > total_kb // 20 else "critical")
    lines += [
        f"Total RAM: {total_kb:,}K (status {status})",
        f" Free RAM: {free_kb:,}K ({free_kb // 3:,}K cached pss + {free_kb // 3:,}K cached kernel"
        f" + {free_kb - 2 * (free_kb // 3):,}K free)",
        f" Used RAM: {used:,}K ({used - kernel:,}K used pss + {kernel:,}K kernel)",
        f" Lost RAM: {lost:,}K",
        f"     ZRAM: {0:,}K physical used for {0:,}K in swap ({0:,}K total swap)",
        f"   Tuning: 256 (large 512), oom {total_kb // 8:,}K, restore limit {total_kb // 24:,}K "
        "(high-end-gfx)",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Temperature:
    name: str
    type: int  # AIDL TemperatureType: 0 CPU, 2 BATTERY, 3 SKIN
    value: float
    status: int


@dataclass(frozen=True)
class Cooling:
    name: str
    type: int  # CoolingType: 2 CPU
    value: int


def thermalservice(status: int, temperatures: Sequence[Temperature],
                   cooling: Sequence[Cooling], overridden: bool,
                   thresholds: Sequence[float], hal: str = "2.0") -> str:
    """``dumpsys thermalservice``; ``hal`` 2.0, 1.0 (no thresholds) or not_ready (no HAL part)."""
    temps = "".join(
        f"\tTemperature{{mValue={t.value:.1f}, mType={t.type}, mName={t.name}, "
        f"mStatus={t.status}}}\n" for t in temperatures
    )
    cools = "".join(
        f"\tCoolingDevice{{mValue={c.value}, mType={c.type}, mName={c.name}}}\n" for c in cooling
    )
    hot = ", ".join(["NaN", *(f"{v:.1f}" for v in thresholds)])
    head = (
        f"IsStatusOverride: {str(overridden).lower()}\n"
        "ThermalEventListeners:\n\tcallbacks: 1\n\tkilled: false\n\tbroadcasts count: -1\n"
        "ThermalStatusListeners:\n\tcallbacks: 1\n\tkilled: false\n\tbroadcasts count: -1\n"
        f"Thermal Status: {status}\n"
        "Cached temperatures:\n"
    )
    if hal == "not_ready":  # no temperatures ever reached the service
        return head + "HAL Ready: false\n"
    static = (
        f"\tTemperatureThreshold{{mType=3, mName=skin, mHotThrottlingThresholds=[{hot}], "
        "mColdThrottlingThresholds=[NaN, NaN, NaN, NaN, NaN, NaN, NaN]}\n"
    ) if hal == "2.0" else ""  # HAL 1.0 has no thresholds
    return (
        head
        + f"{temps}"
        "HAL Ready: true\n"
        f"HAL connection:\n\tThermalHAL {hal} connected: yes\n"
        "Current temperatures from HAL:\n"
        f"{temps}"
        "Current cooling devices from HAL:\n"
        f"{cools}"
        "Temperature static thresholds from HAL:\n"
        f"{static}"
    )


def dumpsys_gpumem(holders: Mapping[int, int], available: bool = True) -> str:
    """``dumpsys gpu --gpumem`` as GpuService prints it (Android 12-14, no imported column):
    GPU 0's global total (the driver's pid-0 entry: what every process holds) and each holder
    by pid, in bytes. ``available`` false: a kernel without the gpu_mem_total tracepoint."""
    if not available:
        return "Failed to initialize GPU memory eBPF\n"
    if not holders:
        return "GPU memory usage maps are empty\n"
    lines = ["Memory snapshot for GPU 0:", f"Global total: {sum(holders.values())}"]
    lines += [f"Proc {pid} total: {size}" for pid, size in sorted(holders.items())]
    return "\n".join(lines) + "\n"


def battery_status(charging: str, level: int, overheat: bool = False) -> int:
    """BatteryManager status: 2 charging, 3 discharging, 4 not charging (plugged in but too
    hot to charge), 5 full."""
    if charging == "none":
        return 3
    if overheat:
        return 4
    return 5 if level >= 100 else 2


@dataclass(frozen=True)
class Gauge:
    """What the fuel gauge reads (the power model's live state, see phone.py's battery.json)."""

    charge_counter_uah: int
    voltage_mv: int
    status: int  # BatteryManager status
    max_charging_ua: int


def battery(level: int, temperature_c: float, overheat: bool, charging: str = "usb",
            gauge: Gauge | None = None) -> str:
    """``dumpsys battery``; ``charging`` none, usb or ac. Without a ``gauge`` the counter,
    voltage and status are derived from the level alone."""
    def powered(kind: str) -> str:
        return str(charging == kind).lower()

    if gauge is None:
        gauge = Gauge(level * 45000, 3600 + level * 6, battery_status(charging, level, overheat),
                      {"none": 0, "usb": 500000, "ac": 3000000}.get(charging, 0))
    current = gauge.max_charging_ua if charging != "none" else 0
    return (
        "Current Battery Service state:\n"
        f"  AC powered: {powered('ac')}\n  USB powered: {powered('usb')}\n"
        "  Wireless powered: false\n"
        "  Dock powered: false\n"
        f"  Max charging current: {current}\n"
        f"  Max charging voltage: {5000000 if current else 0}\n"
        f"  Charge counter: {gauge.charge_counter_uah}\n"
        f"  status: {gauge.status}\n"
        f"  health: {3 if overheat else 2}\n  present: true\n"
        f"  level: {level}\n  scale: 100\n  voltage: {gauge.voltage_mv}\n"
        f"  temperature: {round(temperature_c * 10)}\n  technology: Li-ion\n"
    )


@dataclass(frozen=True)
class Power:
    """What PowerManagerService and DeviceIdleController know (see phone.py's PowerState)."""

    screen_on: bool
    plug_type: int  # 0 none, 1 AC, 2 USB, 4 wireless
    level: int
    stay_on_setting: int  # stay_on_while_plugged_in bitmask
    battery_saver: bool
    deep: str  # deviceidle deep state
    light: str

    @property
    def stay_on(self) -> bool:
        """PowerManagerService.updateStayOnLocked: the setting names the current plug type."""
        return bool(self.plug_type and self.stay_on_setting & self.plug_type)


def dumpsys_power(power: Power, uptime_ms: int) -> str:
    """``dumpsys power``, the lines of Android 12-14's dump that matter (others left out)."""
    wake = "Awake" if power.screen_on else "Asleep"
    yes = str(power.plug_type != 0).lower()
    saver = "ON" if power.battery_saver else "OFF"
    wake_ms = max(0, uptime_ms - 60000)
    return (
        "POWER MANAGER (dumpsys power)\n\n"
        "Power Manager State:\n"
        "  Settings power_manager_constants:\n    no_cached_wake_locks=true\n"
        "  mDirty=0x0\n"
        f"  mWakefulness={wake}\n"
        "  mWakefulnessChanging=false\n"
        f"  mIsPowered={yes}\n"
        f"  mPlugType={power.plug_type}\n"
        f"  mBatteryLevel={power.level}\n"
        "  mBatteryLevelWhenDreamStarted=0\n"
        "  mDockState=0\n"
        f"  mStayOn={str(power.stay_on).lower()}\n"
        "  mProximityPositive=false\n"
        "  mBootCompleted=true\n"
        "  mSystemReady=true\n"
        "  mHalAutoSuspendModeEnabled=false\n"
        f"  mHalInteractiveModeEnabled={str(power.screen_on).lower()}\n"
        "  mWakeLockSummary=0x0\n"
        f"  mLightDeviceIdleMode={str(power.light in ('IDLE', 'OVERRIDE')).lower()}\n"
        f"  mDeviceIdleMode={str(power.deep == 'IDLE').lower()}\n"
        f"  mLastWakeTime={wake_ms} ({uptime_ms - wake_ms} ms ago)\n"
        f"  mDisplayReady={str(power.screen_on).lower()}\n"
        "  mHoldingWakeLockSuspendBlocker=false\n"
        f"  mHoldingDisplaySuspendBlocker={str(power.screen_on).lower()}\n"
        "\n"
        "Settings and Configuration:\n"
        "  mScreenOffTimeoutSetting=30000\n"
        f"  mStayOnWhilePluggedInSetting={power.stay_on_setting}\n"
        "\n"
        "Sleep timeout: -1 ms\n"
        "Screen off timeout: 30000 ms\n"
        "\n"
        "Wake Locks: size=0\n"
        "\n"
        "Battery saving stats:\n"
        f"  Battery Saver is currently: {saver}\n"
        "\n"
        "Battery saver state machine:\n"
        f"  Enabled={str(power.battery_saver).lower()}\n"
    )


def dumpsys_deviceidle(power: Power) -> str:
    """``dumpsys deviceidle`` (no args): the state lines of DeviceIdleController's dump."""
    return (
        "  mLightEnabled=true  mDeepEnabled=true\n"
        "  mForceIdle=false\n"
        f"  mScreenOn={str(power.screen_on).lower()}\n"
        f"  mCharging={str(power.plug_type != 0).lower()}\n"
        f"  mState={power.deep} mLightState={power.light}\n"
    )


def light_idle_state(deep: str) -> str:
    """DeviceIdleController puts light idle in OVERRIDE while deep idle is IDLE."""
    return {"ACTIVE": "ACTIVE", "INACTIVE": "INACTIVE", "IDLE": "OVERRIDE"}.get(deep, "IDLE")


def pressure(some: Sequence[float], some_total_us: int, full: Sequence[float],
             full_total_us: int) -> str:
    """``/proc/pressure/memory``: avg10/avg60/avg300 in percent, totals in microseconds."""
    def row(kind: str, avgs: Sequence[float], total: int) -> str:
        return (f"{kind} avg10={avgs[0]:.2f} avg60={avgs[1]:.2f} avg300={avgs[2]:.2f} "
                f"total={total}\n")

    return row("some", some, some_total_us) + row("full", full, full_total_us)


def cpu_list(cpus: Iterable[int]) -> str:
    """Kernel cpu-list syntax: ``0-5``, ``0-3,6``."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def lmkd_kill_line(sdk: int, name: str, pid: int, rss_kb: int, swap_kb: int, reason: str,
                   uid: int = 2000, adj: int = 0) -> str:
    if sdk >= 31:
        return (f"Kill '{name}' ({pid}), uid {uid}, oom_score_adj {adj} to free {rss_kb}kB rss, "
                f"{swap_kb}kB swap; reason: {reason}")
    return f"Kill '{name}' ({pid}), uid {uid}, oom_adj {adj} to free {rss_kb}kB; reason: {reason}"


def logcat_threadtime(epoch: float, pid: int, tid: int, level: str, tag: str, message: str) -> str:
    """``MM-DD HH:MM:SS.mmm  PID  TID L TAG     : msg`` as ``logcat -v threadtime`` prints."""
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(epoch))
    millis = int((epoch % 1) * 1000)
    return f"{stamp}.{millis:03d} {pid:>5} {tid:>5} {level} {tag:<8}: {message}"


# A captured phone's own layout of a service, with this phone's live values put in its fields
# (``android.layouts``, written by ``harness sim start --from-capture``): the vendor's lines,
# sensor names and indentation stay as the phone printed them.
_LAYOUT_TEMPERATURE = re.compile(r"Temperature\{mValue=[^,]*, mType=(-?\d+), mName=([^,]*), "
                                 r"mStatus=-?\d+\}")
_LAYOUT_COOLING = re.compile(r"CoolingDevice\{mValue=[^,]*, mType=(-?\d+), mName=([^,}]*)\}")
_LAYOUT_STATUS = re.compile(r"^(\s*Thermal Status:\s*)\d+", re.MULTILINE)
_LAYOUT_FIELD = re.compile(r"^(\s*)([A-Za-z][A-Za-z ]*?): (.*)$")


def filled_thermalservice(layout: str, status: int, temperatures: Sequence[Temperature],
                          cooling: Sequence[Cooling]) -> str:
    """The layout with the live status, each sensor of a type this phone models given that
    type's hottest live reading and status (power, percent and other types kept as captured),
    and each cooling device of a modelled type given its live step."""
    hottest: dict[int, Temperature] = {}
    for t in temperatures:
        if t.type not in hottest or t.value > hottest[t.type].value:
            hottest[t.type] = t
    steps = {c.type: c.value for c in cooling}

    def temperature(match: re.Match[str]) -> str:
        live = hottest.get(int(match.group(1)))
        if live is None:
            return match.group(0)
        return (f"Temperature{{mValue={live.value:.1f}, mType={match.group(1)}, "
                f"mName={match.group(2)}, mStatus={live.status}}}")

    def device(match: re.Match[str]) -> str:
        live = steps.get(int(match.group(1)))
        if live is None:
            return match.group(0)
        return f"CoolingDevice{{mValue={live}, mType={match.group(1)}, mName={match.group(2)}}}"

    text = _LAYOUT_STATUS.sub(lambda m: f"{m.group(1)}{status}", layout)
    return _LAYOUT_COOLING.sub(device, _LAYOUT_TEMPERATURE.sub(temperature, text))


def filled_fields(layout: str, live: str) -> str:
    """``key: value`` lines (``dumpsys battery``): the first line of each key the live text
    also prints takes the live value, in the layout's indentation; the vendor's other lines
    stay as captured."""
    values: dict[str, str] = {}
    for line in live.splitlines():
        match = _LAYOUT_FIELD.match(line)
        if match is not None:
            values.setdefault(match.group(2), match.group(3))
    lines = []
    for line in layout.splitlines(keepends=True):
        match = _LAYOUT_FIELD.match(line.rstrip("\n"))
        if match is not None and match.group(2) in values:
            end = "\n" if line.endswith("\n") else ""
            line = f"{match.group(1)}{match.group(2)}: {values.pop(match.group(2))}{end}"
        lines.append(line)
    return "".join(lines)
