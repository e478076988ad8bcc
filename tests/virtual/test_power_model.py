"""The virtual phone's battery power model (harness/virtual/power.py): the pure model, its
profile keys, the truth logs, and a phone whose fuel gauge follows what its processes burn.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import replace
from pathlib import Path

import adbutils
import pytest
import yaml
from fixtures_phones import PhoneFactory, VirtualPhone

from harness.errors import ConfigError
from harness.profiles import find_profile, parse_profile
from harness.testing.adbserver import AdbServer
from harness.virtual import phone as phone_module
from harness.virtual import power, thermal
from harness.virtual.phone import Phone
from harness.virtual.provision import config_from_profile
from harness.virtual.sandbox import Sandbox
from virtual.procwait import wait_for

STOCK = power.PowerParams()
SUPPLY = "/sys/class/power_supply"
DEVICES = Path(__file__).resolve().parents[2] / "devices"


# ----- the model ------------------------------------------------------------------------------
def test_busy_cores_and_their_clock_set_the_load_power() -> None:
    assert power.load_power_w(STOCK, 0.0, 0.533) == pytest.approx(0.6)
    assert power.load_power_w(STOCK, 2.0, 2.4) == pytest.approx(0.6 + 0.9 * 2 * 2.4)
    assert power.load_power_w(STOCK, 4.0, 1.0) == pytest.approx(0.6 + 0.9 * 4)
    # a throttled cluster clocks lower, so the same busy cores draw less
    full = thermal.capped_khz(2_400_000, 533_000, 0) / 1e6
    capped = thermal.capped_khz(2_400_000, 533_000, 4) / 1e6
    assert capped < full
    assert power.load_power_w(STOCK, 2.0, capped) < power.load_power_w(STOCK, 2.0, full) - 2.0


def test_discharging_battery_sags_and_its_current_carries_the_load() -> None:
    battery = power.initial_battery(STOCK, 80)
    assert battery.charge_uah == pytest.approx(4500 * 1000 * 0.8)
    assert power.ocv_v(80) == pytest.approx(3.5 + 0.7 * 0.8)
    idle = power.step_battery(battery, STOCK, 0.6, "none", 0.25)
    busy = power.step_battery(battery, STOCK, 5.0, "none", 0.25)
    for state, watts in ((idle, 0.6), (busy, 5.0)):
        assert state.status == "Discharging" and state.battery_a < 0
        assert -state.battery_a * state.voltage_v == pytest.approx(watts)  # P = V * I
        assert state.voltage_v == pytest.approx(power.ocv_v(80) + 0.1 * state.battery_a)
    assert busy.voltage_v < idle.voltage_v < power.ocv_v(80)
    # the charge counter integrates the current: 0.25 s of it, in uAh
    assert battery.charge_uah - busy.charge_uah == pytest.approx(-busy.battery_a * 1e6 * 0.25
                                                                 / 3600)
    # a lower charge: a lower voltage, so more current for the same power
    low = power.step_battery(power.initial_battery(STOCK, 15), STOCK, 5.0, "none", 0.25)
    assert low.voltage_v < busy.voltage_v and low.battery_a < busy.battery_a


def test_the_level_follows_the_charge_counter() -> None:
    battery = power.initial_battery(STOCK, 50)
    hour = power.step_battery(battery, STOCK, 4.0, "none", 3600.0)  # ~1.1 A for an hour
    lost_mah = (battery.charge_uah - hour.charge_uah) / 1000
    assert lost_mah == pytest.approx(-hour.battery_a * 1000, rel=1e-9)
    assert hour.level(STOCK) == round(50 - 100 * lost_mah / 4500)
    empty = power.step_battery(battery, STOCK, 20.0, "none", 36000.0)
    assert empty.charge_uah == 0 and empty.level(STOCK) == 0


@pytest.mark.parametrize(("unit", "sign", "expected"), [
    ("uA", "negative", -1_234_568), ("uA", "positive", 1_234_568),
    ("mA", "negative", -1235), ("mA", "positive", 1235)])
def test_current_now_in_the_gauge_unit_and_sign(unit: str, sign: str, expected: int) -> None:
    params = power.PowerParams(current_unit=unit, discharge_sign=sign)
    assert power.current_now(params, -1.2345678) == expected  # discharging
    assert power.current_now(params, 0.5) == (-1 if sign == "positive" else 1) * (
        500_000 if unit == "uA" else 500)


def test_a_charger_feeds_the_load_first_and_charges_with_the_rest() -> None:
    battery = power.initial_battery(STOCK, 60, "usb")
    assert battery.status == "Charging"
    light = power.step_battery(battery, STOCK, 0.6, "usb", 1.0)
    load_a = 0.6 / light.voltage_v
    assert light.load_a == pytest.approx(load_a)
    assert light.battery_a == pytest.approx(0.5 - load_a)  # usb: 500 mA, net into the battery
    assert light.status == "Charging" and light.charge_uah > battery.charge_uah
    assert light.voltage_v > power.ocv_v(60)
    heavy = power.step_battery(battery, STOCK, 6.0, "usb", 1.0)  # more than usb gives
    assert heavy.battery_a < 0 and heavy.status == "Charging"
    assert heavy.charge_uah < battery.charge_uah
    ac = power.step_battery(battery, STOCK, 6.0, "ac", 1.0)  # ac: 2000 mA
    assert ac.battery_a == pytest.approx(2.0 - ac.load_a) and ac.battery_a > 0
    # full: the charger carries the load, the battery neither charges nor discharges
    full = power.step_battery(power.initial_battery(STOCK, 100, "usb"), STOCK, 0.6, "usb", 1.0)
    assert full.status == "Full" and full.battery_a == 0
    assert full.charge_uah == pytest.approx(STOCK.capacity_uah)
    # too hot to charge: "Not charging"; a load above the charger still drains the battery
    hot = power.step_battery(battery, STOCK, 0.6, "usb", 1.0, overheat=True)
    assert hot.status == "Not charging" and hot.battery_a == 0
    hot_busy = power.step_battery(battery, STOCK, 6.0, "usb", 1.0, overheat=True)
    assert hot_busy.battery_a < 0 and hot_busy.status == "Not charging"
    assert power.STATUS_CODES[hot.status] == 4


def test_sysfs_files_of_a_battery_state() -> None:
    params = power.PowerParams(current_unit="mA", discharge_sign="positive")
    state = power.step_battery(power.initial_battery(params, 80), params, 2.0, "none", 0.25)
    files = power.supply_files(state, params, "ac", 31.25)
    assert files["battery/current_now"] == f"{round(-state.battery_a * 1000)}\n"
    assert int(files["battery/current_now"]) > 0
    assert files["battery/voltage_now"] == f"{round(state.voltage_v * 1e6)}\n"
    assert files["battery/charge_counter"] == f"{round(state.charge_uah)}\n"
    assert files["battery/temp"] == "312\n" and files["battery/capacity"] == "80\n"
    assert files["battery/present"] == "1\n" and files["battery/type"] == "Battery\n"
    assert (files["ac/online"], files["usb/online"]) == ("1\n", "0\n")


def test_power_model_profile_keys_are_checked() -> None:
    params = power.PowerParams.from_profile(
        {"idle_w": 1, "current_unit": "mA", "discharge_sign": "positive",
         "charge_ma": {"ac": 3000}, "capacity_mah": 6000})
    assert params.idle_w == 1.0 and params.capacity_uah == 6_000_000
    assert dict(params.charge_ma) == {"usb": 500.0, "ac": 3000.0}
    assert power.PowerParams.from_profile({}) == STOCK
    for bad, word in (({"current_unit": "A"}, "power_model.current_unit must be one of uA, mA"),
                      ({"discharge_sign": "up"}, "power_model.discharge_sign"),
                      ({"idle_w": -1}, "power_model.idle_w must be at least 0"),
                      ({"capacity_mah": 0}, "power_model.capacity_mah must be above 0"),
                      ({"w_per_core_ghz": True}, "power_model.w_per_core_ghz must be a number"),
                      ({"charge_ma": {"wireless": 900}}, "unknown charger 'wireless'"),
                      ({"volts": 4}, "unknown key 'volts'")):
        with pytest.raises(ConfigError, match=word):
            power.PowerParams.from_profile(bad)
    data = yaml.safe_load((DEVICES / "midrange-8gb.yaml").read_text())
    with pytest.raises(ConfigError, match=r"^x\.yaml: power_model\.internal_ohm must be a number"):
        parse_profile({**data, "power_model": {"internal_ohm": "low"}}, "x.yaml")
    profile = parse_profile({**data, "power_model": {"idle_w": 0.7}}, "x.yaml")
    assert profile.power_model == {"idle_w": 0.7}
    flagship = find_profile("flagship-16gb")
    flagship_params = power.PowerParams.from_profile(flagship.power_model)
    assert (flagship_params.current_unit, flagship_params.discharge_sign) == ("mA", "positive")


# ----- truth logs -----------------------------------------------------------------------------
def test_truth_energy_integrates_the_power_log_within_the_window(tmp_path: Path) -> None:
    log = tmp_path / "power.log"
    log.write_text(power.power_log_line(10.0, 1.0, False) + power.power_log_line(12.0, 3.0, False)
                   + "garbage\n" + power.power_log_line(13.0, 0.5, True) + "14.0 9")
    entries = power.read_power_log(log)  # the unfinished last line is left out
    assert entries == [(10.0, 1.0, False), (12.0, 3.0, False), (13.0, 0.5, True)]
    assert power.truth_energy_j(entries, 10.0, 13.0) == pytest.approx(2 * 1.0 + 1 * 3.0)
    assert power.truth_energy_j(entries, 11.5, 12.5) == pytest.approx(0.5 * 1.0 + 0.5 * 3.0)
    assert power.truth_energy_j(entries, 0.0, 11.0) == pytest.approx(1.0)  # nothing before 10
    assert power.truth_energy_j(entries, 13.0, 17.0) == pytest.approx(4 * 0.5)  # the last holds
    assert power.truth_energy_j(entries, 12.5, 12.5) == 0
    assert power.truth_energy_j([], 0, 100) == 0
    assert power.read_power_log(tmp_path / "missing") == []
    status = tmp_path / "thermal.log"
    status.write_text(power.status_log_line(0.0, 0) + power.status_log_line(7.5, 2) + "x y\n")
    assert power.read_status_log(status) == [(0.0, 0), (7.5, 2)]


def test_trimming_a_log_keeps_its_newest_whole_lines() -> None:
    text = "".join(power.power_log_line(t, 1.0, False) for t in range(100))
    kept = power.trim_log(text, len(text) // 2)
    assert len(kept) <= len(text) // 2 and text.endswith(kept) and kept.endswith("\n")
    assert kept.startswith(power.power_log_line(float(kept.split()[0]), 1.0, False))
    assert power.trim_log("short\n", 100) == "short\n"


def test_the_phone_trims_a_truth_log_to_its_newest_half(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_from_profile(find_profile("midrange-8gb"), "trim-1")
    phone = Phone(Sandbox(tmp_path / "trim-1"), config)
    phone.sandbox.state.mkdir(parents=True)
    monkeypatch.setattr(phone_module, "LOG_MAX_BYTES", 1000)
    for tick in range(200):
        phone._append_log(phone_module.POWER_LOG, power.power_log_line(tick * 0.25, 1.0, False))
    log = phone.sandbox.state / phone_module.POWER_LOG
    assert 400 < log.stat().st_size <= 1000
    entries = power.read_power_log(log)
    assert entries[-1][0] == 199 * 0.25 and entries[0][0] > 0
    assert {b[0] - a[0] for a, b in itertools.pairwise(entries)} == {0.25}


# ----- on a phone -----------------------------------------------------------------------------
def _read(client: adbutils.AdbClient, phone: VirtualPhone, name: str) -> str:
    # through sync, as `adb pull` reads it (the phone's shell reaches /sys/class/power_supply
    # only once the sandbox maps that prefix; see the power model section of the docs)
    return client.device(phone.serial).sync.read_text(f"{SUPPLY}/{name}")


def _gauge_w(client: adbutils.AdbClient, phone: VirtualPhone) -> float:
    """Power from the gauge, |current_now| x voltage_now (a stock phone: uA and uV)."""
    current = int(_read(client, phone, "battery/current_now"))
    volts = int(_read(client, phone, "battery/voltage_now")) / 1e6
    return abs(current) / 1e6 * volts


def _logged(phone: VirtualPhone) -> list[tuple[float, float, bool]]:
    return power.read_power_log(phone.sandbox / "state" / "power.log")


def _uptime(phone: VirtualPhone) -> float:
    """The phone's uptime now (its boot_time is the wall clock at boot)."""
    return time.time() - float((phone.sandbox / "state" / "boot_time").read_text())


