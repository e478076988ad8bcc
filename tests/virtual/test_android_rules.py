"""The virtual phone follows a stock phone's permission, thermal, power, log and affinity rules,
and each profile variant real phones show (contract of issue 13; VIRTUAL_PHONE.md, "Android
fidelity"). Everything goes through the real adb path.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures_phones import PhoneFactory, VirtualPhone

from harness.errors import ConfigError
from harness.profiles import DeviceProfile, find_profile
from harness.testing.adbserver import AdbServer
from harness.virtual.control import set_fault

ZONES = "/sys/class/thermal"
PERMISSIVE = Path(__file__).resolve().parents[2] / "devices" / "virtual" / "permissive.yaml"


def _sh(server: AdbServer, phone: VirtualPhone, command: str,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return server.adb("-s", phone.serial, "shell", command, timeout=timeout)


def _out(server: AdbServer, phone: VirtualPhone, command: str) -> str:
    result = _sh(server, phone, command)
    assert result.returncode == 0, (command, result.stderr)
    return result.stdout


def _with(profile: DeviceProfile, **rules: object) -> DeviceProfile:
    return replace(profile, android=replace(profile.android, **rules))  # type: ignore[arg-type]


@pytest.fixture
def other_process() -> Iterator[int]:
    """A process that is not the phone's (a host process the host lets us read), by pid."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_stock_phone_denies_what_the_shell_domain_may_not_read(
        adb_server: AdbServer, virtual_phone: VirtualPhone, other_process: int) -> None:
    """Each read AOSP's shell policy refuses uid 2000 (docs/real-phones.md), with the errno a
    phone gives, and what it still serves."""
    dmesg = _sh(adb_server, virtual_phone, "dmesg")
    assert dmesg.returncode == 1 and dmesg.stderr == "dmesg: klogctl: Permission denied\n"
    assert dmesg.stdout == ""
    cpufreq = "/sys/devices/system/cpu/cpu7/cpufreq"
    for path in ("/proc/pressure/memory", f"{ZONES}/thermal_zone0/temp",
                 f"{ZONES}/thermal_zone2/type", f"{cpufreq}/cpuinfo_cur_freq",
                 f"/proc/{other_process}/smaps_rollup", f"/proc/{other_process}/io"):
        read = _sh(adb_server, virtual_phone, f"cat {path}")
        # (a virtual phone names a file it keeps in its sandbox by the host path)
        assert read.returncode == 1, (path, read.stderr)
        assert read.stderr.endswith(f"{path}: Permission denied\n"), (path, read.stderr)
        assert read.stdout == ""
    # ...and what a phone serves instead: the current clock, the shell's own processes
    assert int(_out(adb_server, virtual_phone, f"cat {cpufreq}/scaling_cur_freq")) > 0
    assert "Rss:" in _out(adb_server, virtual_phone, "cat /proc/$$/smaps_rollup")
    assert "read_bytes:" in _out(adb_server, virtual_phone, "cat /proc/$$/io")
    engine = _out(adb_server, virtual_phone, "sleep 5 >/dev/null 2>&1 & echo $!").strip()
    assert "Rss:" in _out(adb_server, virtual_phone, f"cat /proc/{engine}/smaps_rollup")
    # kgsl and devfreq nodes: a phone without an Adreno has none (absent, not denied)
    kgsl = _sh(adb_server, virtual_phone, "ls /sys/class/kgsl/kgsl/proc")
    assert kgsl.returncode == 1 and "No such file or directory" in kgsl.stderr
    boot_id = _out(adb_server, virtual_phone, "cat /proc/sys/kernel/random/boot_id").strip()
    assert [len(part) for part in boot_id.split("-")] == [8, 4, 4, 4, 12]
    up, idle = _out(adb_server, virtual_phone, "cat /proc/uptime").split()
    assert 0 < float(up) < 60 and float(idle) >= 0
    assert _out(adb_server, virtual_phone, "getprop ro.logd.kernel").strip() == "false"
    # a stock kernel has smaps_rollup; dumpsys knows native processes; every cpu is online
    assert f"** MEMINFO in pid {engine} [sleep] **" in _out(
        adb_server, virtual_phone, f"dumpsys meminfo {engine}")
    assert _out(adb_server, virtual_phone, "cat /sys/devices/system/cpu/online") == "0-7\n"


