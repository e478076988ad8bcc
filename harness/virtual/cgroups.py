"""A virtual phone's memory and storage, enforced by the host kernel (cgroup v1).

A phone's kernel keeps hot file pages resident and reclaims clean ones when memory runs short: a
model mapped with mmap that is bigger than the phone's RAM keeps running, its weights read again
from storage as they are needed. Counting every resident page against a limit, as the simulated
memory model does, kills such an engine instead. So where the host allows it, each virtual phone
gets a memory cgroup (its processes' anonymous memory and page cache, with the limit of what the
phone leaves to the shell's processes) and a blkio cgroup (its storage's read speed, throttled on
the block device that holds its files): the host kernel then reclaims the phone's page cache
and reads the pages back at the phone's storage speed, for real.

Out of memory inside the phone, the kernel's OOM killer acts within the cgroup, by
``oom_score_adj`` as on a phone: the cached apps' memory is real there (harness.virtual.balloons,
adj 700-999), so they go first; a shell-started engine (adj -950) goes when none is left, and
``adb shell`` reports its SIGKILL as 137. (A userspace handler with the cgroup's OOM killer off
was tried first: an allocation inside a system call, such as read() into a buffer, then fails
with EFAULT instead of waiting, and the engine saw an I/O error where a phone kills it.)

The cgroups are made by ``harness sim start`` below the starting process's own cgroup (so a
harness run inside a container or a CI job's cgroup nests under it), named after the phone, and
removed when the phone stops. Readers of the controllers' files are pure functions.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError

CONTROLLERS = ("memory", "blkio")
PREFIX = "harness-"  # every phone cgroup's name starts with it
MEMSW_LIMIT = "memory.memsw.limit_in_bytes"  # memory + swap (with the kernel's swap accounting)
REMOVE_WAIT_S = 5.0  # killed processes leave their cgroup within this


class CgroupError(ConfigError):
    """A phone's cgroup cannot be made or used here (one line, names the file and what to do)."""


@dataclass(frozen=True)
class PhoneCgroups:
    """Where one phone's cgroups are; ``blkio`` None: its storage is not throttled."""

    memory: Path
    blkio: Path | None = None
    device: str | None = None  # "major:minor" of the block device the throttle applies to

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The cgroup.procs files a process of the phone writes its pid to (execshim.c)."""
        dirs = [self.memory] + ([self.blkio] if self.blkio is not None else [])
        return tuple(str(d / "cgroup.procs") for d in dirs)

    def to_json(self) -> dict[str, str | None]:
        return {"memory": str(self.memory), "blkio": str(self.blkio) if self.blkio else None,
                "device": self.device}

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None) -> PhoneCgroups | None:
        if not data or not data.get("memory"):
            return None
        blkio = data.get("blkio")
        device = data.get("device")
        return cls(Path(str(data["memory"])), Path(str(blkio)) if blkio else None,
                   str(device) if device else None)


# ----- pure readers --------------------------------------------------------------------------


def parse_mounts(text: str) -> dict[str, Path]:
    """cgroup v1 controller -> mount point, from /proc/self/mounts."""
    found: dict[str, Path] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] != "cgroup":
            continue
        for option in fields[3].split(","):
            if option in CONTROLLERS:
                found.setdefault(option, Path(fields[1]))
    return found


def parse_own_cgroups(text: str) -> dict[str, str]:
    """controller -> this process's path in that v1 hierarchy, from /proc/self/cgroup."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            if controller in CONTROLLERS:
                found[controller] = parts[2]
    return found


