"""Power state, kernel files and read errors: text composed from AOSP's formats, and garbage."""

from __future__ import annotations

import pytest

from harness.android import (
    format_cpu_range,
    mask_cpus,
    parse_boot_id,
    parse_cpu_range,
    parse_dumpsys_power,
    parse_idle_state,
    parse_low_power,
    parse_memory_pressure,
    parse_read_errors,
    parse_settings_value,
    parse_stay_on_setting,
    parse_uptime,
    parse_zone_grep,
    read_thermal_zones,
)
from harness.android.power import LIGHT_IDLE_STATES

# PowerManagerService.dumpInternal, Android 12-14 (abridged; real output has ~150 lines)
POWER = """POWER MANAGER (dumpsys power)

Power Manager State:
  Settings power_manager_constants:
    no_cached_wake_locks=true
  mDirty=0x0
  mWakefulness=Awake
  mWakefulnessChanging=false
  mIsPowered=true
  mPlugType=2
  mBatteryLevel=76
  mBatteryLevelWhenDreamStarted=0
  mDockState=0
  mStayOn=false
  mProximityPositive=false
  mBootCompleted=true
Display Power: state=ON
Settings and Configuration:
  mStayOnWhilePluggedInSetting=0
"""


def test_dumpsys_power_reads_wakefulness_plug_and_stay_on() -> None:
    state = parse_dumpsys_power(POWER)
    assert state is not None
    assert (state.wakefulness, state.screen_on, state.stay_on) == ("Awake", True, False)
    assert (state.is_powered, state.plug_type, state.plug_source) == (True, 2, "usb")
    assert state.battery_level == 76 and state.display_state == "ON"


def test_dumpsys_power_asleep_unplugged_and_unknown_plug_types() -> None:
    text = POWER.replace("mWakefulness=Awake", "mWakefulness=Asleep").replace(
        "mIsPowered=true", "mIsPowered=false").replace("mPlugType=2", "mPlugType=0")
    state = parse_dumpsys_power(text)
    assert state is not None
    assert (state.screen_on, state.plug_source) == (False, "none")
    odd = parse_dumpsys_power("  mPlugType=16\n")
    assert odd is not None and odd.plug_source == "type 16"
    # no wakefulness line: the display power state decides
    display = parse_dumpsys_power("Display Power: state=OFF\n  mIsPowered=false\n")
    assert display is not None and display.screen_on is False


@pytest.mark.parametrize("text", ["", "Can't find service: power\n", "garbage=1\n",
                                  "  mWakefulness=Sideways\n"])
def test_dumpsys_power_without_its_fields_is_none(text: str) -> None:
    assert parse_dumpsys_power(text) is None


def test_settings_values_and_null() -> None:
    assert parse_settings_value("7\n") == "7"
    assert parse_settings_value("null\n") is None
    assert parse_settings_value("") is None
    assert parse_low_power("1\n") is True and parse_low_power("0\n") is False
    assert parse_low_power("null\n") is False  # never set: off
    assert parse_low_power("Permission denial: ...\n") is None
    assert parse_stay_on_setting("3\n") == 3 and parse_stay_on_setting("null") == 0
    assert parse_stay_on_setting("x") is None


def test_deviceidle_states() -> None:
    assert parse_idle_state("IDLE\n") == "IDLE"
    assert parse_idle_state("ACTIVE") == "ACTIVE"
    assert parse_idle_state("Can't find service: deviceidle\n") is None
    assert parse_idle_state("") is None
    assert parse_idle_state("WAITING_FOR_NETWORK", LIGHT_IDLE_STATES) == "WAITING_FOR_NETWORK"


def test_memory_pressure_some_and_full() -> None:
    text = ("some avg10=1.50 avg60=0.40 avg300=0.08 total=912345\n"
            "full avg10=0.75 avg60=0.10 avg300=0.00 total=456789\n")
    pressure = parse_memory_pressure(text)
    assert pressure is not None
    assert (pressure.some_avg10, pressure.some_total_us) == (1.5, 912345)
    assert (pressure.full_avg10, pressure.full_total_us) == (0.75, 456789)
    only_some = parse_memory_pressure(text.splitlines()[0])
    assert only_some is not None and only_some.full_total_us is None
    assert parse_memory_pressure("cat: /proc/pressure/memory: Permission denied") is None
    assert parse_memory_pressure("some avg10=x total=y") is None


def test_boot_id_and_uptime() -> None:
    assert parse_boot_id("0c6a7e3e-5b0e-4a2b-9d61-3f0e2b7c1a9d\n") == (
        "0c6a7e3e-5b0e-4a2b-9d61-3f0e2b7c1a9d")
    assert parse_boot_id("0C6A7E3E-5B0E-4A2B-9D61-3F0E2B7C1A9D") is not None
    assert parse_boot_id("cat: /proc/sys/kernel/random/boot_id: Permission denied") is None
    assert parse_uptime("12345.67 45678.90\n") == 12345.67
    assert parse_uptime("") is None and parse_uptime("-3 1") is None


def test_cpu_lists_and_masks_round_trip() -> None:
    assert format_cpu_range([6, 0, 1, 2, 3]) == "0-3,6"
    assert format_cpu_range([1]) == "1" and format_cpu_range([]) == ""
    assert parse_cpu_range(format_cpu_range([0, 2, 3, 4, 7])) == (0, 2, 3, 4, 7)
    assert mask_cpus("0xf0") == frozenset({4, 5, 6, 7})
    assert mask_cpus("2") == frozenset({1})  # toybox taskset spells masks without 0x
    assert mask_cpus("0x0") == frozenset() and mask_cpus("zz") == frozenset()


def test_read_errors_name_the_file_and_the_reason_once() -> None:
    stderr = "\n".join([
        "grep: /sys/class/thermal/thermal_zone1/temp: Permission denied",
        "cat: /proc/4242/smaps_rollup: No such file or directory",
        "cat: /proc/4242/smaps_rollup: No such file or directory",
        "mksh: /proc/pressure/memory: open: Permission denied",
        "grep: /sys/class/thermal/thermal_zone*/type: No such file or directory",
        "some other complaint",
    ])
    assert parse_read_errors(stderr) == (
        "thermal_zone1/temp: Permission denied",
        "/proc/<pid>/smaps_rollup: No such file or directory",
        "/proc/pressure/memory: Permission denied",
    )
    assert parse_read_errors("") == ()


def test_zone_grep_pairs_type_and_temp_per_zone_and_leaves_unreadable_ones_out() -> None:
    text = "\n".join([
        "/sys/class/thermal/thermal_zone0/type:cpu-big",
        "/sys/class/thermal/thermal_zone10/type:skin",
        "/sys/class/thermal/thermal_zone2/type:battery",
        "/sys/class/thermal/thermal_zone0/temp:48200",
        "/sys/class/thermal/thermal_zone10/temp:36100",
        # zone2's temp was denied: its error went to stderr, no line here
    ])
    zones = parse_zone_grep(text)
    assert zones == {"thermal_zone0": ("cpu-big", "48200"), "thermal_zone10": ("skin", "36100"),
                     "thermal_zone2": ("battery", None)}
    read = read_thermal_zones(zones)
    assert [(z.zone, z.type, z.celsius) for z in read] == [
        ("thermal_zone0", "cpu-big", 48.2), ("thermal_zone10", "skin", 36.1)]
