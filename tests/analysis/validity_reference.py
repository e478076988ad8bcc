"""The validity table as it was before it was grouped in bulk: a pandas selection per
candidate, kept only so ``test_validity_bulk`` can hold the two side by side."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from harness.analysis.sustained import GROUP, column, narrow
from harness.analysis.validity_table import SHOWN_REASONS, OutputChecks, Validity, ValidityRow
from harness.labels import config_label


def _median(frame: pd.DataFrame, name: str) -> float | None:
    values = pd.to_numeric(column(frame, name), errors="coerce").dropna()
    return float(values.median()) if len(values) else None


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
