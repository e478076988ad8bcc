"""Every source on a phone the harness reads, and the measurements they serve.

This is the list of command templates the harness sends to a phone, one ``Source`` each: what it
asks (the doctor's probe, ``{cpu}`` standing for a big core and ``$$`` for the probing shell's
own pid, which reads like the engine's: same uid, a child of the shell), and which of the
harness's own command texts it stands for (``covers``: shell-glob patterns of the services and
paths ``harness.doctor.coverage`` finds in the harness's code). A command the harness gains
without a source here fails ``tests/doctor/test_coverage.py``.

A ``Measurement`` lists its sources in the order the harness prefers them: the first that works
on a phone serves it, the others are its fallbacks, and when none works the measurement is lost
(``lost`` says what that costs). Pure data and pure checks; the probing is ``harness.doctor.probe``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.android.battery import parse_battery
from harness.android.gpumem import parse_gpumem
from harness.android.kernel import parse_memory_pressure
from harness.android.power import parse_dumpsys_power, parse_idle_state
from harness.android.procfs import parse_proc_status, parse_smaps_rollup
from harness.android.thermal import parse_thermalservice

Check = Callable[[str], str | None]
"""``check(stdout)``: None when a source's answer is usable, else why not (a short phrase)."""


def _thermal_hal(text: str) -> str | None:
    found = parse_thermalservice(text)
    if found is None:
        return "not thermalservice output"
    if found.hal_ready is False or not found.temperatures:
        return "thermal HAL not ready: no temperatures"
    return None


def _parsed(parse: Callable[[str], object], what: str) -> Check:
    def check(text: str) -> str | None:
        return None if parse(text) is not None else f"no {what} in the answer"
    return check


def _numbers(text: str) -> str | None:
    words = text.split()
    if not words or not all(w.lstrip("-").isdigit() for w in words):
        return "not a number"
    return None


def _zones(text: str) -> str | None:
    return None if "/temp:" in text else "no thermal zone readable"


def _gpumem(text: str) -> str | None:
    found = parse_gpumem(text)
    if found is None:
        return "GpuService has no GPU memory snapshot (no gpu_mem_total tracepoint)"
    return None


def _memtrack(text: str) -> str | None:
    return None if "GL mtrack" in text else "no GL mtrack row (no memtrack HAL for the GPU)"


def _anything(text: str) -> str | None:
    """Any answer on a 0 exit: a log without kill lines, a folder without pids, are usable."""
    return None


def _copied(text: str) -> str | None:
    return None if "records out" in text else "dd printed no records line"


def _head_dump(text: str) -> str | None:
    return None if "==> " in text else "no CPU file readable"


def _deep_idle(text: str) -> str | None:
    return None if parse_idle_state(text) is not None else "no deep idle state"


def _setting(text: str) -> str | None:
    return None if text.strip() else "empty answer"


@dataclass(frozen=True)
class Source:
    id: str
    command: str  # the doctor's probe: {cpu} is a big core, $$ the probing shell's pid
    covers: tuple[str, ...]  # glob patterns of the harness's command texts it stands for
    gives: str  # what it serves, in a few words
    check: Check | None = None  # on a 0 exit: is the answer usable?

    def probe_command(self, cpu: int) -> str:
        return self.command.replace("{cpu}", str(int(cpu)))


CPUFREQ = "/sys/devices/system/cpu/cpu{cpu}/cpufreq"
_CPU = "/sys/devices/system/cpu"
# every core's files in `head` layout ("==> PATH <=="), offline cores' absent
CPU_FILES = (f"for f in {_CPU}/possible {_CPU}/online {_CPU}/cpu[0-9]*/cpu_capacity "
             f"{_CPU}/cpu[0-9]*/cpufreq/cpuinfo_max_freq {_CPU}/cpu[0-9]*/cpufreq/cpuinfo_min_freq "
             f"{_CPU}/cpu[0-9]*/cpufreq/related_cpus; do "
             'if [ -r "$f" ]; then echo "==> $f <=="; cat "$f"; echo; fi; done')
POWER_SUPPLY = "/sys/class/power_supply/battery"

