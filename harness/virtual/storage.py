"""How fast the host's disk reads, so a virtual phone never claims storage faster than it.

A phone profile's ``storage.read_mb_s`` becomes a blkio throttle on the disk that holds the
phone's files: a ceiling, not a guarantee. If the host's own disk is slower, the phone would be
slower than its profile says and every paging figure would be wrong without a word, so the
start refuses it. The host's speed is measured once per disk and boot: a file of
``PROBE_BYTES`` is written, synced and evicted from the page cache, then read back in 1 MiB
reads (the best of ``PROBE_RUNS``); the figure is kept under the cache root.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from harness.artifacts.llama_source import cache_root
from harness.errors import ConfigError
from harness.units import MB, MIB

PROBE_BYTES = 64 * MIB
PROBE_RUNS = 2
CHUNK = MIB


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _read_back(path: Path) -> float:
    """Seconds to read ``path`` from the disk (its pages evicted first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        start = time.perf_counter()
        while os.read(fd, CHUNK):
            pass
        return time.perf_counter() - start
    finally:
        os.close(fd)


def measure_read_mb_s(folder: Path) -> float:
    """Uncached sequential read speed of the disk holding ``folder`` (MB/s), measured now."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".storage-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as handle:
            block = os.urandom(CHUNK)
            for _ in range(PROBE_BYTES // CHUNK):
                handle.write(block)
            handle.flush()
            os.fdatasync(handle.fileno())
        best = min(_read_back(probe) for _ in range(PROBE_RUNS))
    finally:
        probe.unlink(missing_ok=True)
    return PROBE_BYTES / MB / max(best, 1e-6)


def host_read_mb_s(folder: Path, device: str) -> float:
    """The host disk's read speed for ``device`` ("major:minor"), measured once per boot."""
    record = cache_root() / "vphone" / f"storage-{device.replace(':', '_')}.json"
    boot = _boot_id()
    try:
        data = json.loads(record.read_text())
        if data.get("boot_id") == boot and float(data["read_mb_s"]) > 0:
            return float(data["read_mb_s"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    speed = measure_read_mb_s(folder)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(f".{record.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"boot_id": boot, "device": device, "read_mb_s": round(speed, 1)}))
    os.replace(tmp, record)
    return speed


def check_reachable(read_mb_s: float, host_mb_s: float, device: str, where: str) -> None:
    """A phone cannot read faster than the disk under it: one line naming the figures."""
    if read_mb_s > host_mb_s:
        raise ConfigError(
            f"{where}: storage read speed {read_mb_s:g} MB/s is more than this host's disk "
            f"({device}) reads uncached ({host_mb_s:.0f} MB/s measured); a virtual phone "
            f"cannot be faster than its host: use {int(host_mb_s)} MB/s or less "
            "(--storage-mb-s or the profile's storage.read_mb_s)")
