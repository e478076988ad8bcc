"""History over the store: one median per night per device x config, and its change points.

The detector is ``history.detect_change_points`` (pure, over one value per night). This module
turns trials into those nightly series and puts names on the answer: the night and the build
before and after each change point, so a morning reader can go straight to the suspect commit.
A night is the UTC date of a trial's ``started_at``; a night without a usable value is left out
of the series rather than read as zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.frames import METRIC_COLUMNS, config_label, metric_name, nights, usable
from harness.analysis.history import detect_change_points

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class NightPoint:
    night: str
    median: float
    n: int
    build: str  # the build with most trials that night (ties: alphabetical first)


@dataclass(frozen=True)
class Change:
    """One level shift: night ``index`` of the series is the first night of the new level."""

    index: int
    night_before: str
    night_after: str
    build_before: str
    build_after: str
    before_mean: float
    after_mean: float
    magnitude: float
    p_value: float

    def describe(self, metric: str) -> str:
        return (f"{metric} {self.magnitude * 100:+.1f}% from {self.night_after} "
                f"({self.build_before} -> {self.build_after}), p={self.p_value:.2g}")


@dataclass(frozen=True)
class Series:
    device: str
    config_id: str
    label: str
    metric: str
    points: tuple[NightPoint, ...]
    changes: tuple[Change, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device, "config_id": self.config_id, "label": self.label,
            "metric": self.metric,
            "nights": [{"night": p.night, "median": p.median, "n": p.n, "build": p.build}
                       for p in self.points],
            "change_points": [
                {"index": c.index, "night_before": c.night_before, "night_after": c.night_after,
                 "build_before": c.build_before, "build_after": c.build_after,
                 "before_mean": c.before_mean, "after_mean": c.after_mean,
                 "magnitude": c.magnitude,
                 "p_value": c.p_value if math.isfinite(c.p_value) else None}
                for c in self.changes
            ],
        }


def _points(rows: pd.DataFrame, column: str) -> list[NightPoint]:
    points = []
    for night, day in rows.groupby("night", sort=True):
        values = day[column].dropna().to_numpy(dtype=np.float64)
        if values.size == 0:
            continue
        counts = day["build_id"].value_counts()
        build = sorted(counts[counts == counts.max()].index)[0]
        points.append(NightPoint(str(night), float(np.median(values)), int(values.size),
                                 str(build)))
    return points


def _changes(points: Sequence[NightPoint], p_value: float, min_magnitude: float,
             min_size: int) -> list[Change]:
    series = np.array([p.median for p in points])
    found = detect_change_points(series, p_value=p_value, min_magnitude=min_magnitude,
                                 min_size=min_size)
    return [
        Change(index=c.index, night_before=points[c.index - 1].night,
               night_after=points[c.index].night, build_before=points[c.index - 1].build,
               build_after=points[c.index].build, before_mean=c.before_mean,
               after_mean=c.after_mean, magnitude=c.magnitude, p_value=c.p_value)
        for c in found
    ]


def nightly_history(
    trials: pd.DataFrame,
    metric: str = "tg_tps",
    *,
    device: str | None = None,
    config_id: str | None = None,
    builds: Sequence[str] = (),
    exclude_builds: Sequence[str] = (),
    include_throttled: bool = False,
    p_value: float = 0.001,
    min_magnitude: float = 0.03,
    min_size: int = 3,
) -> list[Series]:
    """Nightly medians and change points of every device x config (optionally filtered).

    ``builds`` keeps only those builds, ``exclude_builds`` drops some (a reference build run
    every night next to the nightly one would otherwise be mixed into the same medians).
    """
    name = metric_name(metric)
    column = METRIC_COLUMNS[name]
    rows = usable(trials, include_throttled)
    if device is not None:
        rows = rows[(rows["device_serial"] == device) | (rows["device_model"] == device)]
    if config_id is not None:
        rows = rows[rows["config_id"] == config_id]
    if builds:
        rows = rows[rows["build_id"].isin(list(builds))]
    if exclude_builds:
        rows = rows[~rows["build_id"].isin(list(exclude_builds))]
    rows = rows.assign(night=nights(rows))
    out = []
    for (serial, config), cell in rows.groupby(["device_serial", "config_id"], sort=True):
        points = _points(cell, column)
        if not points:
            continue
        changes = _changes(points, p_value, min_magnitude, min_size)
        out.append(Series(str(serial), str(config), config_label(cell.iloc[0].to_dict()), name,
                          tuple(points), tuple(changes)))
    return out
