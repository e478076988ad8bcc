"""Command composition and fact gathering, against a fake device that fails on the unexpected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from adbutils.errors import AdbConnectionError, AdbError
from click.testing import CliRunner
from fake_device import FakeDevice, UnexpectedCall

from harness.cli import main
from harness.device import Device, DeviceTimeoutError
from harness.device.adb import translate_error
from harness.device.base import ShellResult, parse_df_available_kb, shell_command
from harness.device.facts import CPU_SYSFS_LOOP, gather_facts
from harness.errors import DeviceError, DeviceLostError

PWNED_NAME = "x; touch /tmp/pwned #.gguf"
OWN_DATA = Path(__file__).resolve().parent.parent / "data" / "android"


def ok(stdout: str) -> ShellResult:
    return ShellResult(0, stdout, "")


def test_a_sequence_is_quoted_and_a_string_is_passed_as_is() -> None:
    assert shell_command(["ls", "-l", PWNED_NAME]) == "ls -l 'x; touch /tmp/pwned #.gguf'"
    assert shell_command("ls | wc -l") == "ls | wc -l"
    assert shell_command(["echo", "it's"]) == "echo 'it'\"'\"'s'"
    with pytest.raises(DeviceError):
        shell_command([])


def test_df_available_column() -> None:
    toybox = ("Filesystem      1K-blocks     Used Available Use% Mounted on\n"
              "/dev/block/dm-8 115234864 60123456  55111408  53% /data\n")
    assert parse_df_available_kb(toybox) == 55111408
    assert parse_df_available_kb("df: /nope: No such file or directory\n") is None


def test_adb_failures_become_device_errors_naming_serial_and_command() -> None:
    lost = translate_error(AdbError("device 'emu-1' not found"), "emu-1", "getprop")
    assert isinstance(lost, DeviceLostError) and str(lost).startswith("emu-1: getprop")
    assert isinstance(translate_error(EOFError("eof"), "s", "ls"), DeviceLostError)
    other = translate_error(AdbError("permission denied"), "s", "ls /data")
    assert type(other) is DeviceError and "ls /data" in str(other)
    server = translate_error(AdbConnectionError("refused"), "s", "ls")
    assert type(server) is DeviceError and "adb server" in str(server)


GETPROP = "\n".join([
    "[ro.product.model]: [Virtual Flagship]",
    "[ro.product.manufacturer]: [Harness]",
    "[ro.soc.manufacturer]: [Qualcomm]",
    "[ro.soc.model]: [SM8550]",
    "[ro.board.platform]: [kalama]",
    "[ro.build.version.release]: [14]",
    "[ro.build.version.sdk]: [34]",
    "[ro.product.cpu.abi]: [arm64-v8a]",
])
MEMINFO = "MemTotal:       15728640 kB\nMemFree:  100 kB\nMemAvailable:    9437184 kB\n"


def _facts_device(sysfs: str, df: ShellResult) -> FakeDevice:
    return FakeDevice("emulator-5554", {
        "getprop": ok(GETPROP),
        "cat /proc/meminfo": ok(MEMINFO),
        CPU_SYSFS_LOOP: ok(sysfs),
        "df -k /data/local/tmp": df,
    })


def test_facts_from_a_phone() -> None:
    sysfs = ("==> /sys/devices/system/cpu/possible <==\n0-7\n\n"
             + (OWN_DATA / "sysfs_cpu_head_1_3_4_capacity.txt").read_text())
    df = ok("Filesystem 1K-blocks Used Available Use% Mounted on\n"
            "/dev/x 100 50 52428800 50% /data\n")
    device = _facts_device(sysfs, df)
    facts = gather_facts(device, kind="adb", storage_path="/data/local/tmp")
    assert (facts.serial, facts.model, facts.manufacturer, facts.soc) == (
        "emulator-5554", "Virtual Flagship", "Harness", "Qualcomm SM8550")
    assert (facts.android_release, facts.android_sdk, facts.abi) == ("14", 34, "arm64-v8a")
    assert (facts.total_ram_kb, facts.available_ram_kb) == (15728640, 9437184)
    assert (facts.cpu_count, facts.cpu_layout, facts.big_cpus) == (8, "1+3+4", (4, 5, 6, 7))
    assert facts.free_storage_kb == 52428800


def test_facts_survive_failed_commands() -> None:
    device = _facts_device("", ShellResult(1, "", "df: denied"))
    device.answers["getprop"] = ShellResult(127, "", "sh: getprop: not found")
    facts = gather_facts(device, kind="adb", storage_path="/data/local/tmp")
    assert (facts.model, facts.android_sdk, facts.cpu_count, facts.free_storage_kb) == (
        None, None, None, None)
    assert facts.total_ram_kb == 15728640


def test_fake_device_fails_loudly_on_anything_unexpected() -> None:
    device = FakeDevice("s", {})
    with pytest.raises(UnexpectedCall):
        device.shell("rm -rf /")
    with pytest.raises(UnexpectedCall):
        device.push("a", "b")
    assert isinstance(device, Device)


class _Broken(FakeDevice):
    def facts(self):  # type: ignore[no-untyped-def]
        raise DeviceTimeoutError("getprop timed out", self.serial)


def test_devices_cli_json_lists_facts_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    sysfs = (OWN_DATA / "sysfs_cpu_head_1_3_4_capacity.txt").read_text()
    df = ok("Filesystem 1K-blocks Used Available Use% Mounted on\n/dev/x 1 1 2048 1% /data\n")
    good = _facts_device(sysfs, df)
    good.facts = lambda: gather_facts(good, kind="adb", storage_path="/data/local/tmp")  # type: ignore[method-assign]
    monkeypatch.setattr("harness.cli.devices.list_devices", lambda: [good, _Broken("dead-1", {})])
    result = CliRunner().invoke(main, ["devices", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows[0]["model"] == "Virtual Flagship" and rows[0]["big_cpus"] == [4, 5, 6, 7]
    assert rows[0]["free_storage_kb"] == 2048
    assert rows[1] == {"serial": "dead-1", "error": "dead-1: getprop timed out"}
    table = CliRunner().invoke(main, ["devices"])
    assert table.exit_code == 0 and "Virtual Flagship" in table.output and "dead-1" in table.output


def test_devices_cli_with_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.cli.devices.list_devices", lambda: [])
    result = CliRunner().invoke(main, ["devices"])
    assert result.exit_code == 0 and "No devices attached" in result.output
    assert json.loads(CliRunner().invoke(main, ["devices", "--json"]).output) == []
