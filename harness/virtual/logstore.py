"""The phone's log buffers: one tab-separated line per entry in ``state/logcat.log``.

Written by the daemon (lmkd, thermal) and by the phone's ``log`` tool; read by ``logcat``.
Appends of one short line are atomic enough with O_APPEND for these few writers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LOG_NAME = "logcat.log"
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


def append(state: Path, buffer: str, level: str, tag: str, pid: int, message: str,
           epoch: float | None = None) -> None:
    clean = message.replace("\t", " ").replace("\n", " ")
    line = (f"{epoch if epoch is not None else time.time():.3f}\t{buffer}\t{level}\t{tag}\t{pid}"
            f"\t{pid}\t{clean}\n")
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


def read(state: Path) -> Iterator[LogEntry]:
    try:
        with open(state / LOG_NAME) as handle:
            for line in handle:
                entry = parse_line(line)
                if entry is not None:
                    yield entry
    except FileNotFoundError:
        return


def clear(state: Path) -> None:
    (state / LOG_NAME).write_text("")
