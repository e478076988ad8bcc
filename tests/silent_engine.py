"""An engine adapter that parses nothing: for trial-path tests whose device is scripted."""

from __future__ import annotations

from collections.abc import Sequence

from harness.cell import Cell
from harness.engines.base import Measurement


class SilentEngine:
    name = "silent"

    def supports(self, cell: Cell) -> str | None:
        return None

    def argv(self, cell: Cell, binary_path: str, model_path: str,
             cpu_mask: str | None = None) -> list[str]:
        return [binary_path, model_path]

    def parse(self, stdout: str) -> Sequence[object]:
        return []

    def measure(self, records: Sequence[object]) -> list[Measurement]:
        return []
