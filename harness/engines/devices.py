"""Which compute devices a build has on a phone: ``llama-bench --list-devices``, read once.

At prepare time each phone x build is asked (with the launch's environment, so a phone's
Vulkan driver or Hexagon libraries are found as a trial finds them). The answer is a capability
table: a cell that asks for a device the build or the phone lacks is ``unsupported`` with that
reason, before anything runs, instead of llama-bench's "invalid device" exit.

llama.cpp prints (common/arg.cpp ``common_print_available_devices``)::

    Available devices:
      Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)

or ``  (none)`` under the heading when only the CPU is there. The CPU is never listed: device
``none`` (the CPU only) is always available.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness import knobs

_HEADING = "Available devices:"
_LINE = re.compile(r"^\s+([A-Za-z][A-Za-z0-9_.-]*): (.*?)(?: \((\d+) MiB, (\d+) MiB free\))?\s*$")


@dataclass(frozen=True)
class ComputeDevice:
    """One device a build sees on a phone."""

    name: str  # llama.cpp's name: Vulkan0, GPUOpenCL, HTP0, ...
    description: str  # e.g. "Adreno (TM) 740" or "llvmpipe (LLVM 15.0.6, 256 bits)"
    total_mib: int | None = None
    free_mib: int | None = None


@dataclass(frozen=True)
class Capability:
    """What one build can run on one phone: its devices, or why they are unknown."""

    build: str
    devices: tuple[ComputeDevice, ...] = ()
    unknown: str | None = None  # why the build could not say (None: it did)

    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    def find(self, name: str) -> ComputeDevice | None:
        return next((d for d in self.devices if d.name == name), None)


def list_devices_command(binary: str) -> list[str]:
    return [binary, "--list-devices"]


def parse_list_devices(text: str) -> tuple[ComputeDevice, ...] | None:
    """The devices of ``--list-devices`` output; None when the output is not that listing."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == _HEADING]
    if not starts:
        return None
    found: list[ComputeDevice] = []
    for line in lines[starts[-1] + 1:]:
        if line.strip() == "(none)":
            break
        match = _LINE.match(line)
        if not match:
            if line.strip():
                break
            continue
        total, free = match.group(3), match.group(4)
        found.append(ComputeDevice(match.group(1), match.group(2),
                                   int(total) if total else None, int(free) if free else None))
    return tuple(found)


def capability_from_output(build: str, exit_code: int | None, stdout: str,
                           stderr: str) -> Capability:
    devices = parse_list_devices(stdout)
    if devices is not None:
        return Capability(build, devices)
    tail = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
    return Capability(build, unknown=f"--list-devices failed (exit {exit_code}): {tail[:200]}")


def device_problem(device: str, capability: Capability | None, serial: str) -> str | None:
    """Why a cell's device cannot be used with this build on this phone, or None."""
    if device == knobs.CPU_DEVICE or capability is None:
        return None
    if capability.unknown is not None:
        return (f"build {capability.build} on {serial} could not list its devices "
                f"({capability.unknown}), so device {device} cannot be checked")
    if capability.find(device) is None:
        have = ", ".join(capability.names()) or "none but the CPU"
        return (f"build {capability.build} on {serial} has no device {device} (it has: {have}); "
                "build with that backend (harness build llama.cpp --backend ...) or use a phone "
                "that has it")
    return None
