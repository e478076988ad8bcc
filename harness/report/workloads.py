"""The report's sustained-performance, energy, validity and paging sections.

Each is the answer of a ``harness.analysis`` function, labelled for people:
``sustained.sustained_table`` (and the throughput series of a few of its trials, read from the
samples), ``energy_table.energy_table``, ``validity_table.validity`` and
``paging_table.paging_table``. No median or selection
of trials is made here; this module only picks which sustained trials to plot (the newest few
of each candidate) and maps serials and config ids to the report's labels.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import pandas as pd

from harness.analysis.energy_table import energy_table
from harness.analysis.frames import engine_column, usable
from harness.analysis.offload_table import offload_table
from harness.analysis.paging_table import paging_table
from harness.analysis.sustained import (
    SustainedFigures,
    series,
    sustained_mask,
    sustained_table,
)
from harness.analysis.validity_table import validity
from harness.report.load import find_trial_ids, load_samples
from harness.report.model import (
    EnergyRow,
    EnergySection,
    InvalidRow,
    OffloadSection,
    PagingSection,
    SustainedDevice,
    SustainedLine,
    SustainedRow,
    SustainedSection,
    ValiditySection,
)
from harness.report.trends import Labels

TRIALS_PLOTTED = 3  # per candidate: its newest sustained trials
CANDIDATES_PLOTTED = 10  # per device (the plot's palette)


def _row(f: SustainedFigures, labels: Labels) -> SustainedRow:
    return SustainedRow(labels.config(f.config_id), f.build_id, f.engine, f.sustained_s,
                        f.trials, f.sustained_tg_tps, f.steady_state_ratio, f.throttled_trials,
                        f.time_to_throttle_s, f.max_thermal_status)


def _plotted(trials: pd.DataFrame, table: tuple[SustainedFigures, ...]) -> pd.DataFrame:
    """The newest usable sustained trials of each plotted candidate, with its series number."""
    rows = usable(trials[sustained_mask(trials)], include_throttled=True)
    rows = rows.assign(engine=engine_column(rows).to_numpy())
    numbers: dict[tuple[str, str, str, str], int] = {}
    per_device: dict[str, int] = defaultdict(int)
    for f in table:
        if per_device[f.device] < CANDIDATES_PLOTTED:
            numbers[(f.device, f.config_id, f.build_id, f.engine)] = per_device[f.device]
        per_device[f.device] += 1
    keys = list(zip(rows["device_serial"].astype(str), rows["config_id"].astype(str),
                    rows["build_id"].astype(str), rows["engine"].astype(str), strict=True))
    rows = rows.assign(series_no=[numbers.get(k, -1) for k in keys])
    rows = rows[rows["series_no"] >= 0].sort_values("started_at", ascending=False, kind="stable")
    return rows.groupby(["device_serial", "series_no"], sort=True).head(TRIALS_PLOTTED)


def _lines(root: Path, chosen: pd.DataFrame, labels: Labels) -> dict[str, list[SustainedLine]]:
    """Per serial: the throughput series of the chosen trials, oldest first per candidate."""
    if chosen.empty:
        return {}
    chosen = chosen.assign(trial_id=find_trial_ids(root, chosen))
    chosen = chosen[chosen["trial_id"].notna()]
    samples = load_samples(root, chosen[["run_id", "trial_id"]])
    found = {s.trial_id: s for s in series(samples, [str(t) for t in chosen["trial_id"]])}
    out: dict[str, list[SustainedLine]] = defaultdict(list)
    for row in chosen.sort_values(["series_no", "started_at"], kind="stable").itertuples():
        line = found.get(str(row.trial_id))
        if line is None:
            continue
        label = f"{labels.config(str(row.config_id))} · {row.build_id} [{row.engine}]"
        out[str(row.device_serial)].append(SustainedLine(label, int(row.series_no), line.t_s,
                                                         line.tg_tps))
    return out


def sustained_section(root: Path, trials: pd.DataFrame, labels: Labels,
                      top: int) -> SustainedSection:
    """Per device (the first ``top`` by label): the sustained table and a few series."""
    table = sustained_table(trials)
    if not table:
        return SustainedSection()
    serials = sorted({f.device for f in table}, key=labels.device)[:top]
    shown = tuple(f for f in table if f.device in serials)
    lines = _lines(root, _plotted(trials, shown), labels)
    devices = []
    for serial in serials:
        rows = sorted((_row(f, labels) for f in shown if f.device == serial),
                      key=lambda r: (r.config, r.build, r.engine))
        devices.append(SustainedDevice(labels.device(serial), tuple(rows),
                                       tuple(lines.get(serial, ()))))
    return SustainedSection(tuple(devices))


def energy_section(trials: pd.DataFrame, labels: Labels) -> EnergySection:
    """``energy_table`` per device and candidate; invalid ones keep only their reasons."""
    rows = []
    for f in energy_table(trials):
        valid = f.ok
        rows.append(EnergyRow(
            labels.device(f.device), labels.config(f.config_id), f.build_id, f.engine,
            f.measured, f.valid, f.pp_j_per_token if valid else None,
            f.tg_j_per_token if valid else None, f.idle_power_w if valid else None,
            f.source, f.units, f.reason))
    return EnergySection(tuple(sorted(rows, key=lambda r: (r.device, r.config, r.build,
                                                           r.engine))))


def validity_section(trials: pd.DataFrame, labels: Labels) -> ValiditySection:
    """``validity``: how many ok trials were checked, and the candidates with invalid ones."""
    found = validity(trials)
    rows = tuple(InvalidRow(labels.device(r.device), labels.config(r.config_id), r.build_id,
                            r.engine, r.checked, r.invalid, r.reasons, r.tg_tps, r.pp_tps)
                 for r in found.rows)
    return ValiditySection(found.checked, found.invalid, rows, output=found.output)


def offload_section(trials: pd.DataFrame, labels: Labels) -> OffloadSection:
    """``offload_table`` with the report's device and config labels."""
    rows = tuple(dataclasses.replace(r, device=labels.device(r.device),
                                     label=labels.config(r.config_id))
                 for r in offload_table(trials))
    return OffloadSection(rows)


def paging_section(trials: pd.DataFrame, labels: Labels) -> PagingSection:
    """``paging_table`` with the report's device and config labels."""
    rows = tuple(dataclasses.replace(r, device=labels.device(r.device),
                                     label=labels.config(r.config_id))
                 for r in paging_table(trials))
    return PagingSection(rows)
