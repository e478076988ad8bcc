"""The Device protocol: everything the harness does to a phone (or this host) goes through it.

Two implementations share it: ``AdbDevice`` (real and virtual phones, through the adb server)
and ``LocalDevice`` (this host, for Termux-style runs). Command composition lives here as pure
functions, so quoting is tested once and both devices quote the same way.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from harness.errors import DeviceError

Progress = Callable[[int, int], None]
"""Called as ``progress(bytes_done, bytes_total)`` while a push runs."""


@dataclass(frozen=True)
class ShellResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class DeviceFacts:
    """What a device is, read from the device itself (None where it could not be read)."""

    serial: str
    kind: str  # "adb" or "local"
    model: str | None = None
    manufacturer: str | None = None
    soc: str | None = None
    android_release: str | None = None
    android_sdk: int | None = None
    abi: str | None = None
    abis: tuple[str, ...] = ()  # every ABI the device executes (ro.product.cpu.abilist)
    cpu_emulation: str | None = None  # a virtual phone whose CPU is emulated names the emulator
    # a virtual phone's GPU is emulated (ro.harness.gpu_emulated, e.g. lavapipe: Vulkan run on
    # the host's CPU); its speeds are never a phone GPU's
    gpu_emulated: str | None = None
    total_ram_kb: int | None = None
    available_ram_kb: int | None = None
    cpu_count: int | None = None
    cpu_layout: str | None = None  # "1+3+4": cluster sizes, biggest cores first
    big_cpus: tuple[int, ...] = ()
    free_storage_kb: int | None = None
    # a virtual phone says how its memory is enforced (cgroup or simulated) and its storage
    # speed (ro.harness.memory_model, ro.harness.storage_read_mb_s); a real phone neither
    memory_model: str | None = None
    storage_read_mb_s: float | None = None


@runtime_checkable
class Device(Protocol):
    """One phone, virtual phone or this host."""

    @property
    def serial(self) -> str: ...

    def shell(self, cmd: str | Sequence[str], timeout: float | None = None) -> ShellResult:
        """Run a command; a Sequence is quoted word by word, a str is passed as is."""
        ...

    def push(self, local: str | Path, remote: str, progress: Progress | None = None) -> None: ...

    def facts(self) -> DeviceFacts: ...


def shell_command(cmd: str | Sequence[str]) -> str:
    """The command line a device shell receives: Sequences are quoted, a str is left alone."""
    if isinstance(cmd, str):
        return cmd
    if not cmd:
        raise DeviceError("empty command")
    return shlex.join(str(word) for word in cmd)


def parse_df_available_kb(text: str) -> int | None:
    """Available KiB from ``df -k PATH`` (last line; toybox and GNU agree on the columns)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    fields = lines[-1].split()
    if len(fields) < 4:
        return None
    try:
        return int(fields[-3])
    except ValueError:
        return None
