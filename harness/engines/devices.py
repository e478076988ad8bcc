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
PEAK_MARK = "@@harness:probe_vm_hwm_kb"
_PEAK = re.compile(rf"^{PEAK_MARK} (\d+)\s*$", re.MULTILINE)
# The same probe of a build with no device backend: llama-bench, its libc and the CPU backend's
# registry, no driver (measured: host-release's --list-devices peaks at 7.5 MiB VmHWM, x86_64).
# What a GPU build's probe holds above it is its drivers (Vulkan's loader and ICD, OpenCL's,
# the Hexagon session), which every launch of that build loads, CPU cells included.
PROBE_BASE_BYTES = 7_696 * 1024
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
    peak_bytes: int | None = None  # the probe's high-water mark (VmHWM), when it was read
    # a llama-bench too old for --list-devices: the usage it printed instead, which says which
    # flags it has (``llama_bench.dialect_from_help``); None when it knew the flag
    usage: str | None = None

    @property
    def driver_bytes(self) -> int | None:
        """What the build's device drivers hold in its process on this phone (``peak_bytes``
        less a CPU-only probe's), or None when the probe's peak was not read."""
        if self.peak_bytes is None:
            return None
        return max(0, self.peak_bytes - PROBE_BASE_BYTES)

    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    def find(self, name: str) -> ComputeDevice | None:
        return next((d for d in self.devices if d.name == name), None)


# what llama-bench prints to stderr for a flag it does not know, before its usage on stdout
# (tools/llama-bench/llama-bench.cpp, parse_cmd_params)
_UNKNOWN_FLAG = "error: invalid parameter for argument: --list-devices"


def list_devices_command(binary: str) -> list[str]:
    return [binary, "--list-devices"]


def peak_watched(line: str) -> str:
    """``line`` (an already quoted launch line) in the background, its kernel high-water mark
    (VmHWM) read from /proc until it exits (a zombie's status has no VmHWM: its State ends the
    loop), then printed after its output as ``PEAK_MARK <kB>``; the shell exits with its status.
    Builtins only (mksh, dash): nothing is forked while it runs."""
    return (f"{line} & p=$!; h=; while :; do s=; while read -r k v _u; do case $k in "
            "State:) s=$v;; VmHWM:) h=$v; break;; esac; done 2>/dev/null < /proc/$p/status; "
            f"case $s in ''|Z|X) break;; esac; done; wait $p; c=$?; echo; echo {PEAK_MARK} "
            "${h:-}; exit $c")


def probe_peak(stdout: str) -> int | None:
    """The peak ``peak_watched`` printed, in bytes (None: not read)."""
    found = _PEAK.search(stdout)
    return int(found.group(1)) * 1024 if found else None


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
        return Capability(build, devices, peak_bytes=probe_peak(stdout))
    if _UNKNOWN_FLAG in stderr and "usage:" in stdout:  # llama-bench's answer to a flag it lacks
        return Capability(build, unknown="this llama-bench has no --list-devices (an older "
                          "build)", usage=stdout)
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