def _cpu_s(pid: int) -> float:
    """CPU seconds a host process has used (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settled_w(client: adbutils.AdbClient, phone: VirtualPhone) -> float:
    """The gauge's power, once two reads in a row agree with a power.log line (the gauge and
    the log are written in the same tick; 4 uW of rounding)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        watts = _gauge_w(client, phone)
        if any(abs(w - watts) < 1e-4 for _, w, _ in _logged(phone)[-8:]):
            return watts
        time.sleep(0.05)
    raise AssertionError("the gauge never agreed with power.log")


def test_a_busy_phone_draws_more_and_its_gauge_agrees_with_the_truth_log(
        adb_server: AdbServer, virtual_phone: VirtualPhone) -> None:
    client = adbutils.AdbClient(host="127.0.0.1", port=adb_server.port)
    device = client.device(virtual_phone.serial)
    virtual_phone.fault("charging", "none")
    assert wait_for(lambda: _read(client, virtual_phone, "battery/status") == "Discharging\n",
                    10)
    assert _read(client, virtual_phone, "usb/online") == "0\n"
    idle_w = _settled_w(client, virtual_phone)
    assert idle_w == pytest.approx(0.6, abs=0.25)
    assert int(_read(client, virtual_phone, "battery/current_now")) < 0  # Pixel-style sign
    pid = device.shell("sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!").strip()
    try:
        # a busy core shows (less than a core on a loaded host): a settled gauge reading
        # above idle, once the loop has had CPU time in a tick
        readings: list[float] = []
        assert wait_for(lambda: readings.append(_settled_w(client, virtual_phone))
                        or readings[-1] > idle_w + 0.2, 20, step=0.2), (idle_w, readings)
        # the loop's CPU time over a window of at least 2 s of the phone's uptime in which it
        # had at least 0.3 CPU seconds, and the phone's uptime at its ends
        start_up, start_cpu = _uptime(virtual_phone), _cpu_s(int(pid))
        assert wait_for(lambda: _uptime(virtual_phone) - start_up >= 2.0
                        and _cpu_s(int(pid)) - start_cpu >= 0.3, 30)
        end_up, end_cpu = _uptime(virtual_phone), _cpu_s(int(pid))
        # the tick that ends the window has logged it
        assert wait_for(lambda: _logged(virtual_phone)[-1][0] >= end_up, 10)
    finally:
        device.shell(f"kill {pid}")
    # the truth log: the mean power over the window is what the loop's demand costs at the
    # big cluster's 2.4 GHz, 0.9 W per core per GHz (the loop is nearly all the phone runs).
    # The loop is runnable throughout, so it asks for one core whatever share of one a loaded
    # host grants it (phone.py: heat and power follow the demand, not the grant); a loaded
    # fresh-machine run granted it 0.74 of a core and the log rightly said 2.76 W, one core's.
    entries = _logged(virtual_phone)
    mean_w = power.truth_energy_j(entries, start_up, end_up) / (end_up - start_up)
    share = (end_cpu - start_cpu) / (end_up - start_up)
    assert share > 0.1
    assert mean_w == pytest.approx(0.6 + 0.9 * 2.4 * 1.0, abs=0.3, rel=0.15)
    # on /proc/uptime's clock
    uptime = float(device.shell("cat /proc/uptime").split()[0])
    assert 0 <= uptime - entries[-1][0] < 2.0 and not entries[-1][2]
    statuses = power.read_status_log(virtual_phone.sandbox / "state" / "thermal.log")
    assert statuses[0] == (pytest.approx(0.0, abs=1.0), 0)
    # dumpsys battery has the live counter, voltage and status
    battery = device.shell("dumpsys battery")
    counter = int(_read(client, virtual_phone, "battery/charge_counter"))
    assert "  status: 3\n" in battery
    shown = int(battery.split("Charge counter: ")[1].split()[0])
    assert abs(shown - counter) < 50 and counter < 4500 * 1000 * 0.8
    volts_mv = int(battery.split("  voltage: ")[1].split()[0])
    assert 3900 < volts_mv < 4200
    # plugged in: the idle phone charges, and says so
    virtual_phone.fault("charging", "usb")
    assert wait_for(lambda: _read(client, virtual_phone, "battery/status") == "Charging\n",
                    5)
    assert _read(client, virtual_phone, "usb/online") == "1\n"
    assert wait_for(lambda: int(_read(client, virtual_phone, "battery/current_now")) > 0,
                    5)
    assert wait_for(lambda: _logged(virtual_phone)[-1][2], 5)
    assert "  status: 2\n" in device.shell("dumpsys battery")