def parse_stat(text: str) -> dict[str, int]:
    """``memory.stat``: key -> value (bytes or counts)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            found[key] = int(value)
    return found


def parse_oom_control(text: str) -> dict[str, int]:
    return parse_stat(text)


def anon_bytes(stat: Mapping[str, int]) -> int:
    """What the phone cannot reclaim without swap: anonymous and shared memory, hierarchical."""
    return stat.get("total_rss", stat.get("rss", 0)) + stat.get("total_shmem",
                                                                stat.get("shmem", 0))


def cache_bytes(stat: Mapping[str, int]) -> int:
    return stat.get("total_cache", stat.get("cache", 0))


def refaults(stat: Mapping[str, int]) -> int:
    """File pages read back soon after they were reclaimed: the kernel's thrashing count."""
    return stat.get("total_workingset_refault_file",
                    stat.get("workingset_refault_file", stat.get("total_workingset_refault", 0)))


# ----- the host's controllers ----------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def controller_dirs() -> dict[str, Path]:
    """controller -> the directory of this process's own cgroup in it (where phones nest)."""
    mounts = parse_mounts(_read(Path("/proc/self/mounts")))
    own = parse_own_cgroups(_read(Path("/proc/self/cgroup")))
    return {c: mounts[c] / own[c].lstrip("/") for c in CONTROLLERS if c in mounts and c in own}


def block_device(path: Path) -> str | None:
    """"major:minor" of the whole disk holding ``path``, or None when it is on no block device
    (tmpfs, overlay, a network file system): blkio throttling applies to whole disks only."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    node = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not node.exists():
        return None
    if (node / "partition").exists():  # a partition: its parent directory is the disk
        parent = _read(node.resolve().parent / "dev").strip()
        return parent or None
    return f"{os.major(dev)}:{os.minor(dev)}"


def _write(path: Path, text: str, what: str) -> None:
    try:
        path.write_text(text)
    except OSError as error:
        raise CgroupError(f"{path}: cannot set {what} ({error.strerror}); the phone's memory or "
                          "storage model needs a writable cgroup v1 controller "
                          "(or start it with --memory-model simulated)") from error


def _make_dir(parent: Path, name: str) -> Path:
    target = parent / name
    if target.is_dir():
        remove_dir(target)  # a stale one from a phone that was not stopped cleanly
    try:
        target.mkdir()
    except OSError as error:
        raise CgroupError(f"{target}: cannot make the phone's cgroup ({error.strerror}); "
                          "run as root with cgroup v1 memory and blkio mounted, or start the "
                          "phone with --memory-model simulated") from error
    return target


def make(name: str, limit_bytes: int, read_bps: int | None, storage: Path,
         swap_bytes: int = 0, read_iops: int | None = None) -> PhoneCgroups:
    """Make the phone's cgroups: a memory limit (with ``swap_bytes`` of swap on top: the phone's
    zram), and read throttles on the disk holding ``storage``: bytes a second when
    ``read_bps``, reads a second when ``read_iops`` (the kernel holds a read to both).

    Raises CgroupError naming what failed; nothing half made is left behind.
    """
    dirs = controller_dirs()
    if "memory" not in dirs:
        raise CgroupError("no cgroup v1 memory controller is mounted here (/proc/self/mounts); "
                          "start the phone with --memory-model simulated")
    throttled = bool(read_bps or read_iops)
    device = block_device(storage) if throttled else None
    if throttled and device is None:
        raise CgroupError(f"{storage}: the phone's files are on no block device (tmpfs or "
                          "overlay?), so its storage speed cannot be throttled; put the sim "
                          "home on a disk (HARNESS_HOME) or drop storage.read_mb_s and "
                          "storage.read_iops")
    if throttled and "blkio" not in dirs:
        raise CgroupError("no cgroup v1 blkio controller is mounted here, so the phone's "
                          "storage speed cannot be throttled; drop storage.read_mb_s and "
                          "storage.read_iops")
    made: list[Path] = []
    try:
        memory = _make_dir(dirs["memory"], PREFIX + name)
        made.append(memory)
        _write(memory / "memory.limit_in_bytes", str(limit_bytes), "the memory limit")
        # no swap beyond the phone's own: a host with swap on must not let the phone's
        # processes swap where the phone would kill them (memory + swap = memory and its zram);
        # with no swap accounting (memsw), swappiness 0 keeps its anonymous memory in RAM, and a
        # phone with zram cannot be bounded
        if (memory / MEMSW_LIMIT).exists():
            _write(memory / MEMSW_LIMIT, str(limit_bytes + swap_bytes),
                   "the memory + swap limit")
            # Android swaps eagerly (vm.swappiness 100 since Android 11; 60 is Linux's default)
            _write(memory / "memory.swappiness", "100" if swap_bytes else "0",
                   "the cgroup's swappiness")
        elif swap_bytes:
            raise CgroupError("this kernel has no swap accounting (memory.memsw), so the "
                              "phone's zram cannot be bounded; boot with swapaccount=1 or set "
                              "zram_mb: 0")
        else:
            _write(memory / "memory.swappiness", "0", "the cgroup's swappiness")
        blkio = None
        if throttled and device is not None:
            blkio = _make_dir(dirs["blkio"], PREFIX + name)
            made.append(blkio)
            _throttle(blkio, device, read_bps, read_iops)
        return PhoneCgroups(memory, blkio, device)
    except BaseException:
        for path in reversed(made):
            remove_dir(path)
        raise


def _throttle(blkio: Path, device: str, read_bps: int | None, read_iops: int | None) -> None:
    if read_bps:
        _write(blkio / "blkio.throttle.read_bps_device", f"{device} {read_bps}",
               f"the read throttle on {device}")
    if read_iops:
        _write(blkio / "blkio.throttle.read_iops_device", f"{device} {read_iops}",
               f"the reads-a-second throttle on {device}")


def parse_serviced(text: str, device: str) -> int | None:
    """The ``Read`` count of ``device`` in a ``blkio.throttle.io_serviced`` or
    ``io_service_bytes`` file (lines ``MAJ:MIN Read N``); None when it has none."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == device and fields[1] == "Read" \
                and fields[2].isdigit():
            return int(fields[2])
    return None


