"""The phone's log buffers: one tab-separated line per entry in ``state/logcat.log``.

Written by the daemon (lmkd, thermal) and by the phone's ``log`` tool; read by ``logcat``.
Each buffer is a bounded ring, as logd's are: a reader sees only the newest ``ring`` entries of
each buffer, and the daemon now and then rewrites the file without the older ones (``trim``).
Writers and the trim take a lock file, so no append is lost to a rewrite.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LOG_NAME = "logcat.log"
LOCK_NAME = "logcat.lock"
BUFFERS = ("main", "system", "crash", "events", "radio", "kernel")
DEFAULT_BUFFERS = ("main", "system", "crash")


@dataclass(frozen=True)
class LogEntry:
    epoch: float
    buffer: str
    level: str
    tag: str
    pid: int
    tid: int
    message: str


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[None]:
    fd = os.open(state / LOCK_NAME, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def append(state: Path, buffer: str, level: str, tag: str, pid: int, message: str,
           epoch: float | None = None) -> None:
    clean = message.replace("\t", " ").replace("\n", " ")
    line = (f"{epoch if epoch is not None else time.time():.3f}\t{buffer}\t{level}\t{tag}\t{pid}"
            f"\t{pid}\t{clean}\n")
    with _locked(state):
        fd = os.open(state / LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def parse_line(line: str) -> LogEntry | None:
    parts = line.rstrip("\n").split("\t", 6)
    if len(parts) != 7:
        return None
    try:
        return LogEntry(float(parts[0]), parts[1], parts[2], parts[3], int(parts[4]),
                        int(parts[5]), parts[6])
    except ValueError:
        return None


def _lines(state: Path) -> list[str]:
    try:
        with open(state / LOG_NAME) as handle:
            return handle.readlines()
    except FileNotFoundError:
        return []


def _newest(lines: list[str], ring: int | None) -> Iterator[tuple[str, LogEntry]]:
    """The lines each buffer still holds when it keeps its newest ``ring`` entries."""
    parsed = [(line, entry) for line in lines if (entry := parse_line(line)) is not None]
    if ring is None:
        yield from parsed
        return
    drop = Counter(entry.buffer for _, entry in parsed)
    for buffer in drop:
        drop[buffer] = max(0, drop[buffer] - ring)
    for line, entry in parsed:
        if drop[entry.buffer] > 0:
            drop[entry.buffer] -= 1
            continue
        yield line, entry


def read(state: Path, ring: int | None = None) -> Iterator[LogEntry]:
    for _, entry in _newest(_lines(state), ring):
        yield entry


def trim(state: Path, ring: int) -> None:
    """Rewrite the log without the entries that fell out of their buffer's ring."""
    with _locked(state):
        lines = _lines(state)
        kept = [line for line, _ in _newest(lines, ring)]
        if len(kept) == len(lines):
            return
        tmp = state / f".{LOG_NAME}.tmp"
        tmp.write_text("".join(kept))
        os.replace(tmp, state / LOG_NAME)


def size(state: Path) -> int:
    try:
        return (state / LOG_NAME).stat().st_size
    except OSError:
        return 0


def clear(state: Path) -> None:
    with _locked(state):
        (state / LOG_NAME).write_text("")