@pytest.mark.each_adb_client
def test_a_phone_with_unreadable_power_supply_files_and_a_vendor_gauge(
        adb_server: AdbServer, virtual_phones: PhoneFactory, tmp_path: Path) -> None:
    flagship = find_profile("flagship-16gb")
    profile = replace(flagship, android=replace(flagship.android,
                                                unreadable=(f"{SUPPLY}/*",)))
    (phone,) = virtual_phones(profile=profile)
    phone.fault("charging", "none")
    gauge = phone.root / "sys/class/power_supply/battery"
    assert wait_for(lambda: (gauge / "status").read_text() == "Discharging\n", 5)
    # the files are there, in the vendor's unit and sign: mA, positive while discharging
    current_ma = int((gauge / "current_now").read_text())
    volts = int((gauge / "voltage_now").read_text()) / 1e6
    params = power.PowerParams.from_profile(profile.power_model)
    assert current_ma > 0
    assert current_ma / 1000 * volts == pytest.approx(params.idle_w, abs=0.3)
    # ... and the shell user cannot read them, by sync or in the shell
    pulled = adb_server.adb("-s", phone.serial, "pull", f"{SUPPLY}/battery/current_now",
                            str(tmp_path / "current_now"))
    assert pulled.returncode != 0 and "Permission denied" in adb_server.said(pulled)
    denied = adb_server.adb("-s", phone.serial, "shell",
                            "cat sys/class/power_supply/battery/current_now")
    assert denied.returncode == 1 and "Permission denied" in denied.stderr
    # dumpsys battery, a system service, still tells the counter and the voltage
    battery = adb_server.adb("-s", phone.serial, "shell", "dumpsys battery").stdout
    assert "  status: 3\n" in battery and "  level: 88\n" in battery
    counter = int(battery.split("Charge counter: ")[1].split()[0])
    assert abs(6000 * 1000 * 0.88 - counter) < 5000  # charged (usb) at boot, then drains
    assert int(battery.split("  voltage: ")[1].split()[0]) == pytest.approx(volts * 1000, abs=5)
