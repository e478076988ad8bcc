"""Where no adb server listens, the harness says so in one line; it never starts one itself.

adbutils' own client runs ``adb start-server`` on a refused connection, which starts a daemon on
the port of the environment (5037, the user's, when unset) whatever port the client was given.
Here ``ADBUTILS_ADB_PATH`` points at a stand-in that only records being run, so nothing can start
even if that came back; the stand-in must never run.
"""

from __future__ import annotations

from pathlib import Path

import adbutils
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.device import get_device, list_devices
from harness.device.adb import AdbDevice
from harness.errors import AdbServerDownError
from harness.testing.adbserver import free_port

SMOKE = Path(__file__).resolve().parents[2] / "matrices" / "smoke.yaml"


@pytest.fixture
def no_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A port nobody listens on; returns the file the adb stand-in writes when run."""
    ran = tmp_path / "adb-ran"
    stand_in = tmp_path / "adb"
    stand_in.write_text(f'#!/bin/sh\necho "$@" >> {ran}\nexit 1\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("ADBUTILS_ADB_PATH", str(stand_in))
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(free_port()))
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    return ran


def test_library_calls_raise_server_down_and_start_nothing(no_server: Path,
                                                           tmp_path: Path) -> None:
    with pytest.raises(AdbServerDownError, match=r"no adb server listens on 127\.0\.0\.1:"):
        list_devices()
    with pytest.raises(AdbServerDownError):
        get_device("emulator-5554")
    with pytest.raises(AdbServerDownError, match="start-server"):
        AdbDevice("127.0.0.1:5555").shell("true", timeout=5)
    # a plain adbutils client handed in is used without its server-starting connection
    plain = adbutils.AdbClient(host="127.0.0.1", port=free_port())
    with pytest.raises(AdbServerDownError):
        AdbDevice("127.0.0.1:5555", plain).shell("true", timeout=5)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"x")
    with pytest.raises(AdbServerDownError, match="start-server"):  # a push's own connection
        AdbDevice("127.0.0.1:5555").push(blob, "/data/local/tmp/blob.bin")
    assert not no_server.exists()


@pytest.mark.parametrize("args", [
    ["devices"],
    ["run", str(SMOKE), "--devices", "all"],
    ["run", str(SMOKE), "--devices", "127.0.0.1:5555"],
    ["sim", "start"],
])
def test_commands_that_need_a_server_end_in_one_line_and_exit_2(
        no_server: Path, tmp_path: Path, args: list[str]) -> None:
    if args[0] == "run":
        args = [*args, "--results", str(tmp_path / "results")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no adb server listens" in lines[0], lines
    assert not no_server.exists()


def test_plan_for_an_unknown_device_names_the_profile_and_starts_nothing(
        no_server: Path) -> None:
    result = CliRunner().invoke(main, ["plan", str(SMOKE), "--device", "pixel-99"])
    assert result.exit_code == 2 and "no device profile 'pixel-99'" in result.output
    assert not no_server.exists()
