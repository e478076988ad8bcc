"""Reading a device's state and an engine process's memory, one shell round trip each.

The commands are composed here and their output split into sections by marker lines; turning
the sections into values is pure (``state_from_output``, ``memory_from_output``), so it is tested
on text without a device. A section that cannot be parsed yields None fields, never an error: a
failed sample is recorded as missing, it does not stop the trial.
"""

from __future__ import annotations

import shlex
from typing import Protocol

from harness.android.battery import parse_battery
from harness.android.procfs import parse_proc_status, parse_smaps_rollup
from harness.android.thermal import hottest_temperature, parse_thermalservice
from harness.run.state import DeviceState, ProcessMemory

MARK = "@@harness:"


class Shell(Protocol):
    def shell_text(self, command: str, timeout: float | None = None) -> str: ...


def _section(name: str) -> str:
    return f"echo {shlex.quote(MARK + name)}"


def state_command(big_cpu: int) -> str:
    cpufreq = f"/sys/devices/system/cpu/cpu{int(big_cpu)}/cpufreq"
    parts = [
        _section("thermal"), "dumpsys thermalservice 2>/dev/null",
        _section("battery"), "dumpsys battery 2>/dev/null",
        _section("cur"), f"cat {cpufreq}/scaling_cur_freq 2>/dev/null",
        _section("max"), f"cat {cpufreq}/scaling_max_freq 2>/dev/null",
        _section("hwmax"), f"cat {cpufreq}/cpuinfo_max_freq 2>/dev/null",
    ]
    return "; ".join(parts)


def memory_command(pid: int) -> str:
    proc = f"/proc/{int(pid)}"
    return "; ".join([
        _section("rollup"), f"cat {proc}/smaps_rollup 2>/dev/null",
        _section("status"), f"cat {proc}/status 2>/dev/null",
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


def state_from_output(text: str) -> DeviceState:
    sections = split_sections(text)
    thermal = parse_thermalservice(sections.get("thermal", ""))
    battery = parse_battery(sections.get("battery", ""))
    hottest = hottest_temperature(thermal.temperatures) if thermal else None
    return DeviceState(
        thermal_status=thermal.status if thermal else None,
        max_temp_c=hottest.value if hottest else None,
        battery_level=battery.level if battery else None,
        battery_temp_c=battery.temperature_c if battery else None,
        big_cur_khz=_int(sections.get("cur")),
        big_max_khz=_int(sections.get("max")),
        big_hw_max_khz=_int(sections.get("hwmax")),
    )


def memory_from_output(text: str) -> ProcessMemory | None:
    """None when the process is gone (neither file could be read)."""
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
    )
