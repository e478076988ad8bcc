"""Behaviour every Device must show; run against LocalDevice and a virtual phone over adb."""

from __future__ import annotations

import itertools
import shlex
import signal
import time
from pathlib import Path

import pytest

from harness.device import Device, DeviceTimeoutError
from harness.errors import DeviceError

PWNED_NAME = "x; touch /tmp/pwned #.gguf"
PWNED_MARKER = "/tmp/pwned"


def wait_until(predicate, seconds: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    """Poll a condition with a generous deadline (waiting, not a timed assertion)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def check_shell_exit_codes_and_streams(device: Device) -> None:
    result = device.shell("echo out; echo err >&2; exit 3", timeout=60)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert device.shell(["echo", "a  b", "$HOME", "*"], timeout=60).stdout == "a  b $HOME *\n"
    assert device.shell("kill -9 $$", timeout=60).exit_code == 137


def check_shell_timeout(device: Device) -> None:
    with pytest.raises(DeviceTimeoutError):
        device.shell("sleep 30", timeout=1.0)


def check_hostile_file_name_is_a_name(device: Device, tmp_path: Path, remote_dir: str) -> None:
    host_marker = Path(PWNED_MARKER)
    if host_marker.exists() or device.exists(PWNED_MARKER):
        pytest.skip(f"{PWNED_MARKER} already exists; cannot prove it is not created")
    # The name holds slashes, so it is also a relative path: "x; touch " / "tmp" / "pwned #.gguf".
    local = tmp_path / PWNED_NAME
    local.parent.mkdir(parents=True)
    local.write_bytes(b"GGUF fake weights\n")
    remote = f"{remote_dir}/{PWNED_NAME}"
    device.push(local, remote)
    # ``ls PATH`` echoes the path; the virtual phone shows it in its sandbox, so compare the tail.
    assert device.shell(["ls", remote], timeout=60).stdout.endswith(f"/{PWNED_NAME}\n")
    assert device.shell(["ls", f"{remote_dir}/x; touch /tmp"], timeout=60).stdout == (
        "pwned #.gguf\n")
    assert device.exists(remote)
    assert device.read_text(remote) == "GGUF fake weights\n"
    device.pull(remote, tmp_path / "back")
    assert (tmp_path / "back").read_bytes() == b"GGUF fake weights\n"
    assert device.shell(["rm", remote], timeout=60).ok
    assert not device.exists(remote)
    assert not host_marker.exists()
    assert not device.exists(PWNED_MARKER)


def check_push_progress_and_pull_round_trip(
    device: Device, tmp_path: Path, remote_dir: str,
) -> None:
    payload = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes, not chunk aligned
    local = tmp_path / "blob.bin"
    local.write_bytes(payload)
    calls: list[tuple[int, int]] = []
    remote = f"{remote_dir}/sub dir/blob.bin"
    device.push(local, remote, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (len(payload), len(payload))
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(calls))
    device.pull(remote, tmp_path / "copy.bin")
    assert (tmp_path / "copy.bin").read_bytes() == payload
    with pytest.raises(DeviceError):
        device.pull(f"{remote_dir}/missing.bin", tmp_path / "missing.bin")
    assert not (tmp_path / "missing.bin").exists()
    with pytest.raises(DeviceError):
        device.read_text(f"{remote_dir}/missing.txt")


def check_spawn_kill_and_liveness(device: Device, remote_dir: str) -> None:
    out, err = f"{remote_dir}/out file.txt", f"{remote_dir}/err.txt"
    pid = device.spawn(["sh", "-c", "echo started; echo warn >&2; exec sleep 60"], out, err)
    try:
        assert device.is_alive(pid)
        assert wait_until(lambda: device.read_text(out) == "started\n")
        assert device.read_text(err) == "warn\n"
    finally:
        assert device.kill(pid, signal.SIGKILL)
    # A killed process may linger as a zombie until reaped; is_alive must already say dead.
    assert wait_until(lambda: not device.is_alive(pid))
    quick = device.spawn(f"echo {shlex.quote(PWNED_NAME)}", out, err)
    assert wait_until(lambda: not device.is_alive(quick))
    assert device.read_text(out) == PWNED_NAME + "\n"
