"""An external power monitor as the energy source: its timestamped samples joined to trials.

A monitor (a Monsoon, a USB power meter, a shunt and a DAQ) measures the phone's supply with no
gauge in the way and no charging to contaminate it. Its own tool writes a CSV; this adapter
reads one with a header row and

- a time column: ``timestamp`` (ISO 8601; no zone means UTC) or ``time``/``unix_s``/``epoch_s``
  (seconds since the epoch), on a clock synchronised with the harness host's;
- power: ``power_w`` or ``power_mw``, or current and voltage (``current_a``/``current_ma`` with
  ``voltage_v``/``voltage_mv``), drawn by the phone (positive).

Each trial that stored its launch time and windows (``launched_at``, ``pp_start_ms`` ..
``tg_end_ms``) and lies inside the monitor's time range gets one ``EnergyRecord``: the idle draw
is the median over the ``idle_s`` before the launch, each window's energy its mean draw above
idle times its length, divided by its tokens. The same honesty rules as the gauge's apply: a
window with too few samples has no figure, and says so.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from harness import store
from harness.errors import ConfigError
from harness.records import EnergyRecord
from harness.run import energy

TIME_COLUMNS = ("timestamp", "time", "unix_s", "epoch_s")
POWER_COLUMNS = {"power_w": 1.0, "power_mw": 1e-3}
CURRENT_COLUMNS = {"current_a": 1.0, "current_ma": 1e-3}
VOLTAGE_COLUMNS = {"voltage_v": 1.0, "voltage_mv": 1e-3}
IDLE_GUARD_S = 0.05  # the idle window ends this long before the launch


@dataclass(frozen=True)
class MonitorSamples:
    name: str
    times: tuple[float, ...]  # epoch seconds, sorted
    watts: tuple[float, ...]
    units: str  # which columns were read


def _time(value: str, column: str) -> float:
    if column == "timestamp":
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    return float(value)


def _pick(header: Sequence[str], names: Sequence[str]) -> str | None:
    return next((n for n in names if n in header), None)


def parse_monitor_csv(text: str, name: str, where: str = "monitor CSV") -> MonitorSamples:
    """The samples of a monitor's CSV; ``ConfigError`` naming the file and what is missing."""
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    time_col = _pick(header, TIME_COLUMNS)
    if time_col is None:
        raise ConfigError(f"{where}: no time column (one of {', '.join(TIME_COLUMNS)})")
    power_col = _pick(header, list(POWER_COLUMNS))
    current_col = _pick(header, list(CURRENT_COLUMNS))
    voltage_col = _pick(header, list(VOLTAGE_COLUMNS))
    if power_col is None and (current_col is None or voltage_col is None):
        raise ConfigError(f"{where}: no power column ({', '.join(POWER_COLUMNS)}, or a current "
                          f"({', '.join(CURRENT_COLUMNS)}) and a voltage "
                          f"({', '.join(VOLTAGE_COLUMNS)}) column)")
    rows: list[tuple[float, float]] = []
    for number, row in enumerate(reader, start=2):
        try:
            t = _time(row[time_col], time_col)
            if power_col is not None:
                w = float(row[power_col]) * POWER_COLUMNS[power_col]
            else:
                assert current_col is not None and voltage_col is not None
                w = (float(row[current_col]) * CURRENT_COLUMNS[current_col]
                     * float(row[voltage_col]) * VOLTAGE_COLUMNS[voltage_col])
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(f"{where}: line {number}: not a sample ({error})") from error
        if math.isfinite(t) and math.isfinite(w):
            rows.append((t, w))
    if not rows:
        raise ConfigError(f"{where}: no samples")
    rows.sort()
    units = power_col or f"{current_col} x {voltage_col}"
    return MonitorSamples(name, tuple(t for t, _ in rows), tuple(w for _, w in rows), units)


def _between(samples: MonitorSamples, start: float, end: float) -> list[tuple[float, float]]:
    return [(t, w) for t, w in zip(samples.times, samples.watts, strict=True) if start <= t <= end]


