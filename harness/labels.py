"""The one way a configuration is named: every knob of ``Cell.config_id``, in one spelling.

A configuration is what ``config_id`` hashes: model, quant, n_ctx, KV types, threads and
affinity, flash attention, the workload, the batch sizes, how the model is loaded (mmap or a
load mode) and its page cache, swa_full, a sustained duration, and the compute device with its
offloaded layers (``harness.knobs``). ``config_label`` names all of
them (a knob at its quiet default says nothing: ``@all``, ``mmap``, burst); ``distinct_labels``
names a set of configurations for one table or report: the core knobs always, every other knob
wherever it differs within the set, so two configurations never share a label.

Rows are mappings of the trial columns (``TrialRecord``'s names); a column that is missing or
null (a store from before the knob) reads as the knob's default.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness import knobs

if TYPE_CHECKING:
    import pandas as pd

Row = Mapping[str, Any]

#: The trial columns a configuration is read from (all of ``Cell.identity`` but the build).
CONFIG_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys((
    "model_name", "quant", "n_ctx", "type_k", "type_v", "threads", "affinity", "flash_attn",
    "n_prompt", "n_gen", "n_depth", "n_batch", "n_ubatch", "mmap", "load_mode", "cache",
    "swa_full", "sustained_s", *knobs.columns(), knobs.EXTRA_COLUMN,
)))


def _given(value: Any) -> bool:
    """Whether a cell of a frame holds a value (not None, NaN, pandas' NA or NaT)."""
    if value is None:
        return False
    if isinstance(value, float):
        return not math.isnan(value)
    return type(value).__name__ not in ("NAType", "NaTType")


def _get(row: Row, column: str, default: Any = None) -> Any:
    value = row.get(column)
    return value if _given(value) else default


def _int(value: Any) -> Any:
    """``512.0`` or numpy's 512 -> ``512`` (nullable integer columns come back as floats)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _kv(row: Row) -> str:
    k, v = _get(row, "type_k"), _get(row, "type_v")
    return f"kv={k}" if k == v else f"kv={k}/{v}"


def _affinity(row: Row) -> str:
    return f"@{_get(row, 'affinity', 'all')}"


def _workload(row: Row) -> str:
    """``p32/g16``, with ``/d464`` at a depth, or ``/dfill`` at the depth that fills n_ctx
    (the matrix's ``n_depth: fill``, the same workload at every context length)."""
    prompt, gen = _int(_get(row, "n_prompt")), _int(_get(row, "n_gen"))
    depth, n_ctx = _int(_get(row, "n_depth", 0)), _int(_get(row, "n_ctx"))
    if prompt is None and gen is None:
        return ""
    text = f"p{prompt}/g{gen}"
    if not depth:
        return text
    fills = all(isinstance(v, int) for v in (prompt, gen, n_ctx)) and depth + prompt + gen == n_ctx
    return f"{text}/dfill" if fills else f"{text}/d{depth}"


def _batch(row: Row) -> str:
    batch, ubatch = _get(row, "n_batch"), _get(row, "n_ubatch")
    if batch is None and ubatch is None:  # a row that does not carry them (a prediction)
        return ""
    return f"b{_int(batch)}/ub{_int(ubatch)}"


def _load(row: Row) -> str:
    mode = knobs.load_mode_of(bool(_get(row, "mmap", True)), _get(row, "load_mode"))
    return {"mmap": "mmap", "none": "no-mmap"}.get(str(mode), f"lm={mode}")


def _cache(row: Row) -> str:
    cache = _get(row, "cache")
    return f"cache={cache}" if cache else "cache=as-found"


def _swa(row: Row) -> str:
    return "swa-full" if bool(_get(row, "swa_full", False)) else "swa-window"


def _offload(row: Row) -> str:
    """``cpu`` (device none), else the device and its layers: ``Vulkan0/ngl=all``."""
    device, layers = knobs.offload_of(row)
    if device == knobs.CPU_DEVICE and not layers:
        return "cpu"
    return f"{device}/ngl={knobs.gpu_layers_text(layers)}"


def _sustained(row: Row) -> str:
    seconds = _get(row, "sustained_s", 0.0)
    return f"sustained{float(seconds):g}s" if seconds and float(seconds) > 0 else "burst"


@dataclass(frozen=True)
class LabelPart:
    """One named part of a configuration's label: its explicit text, and the text left unsaid."""

    name: str
    text: Callable[[Row], str]
    quiet: str | None = None  # this text is left out of labels (the default)
    core: bool = False  # always in a distinct label (quant, n_ctx, KV, threads)


LABEL_PARTS: tuple[LabelPart, ...] = (
    LabelPart("model", lambda r: str(_get(r, "model_name", "?"))),
    LabelPart("quant", lambda r: str(_get(r, "quant", "?")), core=True),
    LabelPart("n_ctx", lambda r: f"ctx{_int(_get(r, 'n_ctx'))}", core=True),
    LabelPart("kv", _kv, core=True),
    LabelPart("threads", lambda r: f"t{_int(_get(r, 'threads'))}", core=True),
    LabelPart("affinity", _affinity, quiet="@all"),
    LabelPart("flash_attn", lambda r: f"fa={_get(r, 'flash_attn', 'auto')}"),
    LabelPart("workload", _workload),
    LabelPart("batch", _batch),
    LabelPart("load", _load, quiet="mmap"),
    LabelPart("cache", _cache, quiet="cache=as-found"),
    LabelPart("swa", _swa, quiet="swa-window"),
    LabelPart("sustained", _sustained, quiet="burst"),
    LabelPart("offload", _offload, quiet="cpu"),
)


def _registered(spec: knobs.Knob, said: Callable[[Any], str]) -> LabelPart:
    """A knob of ``harness.knobs`` that names itself: its text, unsaid at its default."""
    return LabelPart(spec.name, lambda r: said(knobs.stored(r, spec.name)),
                     quiet=said(spec.default))


def _all() -> tuple[LabelPart, ...]:
    """``LABEL_PARTS``, then the registry's knobs with a label of their own, in registry order."""
    return LABEL_PARTS + tuple(_registered(k, k.label) for k in knobs.KNOBS if k.label is not None)


def _join(parts: Sequence[tuple[LabelPart, str]]) -> str:
    out = ""
    for knob, text in parts:
        if not text:  # a knob the row does not carry
            continue
        if knob.name == "affinity" and out:  # t4@big reads as one thing
            out += text
        else:
            out = f"{out} {text}" if out else text
    return out


def config_label(row: Row) -> str:
    """Every knob of a configuration but those at their quiet default, e.g.
    ``tiny Q4_K_M ctx512 kv=q8_0 t4 fa=auto p32/g16 b256/ub128 no-mmap``."""
    parts = [(knob, knob.text(row)) for knob in _all()]
    return _join([(k, t) for k, t in parts if t != k.quiet])


def config_labels(frame: pd.DataFrame, rows: Sequence[Row]) -> list[str]:
    """``config_label`` of each of ``rows`` (``frame``'s rows, as dicts), made once for each
    distinct configuration: ``frame``'s ``CONFIG_COLUMNS`` (all a label reads), a missing value
    equal to any other (a label reads None, NaN and NA alike). A farm's candidates, or its
    cells with invalid trials, are tens of thousands of rows over a few hundred configs."""
    present = [c for c in CONFIG_COLUMNS if c in frame]
    if not present or frame.empty:
        return [config_label(r) for r in rows]
    codes = frame.groupby(present, dropna=False, sort=False, observed=True).ngroup().tolist()
    made: dict[int, str] = {}
    out = []
    for code, row in zip(codes, rows, strict=True):
        label = made.get(code)
        if label is None:
            label = made[code] = config_label(row)
        out.append(label)
    return out


def distinct_labels(rows: Mapping[Hashable, Row]) -> dict[Hashable, str]:
    """A label per configuration (key: its config_id) that tells it from every other one of
    ``rows``: the core knobs, and every other knob where the set holds more than one value of
    it (said explicitly then, ``mmap`` against ``no-mmap``). Keys whose configurations read the
    same (columns a store lacks) get their key's first characters appended."""
    every = _all()
    texts = {key: {knob.name: knob.text(row) for knob in every} for key, row in rows.items()}
    varied = {knob.name for knob in every
              if len({t[knob.name] for t in texts.values()}) > 1}
    out: dict[Hashable, str] = {}
    for key, text in texts.items():
        parts = [(knob, text[knob.name]) for knob in every
                 if knob.name in varied
                 or (knob.core and text[knob.name] != knob.quiet)
                 or (knob.name == "affinity" and text[knob.name] != knob.quiet)]
        out[key] = _join(parts)
    seen: dict[str, list[Hashable]] = {}
    for key, label in out.items():
        seen.setdefault(label, []).append(key)
    for keys in seen.values():
        if len(keys) > 1:
            for key in keys:
                out[key] = f"{out[key]} #{str(key)[:8]}"
    return out


def varied_knobs(rows: Sequence[Row], skip: Sequence[str] = ()) -> tuple[str, ...]:
    """The names of the knobs (``LABEL_PARTS``) with more than one value among ``rows``."""
    return tuple(knob.name for knob in _all() if knob.name not in skip
                 and len({knob.text(r) for r in rows}) > 1)


def knob_text(row: Row, names: Sequence[str]) -> str:
    """The explicit texts of the named knobs for one row, e.g. ``no-mmap fa=on``."""
    wanted = set(names)
    return _join([(k, k.text(row)) for k in _all() if k.name in wanted])
