"""This host as a Device: for Termux-style runs on the phone itself, and for tests.

Shell commands run under ``sh -c`` in their own session, so a timeout stops the whole command
tree.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from harness.device.base import (
    DeviceFacts,
    Progress,
    ShellResult,
    shell_command,
)
from harness.device.facts import gather_facts
from harness.errors import DeviceError, DeviceTimeoutError
from harness.units import MIB

LOCAL_SERIAL = "local"
_CHUNK = MIB


class LocalDevice:
    """The machine the harness runs on. ``work_dir`` plays the role of /data/local/tmp."""

    def __init__(self, work_dir: str | Path | None = None) -> None:
        self.work_dir = Path(work_dir or Path.home() / ".cache" / "harness" / "device")

    @property
    def serial(self) -> str:
        return LOCAL_SERIAL

    def __repr__(self) -> str:
        return f"LocalDevice({str(self.work_dir)!r})"

    def shell(self, cmd: str | Sequence[str], timeout: float | None = None) -> ShellResult:
        command = shell_command(cmd)
        process = subprocess.Popen(
            ["sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            process.communicate()
            raise DeviceTimeoutError(
                f"command timed out after {timeout} s: {command}", self.serial) from None
        return ShellResult(
            exit_code=_exit_code(process.returncode),
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
        )

    def push(self, local: str | Path, remote: str, progress: Progress | None = None) -> None:
        source, target = Path(local), Path(remote)
        try:
            total = source.stat().st_size
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.partial")
            done = 0
            with source.open("rb") as reader, partial.open("wb") as writer:
                while chunk := reader.read(_CHUNK):
                    writer.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
            shutil.copymode(source, partial)
            partial.replace(target)
        except OSError as error:
            raise DeviceError(f"push {local} -> {remote} failed: {error}", self.serial) from error

    def facts(self) -> DeviceFacts:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        facts = gather_facts(self, kind="local", storage_path=str(self.work_dir))
        return replace(
            facts,
            model=facts.model or platform.node() or "this host",
            abi=facts.abi or platform.machine() or None,
            abis=facts.abis or ((platform.machine(),) if platform.machine() else ()),
        )


def _exit_code(returncode: int) -> int:
    """Like adb's shell v2: a process killed by signal N exits 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
