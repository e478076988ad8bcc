"""When no configuration fits: which knob to turn first, and to what.

The order is the one that costs the least quality per byte saved on a phone: the context length
first (the KV cache shrinks linearly with it, and most apps never fill a long context), then the
KV cache precision (q8_0 halves an f16 cache with a small loss), then the weights' quant level
(every step down costs quality on every token), and only then a smaller model. The suggestion is
made for the configuration closest to fitting, and quotes measured evidence from the same device
when the store has it (a smaller context of the same model that did fit, a smaller model).

A knob is named only when it closes the gap: its saving is predicted from the configuration's
own KV term (``predicted_kv_bytes``) and model file, or a measured configuration with that knob
turned fits on this device. When none does alone, the suggestion says so with each knob's
saving; when the reserve is at least the phone's free memory, no knob can, and it says that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness import memory
from harness.units import mib, size

Lever = Literal["n_ctx", "kv", "quant", "model", "reserve"]
KNOB_ORDER: tuple[Lever, ...] = ("n_ctx", "kv", "quant", "model")

#: Weight quant levels from most to fewest bits (harness.memory's one ordering, reversed).
QUANT_ORDER: tuple[str, ...] = tuple(reversed(memory.QUANT_ORDER))
KV_NEXT = {"f32": "f16", "bf16": "q8_0", "f16": "q8_0", "q8_0": "q4_0"}
MIN_CTX = 256


@dataclass(frozen=True)
class Suggestion:
    knob: Lever
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


@dataclass(frozen=True)
class Step:
    """One knob's move: what to do, and the bytes it saves (None: not known; ``fits``: a
    measured configuration with the knob turned fits, whatever the figure)."""

    knob: Lever
    text: str
    saving: int | None
    fits: bool = False

    def closes(self, over: int) -> bool:
        return self.fits or (self.saving is not None and self.saving >= over)

    def said(self) -> str:
        if self.fits:
            return f"{self.knob}: fits as measured"
        return f"{self.knob}: {'saving unknown' if self.saving is None else size(self.saving)}"


def _number(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    if value is None or isinstance(value, str):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and number > 0 else None  # not NaN, not 0


def _ctx_step(row: Mapping[str, Any], fitting: Sequence[Mapping[str, Any]]) -> Step | None:
    n_ctx = int(row["n_ctx"])
    need = int(row.get("n_prompt") or 0) + int(row.get("n_gen") or 0)
    evidence = sorted(
        (f for f in fitting
         if _same(row, f, ("model_name", "quant", "type_k", "type_v")) and f["n_ctx"] < n_ctx),
        key=lambda f: -int(f["n_ctx"]),
    )
    if evidence:  # measured to fit: closes the gap whatever it saves
        best = evidence[0]
        return Step("n_ctx", f"lower n_ctx from {n_ctx} to {best['n_ctx']} (measured on this "
                    f"device: peak {mib(best['peak_bytes'])}, which fits)", None, fits=True)
    target = n_ctx // 2
    if target >= max(MIN_CTX, need):
        kv = _number(row, "predicted_kv_bytes")
        return Step("n_ctx", f"lower n_ctx from {n_ctx} to {target} (the KV cache shrinks in "
                    "proportion)", round(kv / 2) if kv else None)
    return None


def _bytes_per_value(kv_type: str) -> float:
    block_bytes, block_values = memory.KV_BLOCKS[kv_type]
    return block_bytes / block_values


def _kv_step(row: Mapping[str, Any]) -> Step | None:
    k, v = str(row["type_k"]), str(row["type_v"])
    new_k, new_v = KV_NEXT.get(k), KV_NEXT.get(v)
    if new_k is None and new_v is None:
        return None
    nk, nv = new_k or k, new_v or v
    to = nk if nk == nv else f"{nk}/{nv}"
    was = k if k == v else f"{k}/{v}"
    note = " (a quantised V cache needs flash attention)" if new_v and new_v.startswith("q") else ""
    kv = _number(row, "predicted_kv_bytes")
    saving = None
    if kv and all(t in memory.KV_BLOCKS for t in (k, v, nk, nv)):
        # K and V rows hold as many values each: half the cache is K, half is V
        saving = round(kv / 2 * (2 - _bytes_per_value(nk) / _bytes_per_value(k)
                                 - _bytes_per_value(nv) / _bytes_per_value(v)))
    return Step("kv", f"store the KV cache as {to} instead of {was}{note}", saving)


def _quant_step(row: Mapping[str, Any]) -> Step | None:
    quant = str(row["quant"])
    lower = lower_quant(quant)
    if lower is None:
        return None
    weights = _number(row, "model_file_bytes")
    now, then = (memory.BITS_PER_WEIGHT.get(q.upper()) for q in (quant, lower))
    saving = round(weights * (1 - then / now)) if weights and now and then else None
    return Step("quant", f"quantise the weights to {lower} instead of {quant}", saving)


def _model_step(row: Mapping[str, Any], fitting: Sequence[Mapping[str, Any]]) -> Step:
    params = row.get("model_n_params")
    smaller = sorted(
        (f for f in fitting if f.get("model_n_params") and params
         and f["model_n_params"] < params),
        key=lambda f: -int(f["model_n_params"]),
    )
    if smaller:
        return Step("model", f"use a smaller model than {row['model_name']}: "
                    f"{smaller[0]['model_name']} {smaller[0]['quant']} fits on this device (peak "
                    f"{mib(smaller[0]['peak_bytes'])})", None, fits=True)
    size_text = f" ({int(params) / 1e9:.1f}B parameters)" if params else ""
    return Step("model", f"use a smaller model than {row['model_name']}{size_text}", None)


def suggest(candidates: Sequence[Mapping[str, Any]],
            fitting: Sequence[Mapping[str, Any]] = (), *, available: int | None = None,
            reserve: int = 0) -> Suggestion | None:
    """The first knob that closes the gap, for the candidate closest to fitting.

    ``candidates`` are configurations rejected for memory, each a mapping of trial columns plus
    ``config_id``, ``label`` and ``over_bytes`` (how much too big; None when only the
    low-memory killer said so: then the first knob with room is named, as nothing says how far
    it must go). ``fitting`` holds measured configurations that did fit (with ``peak_bytes``),
    quoted as evidence. ``available``/``reserve``: the phone's free memory and the reserve kept
    from it, when known.
    """
    if not candidates:
        return None
    row = min(candidates, key=lambda r: (r.get("over_bytes") is None, r.get("over_bytes") or 0))
    label, config = str(row["label"]), str(row["config_id"])
    if available is not None and reserve >= available:
        return Suggestion("reserve", config, label, (
            f"{label}: no knob can make room: the reserve ({mib(reserve)}) is at least the "
            f"phone's free memory ({mib(available)}), so nothing fits whatever its size; "
            "lower --reserve"))
    over = row.get("over_bytes")
    steps = [step for step in (_ctx_step(row, fitting), _kv_step(row), _quant_step(row),
                               _model_step(row, fitting)) if step is not None]
    if over is None:
        first = steps[0]  # the model step is always there
        return Suggestion(first.knob, config, label,
                          f"{label} was killed by the low-memory killer: {first.text}")
    need = f"needs {mib(over)} less"
    for step in steps:
        if step.closes(int(over)):
            saves = (f" (saves about {size(step.saving)})"
                     if step.saving is not None and not step.fits else "")
            return Suggestion(step.knob, config, label, f"{label} {need}: {step.text}{saves}")
    unknown = [step for step in steps if step.saving is None and not step.fits
               and step.knob != "model"]
    if unknown:  # no prediction stored to say what it saves: name it, and say so
        step = unknown[0]
        return Suggestion(step.knob, config, label, (
            f"{label} {need}: {step.text} (what it saves is not known: the trials carry no "
            "prediction of the KV cache or the model file)"))
    said = "; ".join(step.said() for step in steps if step.knob != "model")
    model = steps[-1]
    return Suggestion("model", config, label, (
        f"{label} {need}: no knob closes the gap alone ({said}); {model.text}"))
