"""Small facts the site's pages show: numbers made JSON-safe, a phone's identity, the battery
temperature trend, a comparison's flagged cells."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.analysis.ab import BuildComparison

TREND_NIGHTS = 14
TREND_SLOPE_C = 0.1
TREND_RISE_C = 1.0


def num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def rounded(value: Any, digits: int = 4) -> float | None:
    number = num(value)
    return None if number is None else round(number, digits)


@dataclass(frozen=True)
class DeviceFacts:
    serial: str
    name: str
    manufacturer: str
    soc: str
    sdk: str
    ram_bytes: int | None
    first_night: str
    last_night: str
    missing_nights: int  # store nights after its last one

    @property
    def display(self) -> str:
        return f"{self.name} ({self.serial})" if self.name and self.name != self.serial \
            else self.serial


def battery_trend(temps: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(slope °C per night, fitted rise over the window) of the last ``TREND_NIGHTS`` values."""
    window = [t for t in temps if t is not None][-TREND_NIGHTS:]
    if len(window) < 5:
        return None, None
    x = np.arange(len(window), dtype=np.float64)
    slope = float(np.polyfit(x, np.asarray(window, dtype=np.float64), 1)[0])
    return slope, slope * (len(window) - 1)


def trend_flagged(slope: float | None, rise: float | None) -> bool:
    return slope is not None and rise is not None and slope >= TREND_SLOPE_C \
        and rise >= TREND_RISE_C


def flagged_json(result: BuildComparison, title: str) -> dict[str, Any]:
    """A comparison as the pages show it: counts and the regression/improvement cells."""
    flagged = []
    for cell in result.worst_first():
        c = cell.comparison
        if c.verdict not in ("regression", "improvement"):
            continue
        flagged.append({
            "device": cell.key.device, "config_id": cell.key.config_id, "label": cell.label,
            "engine": result.candidate_engine, "metric": cell.metric, "verdict": c.verdict,
            "ratio": rounded(c.ratio), "ci_low": rounded(c.ci_low), "ci_high": rounded(c.ci_high),
            "n_baseline": int(c.n_baseline), "n_candidate": int(c.n_candidate),
            "p_adjusted": rounded(c.p_adjusted, 6),
            "median_baseline": rounded(cell.median_baseline),
            "median_candidate": rounded(cell.median_candidate)})
    return {"title": title, "baseline": result.baseline, "candidate": result.candidate,
            "engine": result.candidate_engine, "verdicts": result.verdict_counts(),
            "flagged": flagged}
