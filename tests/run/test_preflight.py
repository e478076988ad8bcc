"""Pre-flight state, the baseline before a launch, and the run's requirements (text we compose)."""

from __future__ import annotations

import pytest

from harness.matrix import Requirements
from harness.run.preflight import (
    BASELINE,
    Baseline,
    Preflight,
    baseline_from_output,
    conditions_command,
    conditions_from_output,
    preflight_from_output,
    rebooted,
    unmet_requirement,
)
from harness.run.probe import MARK

POWER = "  mWakefulness=Awake\n  mIsPowered=true\n  mPlugType=2\n  mStayOn=false\n"
BATTERY = ("Current Battery Service state:\n  AC powered: false\n  USB powered: true\n"
           "  Wireless powered: false\n  status: 2\n  level: 76\n  temperature: 301\n")
LMKD = ("12-01 10:00:01.000   512   512 I lowmemorykiller: Kill 'com.android.chrome' (2718), "
        "uid 10100, oom_score_adj 700 to free 180000kB rss, 0kB swap; reason: low watermark")


def _join(**sections: str) -> str:
    return "\n".join(f"{MARK}{name}\n{body}" for name, body in sections.items())


def test_preflight_reads_screen_stay_awake_charging_saver_and_doze() -> None:
    state = preflight_from_output(_join(power=POWER, battery=BATTERY, low_power="1",
                                        stay_on="0", deep="ACTIVE"))
    assert state == Preflight(screen_on=True, stay_awake=False, charging=True,
                              charge_source="usb", battery_saver=True, doze_state="ACTIVE")
    assert state.dozing is False


def test_preflight_of_a_phone_that_says_nothing_is_all_unknown() -> None:
    assert preflight_from_output("") == Preflight()
    assert Preflight().dozing is None


def test_preflight_falls_back_to_the_setting_and_the_power_service() -> None:
    # no mStayOn line: the setting's bitmask; no battery status: plugged in = charging
    state = preflight_from_output(_join(power="  mIsPowered=true\n  mPlugType=1\n",
                                        stay_on="3", deep="IDLE"))
    assert (state.stay_awake, state.charging, state.charge_source) == (True, True, "ac")
    assert state.dozing is True
    # full, or held at a charge limit, on a cable: on external power, which is what the
    # energy gates and every other reader of the flag mean (harness.android.battery.is_charging)
    full = preflight_from_output(_join(battery=BATTERY.replace("status: 2", "status: 5")))
    assert full.charging is True and full.charge_source == "usb"
    held = preflight_from_output(_join(battery=BATTERY.replace("status: 2", "status: 4")))
    assert held.charging is True


def test_one_charging_rule_for_dumpsys_and_power_supply() -> None:
    from harness.android.battery import is_charging

    assert is_charging(2) and is_charging("Charging") and is_charging(5) and is_charging("Full")
    assert is_charging(3, "none") is False and is_charging("Discharging") is False
    assert is_charging(4, "usb") is True  # a charge limit: the cable still feeds the phone
    assert is_charging(None, None, powered=True) is True
    assert is_charging(1, None, powered=False) is False
    assert is_charging(None) is None and is_charging(1) is None and is_charging("Unknown") is None


def test_requirements_name_what_failed_and_what_the_matrix_asks() -> None:
    saving = Preflight(screen_on=True, battery_saver=True, charging=False, doze_state="ACTIVE")
    require = Requirements(screen_on=True, battery_saver=False)
    assert unmet_requirement(require, saving) == (
        "battery saver is on; the matrix requires battery_saver: false")
    assert unmet_requirement(require, Preflight(screen_on=True, battery_saver=False)) is None
    assert unmet_requirement(Requirements(), Preflight()) is None
    assert unmet_requirement(Requirements(screen_on=True), Preflight(screen_on=False)) == (
        "the screen is off; the matrix requires screen_on: true")
    assert unmet_requirement(Requirements(doze=False), Preflight(doze_state="IDLE")) == (
        "the phone is in Doze; the matrix requires doze: false")
    assert unmet_requirement(Requirements(charging=False), saving) is None


def test_a_requirement_on_a_state_that_cannot_be_read_is_not_met() -> None:
    assert unmet_requirement(Requirements(battery_saver=False), Preflight()) == (
        "battery_saver could not be read (the matrix requires battery_saver: false)")


def test_baseline_reads_boot_memory_pressure_and_existing_kill_lines() -> None:
    text = _join(
        boot_id="0c6a7e3e-5b0e-4a2b-9d61-3f0e2b7c1a9d", uptime="100.5 300.2",
        meminfo="MemTotal:       28672 kB\nMemFree:   1000 kB\nMemAvailable:   20480 kB\n",
        pressure="some avg10=0.00 avg60=0.00 avg300=0.00 total=10\n"
                 "full avg10=0.00 avg60=0.00 avg300=0.00 total=4\n",
        lmkd=f"--------- beginning of main\n{LMKD}\n")
    base = baseline_from_output(text)
    assert base.boot_id == "0c6a7e3e-5b0e-4a2b-9d61-3f0e2b7c1a9d" and base.uptime_s == 100.5
    assert (base.mem_total_kb, base.mem_available_kb) == (28672, 20480)
    assert base.pressure is not None and base.pressure.full_total_us == 4
    assert base.lmkd_lines == (LMKD,)
    assert baseline_from_output("") == Baseline()


def test_reboot_is_a_new_boot_id_or_an_uptime_that_went_back() -> None:
    before = Baseline(boot_id="a" * 8 + "-0000-0000-0000-" + "0" * 12, uptime_s=500.0)
    assert rebooted(before, before.boot_id, 600.0) is False
    assert rebooted(before, "b" * 8 + "-0000-0000-0000-" + "0" * 12, 600.0) is True
    assert rebooted(Baseline(uptime_s=500.0), None, 3.0) is True
    assert rebooted(Baseline(uptime_s=500.0), None, 510.0) is False
    assert rebooted(Baseline(), None, None) is None


def test_one_conditions_read_holds_state_preflight_and_baseline() -> None:
    command = conditions_command(7)
    for part in ("dumpsys thermalservice", "dumpsys power", "settings get global low_power",
                 "settings get global stay_on_while_plugged_in", "dumpsys deviceidle get deep",
                 "/proc/sys/kernel/random/boot_id", "/proc/pressure/memory", "logcat -d"):
        assert part in command
    assert BASELINE in command
    read = conditions_from_output(
        _join(battery=BATTERY, power=POWER, low_power="0", pressure="garbage"),
        "cat: /proc/pressure/memory: Permission denied\n")
    assert read.preflight.charging is True and read.state.battery_level == 76
    assert read.baseline.pressure is None
    assert read.state.unreadable == ("/proc/pressure/memory: Permission denied",)


@pytest.mark.parametrize("bad", ["$(", "`", "&&&", "2**"])
def test_preflight_commands_carry_no_shell_surprises(bad: str) -> None:
    assert bad not in conditions_command(7)
