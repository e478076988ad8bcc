"""The virtual phone through the REAL adb binary and adbutils, against a private adb server."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import adbutils
import pytest
from fixtures_phones import PhoneFactory, VirtualPhone

from harness.android.thermal import parse_thermalservice
from harness.testing.adbserver import AdbServer

# every test here runs once per adb client this machine has (tests/conftest.py)
pytestmark = pytest.mark.each_adb_client


def _device(server: AdbServer, phone: VirtualPhone) -> adbutils.AdbDevice:
    return adbutils.AdbClient(host="127.0.0.1", port=server.port).device(phone.serial)


def test_adb_devices_lists_the_phone_with_its_model(adb_server: AdbServer,
                                                    virtual_phone: VirtualPhone) -> None:
    listing = adb_server.adb("devices", "-l").stdout
    line = next(x for x in listing.splitlines() if x.startswith(virtual_phone.serial))
    assert " device " in line
    assert "model:SM_A546B" in line and "product:a54xnsxx" in line and "device:a54x" in line


def test_adb_shell_answers_getprop_and_reports_exit_codes(adb_server: AdbServer,
                                                          virtual_phone: VirtualPhone) -> None:
    serial = virtual_phone.serial
    model = adb_server.adb("-s", serial, "shell", "getprop ro.product.model")
    assert model.returncode == 0 and model.stdout.strip() == "SM-A546B"
    assert adb_server.adb("-s", serial, "shell", "exit 3").returncode == 3
    split = adb_server.adb("-s", serial, "shell", "echo out; echo err >&2")
    assert split.stdout == "out\n" and split.stderr == "err\n"
    killed = adb_server.adb("-s", serial, "shell", "kill -9 $$")
    assert killed.returncode == 137


def test_adb_push_and_pull_round_trip_20_mb(adb_server: AdbServer, virtual_phone: VirtualPhone,
                                            tmp_path: Path) -> None:
    source = tmp_path / "blob.bin"
    source.write_bytes(os.urandom(20 * 1024 * 1024))
    serial = virtual_phone.serial
    push = adb_server.adb("-s", serial, "push", str(source), "/data/local/tmp/new/dir/blob.bin")
    assert push.returncode == 0, push.stderr
    # the shell sees the pushed file at the same device path
    listed = adb_server.adb("-s", serial, "shell", "wc -c < /data/local/tmp/new/dir/blob.bin")
    assert listed.stdout.strip() == str(20 * 1024 * 1024)
    back = tmp_path / "back.bin"
    pull = adb_server.adb("-s", serial, "pull", "/data/local/tmp/new/dir/blob.bin", str(back))
    assert pull.returncode == 0, pull.stderr
    digest = hashlib.sha256(source.read_bytes()).digest()
    assert hashlib.sha256(back.read_bytes()).digest() == digest


def test_adbutils_shell2_sync_and_getprop(adb_server: AdbServer,
                                          virtual_phone: VirtualPhone) -> None:
    device = _device(adb_server, virtual_phone)
    result = device.shell2("getprop ro.build.version.sdk; false")
    assert result.returncode == 1 and result.output.strip() == "34"
    assert device.getprop("ro.soc.model") == "s5e8835"
    device.sync.push(b"hello phone", "/sdcard/Download/a b.txt")
    assert device.shell("cat '/sdcard/Download/a b.txt'") == "hello phone"
    assert (virtual_phone.root / "sdcard/Download/a b.txt").read_bytes() == b"hello phone"
    assert device.sync.read_bytes("/storage/emulated/0/Download/a b.txt") == b"hello phone"
    names = {entry.path for entry in device.sync.list("/sdcard/Download")}
    assert "a b.txt" in names
    assert device.sync.stat("/data/local/tmp/missing").size == 0


def test_phone_files_report_profile_and_state(adb_server: AdbServer,
                                              virtual_phone: VirtualPhone) -> None:
    device = _device(adb_server, virtual_phone)
    meminfo = device.shell("cat /proc/meminfo")
    assert meminfo.startswith("MemTotal:        7864320 kB")
    capacity = device.shell("cat /sys/devices/system/cpu/cpu7/cpu_capacity")
    assert capacity == "1024"
    assert device.shell("cat /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") == "2002000"
    # a stock phone's shell reads heat from the thermal HAL: its sysfs zones are denied
    zone = "/sys/class/thermal/thermal_zone2"
    assert f"{zone}/temp: Permission denied" in device.shell(f"cat {zone}/temp 2>&1")
    hal = parse_thermalservice(device.shell("dumpsys thermalservice"))
    assert hal is not None
    skin = {t.name: t.value for t in hal.temperatures}["skin"]
    assert 20 < skin < 40
    assert "CPU part\t: 0xd41" in device.shell("cat /proc/cpuinfo")
    pid = device.shell("sleep 5 >/dev/null 2>&1 & echo $!")
    meminfo_pid = device.shell(f"dumpsys meminfo {pid}")
    assert f"** MEMINFO in pid {pid} [sleep] **" in meminfo_pid
    assert "TOTAL PSS:" in meminfo_pid and "TOTAL RSS:" in meminfo_pid
    assert "VmHWM:" in device.shell(f"cat /proc/{pid}/status")
    assert device.shell("dumpsys meminfo 1").startswith("No process found for: 1")
    device.shell("log -t harness-test hello from the test")
    assert "harness-test: hello from the test" in device.shell("logcat -d -s harness-test")


def test_sync_refuses_a_push_when_the_disk_is_full(adb_server: AdbServer,
                                                   virtual_phone: VirtualPhone,
                                                   tmp_path: Path) -> None:
    source = tmp_path / "small.bin"
    source.write_bytes(b"x" * 100_000)
    virtual_phone.fault("disk-full")
    push = adb_server.adb("-s", virtual_phone.serial, "push", str(source), "/data/local/tmp/s.bin")
    assert push.returncode != 0
    assert "No space left on device" in adb_server.said(push)
    assert not (virtual_phone.root / "data/local/tmp/s.bin").exists()
    virtual_phone.fault("disk-ok")
    again = adb_server.adb("-s", virtual_phone.serial, "push", str(source), "/data/local/tmp/s.bin")
    assert again.returncode == 0, again.stderr


def test_crash_and_hang_faults_hit_the_next_command(adb_server: AdbServer,
                                                    virtual_phone: VirtualPhone) -> None:
    serial = virtual_phone.serial
    virtual_phone.fault("crash")
    assert adb_server.adb("-s", serial, "shell", "echo fine").returncode == 139  # SIGSEGV
    assert adb_server.adb("-s", serial, "shell", "echo fine").stdout == "fine\n"
    virtual_phone.fault("hang")
    device = _device(adb_server, virtual_phone)
    with pytest.raises(adbutils.AdbTimeout):
        device.shell("echo never", timeout=1.5)
    assert device.shell("echo back") == "back"


def test_small_virtual_disk_fills_up(adb_server: AdbServer, virtual_phones: PhoneFactory,
                                     tmp_path: Path) -> None:
    phone = virtual_phones(storage_mb=1)[0]
    source = tmp_path / "two-mb.bin"
    source.write_bytes(b"y" * 2 * 1024 * 1024)
    push = adb_server.adb("-s", phone.serial, "push", str(source), "/sdcard/two.bin")
    assert push.returncode != 0 and "No space left on device" in adb_server.said(push)


def test_drop_fault_takes_the_phone_offline_until_it_reconnects(
        adb_server: AdbServer, virtual_phone: VirtualPhone) -> None:
    virtual_phone.fault("drop", 60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the server notices the closed socket on its own time
        states = adb_server.adb("devices").stdout
        line = next((x for x in states.splitlines() if x.startswith(virtual_phone.serial)), "")
        if "\tdevice" not in line:
            break
        time.sleep(0.1)
    assert "\tdevice" not in line  # offline, or gone from the list