def test_a_permissive_phone_reads_pressure_in_the_kernels_format(
        adb_server: AdbServer, virtual_phones: PhoneFactory, other_process: int) -> None:
    (phone,) = virtual_phones(profile=find_profile(str(PERMISSIVE)))
    psi = _out(adb_server, phone, "cat /proc/pressure/memory").splitlines()
    assert [line.split()[0] for line in psi] == ["some", "full"], psi
    for line in psi:  # the kernel's format
        assert re.fullmatch(r"(some|full) avg10=\d+\.\d\d avg60=\d+\.\d\d avg300=\d+\.\d\d "
                            r"total=\d+", line), line
    # a phone at rest stalls little, but not always nothing: its cgroup can refault while its
    # apps start, which the phone reports as thrashing (seen once in CI on a loaded host: 0.13 s
    # of some-stall, half of it full, at boot)
    some, full = (int(line.rsplit("=", 1)[1]) for line in psi)
    assert full <= some < 5_000_000, psi
    zone = _out(adb_server, phone, f"cat {ZONES}/thermal_zone2/type {ZONES}/thermal_zone2/temp")
    assert zone.split()[0] == "skin" and int(zone.split()[1]) > 0
    assert int(_out(adb_server, phone, "cat /sys/devices/system/cpu/cpu7/cpufreq/"
                                       "cpuinfo_cur_freq")) > 0
    assert "Rss:" in _out(adb_server, phone, f"cat /proc/{other_process}/smaps_rollup")


@pytest.mark.each_adb_client
def test_strict_legacy_phone_denies_zones_lacks_smaps_rollup_and_hides_native_pids(
        adb_server: AdbServer, virtual_phones: PhoneFactory,
        data_profile: Callable[[str], DeviceProfile], tmp_path: Path) -> None:
    (phone,) = virtual_phones(profile=data_profile("strict-legacy"))
    denied = _sh(adb_server, phone, f"cat {ZONES}/thermal_zone1/temp")
    assert denied.returncode == 1 and "Permission denied" in denied.stderr
    for name in ("type", "temp"):  # a glob: the whole zone
        assert "Permission denied" in _sh(adb_server, phone,
                                          f"cat {ZONES}/thermal_zone3/{name}").stderr
    assert _sh(adb_server, phone, f"[ -r {ZONES}/thermal_zone1/temp ]").returncode == 1
    # the other zones read, whatever the tool: a glob over all zones fails only for those
    assert int(_out(adb_server, phone, f"cat {ZONES}/thermal_zone2/temp")) > 0
    listing = _sh(adb_server, phone, f"cat {ZONES}/thermal_zone*/temp")
    assert listing.returncode == 1 and len(listing.stdout.split()) == 2
    assert listing.stderr.count("Permission denied") == 2
    assert "Permission denied" in _sh(adb_server, phone,
                                      f"cd {ZONES} && head -c 9 thermal_zone1/temp").stderr
    pulled = adb_server.adb("-s", phone.serial, "pull", f"{ZONES}/thermal_zone1/temp",
                            str(tmp_path / "temp"))
    assert pulled.returncode != 0 and "Permission denied" in adb_server.said(pulled)
    # kernel 4.9: no smaps_rollup; status still reads
    rollup = _sh(adb_server, phone, "cat /proc/$$/smaps_rollup")
    assert rollup.returncode == 1 and "No such file or directory" in rollup.stderr
    assert "VmRSS:" in _out(adb_server, phone, "cat /proc/$$/status")
    # dumpsys meminfo does not know native processes: exit 0 all the same
    pid = _out(adb_server, phone, "sleep 5 >/dev/null 2>&1 & echo $!").strip()
    assert _out(adb_server, phone, f"dumpsys meminfo {pid}") == f"No process found for: {pid}\n"
    # two big cores offline
    assert _out(adb_server, phone, "cat /sys/devices/system/cpu/online") == "0-5\n"
    cpu = "/sys/devices/system/cpu"
    assert _out(adb_server, phone, f"cat {cpu}/cpu7/online {cpu}/cpu0/online").split() \
        == ["0", "1"]
    assert _out(adb_server, phone, "cat /sys/devices/system/cpu/possible") == "0-7\n"
    assert _out(adb_server, phone, "grep -c ^processor /proc/cpuinfo").strip() == "6"
    # HAL not ready: no temperatures from the service; sysfs and the battery still have them
    thermal = _out(adb_server, phone, "dumpsys thermalservice")
    assert "HAL Ready: false" in thermal and "HAL connection" not in thermal
    assert "Temperature{" not in thermal and "Thermal Status: 0" in thermal
    assert "  temperature: " in _out(adb_server, phone, "dumpsys battery")


HOT = {"heat_c_per_core_s": 25.0, "tau_s": 120.0}  # a few busy seconds make the phone hot


def _heat(server: AdbServer, phone: VirtualPhone) -> None:
    _sh(server, phone, "timeout 2 yes > /dev/null; true")


