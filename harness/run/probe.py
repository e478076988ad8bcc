"""Reading a device's state and an engine process's memory, one shell round trip each.

The commands are composed here and their output split into sections by marker lines; turning
the sections into values is pure (``state_from_output``, ``memory_from_output``), so it is tested
on text without a device. A section that cannot be parsed yields None fields, never an error: a
failed sample is recorded as missing, it does not stop the trial.
"""

from __future__ import annotations

import shlex
from typing import Protocol

from harness.android.battery import Battery, parse_battery
from harness.android.procfs import parse_proc_status, parse_smaps_rollup
from harness.android.readerrors import parse_read_errors
from harness.android.thermal import (
    ThermalService,
    ThermalZone,
    hottest_temperature,
    is_surface_sensor,
    is_surface_zone,
    parse_thermalservice,
    parse_zone_grep,
    read_thermal_zones,
)
from harness.run.state import DeviceState, ProcessMemory

MARK = "@@harness:"
# Every zone's type and temperature in one applet call; an unreadable file's error goes to the
# command's stderr, where it becomes an ``unreadable`` reason (recorded once per trial).
ZONES = ("grep -H '' /sys/class/thermal/thermal_zone*/type "
         "/sys/class/thermal/thermal_zone*/temp")


class Shell(Protocol):
    def shell_text(self, command: str, timeout: float | None = None) -> str: ...


def _section(name: str) -> str:
    return f"echo {shlex.quote(MARK + name)}"


# The state's system-service queries (section, command); their stderr is not evidence.
STATE_SERVICES = [("thermal", "dumpsys thermalservice"), ("battery", "dumpsys battery")]


def state_files(big_cpu: int) -> str:
    """The state's file reads (thermal zones, big-core clocks); an unreadable one says why."""
    cpufreq = f"/sys/devices/system/cpu/cpu{int(big_cpu)}/cpufreq"
    return "; ".join([
        _section("zones"), ZONES,
        _section("cur"), f"cat {cpufreq}/scaling_cur_freq",
        _section("max"), f"cat {cpufreq}/scaling_max_freq",
        _section("hwmax"), f"cat {cpufreq}/cpuinfo_max_freq",
    ])


def state_command(big_cpu: int) -> str:
    services = "; ".join(f"{_section(name)}; {command} 2>/dev/null"
                         for name, command in STATE_SERVICES)
    return f"{services}; {state_files(big_cpu)}"


def memory_command(pid: int) -> str:
    proc = f"/proc/{int(pid)}"
    return "; ".join([
        _section("rollup"), f"cat {proc}/smaps_rollup",
        _section("status"), f"cat {proc}/status",
    ])


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text else None
    except ValueError:
        return None


def split_sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(MARK):
            current = sections.setdefault(line[len(MARK):].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def surface_temperature(thermal: ThermalService | None, zones: tuple[ThermalZone, ...],
                        battery: Battery | None) -> tuple[float | None, str | None]:
    """The hotter of skin and battery, and where it came from.

    The thermal HAL's skin/battery sensors first; when the HAL is not ready (or has none) the
    sysfs zones named like them; failing both, the battery's own temperature. Why skin and
    battery: they are what the phone throttles on, and they still read true when the reported
    thermal status is stuck at 0 (as on many Samsung and Xiaomi builds).
    """
    hal = [s.value for s in (thermal.temperatures if thermal else ()) if is_surface_sensor(s)]
    if hal:
        return max(v for v in hal if v is not None), "hal"
    surface = [z.celsius for z in zones if is_surface_zone(z) and z.celsius is not None]
    if surface:
        return max(surface), "sysfs"
    if battery is not None and battery.temperature_c is not None:
        return battery.temperature_c, "dumpsys_battery"
    return None, None


def state_from_output(text: str, errors: str = "") -> DeviceState:
    """The state from ``state_command``'s stdout, and its stderr for the files it could not read."""
    sections = split_sections(text)
    thermal = parse_thermalservice(sections.get("thermal", ""))
    battery = parse_battery(sections.get("battery", ""))
    zones = read_thermal_zones(parse_zone_grep(sections.get("zones", "")))
    hottest = hottest_temperature(thermal.temperatures) if thermal else None
    hottest_zone = max((z.celsius for z in zones if z.celsius is not None), default=None)
    surface, source = surface_temperature(thermal, zones, battery)
    return DeviceState(
        thermal_status=thermal.status if thermal else None,
        # the HAL's hottest sensor; without a ready HAL, the hottest real sysfs zone
        max_temp_c=hottest.value if hottest else hottest_zone,
        battery_level=battery.level if battery else None,
        battery_temp_c=battery.temperature_c if battery else None,
        big_cur_khz=_int(sections.get("cur")),
        big_max_khz=_int(sections.get("max")),
        big_hw_max_khz=_int(sections.get("hwmax")),
        surface_temp_c=surface,
        surface_source=source,
        unreadable=parse_read_errors(errors),
    )


def memory_from_output(text: str, errors: str = "") -> ProcessMemory | None:
    """None when the process is gone (neither file could be read).

    A file of a live process that could not be read (no smaps_rollup before kernel 4.14, a
    denied one) is named in ``unreadable``; the other file still gives the sample.
    """
    sections = split_sections(text)
    rollup = parse_smaps_rollup(sections.get("rollup", ""))
    status = parse_proc_status(sections.get("status", ""))
    if rollup is None and status is None:
        return None
    return ProcessMemory(
        pss_kb=rollup.pss_kb if rollup else None,
        rss_kb=(rollup.rss_kb if rollup and rollup.rss_kb is not None
                else status.vm_rss_kb if status else None),
        swap_kb=(rollup.swap_pss_kb if rollup and rollup.swap_pss_kb is not None
                 else status.vm_swap_kb if status else None),
        pss_anon_kb=rollup.pss_anon_kb if rollup else None,
        pss_file_kb=rollup.pss_file_kb if rollup else None,
        vm_hwm_kb=status.vm_hwm_kb if status else None,
        source="smaps_rollup" if rollup else "status",
        unreadable=parse_read_errors(errors),
    )
