"""Whether two sides of an engine comparison measured the same work, and what differs if not.

Cells pair by ``config_id``, so both sides ran the same model name and quant label, prompt and
generation lengths, threads and compute device. What a config cannot hold is the rest of the
work: two engines rarely run the same file (a GGUF against MNN's or ExecuTorch's conversion of
the same weights, or of other weights), may define TTFT differently (LiteRT-LM's clock includes
the first decode step), and may report their own means over several runs instead of one run
per trial. ``differences`` names each of these in one sentence, so a reader weighs a verdict
between engines knowing what it compares.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from harness.analysis.frames import Side, usable

_COLUMNS = ("model_sha256", "model_file", "model_converted_from", "ttft_definition",
            "engine_aggregate_n")


def _side(frame: pd.DataFrame, side: Side, configs: Iterable[str]) -> pd.DataFrame:
    rows = frame[(frame["build_id"] == side.build) & (frame["engine"] == side.engine)
                 & frame["config_id"].isin(list(configs))]
    return usable(rows)


def _values(rows: pd.DataFrame, column: str) -> list[str]:
    if column not in rows.columns:
        return []
    return sorted({str(v) for v in rows[column].dropna()})


def _files(rows: pd.DataFrame) -> str:
    names = _values(rows, "model_file") or ["?"]
    made = _values(rows, "model_converted_from")
    text = ", ".join(names)
    return f"{text} (made from {'; '.join(made)})" if made else text


def differences(frame: pd.DataFrame, base: Side, cand: Side,
                configs: Iterable[str]) -> tuple[str, ...]:
    """One sentence per way the two sides' trials on ``configs`` were not the same work."""
    if base.engine == cand.engine:
        return ()
    configs = list(configs)
    a, b = _side(frame, base, configs), _side(frame, cand, configs)
    if a.empty or b.empty:
        return ()
    found = []
    pairs = a.groupby("config_id")["model_sha256"].agg(set).to_dict()
    other = b.groupby("config_id")["model_sha256"].agg(set).to_dict()
    apart = sorted(c for c in pairs if c in other and not (pairs[c] & other[c]))
    if apart:
        unsaid = "" if _values(b, "model_converted_from") or _values(a, "model_converted_from") \
            else "; neither side says what its files were made from (models.NAME.converted_from)"
        found.append(
            f"model files differ on {len(apart)} of {len(pairs)} configurations: "
            f"{base.engine} ran {_files(a)}, {cand.engine} ran {_files(b)}: the same weights "
            f"only if one was converted from the other{unsaid}")
    ttft_a, ttft_b = _values(a, "ttft_definition"), _values(b, "ttft_definition")
    if ttft_a and ttft_b and ttft_a != ttft_b:
        found.append(f"time to first token counts different things: {base.engine} "
                     f"{', '.join(ttft_a)}, {cand.engine} {', '.join(ttft_b)}")
    for side, rows in ((base, a), (cand, b)):
        if "engine_aggregate_n" not in rows.columns:
            continue
        runs = rows["engine_aggregate_n"].dropna()
        if len(runs) and (runs > 1).any():
            found.append(f"{side.engine}'s figures are its own means over up to "
                         f"{int(runs.max())} runs per trial, not one run each: its spread "
                         "is smaller than a per-run engine's")
    return tuple(found)
