"""Where a trial's time goes on the host: monotonic laps through the trial path.

``TrialRunner`` laps its phases (pre-flight, cooldown, launch, evidence, classify) and the worker
its own (output check, validity, store); the worker sends them with the trial's ``done`` event,
so the benchmark (``bench.overhead``) breaks the time between two engine launches down without
guessing. A lap is cheap: one clock read and one dict update.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# in trial order; "engine" (the engine's own run, on the phone's clock) is part of "launch",
# "output_check" comes before the trial (once per run and cell)
PHASES = ("output_check", "preflight", "cooldown", "launch", "evidence", "classify", "validity",
          "store")


class Laps:
    """Seconds per named phase since ``start``; a phase lapped twice adds up."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self._last = clock()

    def start(self) -> None:
        self.seconds = {}
        self._last = self.clock()

    def lap(self, name: str) -> float:
        """Close the phase ``name`` now; its length."""
        now = self.clock()
        spent = now - self._last
        self.seconds[name] = self.seconds.get(name, 0.0) + spent
        self._last = now
        return spent

    def rounded(self) -> dict[str, float]:
        return {name: round(value, 4) for name, value in self.seconds.items()}
