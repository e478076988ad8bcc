"""Lenient number readers shared by the parsers.

Device text is full of surprises (thousands separators, ``NaN``, ``\\r`` line ends, vendor noise);
every parser turns a value it cannot read into ``None`` instead of raising, so one odd line never
costs a whole sample.
"""

from __future__ import annotations

import math
import re

_GROUPED_INT = re.compile(r"-?[\d,]+")


def to_int(text: str | None) -> int | None:
    """An integer, or None when the text is not one (``"12"``, ``" -3 "``; not ``"1.5"``)."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def to_float(text: str | None) -> float | None:
    """A finite float, or None (``NaN``, ``inf`` and garbage all read as None)."""
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def grouped_kb(text: str) -> int | None:
    """``"5,862,088K"`` or ``"-208,199K"`` as an int: AMS groups thousands with commas."""
    match = _GROUPED_INT.search(text)
    if match is None:
        return None
    digits = match.group(0).replace(",", "")
    return to_int(digits) if digits not in ("", "-") else None


def kb_value(text: str) -> int | None:
    """The number of a ``"  5940 kB"`` field (procfs style)."""
    parts = text.split()
    return to_int(parts[0]) if parts else None
