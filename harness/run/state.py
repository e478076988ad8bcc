"""A snapshot of a device's heat, clocks and battery, and its reduction over a trial."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceState:
    thermal_status: int | None = None  # 0 NONE .. 6 SHUTDOWN
    max_temp_c: float | None = None  # hottest CPU/SoC/skin temperature
    battery_level: int | None = None
    battery_temp_c: float | None = None
    big_cur_khz: int | None = None  # current frequency of the biggest cluster
    big_max_khz: int | None = None  # scaling_max_freq of the biggest cluster (caps show here)
    big_hw_max_khz: int | None = None  # cpuinfo_max_freq: what the hardware can do
    # the hotter of the skin and battery temperatures, from the best source that has them:
    # "hal" (thermalservice), "sysfs" (thermal zones), "dumpsys_battery" (battery only)
    surface_temp_c: float | None = None
    surface_source: str | None = None
    unreadable: tuple[str, ...] = ()  # "thermal_zone1/temp: Permission denied", ...
    max_gpu_temp_c: float | None = None  # the hottest zone whose type names the GPU


@dataclass(frozen=True)
class ProcessMemory:
    pss_kb: int | None = None
    rss_kb: int | None = None
    swap_kb: int | None = None
    pss_anon_kb: int | None = None
    pss_file_kb: int | None = None
    vm_hwm_kb: int | None = None
    source: str | None = None
    unreadable: tuple[str, ...] = ()  # files of a live process that could not be read
    # paging evidence, cumulative since the process started: major faults (/proc/PID/stat) and
    # bytes read from storage (/proc/PID/io read_bytes; page cache hits are not counted)
    major_faults: int | None = None
    read_bytes: int | None = None
    # the process's GPU memory as the phone's kgsl node says (/sys/class/kgsl/kgsl/proc/PID/
    # kernel); None: not read (no kgsl, or the tick did not read it)
    gpu_bytes: int | None = None
    gpu_mapped_bytes: int | None = None  # of which mapped into the process (inside its PSS)
    # the phone's swap-ins so far (/proc/vmstat pswpin x the page size), every process's: a page
    # back from zram counts in read_bytes and major_faults too; None: not read
    swap_in_bytes: int | None = None


@dataclass(frozen=True)
class GpuState:
    """The GPU as kgsl-3d0 reports it (Adreno): clocks in kHz, busy share, thermal level."""

    cur_khz: int | None = None  # gpuclk (Hz on the phone)
    max_khz: int | None = None  # max_gpuclk: lowered while the phone throttles the GPU
    busy_pct: float | None = None  # gpu_busy_percentage
    pwrlevel: int | None = None  # thermal_pwrlevel: 0 none, higher: capped by heat

    @property
    def capped(self) -> bool:
        return bool(self.pwrlevel)


def _max(values: Sequence[float | int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def is_capped(state: DeviceState) -> bool:
    """The big cores are held below what the hardware can do (thermal or other mitigation)."""
    if state.big_max_khz is None or state.big_hw_max_khz is None:
        return False
    return state.big_max_khz < state.big_hw_max_khz


MITIGATING_STATUS = 2  # MODERATE: Android's first status whose throttling apps notice


def mitigating(state: DeviceState) -> bool:
    """The phone says it is holding its CPUs back: big cores capped, or MODERATE and above."""
    status = state.thermal_status
    return is_capped(state) or (status is not None and status >= MITIGATING_STATUS)


def throttled_during(states: Sequence[DeviceState], max_thermal_status: int) -> bool:
    """A trial is throttled when the status rose above the policy or the big cores were capped."""
    for state in states:
        if state.thermal_status is not None and state.thermal_status > max_thermal_status:
            return True
        if is_capped(state):
            return True
    return False


def peak(values: Sequence[int | None]) -> int | None:
    found = _max(values)
    return None if found is None else int(found)


def hottest(states: Sequence[DeviceState]) -> float | None:
    return _max([s.max_temp_c for s in states])


def worst_status(states: Sequence[DeviceState]) -> int | None:
    found = _max([s.thermal_status for s in states])
    return None if found is None else int(found)
