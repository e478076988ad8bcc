"""A virtual phone's own storage: /data on a loop device with its own file system and readahead.

A phone's flash is its own block device, with its own readahead (``read_ahead_kb``: 128 KB is
the kernel's default, phones set 128-2048) and its own speed. On the host's disk a phone would
inherit the host's readahead, and how much a page fault reads around it is what decides how much
of a mixture-of-experts model a token pulls from storage: with this project's machines' 8 MB
(16 MB once llama.cpp advises sequential reads) a fault on one expert reads its neighbours too,
as no phone would. So where the host allows it (root, losetup, mkfs.ext4), the phone's /data is
an ext4 file system in a sparse image beside its sandbox (``data.img``, the profile's free
storage in size), attached to a loop device with direct I/O (no second copy in the host's page
cache) and mounted at ``root/data``; the blkio throttle (harness.virtual.cgroups) then applies
to that loop device. The image persists with the phone's slot; ``release`` unmounts and detaches.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError
from harness.units import MIB

IMAGE = "data.img"
DEFAULT_READAHEAD_KB = 128  # the kernel's default for a disk; phones set 128-2048
TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")
TIMEOUT_S = 60


class DiskError(ConfigError):
    """The phone's own disk cannot be made here (one line; the phone falls back to the host's)."""


@dataclass(frozen=True)
class PhoneDisk:
    image: Path
    device: str  # /dev/loopN
    mountpoint: Path
    readahead_kb: int

    def to_json(self) -> dict[str, str | int]:
        return {"image": str(self.image), "device": self.device,
                "mountpoint": str(self.mountpoint), "readahead_kb": self.readahead_kb}

    @classmethod
    def from_json(cls, data: dict[str, object] | None) -> PhoneDisk | None:
        if not data or not data.get("device"):
            return None
        return cls(Path(str(data["image"])), str(data["device"]), Path(str(data["mountpoint"])),
                   int(str(data.get("readahead_kb", DEFAULT_READAHEAD_KB))))


def probe() -> str | None:
    """Why the phone cannot have its own disk here (None: it can)."""
    if os.geteuid() != 0:
        return "not root (loop devices and mounts need it)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not found (util-linux, e2fsprogs)"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control (no loop devices)"
    return None


def _run(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DiskError(f"{argv[0]} failed: {error}") from error
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DiskError(f"{' '.join(argv[:2])} failed: {last}")
    return done.stdout


def _loops_of(image: Path) -> list[str]:
    """Loop devices still attached to ``image`` (a phone that was not stopped cleanly)."""
    with contextlib.suppress(DiskError):
        text = _run("losetup", "-j", str(image))
        return [line.split(":", 1)[0] for line in text.splitlines() if line.startswith("/dev/")]
    return []


def _unmount(mountpoint: Path) -> None:
    if not os.path.ismount(mountpoint):
        return
    try:
        _run("umount", str(mountpoint))
    except DiskError:  # something still has it open: detach now, it goes when they close
        _run("umount", "-l", str(mountpoint))


def attach(phone_dir: Path, size_mb: int, readahead_kb: int) -> PhoneDisk:
    """The phone's /data on its own loop device (made on first use, reused after)."""
    image = phone_dir / IMAGE
    mountpoint = phone_dir / "root" / "data"
    _unmount(mountpoint)
    for stale in _loops_of(image):
        _run("losetup", "-d", stale)
    if not image.exists():
        # what the slot kept on the host's disk so far is pushed again (artifacts are
        # content-addressed), rather than hidden under the mount
        if mountpoint.is_dir():
            shutil.rmtree(mountpoint)
        with open(image, "wb") as handle:
            handle.truncate(max(size_mb, 64) * MIB)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
             "-E", "lazy_itable_init=1", str(image))
    mountpoint.mkdir(parents=True, exist_ok=True)
    try:
        device = _run("losetup", "--find", "--show", "--direct-io=on", str(image)).strip()
    except DiskError:  # a backing file system without O_DIRECT (tmpfs): buffered, then
        device = _run("losetup", "--find", "--show", str(image)).strip()
    try:
        (Path("/sys/block") / Path(device).name / "queue" / "read_ahead_kb").write_text(
            str(readahead_kb))
        _run("mount", "-t", "ext4", "-o", "noatime", device, str(mountpoint))
        (mountpoint / "local" / "tmp").mkdir(parents=True, exist_ok=True)
    except (OSError, DiskError) as error:
        with contextlib.suppress(DiskError):
            _unmount(mountpoint)
            _run("losetup", "-d", device)
        raise DiskError(f"{device}: cannot mount the phone's /data ({error})") from error
    return PhoneDisk(image, device, mountpoint, readahead_kb)


def release(disk: PhoneDisk | None) -> None:
    """Unmount the phone's /data and detach its loop device (the image stays, with the slot)."""
    if disk is None:
        return
    with contextlib.suppress(DiskError):
        _unmount(disk.mountpoint)
    for device in _loops_of(disk.image):  # never disk.device itself: its number may be reused
        with contextlib.suppress(DiskError):
            _run("losetup", "-d", device)