def _skin_from_hal(text: str) -> float:
    part = text.split("Current temperatures from HAL:", 1)[1]
    line = next(x for x in part.splitlines() if "mType=3" in x)
    return float(line.split("mValue=")[1].split(",")[0])


def test_thermal_hal_variants_report_what_real_phones_report(
        adb_server: AdbServer, virtual_phones: PhoneFactory) -> None:
    base = _with(replace(find_profile("midrange-8gb"), thermal=HOT),
                 readable=("thermal_zones",))  # a vendor that labels its zones readable
    (stuck,) = virtual_phones(profile=_with(base, thermal_status_stuck=True))
    (hal10,) = virtual_phones(profile=_with(base, thermal_hal="1.0"))
    (stock,) = virtual_phones(profile=base)
    for phone in (stock, hal10, stuck):
        _heat(adb_server, phone)
    ambient = 26.0
    # stuck: Thermal Status 0 whatever the heat, yet the phone is hot and throttles
    text = _out(adb_server, stuck, "dumpsys thermalservice")
    assert "Thermal Status: 0" in text and "ThermalHAL 2.0 connected: yes" in text
    assert _skin_from_hal(text) > ambient + 8
    cap = _out(adb_server, stuck, "cat /sys/devices/system/cpu/cpu7/cpufreq/scaling_max_freq")
    assert int(cap) < 2400000
    # stock: the status follows the heat
    text = _out(adb_server, stock, "dumpsys thermalservice")
    assert int(text.split("Thermal Status: ")[1].split()[0]) >= 2
    assert "ThermalHAL 2.0 connected: yes" in text and "TemperatureThreshold{" in text
    # HAL 1.0: its layout, temperatures without severities, no thresholds, no status
    text = _out(adb_server, hal10, "dumpsys thermalservice")
    assert "ThermalHAL 1.0 connected: yes" in text and "HAL Ready: true" in text
    assert "Thermal Status: 0" in text and "TemperatureThreshold{" not in text
    assert _skin_from_hal(text) > ambient + 8 and "mStatus=0}" in text
    # sysfs and the battery follow the heat model on every variant
    for phone in (stuck, hal10):
        skin = int(_out(adb_server, phone, f"cat {ZONES}/thermal_zone2/temp"))
        assert skin > (ambient + 8) * 1000
        battery = _out(adb_server, phone, "dumpsys battery")
        assert int(battery.split("  temperature: ")[1].split()[0]) > ambient * 10 + 30


def _power_line(text: str, key: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(f"  {key}=")).split("=", 1)[1]


def test_power_state_follows_the_profile_and_the_power_faults(
        adb_server: AdbServer, virtual_phones: PhoneFactory) -> None:
    (phone,) = virtual_phones()
    power = _out(adb_server, phone, "dumpsys power")
    assert power.startswith("POWER MANAGER (dumpsys power)\n")
    assert [_power_line(power, k) for k in ("mWakefulness", "mIsPowered", "mPlugType",
                                            "mStayOn", "mBatteryLevel")] \
        == ["Awake", "true", "2", "false", "76"]
    assert _out(adb_server, phone, "settings get global low_power") == "0\n"
    assert _out(adb_server, phone, "settings get global stay_on_while_plugged_in") == "0\n"
    assert _out(adb_server, phone, "dumpsys deviceidle get deep") == "ACTIVE\n"
    assert _out(adb_server, phone, "dumpsys deviceidle get light") == "ACTIVE\n"
    battery = _out(adb_server, phone, "dumpsys battery")
    assert "  USB powered: true\n" in battery and "  AC powered: false\n" in battery
    assert "  status: 2\n" in battery

    phone.fault("charging", "none")
    power = _out(adb_server, phone, "dumpsys power")
    assert (_power_line(power, "mIsPowered"), _power_line(power, "mPlugType")) == ("false", "0")
    battery = _out(adb_server, phone, "dumpsys battery")
    assert "  USB powered: false\n" in battery and "  status: 3\n" in battery
    phone.fault("charging", "ac")
    assert _power_line(_out(adb_server, phone, "dumpsys power"), "mPlugType") == "1"
    assert "  AC powered: true\n" in _out(adb_server, phone, "dumpsys battery")
    # stay awake while plugged in, as the developer option sets it
    assert _sh(adb_server, phone, "settings put global stay_on_while_plugged_in 7").returncode == 0
    power = _out(adb_server, phone, "dumpsys power")
    assert (_power_line(power, "mStayOn"), _power_line(power, "mStayOnWhilePluggedInSetting")) \
        == ("true", "7")
    phone.fault("battery-saver", "on")
    assert _out(adb_server, phone, "settings get global low_power") == "1\n"
    assert "Battery Saver is currently: ON" in _out(adb_server, phone, "dumpsys power")
    phone.fault("screen", "off")
    phone.fault("doze", "IDLE")
    power = _out(adb_server, phone, "dumpsys power")
    assert _power_line(power, "mWakefulness") == "Asleep"
    assert _power_line(power, "mDeviceIdleMode") == "true"
    assert _out(adb_server, phone, "dumpsys deviceidle get deep") == "IDLE\n"
    assert _out(adb_server, phone, "dumpsys deviceidle get light") == "OVERRIDE\n"
    with pytest.raises(ConfigError, match="none, usb, ac"):
        set_fault(phone.serial, "charging", "solar", home=phone.home)
    phone.fault("clear")  # every fault off: power as the profile sets it
    power = _out(adb_server, phone, "dumpsys power")
    assert [_power_line(power, k) for k in ("mWakefulness", "mPlugType", "mStayOn")] \
        == ["Awake", "2", "false"]
    assert _out(adb_server, phone, "settings get global low_power") == "0\n"
    assert _out(adb_server, phone, "dumpsys deviceidle get deep") == "ACTIVE\n"


