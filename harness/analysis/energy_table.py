"""Energy per token per device and candidate: a figure only where an honest one exists.

The runner stores per trial joules per prompt and per generated token with the idle draw
subtracted (``pp_j_per_token``, ``tg_j_per_token``), or ``energy_valid`` False and the reason
there is no figure (charging, too few power readings in the window, ...). A candidate's figure
is the median over its counted trials (``sustained.counted``: the trials its speeds are medians
of) whose energy is valid; a candidate with none has no number, only the reasons, each with how
many trials it struck. A trial whose energy was never measured (``energy_valid`` null) is not
counted either way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pandas as pd

from harness.analysis.sustained import GROUP, column, counted_mask, median, narrow
from harness.labels import config_label


def _texts(values: pd.Series) -> str:
    """The distinct non-empty texts, in order of first appearance, ``; ``-joined."""
    return "; ".join(dict.fromkeys(str(v) for v in values.dropna() if str(v)))


@dataclass(frozen=True)
class EnergyFigures:
    """One device and candidate's energy. The numbers are None unless ``valid`` > 0."""

    device: str  # serial
    config_id: str
    build_id: str
    engine: str
    label: str
    measured: int  # counted trials whose energy was measured (energy_valid not null)
    valid: int
    pp_j_per_token: float | None
    tg_j_per_token: float | None
    idle_power_w: float | None
    tg_power_w: float | None  # mean decode power above idle
    source: str  # energy_source of the valid trials (of all measured when none is valid)
    units: str
    invalid_reasons: tuple[tuple[str, int], ...]  # reason -> trials, most frequent first

    @property
    def ok(self) -> bool:
        """A figure per generated token exists."""
        return self.valid > 0 and self.tg_j_per_token is not None

    @property
    def reason(self) -> str:
        """Why the invalid trials have no figure: each reason with its count of trials."""
        return "; ".join(f"{text} ({n} of {self.measured} trials)"
                         for text, n in self.invalid_reasons)


def energy_of(key: tuple[str, str, str, str], rows: pd.DataFrame,
              label: str | None = None) -> EnergyFigures | None:
    """The energy of one candidate's ``counted`` rows; None when none was measured."""
    state = column(rows, "energy_valid").notna().to_numpy()
    if not state.any():  # energy not measured: nothing to select
        return None
    measured = rows[state]
    good = measured[measured["energy_valid"].astype(bool).to_numpy()]
    bad = measured[~measured["energy_valid"].astype(bool).to_numpy()]
    reasons = Counter(str(r) if isinstance(r, str) and r else "no reason recorded"
                      for r in column(bad, "energy_invalid_reason"))
    shown = good if not good.empty else measured
    return EnergyFigures(
        device=key[0], config_id=key[1], build_id=key[2], engine=key[3],
        label=label or config_label(rows.iloc[0].to_dict()), measured=len(measured),
        valid=len(good),
        pp_j_per_token=median(column(good, "pp_j_per_token")) if len(good) else None,
        tg_j_per_token=median(column(good, "tg_j_per_token")) if len(good) else None,
        idle_power_w=median(column(good, "idle_power_w")) if len(good) else None,
        tg_power_w=median(column(good, "tg_power_w")) if len(good) else None,
        source=_texts(column(shown, "energy_source")),
        units=_texts(column(shown, "energy_units")),
        invalid_reasons=tuple(sorted(reasons.items(), key=lambda p: (-p[1], p[0]))))


def energy_table(trials: pd.DataFrame) -> tuple[EnergyFigures, ...]:
    """Per device and (config, build, engine) whose energy was measured, sorted by key."""
    measured = column(trials, "energy_valid").notna()
    if not measured.any():
        return ()
    rows = narrow(trials, measured & counted_mask(trials))
    out = []
    for key, group in rows.groupby(list(GROUP), sort=True, observed=True):
        found = energy_of((str(key[0]), str(key[1]), str(key[2]), str(key[3])), group,
                          config_label(group.iloc[0].to_dict()))
        if found is not None:
            out.append(found)
    return tuple(out)
