"""What changed, per phone: regressions, improvements, new failures and missing data.

Why a function of its own: the report leads with it, and a nightly alert may one day say the
same, so the definitions live here, once, over the trials frame the commands read
(``harness.store.read_table`` or the report's loader, strings as plain objects). Nothing is
re-measured: regressions and improvements are the cells of a ``compare_builds`` result (the very
object ``harness compare`` prints and the report's Build comparison shows), only grouped by phone.

Definitions (a *cell* here is a phone, config and engine):

- **regression / improvement**: a cell and metric whose ``compare_builds`` verdict is
  ``regression`` / ``improvement``; nothing when no comparison was made.
- **new failure**: a cell whose newest trial (by ``started_at``) ended in a failure outcome
  (``records.FAILED``: it ran, or tried to, and failed; an outcome of ``records.NOT_ATTEMPTED``
  is none) while an earlier trial of it ended ``ok``.
- **missing data**: a cell with trials on an earlier night but none on the latest night in scope
  (nights are UTC dates of ``started_at``, ``frames.nights``, as ``harness history`` has them),
  so a phone absent from the latest night has each of its cells missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from harness.analysis.ab import BuildComparison
from harness.analysis.frames import engine_column, nights
from harness.records import FAILED


@dataclass(frozen=True)
class MetricChange:
    """One cell and metric whose verdict moved (``compare_builds``'s numbers, unchanged)."""

    device: str  # serial
    config_id: str
    metric: str
    verdict: str  # "regression" or "improvement"
    ratio: float  # candidate / baseline
    ci_low: float
    ci_high: float
    median_baseline: float
    median_candidate: float


@dataclass(frozen=True)
class NewFailure:
    device: str
    config_id: str
    engine: str
    build: str  # of the failed trial
    outcome: str
    started_at: datetime
    error: str
    last_ok: datetime  # the newest ok trial before it


@dataclass(frozen=True)
class MissingData:
    device: str
    config_id: str
    engine: str
    last_night: str  # the newest night the cell has trials on
    trials: int  # how many trials it had before the latest night


@dataclass(frozen=True)
class PhoneChanges:
    device: str  # serial
    regressions: tuple[MetricChange, ...] = ()
    improvements: tuple[MetricChange, ...] = ()
    new_failures: tuple[NewFailure, ...] = ()
    missing: tuple[MissingData, ...] = ()
    cells: int = 0  # (config, engine) cells of the phone in scope

    @property
    def changed(self) -> bool:
        return bool(self.regressions or self.improvements or self.new_failures or self.missing)

    @property
    def absent(self) -> bool:
        """No trial of the phone on the latest night (every cell of it missing)."""
        return bool(self.missing) and len(self.missing) == self.cells


@dataclass(frozen=True)
class Changes:
    latest_night: str | None  # the newest night in scope
    previous_night: str | None  # the night before it (None: a single night in scope)
    compared: bool  # regressions and improvements were looked for (a comparison was given)
    phones: tuple[PhoneChanges, ...]  # every phone in scope, by serial

    @property
    def changed(self) -> tuple[PhoneChanges, ...]:
        return tuple(p for p in self.phones if p.changed)

    @property
    def nothing_changed(self) -> bool:
        return not self.changed


def metric_changes(comparison: BuildComparison | None) -> list[MetricChange]:
    """The regressed and improved cells of a comparison, worst first (its own order)."""
    if comparison is None:
        return []
    out = []
    for cell in comparison.worst_first():
        c = cell.comparison
        if c.verdict in ("regression", "improvement"):
            out.append(MetricChange(cell.key.device, cell.key.config_id, cell.metric, c.verdict,
                                    c.ratio, c.ci_low, c.ci_high, cell.median_baseline,
                                    cell.median_candidate))
    return out


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _cells(trials: pd.DataFrame) -> pd.DataFrame:
    """The columns a cell is keyed and ordered by: strings and UTC times (made once)."""
    index = trials.index
    return pd.DataFrame({
        "device": trials["device_serial"].astype(str),
        "config_id": trials["config_id"].astype(str),
        "engine": pd.Series(engine_column(trials).astype(str).to_numpy(), index=index),
        "build": trials["build_id"].astype(str),
        "outcome": trials["outcome"].astype(str),
        "started_at": pd.to_datetime(trials["started_at"], utc=True),
        "error": (trials["error"].astype(object) if "error" in trials
                  else pd.Series(None, index=index, dtype=object)),
    }, index=index)


KEY = ["device", "config_id", "engine"]


def new_failures(trials: pd.DataFrame, cells: pd.DataFrame | None = None) -> list[NewFailure]:
    """Cells whose newest trial failed after an earlier ok one, by phone and config."""
    if trials.empty:
        return []
    frame = _cells(trials) if cells is None else cells
    newest = frame.loc[frame.groupby(KEY, sort=True)["started_at"].idxmax()]
    failed = newest[newest["outcome"].isin(FAILED)]
    if failed.empty:
        return []
    ok = frame[frame["outcome"] == "ok"].groupby(KEY, sort=True)["started_at"].max()
    out = []
    for row in failed.itertuples(index=False):
        last_ok = ok.get((row.device, row.config_id, row.engine))
        if last_ok is None or pd.isna(last_ok) or last_ok >= row.started_at:
            continue
        out.append(NewFailure(row.device, row.config_id, row.engine, row.build, row.outcome,
                              pd.Timestamp(row.started_at).to_pydatetime(), _text(row.error),
                              pd.Timestamp(last_ok).to_pydatetime()))
    return out


def missing_data(trials: pd.DataFrame, night: pd.Series | None = None,
                 cells: pd.DataFrame | None = None) -> tuple[str | None, list[MissingData]]:
    """(latest night, the cells with trials before it but none on it)."""
    if trials.empty:
        return None, []
    night = nights(trials) if night is None else night
    frame = (_cells(trials) if cells is None else cells).assign(night=night.to_numpy())
    latest = str(frame["night"].max())
    seen = frame.groupby(KEY, sort=True)["night"].agg(["max", "size"])
    gone = seen[seen["max"] < latest]
    return latest, [MissingData(str(d), str(c), str(e), str(r["max"]), int(r["size"]))
                    for (d, c, e), r in gone.iterrows()]


def what_changed(trials: pd.DataFrame, comparison: BuildComparison | None) -> Changes:
    """Per phone in ``trials``: the regressions and improvements of ``comparison`` (None: none
    was made), its new failures and its missing data."""
    if trials.empty:
        return Changes(None, None, comparison is not None, ())
    night = nights(trials)
    frame = _cells(trials)
    latest, missing = missing_data(trials, night, frame)
    distinct = sorted({str(n) for n in night.dropna().unique()})
    previous = distinct[-2] if len(distinct) > 1 else None
    moved = metric_changes(comparison)
    failures = new_failures(trials, frame)
    cells = frame.groupby(KEY).size().groupby(level="device").size()
    serials = sorted(str(s) for s in cells.index)

    def mine(items: Iterable[MetricChange], verdict: str, serial: str
             ) -> tuple[MetricChange, ...]:
        return tuple(m for m in items if m.device == serial and m.verdict == verdict)

    phones = tuple(PhoneChanges(
        serial, mine(moved, "regression", serial), mine(moved, "improvement", serial),
        tuple(f for f in failures if f.device == serial),
        tuple(m for m in missing if m.device == serial), int(cells[serial]))
        for serial in serials)
    return Changes(latest, previous, comparison is not None, phones)
