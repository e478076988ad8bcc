"""LocalDevice (this host) against the Device contract, plus its facts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from device_contract import (
    check_hostile_file_name_is_a_name,
    check_push_progress_and_content,
    check_shell_exit_codes_and_streams,
    check_shell_timeout,
)

from harness.android import parse_cpu_range, parse_proc_meminfo
from harness.device import Device, LocalDevice, get_device


@pytest.fixture
def local(tmp_path: Path) -> LocalDevice:
    return LocalDevice(tmp_path / "device")


def test_local_is_a_device(local: LocalDevice) -> None:
    assert isinstance(local, Device) and local.serial == "local"
    assert isinstance(get_device("local"), LocalDevice)


def test_shell_exit_codes_and_streams(local: LocalDevice) -> None:
    check_shell_exit_codes_and_streams(local)


def test_shell_timeout_stops_the_command(local: LocalDevice, tmp_path: Path) -> None:
    check_shell_timeout(local)


def test_hostile_file_name_is_a_name(local: LocalDevice, tmp_path: Path) -> None:
    remote_dir = tmp_path / "device" / "data"
    remote_dir.mkdir(parents=True)
    check_hostile_file_name_is_a_name(local, tmp_path, str(remote_dir))


def test_push_progress_and_content(local: LocalDevice, tmp_path: Path) -> None:
    check_push_progress_and_content(local, tmp_path, str(tmp_path / "device"))


def test_push_keeps_the_executable_bit(local: LocalDevice, tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    local.push(tool, str(tmp_path / "device" / "tool"))
    assert local.shell([str(tmp_path / "device" / "tool")], timeout=30).stdout == "ran\n"


def test_local_facts_match_this_host(local: LocalDevice) -> None:
    facts = local.facts()
    memory = parse_proc_meminfo(Path("/proc/meminfo").read_text())
    assert memory is not None and facts.total_ram_kb == memory.mem_total_kb
    assert facts.available_ram_kb is not None and facts.available_ram_kb <= facts.total_ram_kb
    possible = parse_cpu_range(Path("/sys/devices/system/cpu/possible").read_text())
    assert facts.cpu_count == len(possible) and facts.cpu_count >= 1
    stat = os.statvfs(local.work_dir)
    assert facts.free_storage_kb is not None
    assert abs(facts.free_storage_kb - stat.f_bavail * stat.f_frsize // 1024) < 512 * 1024
    assert facts.kind == "local" and facts.model
