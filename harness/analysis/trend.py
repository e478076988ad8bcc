"""History over the store: one median per night per device x config x engine, and its change
points.

The detector is ``changepoints.detect_change_points`` (pure, over one value per night). This module
turns trials into those nightly series and puts names on the answer: the night and the build
before and after each change point, so a morning reader can go straight to the suspect commit.
A night is the UTC date of a trial's ``started_at``; a night without a usable value is left out
of the series rather than read as zero. Builds follow one another within a series (that is what a
nightly history is); engines never share one, as they are different programs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from harness.analysis.changepoints import detect_change_points
from harness.analysis.frames import (
    engine_column,
    metric_name,
    nights,
    records,
    usable_mask,
)
from harness.cell import DEFAULT_ENGINE
from harness.labels import CONFIG_COLUMNS, config_labels
from harness.metrics import METRIC_COLUMNS

SCHEMA_VERSION = 1


class NightPoint(NamedTuple):  # a tuple: a farm's year makes 700,000 of them
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
    engine: str = DEFAULT_ENGINE

    @property
    def largest_change(self) -> float:
        """The size of the largest change point (0 without one)."""
        return max((abs(c.magnitude) for c in self.changes), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device, "config_id": self.config_id, "label": self.label,
            "metric": self.metric, "engine": self.engine,
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


_KEYS = ["device_serial", "config_id", "engine"]


def _night_builds(rows: pd.DataFrame) -> pd.Series:
    """Per series and night: the build with the most usable trials (ties: alphabetical first)."""
    counts = rows.groupby([*_KEYS, "night", "build_id"], observed=True, sort=False).size()
    table = counts.reset_index(name="n").sort_values(
        [*_KEYS, "night", "n", "build_id"], ascending=[True] * 4 + [False, True])
    first = table.drop_duplicates([*_KEYS, "night"])
    return first.set_index([*_KEYS, "night"])["build_id"].astype(str)


def _series_points(rows: pd.DataFrame, column: str) -> dict[tuple[str, str, str],
                                                             list[NightPoint]]:
    """Every series' nights (oldest first) with their median, count and main build."""
    valued = rows[rows[column].notna()]
    if valued.empty:
        return {}
    stats = valued.groupby([*_KEYS, "night"], observed=True, sort=True)[column].agg(
        ["median", "size"])
    builds = _night_builds(rows).reindex(stats.index)
    flat = stats.reset_index()  # plain columns: no MultiIndex tuple per point (a farm's year
    # is 700,000 of them)
    texts = [flat[k].astype(str).tolist() for k in (*_KEYS, "night")]
    points = list(map(NightPoint, texts[3], flat["median"].astype(float).tolist(),
                      flat["size"].astype(int).tolist(), builds.astype(str).tolist()))
    out: dict[tuple[str, str, str], list[NightPoint]] = {}
    for key, point in zip(zip(*texts[:3], strict=True), points, strict=True):
        out.setdefault(key, []).append(point)
    return out


def changes_of(points: Sequence[NightPoint], p_value: float = 0.001,
               min_magnitude: float = 0.03, min_size: int = 3) -> list[Change]:
    """The change points of one series' nights (``nightly_history``'s detection)."""
    return _changes(points, p_value, min_magnitude, min_size)


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
    engines: Sequence[str] = (),
    include_throttled: bool = False,
    p_value: float = 0.001,
    min_magnitude: float = 0.03,
    min_size: int = 3,
    find_changes: Callable[[Sequence[NightPoint]], Sequence[Change]] | None = None,
) -> list[Series]:
    """Nightly medians and change points of every device x config x engine (optionally
    filtered), sorted by device, config and engine. A ``night`` column, when ``trials`` has
    one, is each trial's night (``frames.nights`` of the whole store).

    ``find_changes`` replaces the detection with the same parameters for a series' points (the
    site passes one that remembers each series' answer by its points).

    ``builds`` keeps only those builds, ``exclude_builds`` drops some (a reference build run
    every night next to the nightly one would otherwise be mixed into the same medians);
    ``engines`` keeps only those engines.
    """
    name = metric_name(metric)
    column = METRIC_COLUMNS[name]
    # the usable trials, and only the columns read here (a farm's year is 2 million rows of
    # 160 columns: every copy of the whole frame cost seconds)
    wanted = [c for c in dict.fromkeys((*_KEYS, "night", "build_id", "device_model", column,
                                        *CONFIG_COLUMNS)) if c in trials]
    rows = trials[wanted]
    if "night" not in trials:  # each run's night from all its trials, before any filter
        rows = rows.assign(night=nights(trials).to_numpy())
    rows = _selected(rows[usable_mask(trials, include_throttled).to_numpy()], device,
                     config_id, builds, exclude_builds, engines)
    if rows.empty:
        return []
    rows = rows.assign(engine=engine_column(rows).to_numpy())
    firsts = rows.drop_duplicates(_KEYS)
    found = records(firsts)
    label_of = {tuple(str(r[k]) for k in _KEYS): label
                for r, label in zip(found, config_labels(firsts, found), strict=True)}
    out = []
    for key, points in sorted(_series_points(rows, column).items()):
        changes = list(find_changes(points)) if find_changes is not None \
            else _changes(points, p_value, min_magnitude, min_size)
        out.append(Series(key[0], key[1], label_of[key], name, tuple(points), tuple(changes),
                          key[2]))
    return out


def _selected(rows: pd.DataFrame, device: str | None, config_id: str | None,
              builds: Sequence[str], exclude_builds: Sequence[str],
              engines: Sequence[str]) -> pd.DataFrame:
    if device is not None:
        rows = rows[(rows["device_serial"] == device) | (rows["device_model"] == device)]
    if config_id is not None:
        rows = rows[rows["config_id"] == config_id]
    if builds:
        rows = rows[rows["build_id"].isin(list(builds))]
    if exclude_builds:
        rows = rows[~rows["build_id"].isin(list(exclude_builds))]
    if engines:
        rows = rows[engine_column(rows).isin(list(engines))]
    return rows


def by_largest_change(series: Sequence[Series]) -> list[Series]:
    """Series with the largest change point first, then the longest, then by device and config:
    the order in which a reader (or a report with room for a few charts) should see them."""
    return sorted(series, key=lambda s: (-s.largest_change, -len(s.points), s.device, s.label,
                                         s.engine))
