"""Pure parsers of what Android devices print: text in, frozen dataclasses out, no I/O.

Every parser is tolerant: unknown rows and sections are skipped, missing columns read as None,
and text it cannot make sense of gives None (or an empty result), never an exception, so a bad
sample is recorded as a failed sample instead of ending a run.
"""

from harness.android.battery import Battery, parse_battery
from harness.android.cpu import (
    CpuCore,
    CpuFreq,
    CpuInfo,
    CpuTopology,
    core_name,
    format_cpu_range,
    mask_cpus,
    parse_cpu_range,
    parse_cpuinfo,
    parse_head_dump,
    read_cpu_topology,
)
from harness.android.gpumem import GpuMemSnapshot, parse_gpumem
from harness.android.kernel import (
    MemoryPressure,
    parse_boot_id,
    parse_memory_pressure,
    parse_uptime,
)
from harness.android.lmkd import LmkdKill, parse_lmkd_kill, parse_lmkd_kills
from harness.android.meminfo import (
    MemInfoSummary,
    ProcessMemInfo,
    ProcessPss,
    ProcMemInfo,
    parse_meminfo,
    parse_meminfo_summary,
    parse_proc_meminfo,
)
from harness.android.power import (
    PowerManagerState,
    parse_dumpsys_power,
    parse_idle_state,
    parse_low_power,
    parse_settings_value,
    parse_stay_on_setting,
)
from harness.android.procfs import ProcStatus, SmapsRollup, parse_proc_status, parse_smaps_rollup
from harness.android.props import parse_getprop
from harness.android.readerrors import parse_read_errors
from harness.android.thermal import (
    CoolingDevice,
    Temperature,
    ThermalService,
    ThermalZone,
    cpu_mitigation_active,
    hottest_temperature,
    is_real_temperature,
    is_surface_sensor,
    is_surface_zone,
    normalise_zone_temp,
    parse_thermalservice,
    parse_zone_grep,
    parse_zone_listing,
    read_thermal_zones,
)

__all__ = [
    "Battery",
    "CoolingDevice",
    "CpuCore",
    "CpuFreq",
    "CpuInfo",
    "CpuTopology",
    "GpuMemSnapshot",
    "LmkdKill",
    "MemInfoSummary",
    "MemoryPressure",
    "PowerManagerState",
    "ProcMemInfo",
    "ProcStatus",
    "ProcessMemInfo",
    "ProcessPss",
    "SmapsRollup",
    "Temperature",
    "ThermalService",
    "ThermalZone",
    "core_name",
    "cpu_mitigation_active",
    "format_cpu_range",
    "hottest_temperature",
    "is_real_temperature",
    "is_surface_sensor",
    "is_surface_zone",
    "mask_cpus",
    "normalise_zone_temp",
    "parse_battery",
    "parse_boot_id",
    "parse_cpu_range",
    "parse_cpuinfo",
    "parse_dumpsys_power",
    "parse_getprop",
    "parse_gpumem",
    "parse_head_dump",
    "parse_idle_state",
    "parse_lmkd_kill",
    "parse_lmkd_kills",
    "parse_low_power",
    "parse_meminfo",
    "parse_meminfo_summary",
    "parse_memory_pressure",
    "parse_proc_meminfo",
    "parse_proc_status",
    "parse_read_errors",
    "parse_settings_value",
    "parse_smaps_rollup",
    "parse_stay_on_setting",
    "parse_thermalservice",
    "parse_uptime",
    "parse_zone_grep",
    "parse_zone_listing",
    "read_cpu_topology",
    "read_thermal_zones",
]
