"""Which ok trials failed a validity gate (impossible numbers), per device and candidate.

The runner checks every ok trial's figures against physical bounds and stores ``valid`` (None:
not checked) and, when a gate failed, ``invalid_reason`` (the failed gates with their figures,
``; ``-joined). ``frames.usable`` leaves invalid trials out of every median; this module only
counts them, their reasons and their (invalid) speeds, so the report can show what was left
out and why. ``output_checks`` counts the output check's states (checked, mismatch, error,
unchecked) over the ok trials: only a mismatch makes a trial invalid, and the other states are
shown for what they are, never as checked.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.frames import records
from harness.analysis.sustained import GROUP, column, narrow
from harness.labels import config_labels


@dataclass(frozen=True)
class ValidityRow:
    """One device and candidate with invalid trials."""

    device: str  # serial
    config_id: str
    build_id: str
    engine: str
    label: str
    checked: int  # ok trials the gates checked
    invalid: int
    reasons: tuple[tuple[str, int], ...]  # each failed gate's text -> trials, most first
    tg_tps: float | None = None  # median generation speed of the invalid trials (kept, shown)
    pp_tps: float | None = None


@dataclass(frozen=True)
class OutputChecks:
    """The output check over the ok trials: how many matched the reference (checked), did not
    (mismatch: invalid), could not be judged (error) or were never checked (unchecked), and
    the commonest reasons for the last two."""

    checked: int = 0
    mismatch: int = 0
    error: int = 0
    unchecked: int = 0
    reasons: tuple[tuple[str, str, int], ...] = ()  # (state, detail, trials), most first
    stored: int = 0  # trials with a state stored (a store from before the check has none)

    @property
    def total(self) -> int:
        return self.checked + self.mismatch + self.error + self.unchecked


#: how many distinct error / unchecked reasons a report lists
SHOWN_REASONS = 5


def output_checks(trials: pd.DataFrame) -> OutputChecks:
    """Count the ok trials by output check state (a trial stored before the check: unchecked)."""
    ok = (trials["outcome"] == "ok").to_numpy() if "outcome" in trials else \
        np.zeros(len(trials), dtype=bool)
    states = column(trials, "output_check")[ok].astype(object)
    details = column(trials, "output_check_detail")[ok].astype(object)
    unchecked = ~states.isin(["match", "mismatch", "error"])
    named = (states == "error").to_numpy() | unchecked.to_numpy()
    texts = details[named]
    given = texts.map(lambda d: isinstance(d, str) and bool(d)).astype(bool)
    found = pd.DataFrame({
        "state": np.where((states[named] == "error").to_numpy(), "error", "unchecked"),
        "text": texts.where(given, "no output check stored").to_numpy(dtype=object),
    }).value_counts(sort=False)
    ranked = sorted(((str(state), str(text)), int(n)) for (state, text), n in found.items())
    reasons = tuple((state, text, n) for (state, text), n in
                    sorted(ranked, key=lambda p: (-p[1], p[0]))[:SHOWN_REASONS])
    return OutputChecks(int((states == "match").sum()), int((states == "mismatch").sum()),
                        int((states == "error").sum()), int(unchecked.sum()), reasons,
                        int(states.notna().sum()))


@dataclass(frozen=True)
class Validity:
    checked: int  # ok trials whose validity was checked (``valid`` not null)
    invalid: int
    rows: tuple[ValidityRow, ...]  # candidates with invalid trials, most invalid first
    output: OutputChecks = OutputChecks()

    @property
    def present(self) -> bool:
        return self.checked > 0 or self.output.stored > 0


def _reasons(texts: pd.Series, codes: np.ndarray, groups: int) -> list[tuple[tuple[str, int], ...]]:
    """Per group (``codes``: each text's group), each failed gate's text and its trials, most
    first (a trial without a text: "no reason recorded")."""
    found: list[Counter[str]] = [Counter() for _ in range(groups)]
    for code, text in zip(codes.tolist(), texts.tolist(), strict=True):
        parts = [p.strip() for p in text.split("; ")] if isinstance(text, str) else []
        found[code].update([p for p in parts if p] or ["no reason recorded"])
    return [tuple(sorted(c.items(), key=lambda p: (-p[1], p[0]))) for c in found]


def _medians(values: pd.Series, codes: np.ndarray, groups: int) -> list[float | None]:
    """Per group, the median of its numeric ``values`` (None: none)."""
    numbers = pd.Series(pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64))
    found = numbers.groupby(codes).median().reindex(range(groups)).to_numpy(dtype=np.float64)
    return [None if np.isnan(v) else v for v in found.tolist()]


def validity(trials: pd.DataFrame) -> Validity:
    """The ok trials the validity gates checked, and the candidates with invalid ones.

    Grouped once over the frame (a farm year has tens of thousands of candidates with an
    invalid trial; a pandas selection per candidate took minutes)."""
    state = column(trials, "valid")
    checked = (trials["outcome"] == "ok").to_numpy() & state.notna().to_numpy()
    output = output_checks(trials)
    if not checked.any():
        return Validity(0, 0, (), output)
    failed = checked & (state.astype(object) == False).to_numpy()  # noqa: E712 - nullable
    rows = _invalid_rows(narrow(trials, pd.Series(checked, index=trials.index))) \
        if failed.any() else []
    rows.sort(key=lambda r: (-r.invalid, r.device, r.label, r.build_id, r.engine))
    return Validity(int(checked.sum()), int(failed.sum()), tuple(rows), output)


def _invalid_rows(scope: pd.DataFrame) -> list[ValidityRow]:
    """The candidates of ``scope`` (checked trials) with an invalid trial, in key order."""
    scope = scope[scope[list(GROUP)].notna().all(axis=1).to_numpy()]  # as groupby: no null key
    codes, uniques = pd.MultiIndex.from_frame(scope[list(GROUP)].astype(str)).factorize(
        sort=True)
    bad = (scope["valid"].astype(object) == False).to_numpy()  # noqa: E712 - nullable
    n = len(uniques)
    checked = np.bincount(codes, minlength=n)
    invalid = np.bincount(codes[bad], minlength=n)
    worst = scope[bad]
    reasons = _reasons(column(worst, "invalid_reason"), codes[bad], n)
    tg = _medians(column(worst, "tg_tps"), codes[bad], n)
    pp = _medians(column(worst, "pp_tps"), codes[bad], n)
    wanted = np.flatnonzero(invalid)
    _, first = np.unique(codes, return_index=True)  # each group's first row
    firsts = scope.iloc[first[wanted]]
    found = records(firsts)
    rows = []
    for g, row, label in zip(wanted.tolist(), found, config_labels(firsts, found), strict=True):
        device, config_id, build_id, engine = (str(row[k]) for k in GROUP)
        rows.append(ValidityRow(device, config_id, build_id, engine, label,
                                int(checked[g]), int(invalid[g]), reasons[g], tg[g], pp[g]))
    return rows
