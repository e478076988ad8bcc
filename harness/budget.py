"""How much memory a phone has for the engine: one answer for plan, run and recommend.

The figure is the memory an app may use before the low-memory killer acts. In order:

1. what the user says (``--memory``): they know best;
2. a reading from the phone itself: ``MemAvailable`` of an attached phone (``harness plan
   --device SERIAL`` and every ``harness run``), or the one each trial stored when it started
   (``start_mem_available_bytes``, for ``harness recommend`` on a store);
3. the device profile's ``available_mb`` (devices/NAME.yaml);
4. ``AVAILABLE_FRACTION`` of total RAM: the share the shipped profiles leave to apps at idle
   (budget 47%, mid-range 60%, flagship 69%), taken at the middle.

The budget a cell must fit is that figure minus a reserve kept for the rest of the phone (and
the predictor's error): ``DEFAULT_RESERVE_BYTES`` unless ``--reserve`` says otherwise, the same
for plan, run, recommend and the report. ``fit`` is the one test of a peak against it, for a
predicted peak (plan, run) and a measured one (recommend) alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.units import GIB, MIB, size

AVAILABLE_FRACTION = 0.6
DEFAULT_RESERVE_BYTES = 512 * MIB


@dataclass(frozen=True)
class Fit:
    """A peak against a budget: whether it fits, by how much it does not, and why."""

    fits: bool
    over_bytes: int  # peak - budget when it does not fit, else 0
    reason: str


def fit(peak: int, available: int, reserve: int, what: str = "predicted") -> Fit:
    """``peak`` against ``available - reserve``; ``what`` names the peak in the reason."""
    budget = available - reserve
    if peak > budget:
        return Fit(False, peak - budget, f"{what} {size(peak)} > budget {size(budget)} "
                                         f"({size(available)} available - {size(reserve)} reserve)")
    return Fit(True, 0, f"{what} {size(peak)} <= budget {size(budget)}")


@dataclass(frozen=True)
class Available:
    bytes: int | None  # None: nothing to go by
    source: str  # one line saying where the figure came from

    def budget(self, reserve: int) -> int | None:
        return None if self.bytes is None else self.bytes - reserve


def available_memory(*, given: int | None = None, live: int | None = None,
                     live_from: str = "the phone", profile_mb: int | None = None,
                     profile: str | None = None, ram_bytes: int | None = None) -> Available:
    """The first figure there is, in the order of the module's docstring."""
    if given is not None:
        return Available(given, "available memory from --memory")
    if live:
        return Available(live, f"available memory read from {live_from} (MemAvailable)")
    if profile_mb is not None:
        return Available(profile_mb * MIB, f"available memory from profile {profile}")
    if ram_bytes:
        return Available(int(ram_bytes * AVAILABLE_FRACTION),
                         f"available memory estimated as {AVAILABLE_FRACTION:.0%} of total RAM "
                         f"{ram_bytes / GIB:.1f} GiB (pass --memory to set it)")
    return Available(None, "available memory unknown (pass --memory to set it)")
