"""Capture -> replay is a fixed point: a phone started from a capture is captured again as the
same phone, apart from what is volatile (uptime, temperatures, pids, free memory) and what
the virtual phone cannot replay (its toybox and mksh are this host's: `sim status` names them)."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.doctor.capture import read_bundle

REPO = Path(__file__).resolve().parents[2]
VIRTUAL = REPO / "devices" / "virtual"
# answers whose text is the phone's, not the moment's: they must come back the same
STABLE = ("props", "id", "selinux", "workdir", "shell", "cpu.topology", "cpu.hw_max",
          "battery_saver", "stay_on", "doze", "gpu.gpumem", "packages", "uname", "gpu.vkjson")


# a virtual phone's applets print a path they expanded under its sandbox (on the host), where a
# phone prints the bare device path: compared without that prefix
SANDBOX = re.compile(r"/\S*?/root(?=/(?:sys|proc|dev|data|system)/)")


def _same(text: str) -> str:
    return SANDBOX.sub("", text)


def _capture(serial: str, path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["capture", "--serial", serial, "-o", str(path)])
    assert result.exit_code == 0, result.output
    _, records = read_bundle(path)
    return {r.id: r for r in records}


@pytest.mark.parametrize("profile", ["stock.yaml", "gpu-phone-mali.yaml", "small-ram.yaml"])
def test_a_replayed_capture_captures_as_the_original(
        profile: str, virtual_phones: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))
    (phone,) = virtual_phones(1, profile=str(VIRTUAL / profile))
    first = _capture(phone.serial, tmp_path / "first.zip")
    runner = CliRunner()
    started = runner.invoke(main, ["sim", "start", "--from-capture", str(tmp_path / "first.zip"),
                                   "--abi", "x86_64", "--json"])
    try:
        assert started.exit_code == 0, started.output
        serial = json.loads(started.stdout)[0]["serial"]
        second = _capture(serial, tmp_path / "second.zip")
        status = json.loads(runner.invoke(main, ["sim", "status", "--json"]).stdout)
    finally:
        runner.invoke(main, ["sim", "stop", "--all"])
    assert set(second) == set(first)
    # every probe is answered in the same way: served, refused, absent or unusable alike
    assert {k: r.error for k, r in second.items()} == {k: r.error for k, r in first.items()}
    for sid in STABLE:
        assert _same(second[sid].stdout) == _same(first[sid].stdout), sid
    denied = {k for k, r in first.items() if r.error == "EACCES"}
    # the stock policy's refusals on every phone that does not open them (kgsl: none has it
    # but the Adreno-class phone, which opens it)
    assert denied == {"pressure", "thermal.zones"}
    # the replay knows what it could not replay, and says so
    (note,) = [s["capture"] for s in status if s["serial"] == serial]
    assert note["capture"].endswith("first.zip")
    assert note["differs"] == []  # a virtual phone's capture: the same host userland


def test_a_bad_capture_starts_nothing(adb_server: Any, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))
    not_zip = tmp_path / "notes.zip"
    not_zip.write_text("hello")
    newer = tmp_path / "newer.zip"
    with zipfile.ZipFile(newer, "w") as archive:
        archive.writestr("manifest.json", json.dumps({"schema": 99}))
        archive.writestr("probes.jsonl", "")
    no_probes = tmp_path / "noprobes.zip"
    with zipfile.ZipFile(no_probes, "w") as archive:
        archive.writestr("manifest.json", json.dumps({"schema": 1}))
    runner = CliRunner()
    for path, said in ((not_zip, "not a capture (not a zip file"),
                       (newer, "capture schema 99 is newer"),
                       (no_probes, "it has no probes.jsonl"),
                       (tmp_path / "absent.zip", "absent.zip: no such file")):
        result = runner.invoke(main, ["sim", "start", "--from-capture", str(path)])
        assert result.exit_code == 2, result.output
        assert said in result.output and result.output.strip().count("\n") == 0, result.output
    assert "no virtual phones" in runner.invoke(main, ["sim", "status"]).output
    both = runner.invoke(main, ["sim", "start", "--from-capture", str(newer), "--profile",
                                "midrange-8gb"])
    assert both.exit_code == 2 and "not both" in both.output
