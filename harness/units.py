"""Byte sizes and the few ways the harness prints sizes and ratios.

One place for the binary units (sizes are always powers of 1024 here) and for the formats of
sizes and relative changes in messages, tables and reports, so the same number reads the same
everywhere.
"""

from __future__ import annotations

import math

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
#: a decimal megabyte: storage speeds (MB/s) are quoted in these, as phone makers quote them
MB = 1_000_000

MISSING = "–"  # what a size or ratio that is unknown prints as in reports


def mib(n: float, places: int = 0, *, grouped: bool = True) -> str:
    """A byte size in MiB: `mib(3 << 20)` is "3 MiB", `mib(n, 1, grouped=False)` "1536.0 MiB"."""
    sep = "," if grouped else ""
    return f"{n / MIB:{sep}.{places}f} MiB"


def size(n: float) -> str:
    """A byte size that reads at any scale: KiB below 1 MiB, MiB with one decimal below 10 MiB,
    whole MiB above (``size(3.5 * MIB)`` is "3.5 MiB", ``size(1536 * MIB)`` "1,536 MiB")."""
    if abs(n) < MIB:
        return f"{n / KIB:,.0f} KiB"
    return mib(n, 1) if abs(n) < 10 * MIB else mib(n)


def gib(n: float | None, *, missing: str = MISSING) -> str:
    """A byte size in GiB, or in MiB below 1 GiB (small test models would all read 0.01 GiB)."""
    if n is None:
        return missing
    return f"{n / GIB:.2f} GiB" if n >= GIB else mib(n, 1, grouped=False)


def pct(ratio: float | None, *, missing: str = MISSING) -> str:
    """A ratio as a signed change in percent: 1.05 is "+5.0%"; unknown or not finite `missing`."""
    if ratio is None or not math.isfinite(ratio):
        return missing
    return f"{(ratio - 1) * 100:+.1f}%"
