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

import pandas as pd

from harness.analysis.sustained import GROUP, column, narrow
from harness.labels import config_label


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


def _median(frame: pd.DataFrame, name: str) -> float | None:
    values = pd.to_numeric(column(frame, name), errors="coerce").dropna()
    return float(values.median()) if len(values) else None


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
    ok = trials[trials["outcome"] == "ok"] if "outcome" in trials else trials.iloc[0:0]
    states = column(ok, "output_check").astype(object)
    details = column(ok, "output_check_detail").astype(object)
    unchecked = ~states.isin(["match", "mismatch", "error"])
    found: Counter[tuple[str, str]] = Counter()
    for state, detail in zip(states, details, strict=True):
        if state == "error" or state not in ("match", "mismatch"):
            name = "error" if state == "error" else "unchecked"
            text = detail if isinstance(detail, str) and detail else "no output check stored"
            found[(name, text)] += 1
    reasons = tuple((state, text, n) for (state, text), n in
                    sorted(found.items(), key=lambda p: (-p[1], p[0]))[:SHOWN_REASONS])
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


def _reasons(texts: pd.Series) -> tuple[tuple[str, int], ...]:
    found: Counter[str] = Counter()
    for text in texts:
        parts = [p.strip() for p in text.split("; ")] if isinstance(text, str) else []
        found.update([p for p in parts if p] or ["no reason recorded"])
    return tuple(sorted(found.items(), key=lambda p: (-p[1], p[0])))


def validity(trials: pd.DataFrame) -> Validity:
    """The ok trials the validity gates checked, and the candidates with invalid ones."""
    state = column(trials, "valid")
    checked = (trials["outcome"] == "ok").to_numpy() & state.notna().to_numpy()
    output = output_checks(trials)
    if not checked.any():
        return Validity(0, 0, (), output)
    failed = checked & (state.astype(object) == False).to_numpy()  # noqa: E712 - nullable
    rows = []
    if failed.any():
        scope = narrow(trials, pd.Series(checked, index=trials.index))
        keys = pd.MultiIndex.from_frame(scope[list(GROUP)].astype(str))
        wanted = keys[(scope["valid"].astype(object) == False).to_numpy()].unique()  # noqa: E712
        for key, group in scope[keys.isin(wanted)].groupby(list(GROUP), sort=True,
                                                            observed=True):
            bad = group[(group["valid"].astype(object) == False).to_numpy()]  # noqa: E712
            rows.append(ValidityRow(str(key[0]), str(key[1]), str(key[2]), str(key[3]),
                                    config_label(group.iloc[0].to_dict()), len(group),
                                    len(bad), _reasons(column(bad, "invalid_reason")),
                                    _median(bad, "tg_tps"), _median(bad, "pp_tps")))
    rows.sort(key=lambda r: (-r.invalid, r.device, r.label, r.build_id, r.engine))
    return Validity(int(checked.sum()), int(failed.sum()), tuple(rows), output)
