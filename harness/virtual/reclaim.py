"""Page reclaim for the simulated memory model: clean file pages go before anything is killed.

A kernel short of memory first reclaims clean file pages (an mmap'd model's weights among them:
they can be read back from storage) and kills only when what is left cannot go. The cgroup model
gets that from the host kernel. The simulated model counts the RSS of the phone's processes, so
it must reclaim itself: when the phone is over its limit, the file-backed pages its processes map
from the phone's own files are paged out with ``process_madvise(MADV_PAGEOUT)`` (Linux 5.10),
largest process first, a step at a time from the start of its mappings, until the phone is back
under its limit with a margin; the engine then faults them in again from storage, as on a phone
whose model does not fit (its major faults and read bytes show it, and the trial is labelled
paging). Anonymous memory is paged out only on a phone with zram (``harness.virtual.zram``),
after the file pages and up to what its zram holds; without it an engine that reads its weights
into memory is killed, as on a phone.

``process_madvise`` on another process needs CAP_SYS_NICE (root has it); without it the
simulated model cannot reclaim, and says so in the phone's memory note (``provision``).
Parsing /proc/PID/maps is pure; the system call is the edge.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass

from harness.virtual.procs import read_text

SYS_PROCESS_MADVISE = 440  # in the generic table: x86_64 and aarch64 alike
MACHINES = ("x86_64", "aarch64")
MADV_PAGEOUT = 21
CAP_SYS_NICE = 23
_IOV_MAX = 1024  # the kernel's UIO_MAXIOV: ranges per call


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    path: str


def file_mappings(maps_text: str, root: str) -> list[Mapping]:
    """The mappings of /proc/PID/maps that map a file under ``root`` (the phone's own files)
    without write access: clean file pages, which a kernel may drop and read back."""
    found = []
    prefix = root.rstrip("/") + "/"
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith(prefix) or "w" in parts[1]:
            continue
        if parts[5].endswith(" (deleted)"):
            continue
        low, _, high = parts[0].partition("-")
        try:
            found.append(Mapping(int(low, 16), int(high, 16), parts[5]))
        except ValueError:
            continue
    return found


def anon_mappings(maps_text: str) -> list[Mapping]:
    """The private writable mappings of /proc/PID/maps backed by no file (the heap, anonymous
    mmaps): what a kernel with swap may page out to it."""
    found = []
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5 or parts[1][:2] != "rw" or parts[1][3:4] != "p":
            continue
        name = parts[5] if len(parts) == 6 else ""
        if name and not (name == "[heap]" or name.startswith("[anon:")):
            continue
        low, _, high = parts[0].partition("-")
        try:
            found.append(Mapping(int(low, 16), int(high, 16), name))
        except ValueError:
            continue
    return found


def status_kb(status_text: str, key: str) -> int | None:
    """A ``key:`` line of /proc/PID/status (RssFile, RssAnon, VmSwap), in kB."""
    for line in status_text.splitlines():
        if line.startswith(key + ":"):
            words = line.split()
            return int(words[1]) if len(words) > 1 and words[1].isdigit() else None
    return None


def rss_file_kb(status_text: str) -> int | None:
    """``RssFile`` of /proc/PID/status, in kB."""
    return status_kb(status_text, "RssFile")


def capable() -> str | None:
    """None when this process may page out another's memory, else why not (one line)."""
    if os.uname().machine not in MACHINES:
        return f"no process_madvise number known for {os.uname().machine}"
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    if int(line.split()[1], 16) >> CAP_SYS_NICE & 1:
                        return None
                    break
    except (OSError, ValueError):
        return "cannot read this process's capabilities"
    return "process_madvise on the phone's processes needs CAP_SYS_NICE (run as root)"


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def page_out(pid: int, mappings: Iterable[Mapping]) -> int:
    """Ask the kernel to reclaim ``mappings`` of ``pid`` now; the bytes it took up (0 when the
    process is gone). Raises OSError for anything else (no permission, no such call)."""
    ranges = [m for m in mappings if m.end > m.start]
    if not ranges:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return 0
    done = 0
    try:
        for at in range(0, len(ranges), _IOV_MAX):
            chunk = ranges[at:at + _IOV_MAX]
            vector = (_Iovec * len(chunk))(*[_Iovec(m.start, m.end - m.start) for m in chunk])
            result = libc.syscall(SYS_PROCESS_MADVISE, fd, vector, len(chunk), MADV_PAGEOUT, 0)
            if result < 0:
                code = ctypes.get_errno()
                if code in (errno.ESRCH, errno.ENOMEM):  # gone, or unmapped meanwhile
                    return done
                raise OSError(code, f"process_madvise(MADV_PAGEOUT) of pid {pid}: "
                                    f"{os.strerror(code)}")
            done += result
    finally:
        os.close(fd)
    return done


def chunks(mappings: Iterable[Mapping], size: int) -> list[list[Mapping]]:
    """The mappings cut, in address order, into groups of about ``size`` bytes each: what one
    step of reclaim pages out (a kernel frees what it needs, not a whole file)."""
    groups: list[list[Mapping]] = []
    current: list[Mapping] = []
    room = size
    for m in sorted(mappings, key=lambda m: m.start):
        start = m.start
        while start < m.end:
            take = min(m.end - start, room)
            current.append(Mapping(start, start + take, m.path))
            start += take
            room -= take
            if room <= 0:
                groups.append(current)
                current, room = [], size
    if current:
        groups.append(current)
    return groups


def reclaim(pids: Iterable[int], root: str | None, need_kb: int, step_kb: int) -> int:
    """Page out clean file pages the processes ``pids`` map from files under ``root`` until
    ``need_kb`` are gone: the largest file RSS first, in steps of ``step_kb`` of address space
    from the start of its mappings (the weights a forward pass read first, the least recently
    used when it ends). The kB reclaimed (RssFile before less after: what really left).

    ``root`` None: their anonymous memory instead, to swap (the phone's zram), the largest
    RssAnon first; what left is RssAnon before less after."""
    key = "RssFile" if root is not None else "RssAnon"
    sized = sorted(((status_kb(read_text(f"/proc/{pid}/status"), key) or 0, pid)
                    for pid in pids), reverse=True)
    freed = 0
    for before, pid in sized:
        if freed >= need_kb or before == 0:
            break
        last = before
        maps = read_text(f"/proc/{pid}/maps")
        found = file_mappings(maps, root) if root is not None else anon_mappings(maps)
        for group in chunks(found, step_kb * 1024):
            page_out(pid, group)
            now = status_kb(read_text(f"/proc/{pid}/status"), key)
            if now is None:  # gone
                break
            freed += max(0, last - now)
            last = now
            if freed >= need_kb:
                break
    return freed
