"""Device state and process memory from one marked shell output (text we compose)."""

from __future__ import annotations

from harness.run.probe import (
    MARK,
    memory_command,
    memory_from_output,
    split_sections,
    state_command,
    state_from_output,
)

THERMAL = """IsStatusOverride: false
ThermalEventListeners:
\tcallbacks: 0
Thermal Status: 2
Cached temperatures:
\tTemperature{mValue=99.0, mType=0, mName=cpu0, mStatus=0}
HAL Ready: true
HAL connection:
\tThermalHAL AIDL 1  connected: yes
Current temperatures from HAL:
\tTemperature{mValue=41.5, mType=0, mName=cpu-big, mStatus=2}
\tTemperature{mValue=36.0, mType=3, mName=skin, mStatus=0}
\tTemperature{mValue=4.3, mType=6, mName=vbat, mStatus=0}
Current cooling devices from HAL:
\tCoolingDevice{mValue=0, mType=2, mName=thermal-cpufreq-7}
"""

BATTERY = """Current Battery Service state:
  AC powered: false
  USB powered: true
  status: 2
  level: 77
  temperature: 312
"""


def _join(**sections: str) -> str:
    return "\n".join(f"{MARK}{name}\n{body}" for name, body in sections.items())


def test_state_takes_current_hal_values_battery_and_big_core_clocks() -> None:
    text = _join(thermal=THERMAL, battery=BATTERY, cur="1800000", max="2400000",
                 hwmax="3000000")
    state = state_from_output(text)
    assert state.thermal_status == 2
    assert state.max_temp_c == 41.5  # not the stale cached 99.0, not the voltage sensor
    assert state.battery_level == 77
    assert state.battery_temp_c == 31.2
    assert (state.big_cur_khz, state.big_max_khz, state.big_hw_max_khz) == (
        1800000, 2400000, 3000000)


def test_missing_sections_read_as_unknown() -> None:
    state = state_from_output(_join(thermal="garbage", cur="", max="x"))
    assert state.thermal_status is None
    assert state.big_cur_khz is None and state.big_max_khz is None


def test_memory_prefers_rollup_and_keeps_the_kernel_peak() -> None:
    rollup = ("00400000-7fff0000 ---p 00000000 00:00 0   [rollup]\nRss:  2048 kB\n"
              "Pss:  1500 kB\nPss_Anon:  1000 kB\nPss_File:  500 kB\nSwapPss:  0 kB\n")
    status = "Name:\tllama-bench\nVmHWM:\t  3000 kB\nVmRSS:\t  2048 kB\nVmSwap:\t 0 kB\n"
    memory = memory_from_output(_join(rollup=rollup, status=status))
    assert memory is not None
    assert (memory.pss_kb, memory.rss_kb, memory.vm_hwm_kb) == (1500, 2048, 3000)
    assert (memory.pss_anon_kb, memory.pss_file_kb) == (1000, 500)
    assert memory.source == "smaps_rollup"


def test_memory_of_a_gone_process_is_none() -> None:
    assert memory_from_output(_join(rollup="", status="")) is None


def test_commands_only_interpolate_integers_and_mark_every_section() -> None:
    command = memory_command(4242)
    assert "/proc/4242/smaps_rollup" in command and "/proc/4242/status" in command
    assert set(split_sections("\n".join(
        line for line in [f"{MARK}rollup", f"{MARK}status"]))) == {"rollup", "status"}
    assert "cpu7/cpufreq/scaling_max_freq" in state_command(7)


HAL_NOT_READY = "IsStatusOverride: false\nThermal Status: 0\nHAL Ready: false\n"
ZONES = "\n".join([
    "/sys/class/thermal/thermal_zone0/type:cpu-big",
    "/sys/class/thermal/thermal_zone1/type:cpu-little",
    "/sys/class/thermal/thermal_zone2/type:skin",
    "/sys/class/thermal/thermal_zone3/type:battery",
    "/sys/class/thermal/thermal_zone0/temp:52000",
    "/sys/class/thermal/thermal_zone2/temp:44500",
    "/sys/class/thermal/thermal_zone3/temp:39000",
])
DENIED = "grep: /sys/class/thermal/thermal_zone1/temp: Permission denied\n"


def test_with_the_hal_ready_skin_and_battery_come_from_it() -> None:
    state = state_from_output(_join(thermal=THERMAL, battery=BATTERY, zones=ZONES))
    assert (state.surface_temp_c, state.surface_source) == (36.0, "hal")
    assert state.max_temp_c == 41.5


def test_without_a_ready_hal_the_sysfs_zones_give_skin_and_hottest() -> None:
    state = state_from_output(_join(thermal=HAL_NOT_READY, battery=BATTERY, zones=ZONES), DENIED)
    assert state.thermal_status == 0
    assert (state.surface_temp_c, state.surface_source) == (44.5, "sysfs")
    assert state.max_temp_c == 52.0  # the hottest real zone stands in for the HAL's
    assert state.unreadable == ("thermal_zone1/temp: Permission denied",)


def test_with_every_zone_denied_the_battery_temperature_is_the_fallback() -> None:
    state = state_from_output(_join(thermal=HAL_NOT_READY, battery=BATTERY, zones=""),
                              "grep: /sys/class/thermal/thermal_zone2/temp: Permission denied\n")
    assert (state.surface_temp_c, state.surface_source) == (31.2, "dumpsys_battery")
    assert state.max_temp_c is None


def test_a_live_process_without_smaps_rollup_is_sampled_from_status_with_the_reason() -> None:
    status = "Name:\tllama-bench\nVmHWM:\t  3000 kB\nVmRSS:\t  2048 kB\n"
    memory = memory_from_output(_join(rollup="", status=status),
                                "cat: /proc/4242/smaps_rollup: No such file or directory\n")
    assert memory is not None and memory.source == "status" and memory.rss_kb == 2048
    assert memory.unreadable == ("/proc/<pid>/smaps_rollup: No such file or directory",)
    assert "thermal_zone*/temp" in state_command(0)
