"""Reading Android text samples: the shared reference set and our own fixtures."""

from __future__ import annotations

import re
from pathlib import Path

OWN = Path(__file__).resolve().parent.parent / "data" / "android"


def drop_source_header(text: str) -> str:
    """Shared samples start with ONE ``# SOURCE:`` line that is not device output."""
    first, _, rest = text.partition("\n")
    assert first.startswith("# SOURCE:"), "shared sample without its # SOURCE: header"
    return rest


def split_parts(text: str) -> list[str]:
    """Multi-part samples separate parts with ``=== name ===`` lines (stated in their header)."""
    return [part for part in re.split(r"^=== .* ===$", text, flags=re.MULTILINE) if part.strip()]