def test_profile_power_keys_set_the_phone_at_boot(adb_server: AdbServer,
                                                  virtual_phones: PhoneFactory) -> None:
    profile = _with(find_profile("budget-4gb"), power=replace(
        find_profile("budget-4gb").android.power, stay_awake=True, charging="none",
        battery_saver=True, screen_on=False, doze="IDLE"))
    (phone,) = virtual_phones(profile=profile)
    assert _out(adb_server, phone, "settings get global stay_on_while_plugged_in") == "7\n"
    assert _out(adb_server, phone, "settings get global low_power") == "1\n"
    power = _out(adb_server, phone, "dumpsys power")
    # stay-on applies only while plugged in
    assert [_power_line(power, k) for k in ("mWakefulness", "mIsPowered", "mStayOn")] \
        == ["Asleep", "false", "false"]
    assert _out(adb_server, phone, "dumpsys deviceidle get deep") == "IDLE\n"


def test_logcat_is_a_bounded_ring_per_buffer(adb_server: AdbServer,
                                             virtual_phones: PhoneFactory) -> None:
    (phone,) = virtual_phones(profile=_with(find_profile("midrange-8gb"), logcat_ring_lines=20))
    _out(adb_server, phone, "for i in $(seq 1 30); do log -t ring line$i; done")
    shown = _out(adb_server, phone, "logcat -d -s ring").splitlines()
    assert [x.rsplit(" ", 1)[1] for x in shown] == [f"line{i}" for i in range(11, 31)]
    assert len(_out(adb_server, phone, "logcat -d -b main").splitlines()) == 20
    # another buffer keeps its own lines
    assert "Start proc" in _out(adb_server, phone, "logcat -d -b system")


@pytest.mark.parametrize("call", ["sched", "pthread"])
def test_affinity_honoured_or_ignored_as_the_profile_says(
        adb_server: AdbServer, virtual_phones: PhoneFactory,
        data_profile: Callable[[str], DeviceProfile], phone_programs: dict[str, Path],
        call: str) -> None:
    duo = data_profile("duo-2cpu")
    (honours,) = virtual_phones(profile=duo)
    (ignores,) = virtual_phones(profile=_with(duo, affinity="ignored"))
    assert _out(adb_server, honours, "cat /sys/devices/system/cpu/cpu1/cpu_capacity") == "1024\n"
    read_back = (f"/data/local/tmp/affinity {call} & p=$!; sleep 0.4; "
                 "grep Cpus_allowed_list /proc/$p/task/*/status; wait $p")
    for phone in (honours, ignores):
        pushed = adb_server.adb("-s", phone.serial, "push", str(phone_programs["affinity"]),
                                "/data/local/tmp/affinity")
        assert pushed.returncode == 0, pushed.stderr
    honoured = _out(adb_server, honours, read_back).splitlines()
    assert honoured[0] == "rc=0 allowed=1"  # the kernel applied the mask: the big core
    assert honoured[1].endswith("Cpus_allowed_list:\t1")
    ignored = _out(adb_server, ignores, read_back).splitlines()
    assert ignored[0] == "rc=0 allowed=0-1"  # the call succeeded and changed nothing
    assert ignored[1].endswith("Cpus_allowed_list:\t0-1")
    # the phone's own tools still pin (toybox taskset takes a hex mask, no -c)
    pinned = _out(adb_server, ignores, "taskset 2 grep Cpus_allowed_list /proc/self/status")
    assert pinned.split() == ["Cpus_allowed_list:", "1"]