SOURCES: tuple[Source, ...] = (
    # identity: what the phone is and who the shell is
    Source("props", "getprop", ("getprop",), "build, SoC and ABI properties"),
    Source("id", "id", ("id",), "the shell's uid, groups and SELinux context"),
    Source("selinux", "getenforce", ("getenforce",), "SELinux mode"),
    Source("toybox", "toybox --version", ("toybox",), "toybox version"),
    Source("mksh", "echo \"${KSH_VERSION:-none}\"", ("KSH_VERSION",), "mksh version"),
    Source("workdir", "mkdir -p /data/local/tmp/harness && touch /data/local/tmp/harness/.doctor"
           " && rm /data/local/tmp/harness/.doctor && echo writable",
           ("/data/local/tmp", "/data/local/tmp/*"), "a writable folder for builds and models"),
    Source("storage", "df -k /data/local/tmp", ("df*",), "free storage"),
    Source("shell", "/system/bin/sh -c 'echo ok'", ("/system/bin/sh", "/system/bin/linker64"),
           "the system shell and linker"),
    # CPU
    Source("cpu.topology", CPU_FILES,
           ("/sys/devices/system/cpu/possible", "/sys/devices/system/cpu/cpu*/cpu_capacity",
            "/sys/devices/system/cpu/cpu*/topology/*",
            "/sys/devices/system/cpu/cpu*/cpufreq/related_cpus",
            "/sys/devices/system/cpu"),
           "clusters and core capacities", _head_dump),
    Source("cpuinfo", "cat /proc/cpuinfo", ("/proc/cpuinfo",), "the cores' part numbers"),
    Source("cpu.clock", f"cat {CPUFREQ}/scaling_cur_freq {CPUFREQ}/scaling_max_freq",
           ("/sys/devices/system/cpu/cpu*/cpufreq",
            "/sys/devices/system/cpu/cpu*/cpufreq/scaling_*"),
           "a big core's clock and its cap", _numbers),
    Source("cpu.hw_max", f"cat {CPUFREQ}/cpuinfo_max_freq",
           ("/sys/devices/system/cpu/cpu*/cpufreq/cpuinfo_max_freq",),
           "a big core's top clock", _numbers),
    # heat and battery
    Source("thermal.hal", "dumpsys thermalservice", ("dumpsys thermalservice",),
           "thermal status and the HAL's sensors", _thermal_hal),
    Source("thermal.zones", "grep -H '' /sys/class/thermal/thermal_zone*/type "
           "/sys/class/thermal/thermal_zone*/temp",
           ("/sys/class/thermal", "/sys/class/thermal/*"), "sysfs thermal zones", _zones),
    Source("battery", "dumpsys battery", ("dumpsys battery",),
           "battery level, temperature, plug", _parsed(parse_battery, "battery fields")),
    Source("power_supply", f"cat {POWER_SUPPLY}/current_now {POWER_SUPPLY}/voltage_now",
           (POWER_SUPPLY, f"{POWER_SUPPLY}/*"), "battery current and voltage", _numbers),
    # power state
    Source("power", "dumpsys power", ("dumpsys power",), "screen, stay-awake, plug",
           _parsed(parse_dumpsys_power, "power manager fields")),
    Source("battery_saver", "settings get global low_power",
           ("settings get global low_power",), "battery saver", _setting),
    Source("stay_on", "settings get global stay_on_while_plugged_in",
           ("settings get global stay_on_while_plugged_in",), "stay awake while plugged in",
           _setting),
    Source("doze", "dumpsys deviceidle get deep", ("dumpsys deviceidle",), "Doze's deep state",
           _deep_idle),
    # memory
    Source("meminfo", "cat /proc/meminfo", ("/proc/meminfo",), "the phone's free memory"),
    Source("pressure", "cat /proc/pressure/memory", ("/proc/pressure/memory",),
           "memory pressure (PSI)", _parsed(parse_memory_pressure, "PSI lines")),
    Source("vmstat", "cat /proc/vmstat", ("/proc/vmstat",), "pages swapped in"),
    Source("lmkd", "logcat -d -s lowmemorykiller", ("logcat -s lowmemorykiller", "logcat"),
           "lmkd's kill lines", _anything),
    Source("proc.rollup", "cat /proc/$$/smaps_rollup",
           ("/proc/<pid>/smaps_rollup", "/proc/<pid>/smaps"), "the engine's PSS and swap",
           _parsed(parse_smaps_rollup, "smaps_rollup fields")),
    Source("proc.status", "cat /proc/$$/status",
           ("/proc/<pid>/status", "/proc/<pid>/task/*/status", "/proc/<pid>/statm",
            "/proc/<pid>"),
           "the engine's RSS, peak and threads", _parsed(parse_proc_status, "status fields")),
    Source("proc.stat", "cat /proc/$$/stat", ("/proc/<pid>/stat",), "CPU time, major faults"),
    Source("proc.io", "cat /proc/$$/io", ("/proc/<pid>/io",), "bytes read from storage"),
    Source("meminfo.dumpsys", "dumpsys meminfo $$", ("dumpsys meminfo",),
           "the engine's memory by kind, graphics rows (memtrack)"),
    # GPU
    Source("gpu.kgsl", "ls /sys/class/kgsl/kgsl/proc",
           ("/sys/class/kgsl", "/sys/class/kgsl/kgsl/proc", "/sys/class/kgsl/kgsl/proc/*"),
           "each process's GPU memory (Adreno kgsl)", _anything),
    Source("gpu.memtrack", "dumpsys meminfo $$", (),
           "GPU memory rows of dumpsys meminfo (memtrack HAL)", _memtrack),
    Source("gpu.gpumem", "dumpsys gpu --gpumem", ("dumpsys gpu",),
           "each process's GPU memory (GpuService, Android 12+)", _gpumem),
    Source("gpu.clock", "cat /sys/class/kgsl/kgsl-3d0/gpuclk",
           ("/sys/class/kgsl/kgsl-3d0", "/sys/class/kgsl/kgsl-3d0/*"),
           "the GPU's clock and busy share", _numbers),
    # clocks, boots, tools
    Source("boot_id", "cat /proc/sys/kernel/random/boot_id",
           ("/proc/sys/kernel/random/boot_id",), "reboots between trials"),
    Source("uptime", "cat /proc/uptime", ("/proc/uptime",), "the sampler's clock"),
    Source("dd", "dd if=/dev/zero of=/dev/null bs=1048576 count=1 2>&1",
           ("/dev/zero", "/dev/null"), "the memory bandwidth probe", _copied),
    Source("packages", "pm list packages -3", (),
           "third-party packages (the capture's scrubber replaces their names)", _anything),
    Source("uname", "uname -a", (), "the kernel's release and build", _setting),
    Source("gpu.vkjson", "cmd gpu vkjson", (),
           "the Vulkan driver and its devices (GpuService)", _setting),
    Source("selinux_denials", "logcat -d -b all -e 'avc: +denied'",
           (), "SELinux denials of the shell (scontext=u:r:shell)"),
)

