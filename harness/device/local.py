"""This host as a Device: for Termux-style runs on the phone itself, and for tests.

Shell commands run under ``sh -c`` in their own session, so a timeout stops the whole command
tree. Spawned processes are kept as Popen objects and reaped, so a finished one never lingers as
a zombie that ``kill -0`` would still call alive.
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
    is_running_state,
    shell_command,
)
from harness.device.facts import gather_facts
from harness.errors import DeviceError, DeviceTimeoutError

LOCAL_SERIAL = "local"
_CHUNK = 1 << 20


class LocalDevice:
    """The machine the harness runs on. ``work_dir`` plays the role of /data/local/tmp."""

    def __init__(self, work_dir: str | Path | None = None) -> None:
        self.work_dir = Path(work_dir or Path.home() / ".cache" / "harness" / "device")
        self._children: dict[int, subprocess.Popen[bytes]] = {}

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

    def pull(self, remote: str, local: str | Path) -> None:
        try:
            Path(local).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(remote, local)
        except OSError as error:
            raise DeviceError(f"pull {remote} -> {local} failed: {error}", self.serial) from error

    def read_text(self, path: str) -> str:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            raise DeviceError(f"cannot read {path}: {error}", self.serial) from error

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def spawn(self, cmd: str | Sequence[str], stdout_path: str, stderr_path: str) -> int:
        inner = cmd if isinstance(cmd, str) else "exec " + shell_command(cmd)
        try:
            with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
                process = subprocess.Popen(
                    ["sh", "-c", inner], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as error:
            raise DeviceError(f"cannot start {inner}: {error}", self.serial) from error
        self._children[process.pid] = process
        return process.pid

    def kill(self, pid: int, sig: int = signal.SIGTERM) -> bool:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def is_alive(self, pid: int) -> bool:
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists():
            return is_running_state(stat.read_text(errors="replace"))
        return True

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
