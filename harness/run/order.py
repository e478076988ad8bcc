"""The order of trials on one device.

Trials are grouped by configuration (the cell without its build). Within a group the builds
alternate on every repetition (A B A B ...), so slow drift of the phone (heat, battery, background
work) lands on both builds alike and cancels out of their comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.cell import Cell


@dataclass(frozen=True)
class TrialSpec:
    """One repetition of one cell on one device, with its identity in the store."""

    run_id: str
    serial: str
    cell: Cell
    rep: int

    @property
    def job_id(self) -> str:
        """The (device, configuration) group this trial belongs to: the unit of scheduling."""
        return f"{self.serial}/{self.cell.config_id}"

    @property
    def trial_id(self) -> str:
        return f"{self.run_id}/{self.serial}/{self.cell.cell_id}/{self.rep}"


def interleave(cells: Sequence[Cell], run_id: str, serial: str) -> list[TrialSpec]:
    """All trials of ``cells`` on one device, builds alternating within each configuration."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.config_id, []).append(cell)
    trials: list[TrialSpec] = []
    for group in groups.values():
        reps = max(c.repetitions for c in group)
        for rep in range(reps):
            trials.extend(
                TrialSpec(run_id, serial, cell, rep) for cell in group if rep < cell.repetitions
            )
    return trials