BY_ID = {source.id: source for source in SOURCES}


@dataclass(frozen=True)
class Measurement:
    name: str
    sources: tuple[str, ...]  # ids, preferred first
    lost: str  # what results lack when no source works
    changes_results: bool = False  # lost: the results are wrong or noisy, not just thinner


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("device facts", ("props",),
                "model, SoC and Android release unknown: results cannot be grouped by phone",
                True),
    Measurement("storage for builds and models", ("workdir",),
                "nothing can be pushed: no trial can run", True),
    Measurement("free storage", ("storage",), "pushes may fill the phone unannounced"),
    Measurement("CPU clusters", ("cpu.topology",),
                "thread placement by cluster unknown: affinity axes cannot run"),
    Measurement("CPU clock", ("cpu.clock",), "throttling by clock cap is not seen", True),
    Measurement("CPU top clock", ("cpu.hw_max",), "the cap's share of the top clock unknown"),
    Measurement("thermal status and temperatures", ("thermal.hal", "thermal.zones"),
                "heat is not seen: throttled trials are not flagged", True),
    Measurement("battery", ("battery", "power_supply"),
                "battery level and temperature missing"),
    Measurement("energy", ("power_supply", "battery"), "energy per token unknown"),
    Measurement("screen and plug", ("power",),
                "screen and plug unknown: runs that require them cannot start", True),
    Measurement("battery saver", ("battery_saver",),
                "battery saver not seen: its clock caps go unnoticed", True),
    Measurement("stay awake", ("power", "stay_on"), "stay-awake unknown"),
    Measurement("Doze", ("doze",), "Doze not seen: deferred work may run during trials"),
    Measurement("phone memory", ("meminfo",), "free memory before a trial unknown"),
    Measurement("memory pressure", ("pressure",),
                "no PSI: OOM evidence from lmkd's lines and the exit alone"),
    Measurement("OOM kills", ("lmkd",),
                "lmkd's kills not seen: a killed engine reads as a crash", True),
    Measurement("engine memory", ("proc.rollup", "proc.status", "meminfo.dumpsys"),
                "the engine's memory is not measured", True),
    Measurement("engine paging", ("proc.io", "vmstat"),
                "storage reads not measured: mmap paging is not seen"),
    Measurement("engine CPU time", ("proc.stat",), "CPU time and major faults missing"),
    Measurement("GPU memory", ("gpu.kgsl", "gpu.gpumem", "gpu.memtrack"),
                "accelerator memory of GPU cells unreadable"),
    Measurement("GPU clock", ("gpu.clock",), "GPU clock and busy share missing"),
    Measurement("reboots", ("boot_id", "uptime"),
                "a reboot during a trial is not told from a crash", True),
    Measurement("memory bandwidth", ("dd",), "the bandwidth probe cannot run"),
)
