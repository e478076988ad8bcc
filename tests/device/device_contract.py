"""Behaviour every Device must show; run against LocalDevice and a virtual phone over adb."""

from __future__ import annotations

import hashlib
import itertools
import shlex
from pathlib import Path

import pytest

from harness.device import Device, DeviceTimeoutError

PWNED_NAME = "x; touch /tmp/pwned #.gguf"
PWNED_MARKER = "/tmp/pwned"


def check_shell_exit_codes_and_streams(device: Device) -> None:
    result = device.shell("echo out; echo err >&2; exit 3", timeout=60)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert device.shell(["echo", "a  b", "$HOME", "*"], timeout=60).stdout == "a  b $HOME *\n"
    assert device.shell("kill -9 $$", timeout=60).exit_code == 137


def check_shell_timeout(device: Device) -> None:
    with pytest.raises(DeviceTimeoutError):
        device.shell("sleep 30", timeout=1.0)


def _exists(device: Device, path: str) -> bool:
    quoted = shlex.quote(path)
    return device.shell(f"test -e {quoted} || test -L {quoted}", timeout=60).ok


def check_hostile_file_name_is_a_name(device: Device, tmp_path: Path, remote_dir: str) -> None:
    host_marker = Path(PWNED_MARKER)
    if host_marker.exists() or _exists(device, PWNED_MARKER):
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
    assert device.shell(["cat", remote], timeout=60).stdout == "GGUF fake weights\n"
    assert device.shell(["rm", remote], timeout=60).ok
    assert not _exists(device, remote)
    assert not host_marker.exists()
    assert not _exists(device, PWNED_MARKER)


def check_push_progress_and_content(device: Device, tmp_path: Path, remote_dir: str) -> None:
    payload = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes, not chunk aligned
    local = tmp_path / "blob.bin"
    local.write_bytes(payload)
    calls: list[tuple[int, int]] = []
    remote = f"{remote_dir}/sub dir/blob.bin"
    device.push(local, remote, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (len(payload), len(payload))
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(calls))
    digest = device.shell(["sha256sum", remote], timeout=60).stdout.split()[:1]
    assert digest == [hashlib.sha256(payload).hexdigest()]
