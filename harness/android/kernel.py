"""Kernel files a shell can read on a user build: memory pressure, boot id, uptime.

They stand in for what a user build hides (``dmesg`` is denied, kernel lines never reach
logcat): a kernel OOM kill leaves memory stall time in ``/proc/pressure/memory``, and a kill that
took system_server leaves a new ``boot_id`` and an uptime that started again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.android._numbers import to_float, to_int

_PRESSURE = re.compile(r"^(some|full)\s+(.*)$")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


@dataclass(frozen=True)
class MemoryPressure:
    """``/proc/pressure/memory`` (PSI). ``*_total_us`` is the stall time since boot (µs).

    ``some``: time at least one task stalled on memory; ``full``: time all non-idle tasks did.
    Kernels before 4.20 (and many 4.19 Android kernels without the backport) have no file;
    ``full_*`` is None on kernels that print only the ``some`` line.
    """

    some_avg10: float | None
    some_total_us: int | None
    full_avg10: float | None = None
    full_total_us: int | None = None


def parse_memory_pressure(text: str) -> MemoryPressure | None:
    """``some avg10=.. avg60=.. avg300=.. total=..`` and ``full ...``; None without a some line."""
    lines: dict[str, dict[str, str]] = {}
    for raw in text.splitlines():
        match = _PRESSURE.match(raw.strip())
        if match is None:
            continue
        fields = dict(part.partition("=")[::2] for part in match.group(2).split() if "=" in part)
        lines.setdefault(match.group(1), fields)
    some = lines.get("some")
    if some is None or to_int(some.get("total")) is None:
        return None
    full = lines.get("full", {})
    return MemoryPressure(
        some_avg10=to_float(some.get("avg10")), some_total_us=to_int(some.get("total")),
        full_avg10=to_float(full.get("avg10")), full_total_us=to_int(full.get("total")),
    )


def parse_boot_id(text: str) -> str | None:
    """``/proc/sys/kernel/random/boot_id``: a UUID, new at every boot; None otherwise."""
    match = _UUID.search(text.strip().lower())
    return match.group(0) if match else None


def parse_uptime(text: str) -> float | None:
    """``/proc/uptime``: seconds since boot (the first of its two numbers)."""
    words = text.split()
    value = to_float(words[0]) if words else None
    return value if value is not None and value >= 0 else None
