"""When no configuration fits: which knob to turn first, and to what.

The order is the one that costs the least quality per byte saved on a phone: the context length
first (the KV cache shrinks linearly with it, and most apps never fill a long context), then the
KV cache precision (q8_0 halves an f16 cache with a small loss), then the weights' quant level
(every step down costs quality on every token), and only then a smaller model. The suggestion is
made for the configuration closest to fitting, and quotes measured evidence from the same device
when the store has it (a smaller context of the same model that did fit, a smaller model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness import memory
from harness.units import mib

Knob = Literal["n_ctx", "kv", "quant", "model"]
KNOB_ORDER: tuple[Knob, ...] = ("n_ctx", "kv", "quant", "model")

#: Weight quant levels from most to fewest bits (harness.memory's one ordering, reversed).
QUANT_ORDER: tuple[str, ...] = tuple(reversed(memory.QUANT_ORDER))
KV_NEXT = {"f32": "f16", "bf16": "q8_0", "f16": "q8_0", "q8_0": "q4_0"}
MIN_CTX = 256


@dataclass(frozen=True)
class Suggestion:
    knob: Knob
    config_id: str
    label: str
    text: str


def lower_quant(quant: str) -> str | None:
    upper = quant.upper()
    if upper not in QUANT_ORDER:
        return None
    index = QUANT_ORDER.index(upper)
    return QUANT_ORDER[index + 1] if index + 1 < len(QUANT_ORDER) else None


def _same(row: Mapping[str, Any], other: Mapping[str, Any], keys: Sequence[str]) -> bool:
    return all(row.get(k) == other.get(k) for k in keys)


def _ctx_step(row: Mapping[str, Any], fitting: Sequence[Mapping[str, Any]]) -> str | None:
    n_ctx = int(row["n_ctx"])
    need = int(row.get("n_prompt") or 0) + int(row.get("n_gen") or 0)
    evidence = sorted(
        (f for f in fitting
         if _same(row, f, ("model_name", "quant", "type_k", "type_v")) and f["n_ctx"] < n_ctx),
        key=lambda f: -int(f["n_ctx"]),
    )
    if evidence:
        best = evidence[0]
        return (f"lower n_ctx from {n_ctx} to {best['n_ctx']} (measured on this device: peak "
                f"{mib(best['peak_bytes'])}, which fits)")
    target = n_ctx // 2
    if target >= max(MIN_CTX, need):
        return f"lower n_ctx from {n_ctx} to {target} (the KV cache shrinks in proportion)"
    return None


def _kv_step(row: Mapping[str, Any]) -> str | None:
    k, v = str(row["type_k"]), str(row["type_v"])
    new_k, new_v = KV_NEXT.get(k), KV_NEXT.get(v)
    if new_k is None and new_v is None:
        return None
    nk, nv = new_k or k, new_v or v
    to = nk if nk == nv else f"{nk}/{nv}"
    was = k if k == v else f"{k}/{v}"
    note = " (a quantised V cache needs flash attention)" if new_v and new_v.startswith("q") else ""
    return f"store the KV cache as {to} instead of {was}{note}"


def _quant_step(row: Mapping[str, Any]) -> str | None:
    lower = lower_quant(str(row["quant"]))
    if lower is None:
        return None
    return f"quantise the weights to {lower} instead of {row['quant']}"


def _model_step(row: Mapping[str, Any], fitting: Sequence[Mapping[str, Any]]) -> str:
    params = row.get("model_n_params")
    smaller = sorted(
        (f for f in fitting if f.get("model_n_params") and params
         and f["model_n_params"] < params),
        key=lambda f: -int(f["model_n_params"]),
    )
    if smaller:
        return (f"use a smaller model than {row['model_name']}: {smaller[0]['model_name']} "
                f"{smaller[0]['quant']} fits on this device (peak "
                f"{mib(smaller[0]['peak_bytes'])})")
    size = f" ({int(params) / 1e9:.1f}B parameters)" if params else ""
    return f"use a smaller model than {row['model_name']}{size}"


def suggest(candidates: Sequence[Mapping[str, Any]],
            fitting: Sequence[Mapping[str, Any]] = ()) -> Suggestion | None:
    """The first knob with room to move, for the candidate closest to fitting.

    ``candidates`` are configurations rejected for memory, each a mapping of trial columns plus
    ``config_id``, ``label`` and ``over_bytes`` (how much too big; None when only the
    low-memory killer said so). ``fitting`` holds measured configurations that did fit (with
    ``peak_bytes``), quoted as evidence.
    """
    if not candidates:
        return None
    row = min(candidates, key=lambda r: (r.get("over_bytes") is None, r.get("over_bytes") or 0))
    over = row.get("over_bytes")
    need = (f"needs {mib(over)} less" if over is not None
            else "was killed by the low-memory killer")
    steps: list[tuple[Knob, str | None]] = [
        ("n_ctx", _ctx_step(row, fitting)),
        ("kv", _kv_step(row)),
        ("quant", _quant_step(row)),
        ("model", _model_step(row, fitting)),
    ]
    for knob, text in steps:
        if text is not None:
            return Suggestion(knob, str(row["config_id"]), str(row["label"]),
                              f"{row['label']} {need}: {text}")
    return None  # unreachable: the model step always has a text