def reads(groups: PhoneCgroups) -> tuple[int, int] | None:
    """(reads, bytes read) the phone's processes issued to its throttled disk so far; None when
    its storage is not throttled or the kernel keeps no count."""
    if groups.blkio is None or groups.device is None:
        return None
    count = parse_serviced(_read(groups.blkio / "blkio.throttle.io_serviced"), groups.device)
    size = parse_serviced(_read(groups.blkio / "blkio.throttle.io_service_bytes"),
                          groups.device)
    return (count, size) if count is not None and size is not None else None


def probe(storage: Path) -> str | None:
    """Why cgroups cannot model a phone here (None: they can), without making any."""
    dirs = controller_dirs()
    if "memory" not in dirs:
        return "no cgroup v1 memory controller is mounted"
    if not os.access(dirs["memory"], os.W_OK):
        return f"{dirs['memory']} is not writable (run as root)"
    return None


def procs(directory: Path) -> list[int]:
    return [int(p) for p in _read(directory / "cgroup.procs").split() if p.isdigit()]


def remove_dir(directory: Path, wait_s: float = REMOVE_WAIT_S) -> bool:
    """Remove one phone cgroup: its processes are SIGKILLed (they are the phone's), then the
    directory goes once they have left. False if it could not be removed in time."""
    if not directory.name.startswith(PREFIX) or not directory.is_dir():
        return not directory.exists()
    deadline = time.monotonic() + wait_s
    while True:
        for pid in procs(directory):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            directory.rmdir()
            return True
        except OSError as error:
            if error.errno == errno.ENOENT:
                return True
            if time.monotonic() > deadline:
                return False
        time.sleep(0.02)


def remove(groups: PhoneCgroups | None) -> None:
    if groups is None:
        return
    for directory in (groups.memory, groups.blkio):
        if directory is not None:
            remove_dir(directory)


def read_stat(memory: Path) -> dict[str, int]:
    return parse_stat(_read(memory / "memory.stat"))


def oom_kills(memory: Path) -> int:
    """How many processes the kernel's OOM killer has taken in the cgroup."""
    return parse_oom_control(_read(memory / "memory.oom_control")).get("oom_kill", 0)
