"""The nightly alert document: what changed tonight that a person should look at.

Pure: ``build_alerts`` reads what ``nightly.run_nightly`` already computed (tonight's
comparisons, the nightly history with and without tonight's run, the trials frame) and returns an
``AlertDocument``; writing it and running ``--on-alert`` happen at the edge
(``nightly.write_alerts``, ``nightly.run_on_alert``). Six lists:

* **regressions** and **improvements**: every cell of tonight's comparisons (against the baseline
  and against the previous night) with that verdict, with its evidence as the comparison gives it;
* **change points** first detected tonight: in the history with tonight's run and not in the
  history without it. A level shift is confirmed only once a few nights sit on the new level
  (``changepoints.min_size``), so its change night is usually a night or two before tonight;
* **failures**: a phone and configuration (and engine) whose latest earlier run had an ``ok``
  trial and no failure, and which tonight ended in a failure (``records.FAILED``: it ran, or
  tried to, and failed; what was never attempted, ``records.NOT_ATTEMPTED`` such as
  ``skipped_infeasible`` or ``precondition_failed``, is none);
* **missing data**: a phone that produced trials in other runs of the last ``lookback`` nights
  but nothing tonight, and, for the phones that did run, a configuration (and engine) they ran in
  that window but not tonight. A missing phone is listed once, not once per configuration;
* **noise grew** (schema 2): a phone, configuration, engine and metric whose robust CV tonight is
  notably above that of its other runs of the last ``lookback`` nights (``noise.noise_grew``:
  ratio above 1.5, an F test on the log values at 1%, tonight's CV at least 0.5%).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from typing import Any

import pandas as pd

from harness.analysis.ab import BuildComparison, CellComparison
from harness.analysis.frames import engine_column, nights
from harness.analysis.noise import NoiseGrowth, noise_grew
from harness.analysis.trend import Change, Series
from harness.labels import config_label
from harness.metrics import DEFAULT_METRICS
from harness.records import FAILED

SCHEMA_VERSION = 2  # 2: the list noise_grew (and its count)
DEFAULT_LOOKBACK_NIGHTS = 7
_KEY = ["device_serial", "config_id", "engine"]
_ERROR_CHARS = 200


@dataclass(frozen=True)
class Flagged:
    """One cell of a comparison whose verdict is regression or improvement."""

    comparison: str  # the comparison's title, e.g. "nightly-2 vs baseline release"
    device: str
    config_id: str
    label: str
    metric: str
    baseline: str  # side "build [engine]"
    candidate: str
    verdict: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    n_baseline: int
    n_candidate: int
    p_value: float | None
    p_adjusted: float | None
    median_baseline: float | None
    median_candidate: float | None
    reason: str


@dataclass(frozen=True)
class NewChange:
    """A change point first seen tonight, with the series it belongs to."""

    device: str
    config_id: str
    label: str
    engine: str
    metric: str
    change: Change

    def as_dict(self) -> dict[str, Any]:
        level = asdict(self.change)
        level.pop("index")  # a position in tonight's series, meaningless outside it
        return {"device": self.device, "config_id": self.config_id, "label": self.label,
                "engine": self.engine, "metric": self.metric, **level}


@dataclass(frozen=True)
class NewFailure:
    device: str
    config_id: str
    label: str
    engine: str
    builds: tuple[str, ...]  # tonight's builds with a failed trial of this cell
    outcomes: dict[str, int]  # failure outcome -> trials tonight
    trials: int  # every trial of this cell tonight
    error: str | None  # the first failed trial's error, shortened
    last_ok_run: str
    last_ok_night: str


@dataclass(frozen=True)
class MissingDevice:
    device: str
    device_model: str
    cells: int  # (config, engine) pairs it ran in the window
    last_run: str
    last_night: str


@dataclass(frozen=True)
class MissingCell:
    device: str
    config_id: str
    label: str
    engine: str
    last_run: str
    last_night: str


@dataclass(frozen=True)
class AlertDocument:
    run_id: str
    night: str
    regressions: tuple[Flagged, ...] = ()
    improvements: tuple[Flagged, ...] = ()
    change_points: tuple[NewChange, ...] = ()
    failures: tuple[NewFailure, ...] = ()
    missing_devices: tuple[MissingDevice, ...] = ()
    missing_cells: tuple[MissingCell, ...] = ()
    lookback_nights: int = DEFAULT_LOOKBACK_NIGHTS
    noise_grew: tuple[NoiseGrowth, ...] = ()

    def counts(self) -> dict[str, int]:
        return {"regressions": len(self.regressions), "improvements": len(self.improvements),
                "change_points": len(self.change_points), "failures": len(self.failures),
                "missing_devices": len(self.missing_devices),
                "missing_cells": len(self.missing_cells), "noise_grew": len(self.noise_grew)}

    @property
    def listed(self) -> int:
        """How many items the document lists (0: nothing to alert about)."""
        return sum(self.counts().values())

    def to_json(self) -> dict[str, Any]:
        lists = ("regressions", "improvements", "change_points", "failures", "missing_devices",
                 "missing_cells", "noise_grew")
        return {
            "schema_version": SCHEMA_VERSION, "run_id": self.run_id, "night": self.night,
            "listed": self.listed, "counts": self.counts(),
            "lookback_nights": self.lookback_nights,
            **{name: [_plain(item.as_dict() if isinstance(item, NewChange) else asdict(item))
                      for item in getattr(self, name)] for name in lists},
        }

    def to_markdown(self) -> str:
        lines = [f"# Nightly alerts {md(self.night)} (run {md(self.run_id)})", ""]
        sections = self._sections()
        if not self.listed:
            lines += ["Nothing to report tonight.", ""]
        else:
            summary = ", ".join(f"{len(rows)} {title.lower()}" for title, _, rows in sections
                                if rows)
            lines += [f"{self.listed} listed: {summary}.", ""]
        for title, header, rows in sections:
            if rows:
                lines += [f"## {title} ({len(rows)})", "", *table(header, rows), ""]
        return "\n".join(lines).rstrip("\n") + "\n"

    def _sections(self) -> list[tuple[str, Sequence[str], list[list[str]]]]:
        flagged_header = ("comparison", "device", "config", "metric", "ratio", "95% CI",
                          "n base/cand", "p_adj", "verdict")
        return [
            ("Regressions", flagged_header, [_flagged_row(f) for f in self.regressions]),
            ("Improvements", flagged_header, [_flagged_row(f) for f in self.improvements]),
            ("New change points", ("device", "config", "engine", "metric", "change",
                                   "nights", "builds", "p"),
             [_change_row(c) for c in self.change_points]),
            ("New failures", ("device", "config", "engine", "builds", "outcomes", "trials",
                              "last ok", "error"),
             [_failure_row(f) for f in self.failures]),
            ("Missing phones", ("device", "model", "cells", "last run", "last night"),
             [[m.device, m.device_model, str(m.cells), m.last_run, m.last_night]
              for m in self.missing_devices]),
            ("Missing cells", ("device", "config", "engine", "last run", "last night"),
             [[m.device, m.label, m.engine, m.last_run, m.last_night]
              for m in self.missing_cells]),
            ("Noise grew", ("device", "config", "engine", "metric", "CV tonight", "CV before",
                            "F p", "trials tonight", "nights before"),
             [_noise_row(g) for g in self.noise_grew]),
        ]


# --- Markdown ------------------------------------------------------------------------------

_MD_SPECIAL = set("\\`*_[]<>|#~!")


def md(text: object) -> str:
    """``text`` as literal Markdown on one line: punctuation Markdown reads is backslash-escaped
    (pipes, backticks, emphasis, links, HTML), newlines and tabs become spaces."""
    flat = " ".join(str(text).splitlines()).replace("\t", " ")
    return "".join(f"\\{ch}" if ch in _MD_SPECIAL else ch for ch in flat)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table; every cell is escaped with ``md``."""
    out = ["| " + " | ".join(md(h) for h in header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(md(c) for c in row) + " |" for row in rows]
    return out


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _flagged_row(f: Flagged) -> list[str]:
    return [f.comparison, f.device, f.label, f.metric,
            "-" if f.ratio is None else f"{f.ratio:.3f} ({_pct(f.ratio)})",
            f"[{_pct(f.ci_low)}, {_pct(f.ci_high)}]", f"{f.n_baseline}/{f.n_candidate}",
            _g(f.p_adjusted), f.verdict]


def _change_row(new: NewChange) -> list[str]:
    c = new.change
    return [new.device, new.label, new.engine, new.metric, f"{c.magnitude * 100:+.1f}%",
            f"{c.night_before} -> {c.night_after}", f"{c.build_before} -> {c.build_after}",
            _g(_finite(c.p_value))]


def _noise_row(g: NoiseGrowth) -> list[str]:
    return [g.device, g.label, g.engine, g.metric, f"{g.cv_tonight * 100:.1f}%",
            f"{g.cv_history * 100:.1f}%", _g(g.p_value), str(g.n_tonight),
            str(g.history_nights)]


def _failure_row(f: NewFailure) -> list[str]:
    outcomes = ", ".join(f"{k} {v}" for k, v in f.outcomes.items())
    return [f.device, f.label, f.engine, ", ".join(f.builds), outcomes, str(f.trials),
            f"{f.last_ok_run} ({f.last_ok_night})", f.error or "-"]


# --- building ------------------------------------------------------------------------------

def _finite(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready values: tuples as lists, non-finite floats as null."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out


def _flag(title: str, result: BuildComparison, cell: CellComparison) -> Flagged:
    c = cell.comparison
    return Flagged(
        comparison=title, device=cell.key.device, config_id=cell.key.config_id,
        label=cell.label, metric=cell.metric, baseline=str(result.baseline_side),
        candidate=str(result.candidate_side), verdict=c.verdict, ratio=_finite(c.ratio),
        ci_low=_finite(c.ci_low), ci_high=_finite(c.ci_high), n_baseline=c.n_baseline,
        n_candidate=c.n_candidate, p_value=_finite(c.p_value), p_adjusted=_finite(c.p_adjusted),
        median_baseline=_finite(cell.median_baseline),
        median_candidate=_finite(cell.median_candidate), reason=c.reason)


def flagged_cells(comparisons: Sequence[tuple[str, BuildComparison]],
                  verdict: str) -> tuple[Flagged, ...]:
    """Every cell of the (title, comparison) pairs with ``verdict``, worst first per comparison."""
    return tuple(_flag(title, result, cell) for title, result in comparisons
                 for cell in result.worst_first() if cell.comparison.verdict == verdict)


def _change_key(series: Series, change: Change) -> tuple[str, ...]:
    return (series.device, series.config_id, series.engine, series.metric, change.night_after)


def new_change_points(history: Sequence[Series],
                      previous: Sequence[Series]) -> tuple[NewChange, ...]:
    """Change points of ``history`` that ``previous`` (the history without tonight) lacks."""
    known = {_change_key(s, c) for s in previous for c in s.changes}
    return tuple(
        NewChange(s.device, s.config_id, s.label, s.engine, s.metric, c)
        for s in history for c in s.changes if _change_key(s, c) not in known)


def _keyed(trials: pd.DataFrame) -> pd.DataFrame:
    return trials.assign(engine=engine_column(trials).astype(str).to_numpy(),
                         night=nights(trials).to_numpy())


def _key_of(group_key: Any) -> tuple[str, str, str]:
    device, config, engine = group_key
    return str(device), str(config), str(engine)


def _short(error: Any) -> str | None:
    if error is None or (isinstance(error, float) and math.isnan(error)):
        return None
    text = " ".join(str(error).split())
    return text if len(text) <= _ERROR_CHARS else text[:_ERROR_CHARS - 3] + "..."


def _failure(key: tuple[str, str, str], now: pd.DataFrame,
             before: pd.DataFrame) -> NewFailure | None:
    """The failure of one cell tonight, when its latest earlier run was ok and failure-free."""
    failed = now[now["outcome"].isin(FAILED)]
    if failed.empty or before.empty:
        return None
    last_run = before.loc[before["started_at"].idxmax(), "run_id"]
    last = before[before["run_id"] == last_run]
    if not (last["outcome"] == "ok").any() or last["outcome"].isin(FAILED).any():
        return None
    counts = failed["outcome"].astype(str).value_counts()
    outcomes = {o: int(counts[o]) for o in FAILED if o in counts}
    first = failed.sort_values("started_at").iloc[0]
    return NewFailure(
        device=key[0], config_id=key[1], label=config_label(first.to_dict()), engine=key[2],
        builds=tuple(sorted(str(b) for b in failed["build_id"].unique())), outcomes=outcomes,
        trials=len(now), error=_short(first.get("error")), last_ok_run=str(last_run),
        last_ok_night=str(last["night"].max()))


def new_failures(trials: pd.DataFrame, run_id: str) -> tuple[NewFailure, ...]:
    """Cells (phone, config, engine) that failed tonight after an ok, failure-free last run."""
    rows = _keyed(trials)
    tonight = rows[rows["run_id"] == run_id]
    earlier = rows[rows["run_id"] != run_id]
    before = {_key_of(k): g for k, g in earlier.groupby(_KEY, sort=False, observed=True)}
    out = []
    for key, now in tonight.groupby(_KEY, sort=True, observed=True):
        found = _failure(_key_of(key), now, before.get(_key_of(key), earlier.iloc[:0]))
        if found is not None:
            out.append(found)
    return tuple(out)


def _window(rows: pd.DataFrame, run_id: str, night: str, lookback: int) -> pd.DataFrame:
    """Other runs' trials of the ``lookback`` nights up to tonight."""
    first = (date.fromisoformat(night) - timedelta(days=lookback)).isoformat()
    return rows[(rows["run_id"] != run_id) & (rows["night"] >= first) & (rows["night"] <= night)]


def _latest(rows: pd.DataFrame) -> pd.Series:
    return rows.loc[rows["started_at"].idxmax()]


def missing_data(trials: pd.DataFrame, run_id: str, night: str,
                 lookback: int = DEFAULT_LOOKBACK_NIGHTS,
                 ) -> tuple[tuple[MissingDevice, ...], tuple[MissingCell, ...]]:
    """Phones, and (phone, config, engine) cells of phones that did run, seen in the window but
    absent from tonight's run."""
    rows = _keyed(trials)
    seen = _window(rows, run_id, night, lookback)
    tonight = rows[rows["run_id"] == run_id]
    present = set(tonight["device_serial"].astype(str))
    devices = []
    for serial, group in seen.groupby("device_serial", sort=True, observed=True):
        if str(serial) not in present:
            last = _latest(group)
            devices.append(MissingDevice(
                str(serial), str(last.get("device_model", "")),
                len(group[_KEY].drop_duplicates()), str(last["run_id"]), str(last["night"])))
    ran = {_key_of(k) for k in tonight.groupby(_KEY, observed=True).groups}
    cells = []
    for key, group in seen.groupby(_KEY, sort=True, observed=True):
        device, config, engine = _key_of(key)
        if device in present and (device, config, engine) not in ran:
            last = _latest(group)
            cells.append(MissingCell(device, config, config_label(last.to_dict()), engine,
                                     str(last["run_id"]), str(last["night"])))
    return tuple(devices), tuple(cells)


def build_alerts(
    *,
    run_id: str,
    night: str,
    trials: pd.DataFrame,
    comparisons: Sequence[tuple[str, BuildComparison]],
    history: Sequence[Series],
    previous_history: Sequence[Series],
    lookback_nights: int = DEFAULT_LOOKBACK_NIGHTS,
    metrics: Sequence[str] = DEFAULT_METRICS,
) -> AlertDocument:
    """Tonight's alert document; see the module docstring for what each list holds.

    ``trials`` is the whole store (tonight's run is ``run_id``), ``comparisons`` tonight's
    (title, comparison) pairs, ``history`` the nightly history with tonight and
    ``previous_history`` the same history computed without tonight's run; ``metrics`` are the
    ones whose noise is checked.
    """
    devices, cells = missing_data(trials, run_id, night, lookback_nights)
    return AlertDocument(
        run_id=run_id, night=night,
        regressions=flagged_cells(comparisons, "regression"),
        improvements=flagged_cells(comparisons, "improvement"),
        change_points=new_change_points(history, previous_history),
        failures=new_failures(trials, run_id),
        missing_devices=devices, missing_cells=cells,
        lookback_nights=lookback_nights,
        noise_grew=noise_grew(trials, run_id, metrics, nights_back=lookback_nights))
