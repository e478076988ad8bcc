"""The GPU memory layer's report, read: ``<current> <peak> <allocations>\n`` per process.

Standard library only: the phone's tools (``dumpsys``) and its tick read the reports, and the
layer's build machinery (``harness.virtual.gpulayer``) stays out of their start-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GpuMemory:
    """One process's Vulkan device memory as the layer last reported it."""

    current_bytes: int  # allocated and not yet freed
    peak_bytes: int  # the most ever allocated at once
    allocations: int  # live VkDeviceMemory objects


def parse_report(text: str) -> GpuMemory | None:
    """A report's ``<current> <peak> <allocations>`` line, or None when it is anything else."""
    if not text.endswith("\n") or text.count("\n") != 1:
        return None
    fields = text[:-1].split(" ")
    if len(fields) != 3 or not all(field.isascii() and field.isdigit() for field in fields):
        return None
    current, peak, allocations = (int(field) for field in fields)
    if current > peak:
        return None
    return GpuMemory(current, peak, allocations)


def read_reports(report_dir: Path) -> dict[int, GpuMemory]:
    """pid -> the last report of each process in report_dir; temporaries and junk are skipped."""
    reports: dict[int, GpuMemory] = {}
    try:
        entries = list(os.scandir(report_dir))
    except (FileNotFoundError, NotADirectoryError):
        return reports
    for entry in entries:
        if not (entry.name.isascii() and entry.name.isdigit()):
            continue  # <pid>.tmp while the layer writes, and anything not the layer's
        try:
            with open(entry.path, encoding="ascii") as handle:
                text = handle.read(256)
        except (OSError, UnicodeDecodeError):
            continue
        memory = parse_report(text)
        if memory is not None:
            reports[int(entry.name)] = memory
    return reports
