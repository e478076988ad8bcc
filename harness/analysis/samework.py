"""Whether two sides of an engine comparison measured the same work, and what differs if not.

Cells pair by ``config_id``, so both sides ran the same model name and quant label, prompt and
generation lengths, threads and compute device. What a config cannot hold is the rest of the
work: two engines rarely run the same file (a GGUF against MNN's or ExecuTorch's conversion of
the same weights, or of other weights), may define TTFT differently (LiteRT-LM's clock includes
the first decode step), and may report their own means over several runs instead of one run
per trial. ``differences`` names each of these in one sentence, so a reader weighs a verdict
between engines knowing what it compares.

The compute device is part of a config, and each engine names its own: LiteRT-LM's ``gpu`` is its
GPU delegate, llama.cpp's ``Vulkan0`` its Vulkan backend. Configurations that the two sides ran
alike but for their device are therefore not paired; ``differences`` says how many, and on which
device each engine ran them, so "nothing compared" on a GPU is not a silent answer.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from harness import knobs
from harness.analysis.frames import Side, usable
from harness.labels import CONFIG_COLUMNS

_COLUMNS = ("model_sha256", "model_file", "model_converted_from", "ttft_definition",
            "engine_aggregate_n")


def _side(frame: pd.DataFrame, side: Side, configs: Iterable[str] | None = None) -> pd.DataFrame:
    rows = frame[(frame["build_id"] == side.build) & (frame["engine"] == side.engine)]
    if configs is not None:
        rows = rows[rows["config_id"].isin(list(configs))]
    return usable(rows)


_DEVICE = knobs.spec("compute_device").column
_BUT_DEVICE = tuple(c for c in ("device_serial", *CONFIG_COLUMNS) if c != _DEVICE)


def _devices_by_rest(rows: pd.DataFrame) -> dict[tuple[str, ...], set[str]]:
    """Per (phone, configuration but its device), the devices the rows ran it on."""
    if rows.empty or _DEVICE not in rows.columns:
        return {}
    present = [c for c in _BUT_DEVICE if c in rows.columns]
    keys = rows[present].astype(str).itertuples(index=False, name=None)
    devices = rows[_DEVICE].fillna(knobs.CPU_DEVICE).astype(str)
    out: dict[tuple[str, ...], set[str]] = {}
    for key, device in zip(keys, devices, strict=True):
        out.setdefault(tuple(key), set()).add(device)
    return out


def backend_apart(frame: pd.DataFrame, base: Side, cand: Side) -> str | None:
    """The sentence for configurations both engines ran, each on a device of its own naming
    (none in common): not paired, since those are two backends, not one configuration."""
    if base.engine == cand.engine:
        return None
    a, b = _devices_by_rest(_side(frame, base)), _devices_by_rest(_side(frame, cand))
    apart = [key for key in a if key in b and not a[key] & b[key]]
    if not apart:
        return None
    ran_a = sorted(set().union(*(a[k] for k in apart)))
    ran_b = sorted(set().union(*(b[k] for k in apart)))
    return (f"backends differ on {len(apart)} configurations the two sides ran alike but for "
            f"their device: {base.engine} ran them on {', '.join(ran_a)}, {cand.engine} on "
            f"{', '.join(ran_b)}, each engine's own backend, so they are not paired and none "
            "of them is compared")


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
    backends = backend_apart(frame, base, cand)
    found = [backends] if backends else []
    a, b = _side(frame, base, configs), _side(frame, cand, configs)
    if a.empty or b.empty:
        return tuple(found)
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
