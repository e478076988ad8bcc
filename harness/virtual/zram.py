"""A virtual phone's zram: a compressed swap device in RAM, of the profile's ``zram_mb``.

Android swaps anonymous memory to zram rather than kill at once; a swapped-in page comes back
through the block layer, so the engine's ``/proc/PID/io`` read_bytes and major faults count it
as they count weights read from the model file (seen on this project's 6.18 host: 98,330 pages
swapped in by a process that read no file gave read_bytes 402,771,968 = 98,330 x 4096 and
98,330 major faults). That is why the sampler also reads ``pswpin`` (``harness.run.ondevice``)
and paging is decided on file reads alone (``harness.run.paging_measure``).

A phone whose profile asks for zram gets its own zram device (``/sys/class/zram-control``'s
``hot_add``, its ``disksize``, ``mkswap``, ``swapon`` at the highest priority, so the phone's
pages go there first), removed when the phone stops. Its memory cgroup allows that much swap on
top of its RAM (``harness.virtual.cgroups``). Making one needs root and the zram module.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError

CONTROL = Path("/sys/class/zram-control")
SYS_BLOCK = Path("/sys/block")
SWAP_FLAG_PREFER = 0x8000  # swapon(2): the priority in the low bits is set
SWAP_PRIORITY = 32767  # the highest: the phone's pages go to its own zram first
TIMEOUT_S = 60


class ZramError(ConfigError):
    """The phone's zram cannot be made here (one line)."""


@dataclass(frozen=True)
class ZramSwap:
    device: str  # /dev/zramN
    size_bytes: int

    @property
    def index(self) -> str:
        return self.device.removeprefix("/dev/zram")

    def to_json(self) -> dict[str, str | int]:
        return {"device": self.device, "size_bytes": self.size_bytes}

    @classmethod
    def from_json(cls, data: dict[str, object] | None) -> ZramSwap | None:
        if not data or not data.get("device"):
            return None
        return cls(str(data["device"]), int(str(data.get("size_bytes", 0))))


def probe() -> str | None:
    """Why a phone cannot have zram here (None: it can)."""
    if os.geteuid() != 0:
        return "not root (a zram device and swapon need it)"
    if not (CONTROL / "hot_add").exists():
        return f"no {CONTROL}/hot_add (load the zram module: modprobe zram)"
    if shutil.which("mkswap") is None:
        return "no mkswap (util-linux)"
    return None


def _libc_call(name: str, *args: object) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def make(size_bytes: int, what: str) -> ZramSwap:
    """A zram device of ``size_bytes``, made swap and switched on; ``what`` names the phone in
    errors. Raises ZramError; nothing half made is left."""
    why = probe()
    if why is not None:
        raise ZramError(f"{what}: the profile's zram_mb needs a zram swap device: {why}; or set "
                        "zram_mb: 0")
    try:
        index = (CONTROL / "hot_add").read_text().strip()
    except OSError as error:
        raise ZramError(f"{what}: cannot add a zram device ({error.strerror})") from error
    swap = ZramSwap(f"/dev/zram{index}", size_bytes)
    try:
        (SYS_BLOCK / f"zram{index}" / "disksize").write_text(str(size_bytes))
        done = subprocess.run(["mkswap", swap.device], capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise ZramError(f"{what}: mkswap {swap.device} failed: "
                            f"{(done.stderr or done.stdout).strip()}")
        _libc_call("swapon", swap.device.encode(), SWAP_FLAG_PREFER | SWAP_PRIORITY)
    except (OSError, subprocess.TimeoutExpired) as error:
        remove(swap)
        raise ZramError(f"{what}: cannot make {swap.device} swap: {error}") from error
    except BaseException:
        remove(swap)
        raise
    return swap


def in_use(swap: ZramSwap) -> bool:
    """Whether the device is on in /proc/swaps."""
    with contextlib.suppress(OSError):
        return any(line.split()[:1] == [swap.device]
                   for line in Path("/proc/swaps").read_text().splitlines()[1:])
    return False


def remove(swap: ZramSwap | None) -> None:
    """Switch the device's swap off (its pages come back to their owners first: the phone's
    processes are gone by then) and remove the device."""
    if swap is None:
        return
    if in_use(swap):
        with contextlib.suppress(OSError):
            _libc_call("swapoff", swap.device.encode())
    with contextlib.suppress(OSError):
        (CONTROL / "hot_remove").write_text(swap.index)
