"""Artefacts are pushed once, verified on the device, and reused by checksum."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.errors import DeviceError
from harness.run.deploy import Artifact, ensure_artifacts


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str


@dataclass
class HostShellDevice:
    """A 'device' whose storage is a host folder; it runs the harness's commands in sh."""

    serial: str = "fake-1"
    pushes: list[str] = field(default_factory=list)
    corrupt: bool = False

    def shell(self, cmd: str, timeout: float | None = None) -> Result:
        done = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)
        return Result(done.returncode, done.stdout, done.stderr)

    def push(self, local: Path, remote: str,
             progress: Callable[[int, int], None] | None = None) -> None:
        self.pushes.append(remote)
        shutil.copyfile(local, remote)
        if self.corrupt:
            with open(remote, "ab") as handle:
                handle.write(b"!")
        if progress:
            progress(local.stat().st_size, local.stat().st_size)


def artifact(tmp_path: Path, name: str, body: bytes, executable: bool = False) -> Artifact:
    local = tmp_path / "host" / name
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(body)
    digest = hashlib.sha256(body).hexdigest()
    remote = str(tmp_path / "device" / digest / name)
    return Artifact(local, digest, remote, executable)


def test_first_run_pushes_and_second_run_pushes_nothing(tmp_path: Path) -> None:
    device = HostShellDevice()
    items = [artifact(tmp_path, "model.gguf", b"x" * 1000),
             artifact(tmp_path, "llama-bench", b"#!/bin/sh\n", executable=True)]
    first = ensure_artifacts(device, items)
    assert (first.bytes_pushed, first.files_pushed, first.files_reused) == (1010, 2, 0)
    assert Path(items[1].remote).stat().st_mode & 0o111
    assert not list((tmp_path / "device").rglob("*.part"))
    second = ensure_artifacts(device, items)
    assert (second.bytes_pushed, second.files_pushed, second.files_reused) == (0, 0, 2)
    assert len(device.pushes) == 2


def test_a_changed_file_on_the_device_is_pushed_again(tmp_path: Path) -> None:
    device = HostShellDevice()
    item = artifact(tmp_path, "model.gguf", b"abc")
    ensure_artifacts(device, [item])
    Path(item.remote).write_bytes(b"tampered")
    again = ensure_artifacts(device, [item])
    assert again.files_pushed == 1
    assert Path(item.remote).read_bytes() == b"abc"


def test_corrupted_transfer_is_an_error_and_leaves_no_file(tmp_path: Path) -> None:
    device = HostShellDevice(corrupt=True)
    item = artifact(tmp_path, "model.gguf", b"abc")
    with pytest.raises(DeviceError, match="arrived corrupted"):
        ensure_artifacts(device, [item])
    assert not Path(item.remote).exists()
    assert not Path(item.remote + ".part").exists()


def test_names_with_shell_metacharacters_stay_names(tmp_path: Path) -> None:
    device = HostShellDevice()
    item = artifact(tmp_path, "x; touch pwned #.gguf", b"m")
    ensure_artifacts(device, [item])
    assert Path(item.remote).read_bytes() == b"m"
    assert not (Path.cwd() / "pwned").exists()
    assert not list(tmp_path.rglob("pwned"))


def test_a_build_of_another_abi_is_refused_before_the_push(tmp_path: Path) -> None:
    from harness.artifacts.builds import Build, Manifest
    from harness.device.base import DeviceFacts
    from harness.run.worker import abi_refusal

    def build(abi: str) -> Build:
        return Build(tmp_path / f"b-{abi}", Manifest(
            name=f"b-{abi}", engine="llama.cpp", version=None, commit=None, abi=abi,
            cmake_flags=(), files=(), created_at="2026-12-01T00:00:00Z", host="test"))

    phone = DeviceFacts(serial="P1", kind="adb", abi="arm64-v8a",
                        abis=("arm64-v8a", "armeabi-v7a", "armeabi"))
    reason = abi_refusal(build("x86_64"), phone)
    assert reason is not None
    assert "x86_64" in reason and "P1" in reason and "--abi arm64-v8a" in reason
    assert abi_refusal(build("arm64-v8a"), phone) is None
    assert abi_refusal(build("armeabi-v7a"), phone) is None  # 32-bit runs on this 64-bit phone
    assert abi_refusal(build("x86_64"), DeviceFacts(serial="P2", kind="adb")) is None