def _epoch(value: object) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NaT:
        return None
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize(UTC)
    return float(stamp.timestamp())


def _ms(row: pd.Series, name: str) -> float | None:
    value = row.get(name)
    return None if value is None or pd.isna(value) else float(value) / 1000


def join(trials: pd.DataFrame, samples: MonitorSamples, idle_s: float = 2.0,
         serial: str | None = None, now: datetime | None = None) -> list[EnergyRecord]:
    """One record per trial inside the monitor's time range (of ``serial``, when given)."""
    now = now or datetime.now(UTC)
    source = f"monitor:{samples.name}"
    first, last = samples.times[0], samples.times[-1]
    out: list[EnergyRecord] = []
    for _, row in trials.iterrows():
        if serial is not None and row.get("device_serial") != serial:
            continue
        launched = _epoch(row.get("launched_at"))
        if launched is None or row.get("outcome") != "ok":
            continue
        windows = []
        for key, name, tokens in (("pp", "prefill", row.get("n_prompt")),
                                  ("tg", "decode", row.get("n_gen"))):
            start, end = _ms(row, f"{key}_start_ms"), _ms(row, f"{key}_end_ms")
            if start is not None and end is not None and tokens:
                reps = row.get("sustained_reps")
                count = int(tokens) * (int(reps) if reps and not pd.isna(reps) else 1)
                windows.append(energy.Window(name, launched + start, launched + end, count))
        if not windows:
            continue
        end_all = max(w.end_s for w in windows)
        if launched - idle_s < first or end_all > last:
            continue  # the monitor did not see the whole trial
        idle = [w for _, w in _between(samples, launched - idle_s, launched - IDLE_GUARD_S)]
        if len(idle) < 2:
            result = energy.Energy(source, False, f"{len(idle)} monitor sample(s) in the "
                                                  f"{idle_s:g} s before the launch (need 2)")
        else:
            result = energy.figures(source, samples.units, statistics.median(idle),
                                    _between(samples, launched, end_all), windows)
        out.append(EnergyRecord(
            run_id=str(row["run_id"]), trial_id=str(row["trial_id"]), joined_at=now,
            energy_source=result.source, energy_valid=result.valid,
            energy_invalid_reason=result.reason, energy_units=result.units,
            idle_power_w=result.idle_w, pp_power_w=result.pp_power_w,
            tg_power_w=result.tg_power_w, pp_j_per_token=result.pp_j_per_token,
            tg_j_per_token=result.tg_j_per_token, energy_samples=result.readings))
    return out


ENERGY_COLUMNS = ("energy_source", "energy_valid", "energy_invalid_reason", "energy_units",
                  "idle_power_w", "pp_power_w", "tg_power_w", "pp_j_per_token", "tg_j_per_token",
                  "energy_samples")


def with_monitor_energy(trials: pd.DataFrame, joined: pd.DataFrame) -> pd.DataFrame:
    """Trials whose energy columns are replaced by the latest monitor record of each trial."""
    if joined.empty or trials.empty:
        return trials
    latest = joined.sort_values("joined_at").drop_duplicates("trial_id", keep="last")
    latest = latest.set_index("trial_id")
    hit = trials["trial_id"].isin(latest.index)
    if not hit.any():
        return trials
    out = trials.copy()
    for column in ENERGY_COLUMNS:
        if column not in out:
            out[column] = None
        values = out.loc[hit, "trial_id"].map(latest[column])
        out[column] = out[column].astype(object)
        out.loc[hit, column] = values.astype(object).to_numpy()
    return out


def with_stored_energy(root: Path, trials: pd.DataFrame) -> pd.DataFrame:
    """``trials`` with the store's monitor records applied (the store's ``energy`` table)."""
    if not (root / "energy").is_dir() or "trial_id" not in trials:
        return trials
    return with_monitor_energy(trials, store.read_table(root, "energy"))
