"""`harness sim` through click: start/status/fault/stop/wipe, and clean errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.testing.adbserver import AdbServer, free_port
from harness.virtual import cpu
from harness.virtual.userland import ABI_QEMU, host_abi


def test_sim_lifecycle_through_the_cli(adb_server: AdbServer, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))
    runner = CliRunner()
    started = runner.invoke(main, ["sim", "start", "--profile", "flagship-16gb", "--json"])
    try:
        assert started.exit_code == 0, started.output
        phone = json.loads(started.output)[0]
        assert phone["model"] == "ASUS_AI2201" and phone["serial"].startswith("127.0.0.1:")
        assert "model:ASUS_AI2201" in adb_server.adb("devices", "-l").stdout
        fault = runner.invoke(main, ["sim", "fault", phone["serial"], "thermal", "5"])
        assert fault.exit_code == 0, fault.output
        status = json.loads(runner.invoke(main, ["sim", "status", "--json"]).output)
        assert status[0]["running"] and status[0]["faults"]["thermal_forced"] == 5
        # its CPUs are its own where the host allows it: a shell of the phone runs at its nice
        reason = cpu.blocked()
        nice = cpu.PHONE_NICE if reason is None else None
        assert status[0]["cpu_note"] == cpu.note(nice, reason or "")
        stat = adb_server.adb("-s", phone["serial"], "shell", "cat /proc/self/stat").stdout
        assert int(stat.rsplit(")", 1)[1].split()[16]) == (nice or 0)  # field 19: nice
        thermal = adb_server.adb("-s", phone["serial"], "shell", "dumpsys thermalservice").stdout
        assert "Thermal Status: 5" in thermal
        unplug = runner.invoke(main, ["sim", "fault", phone["serial"], "charging", "none"])
        assert unplug.exit_code == 0, unplug.output
        battery = adb_server.adb("-s", phone["serial"], "shell", "dumpsys battery").stdout
        assert "  status: 3\n" in battery  # discharging
        bad = runner.invoke(main, ["sim", "fault", phone["serial"], "thermal", "9"])
        assert bad.exit_code == 2 and "0..6" in bad.output and "Traceback" not in bad.output
    finally:
        stopped = runner.invoke(main, ["sim", "stop", "--all"])
    assert stopped.exit_code == 0 and "stopped 127.0.0.1:" in stopped.output
    assert "127.0.0.1:" not in adb_server.adb("devices").stdout
    wiped = runner.invoke(main, ["sim", "wipe", "--all"])
    assert wiped.exit_code == 0 and "wiped flagship-16gb-1" in wiped.output
    assert "no virtual phones" in runner.invoke(main, ["sim", "status"]).output


def test_sim_start_without_an_adb_server_is_a_clean_error(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(free_port()))
    result = CliRunner().invoke(main, ["sim", "start"])
    assert result.exit_code == 2
    assert "no adb server listens" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "sim" / "phones").exists()


def test_sim_fault_rejects_unknown_kinds() -> None:
    result = CliRunner().invoke(main, ["sim", "fault", "127.0.0.1:1", "meteor"])
    assert result.exit_code == 2 and "meteor" in result.output


@pytest.mark.parametrize(("kind", "value", "words"), [
    ("charging", "solar", "none, usb, ac"), ("charging", None, "none, usb, ac"),
    ("battery-saver", "maybe", "on, off"),
    ("screen", None, "on, off"), ("doze", "DEEPER", "ACTIVE"),
])
def test_sim_fault_rejects_bad_power_values(kind: str, value: str | None, words: str) -> None:
    args = ["sim", "fault", "127.0.0.1:1", kind] + ([value] if value else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output


def test_sim_status_names_the_memory_model_and_an_impossible_cgroup_is_one_line(
        adb_server: AdbServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.virtual import cgroups

    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))
    runner = CliRunner()
    nowhere = {c: tmp_path / "no-such-mount" / c for c in cgroups.CONTROLLERS}
    monkeypatch.setattr(cgroups, "controller_dirs", lambda: nowhere)
    refused = runner.invoke(main, ["sim", "start", "--memory-model", "cgroup"])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert "cannot make the phone's cgroup" in refused.output and "--memory-model" in \
        refused.output
    status = json.loads(runner.invoke(main, ["sim", "status", "--json"]).output)
    assert not [p for p in status if p["running"]]  # nothing started, nothing half made
    # auto falls back to the simulated model and says why
    started = runner.invoke(main, ["sim", "start", "--profile", "budget-4gb"])
    try:
        assert started.exit_code == 0, started.output
        status = runner.invoke(main, ["sim", "status"]).output
        assert "memory: simulated (simulated: " in status and "not writable" in status
        assert "storage: not throttled: the simulated memory model" in status
    finally:
        runner.invoke(main, ["sim", "stop", "--all"])


def test_a_phone_may_run_ahead_of_the_host_only_where_the_kernel_allows_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    monkeypatch.setattr(cpu.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(cpu.Path, "read_text", lambda self: "CapEff:\t0000000000000000\n")
    monkeypatch.setattr(cpu.resource, "getrlimit", lambda what: (0, 0))
    reason = cpu.blocked()
    assert reason is not None and "CAP_SYS_NICE" in reason and "ulimit -e 30" in reason
    assert cpu.note(None, reason).startswith("shared with the host's other work (")
    monkeypatch.setattr(cpu.resource, "getrlimit", lambda what: (30, 30))  # 20 - (-10)
    assert cpu.blocked() is None
    monkeypatch.setattr(cpu.resource, "getrlimit", lambda what: (29, 29))
    assert cpu.blocked() is not None
    monkeypatch.setattr(cpu.resource, "getrlimit",
                        lambda what: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert cpu.blocked() is None
    monkeypatch.setattr(cpu.resource, "getrlimit", lambda what: (0, 0))
    monkeypatch.setattr(cpu.Path, "read_text",
                        lambda self: f"CapEff:\t{1 << cpu.CAP_SYS_NICE:016x}\n")
    assert cpu.blocked() is None


def _path_without(tmp_path: Path, prefix: str) -> str:
    """A PATH of one folder holding every program of ours but those named ``prefix*``."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for entry in os.environ["PATH"].split(os.pathsep):
        if not Path(entry).is_dir():
            continue
        for program in Path(entry).iterdir():
            link = folder / program.name
            if not program.name.startswith(prefix) and not link.exists():
                link.symlink_to(program)
    return str(folder)


def test_sim_start_without_qemu_says_why_on_the_terminal(adb_server: AdbServer, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The default profile is an arm64 phone: on a host without qemu-user its daemon stops at
    boot, and `sim start` prints that cause and what to do, not only the daemon log's path."""
    native = host_abi()
    other = "x86_64" if native == "arm64-v8a" else "arm64-v8a"  # an arm64 host: the other way
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))
    monkeypatch.setenv("PATH", _path_without(tmp_path, ABI_QEMU[other]))
    # the daemon runs from the phone's folder: it imports the harness under test
    monkeypatch.setenv("PYTHONPATH", str(Path(harness.__file__).resolve().parents[1]))
    result = CliRunner().invoke(main, ["sim", "start", *(["--abi", other] if other == "x86_64"
                                                         else [])])
    try:
        assert result.exit_code == 2, result.output
        line = result.output.strip()
        assert line.startswith("Error: virtual phone daemon exited at start: virtual phones "
                               f"need {ABI_QEMU[other]}"), line
        assert "install it: apt-get install qemu-user, or start a phone of this host's ABI " \
               f"(--abi {native})" in line
        assert "daemon.log" in line and "Traceback" not in result.output
    finally:
        CliRunner().invoke(main, ["sim", "stop", "--all"])
