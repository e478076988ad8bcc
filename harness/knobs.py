"""The knobs of a cell, declared once: name, matrix key, type, default, store column, id rule,
label and each engine's flag.

A knob is one entry of ``KNOBS``; the matrix (its keys, expansion order, defaults and value
checks), the cell (its field defaults and which knobs stay out of the ids at their default), the
configuration columns ``harness.labels`` reads, the store's column check, the schema's axes
(``schema_properties``) and the engines' flags (``engine_args``, ``flag``) all read it, when they
are imported or asked: nothing derived from it is kept apart. A knob declared with
``attribute=False`` needs nothing else: the cell keeps it in ``Cell.extra``, the store in the
``knobs`` column, a label names it with ``label``, llama-bench passes it with its flag
(tests/test_knob_registry.py adds one). An older knob is also a field of ``Cell`` and
``TrialRecord`` (a test holds them to the registry); an engine that spells a value its own way
maps it, and the memory predictor uses what changes memory. The matrix's kv axis sets two
knobs (type_k, type_v: ``part``). Not here yet: quant (its list lives in harness.memory, which
imports this module), and the workload (n_prompt, n_gen, n_depth).

Parsers are pure: they return the normalised value or raise ``ValueError`` with the problem
(``harness.matrix`` adds the file and key path).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: ``compute_device: none`` runs every tensor on the CPU (llama.cpp's ``-dev none``): no backend
#: device is used, even for the large batched ops llama.cpp offloads at ``-ngl 0``.
CPU_DEVICE = "none"
#: ``n_gpu_layers: all`` (llama.cpp's -1): every layer and the output layer on the device.
ALL_LAYERS = -1
#: llama.cpp's device names: Vulkan0, GPUOpenCL, HTP0, CUDA0, MTL0, BLAS, ...
_DEVICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def _device(value: Any) -> str:
    if isinstance(value, str) and is_cpu(value):
        return CPU_DEVICE
    if isinstance(value, str) and _DEVICE_NAME.match(value):
        return value
    raise ValueError(f"{_text(value)} is not a compute device (allowed: none for the CPU, or a "
                     "llama.cpp device name such as Vulkan0, GPUOpenCL, HTP0: see "
                     "llama-bench --list-devices)")


def _gpu_layers(value: Any) -> int | str:
    """An integer >= 0, ``all`` (-1), or ``half`` (resolved per model by the matrix)."""
    if isinstance(value, str) and value.lower() in ("all", "half"):
        return ALL_LAYERS if value.lower() == "all" else "half"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{_text(value)} is not a layer count (allowed: integers >= 0, half, "
                         "all)")
    if value < 0:
        raise ValueError(f"{value} is below 0 (allowed: integers >= 0, half, all; -1 is "
                         "written all)")
    return value


def _text(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else f'"{value}"'


def show(value: Any) -> str:
    """A matrix value as messages quote it (JSON spelling: ``"x"``, ``true``, ``[1, 2]``)."""
    if isinstance(value, Mapping | list):
        return type(value).__name__ if not value else json.dumps(value, default=str)
    return json.dumps(value, default=str)


def count(minimum: int) -> Callable[[Any], int]:
    """A parser of integers >= ``minimum``."""
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{show(value)} is not an integer (allowed: integers >= {minimum})")
        if value < minimum:
            raise ValueError(f"{value} is out of range (allowed: integers >= {minimum})")
        return value
    return parse


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{show(value)} is not a boolean (allowed: true, false)")
    return value


def choice(allowed: tuple[str, ...], what: str) -> Callable[[Any], str]:
    """A parser of one of ``allowed`` (any letter case), named ``what`` in its message."""
    def parse(value: Any) -> str:
        if isinstance(value, str):
            for option in allowed:
                if value.lower() == option.lower():
                    return option
        raise ValueError(f"unknown {what} {show(value)} (allowed: {', '.join(allowed)})")
    return parse


def gpu_layers_text(value: Any) -> str:
    """``all``, ``half`` or the count, as a label and the CLI show a layer count."""
    if value == ALL_LAYERS:
        return "all"
    return str(value)


def offloadable_layers(n_layer: int) -> int:
    """What llama.cpp counts as layers to offload: the repeating ones and the output layer."""
    return n_layer + 1


def resolve_gpu_layers(value: int | str, n_layer: int | None) -> int:
    """``half`` of a model's offloadable layers (rounded down), ``all`` kept as -1, a count as
    given."""
    if value != "half":
        return int(value)
    if n_layer is None:
        raise ValueError("n_gpu_layers half needs the model's layer count (a ladder model, a "
                         "card, or a GGUF file that exists)")
    return offloadable_layers(n_layer) // 2


def output_offloaded(n_gpu_layers: int) -> bool:
    """llama.cpp (src/llama-model.cpp, 0.3.36's vendored copy) numbers the output layer after
    the repeating ones and offloads from the end: any layer offloaded puts the output there."""
    return n_gpu_layers == ALL_LAYERS or n_gpu_layers >= 1


def offloaded_layers(n_gpu_layers: int, n_layer: int) -> int:
    """Repeating layers on the device: the last ``n_gpu_layers - 1`` (the output layer first)."""
    if n_gpu_layers == ALL_LAYERS:
        return n_layer
    return min(max(n_gpu_layers - 1, 0), n_layer)


#: How an engine reads its weights (llama.cpp's --load-mode names): mapped from the file (pages
#: read on demand, reclaimable: a model bigger than RAM can run by paging), read into memory
#: (none), with direct I/O past the page cache (dio), or mapped/read and locked (mlock).
LOAD_MODES = ("mmap", "none", "dio", "mlock", "mmap+mlock", "auto")
MAPPED_LOAD_MODES = ("mmap", "mmap+mlock", "auto")  # auto maps on a CPU backend
#: The model file's page cache when the engine starts: evicted (cold) or read once (warm).
CACHE_STATES = ("cold", "warm")
FLASH_ATTN = ("on", "off", "auto")
#: llama.cpp's KV cache types
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
_MASK = re.compile(r"^0x[0-9a-fA-F]+$")


def _affinity(value: Any) -> str:
    if isinstance(value, str) and value.lower() in ("all", "big"):
        return value.lower()
    if isinstance(value, str) and _MASK.match(value) and int(value, 16) > 0:
        return value.lower()
    raise ValueError(f"{show(value)} is not a CPU affinity (allowed: all, big, or a non-zero hex "
                     "mask such as 0xf0)")


def _flash(value: Any) -> str:
    if value is True:  # YAML 1.1 reads a bare on/off as a boolean
        return "on"
    if value is False:
        return "off"
    return choice(FLASH_ATTN, "flash_attn value")(value)


def load_mode_of(mmap: bool, load_mode: str | None = "") -> str:
    """The load mode asked of the engine: the cell's ``load_mode``, else what ``mmap`` says."""
    return load_mode or ("mmap" if mmap else "none")


def is_cpu(device: str) -> bool:
    """Whether a device knob value means the CPU only (``none``, also spelt ``cpu``)."""
    return device.lower() in (CPU_DEVICE, "cpu")


@dataclass(frozen=True)
class Knob:
    """One knob of a cell."""

    name: str  # the Cell attribute
    axis: str  # the matrix's key under axes:
    column: str  # the trials column
    default: Any  # what a matrix that leaves the axis out gets
    parse: Callable[[Any], Any]  # matrix value -> normalised value, or ValueError(problem)
    what: str  # what the value is, for messages and --help
    schema: Mapping[str, Any]  # JSON schema of one value (matrices/matrix.schema.json)
    # out of cell_id/config_id at its default, so cells made before the knob keep their ids
    quiet_in_ids: bool = True
    # (engine, flag): the engine's command-line flag that takes the value as it is
    flags: tuple[tuple[str, str], ...] = ()
    # the label's text of a value (None: harness.labels names the knob in a group of its own);
    # a value at the default says nothing
    label: Callable[[Any], str] | None = None
    # False: the Cell holds the value in ``Cell.extra`` and the store in its ``knobs`` column
    # (a knob declared here alone); True: a Cell field and a trials column of its own
    attribute: bool = True
    # the knob's place in an axis that sets several knobs at once (kv: type_k 0, type_v 1); the
    # matrix parses that axis as a whole, and the schema file describes it (None: an axis alone)
    part: int | None = None

    def axis_schema(self) -> dict[str, Any]:
        """The schema of the axis: one value or a non-empty list of them."""
        one = dict(self.schema)
        return {"oneOf": [one, {"type": "array", "minItems": 1, "items": one}]}

    def flag(self, engine: str) -> str | None:
        """The engine's flag for this knob, or None when the engine has none."""
        return dict(self.flags).get(engine)


_LLAMA_BENCH = "llama-bench"
_GENERATE = "harness-generate"  # the output check's generator (harness/artifacts/generator)
_PYBENCH = "llama-cpp-python"  # harness.engines.pybench's options
_COUNT = {"type": "integer", "minimum": 1}

KNOBS: tuple[Knob, ...] = (
    # the context; the KV cache types (the matrix's kv: one type for both, or K/V)
    Knob("n_ctx", "n_ctx", "n_ctx", None, count(1), "context length (tokens; required)", _COUNT,
         quiet_in_ids=False),
    Knob("type_k", "kv", "type_k", "f16", choice(KV_TYPES, "KV cache type"),
         "KV cache type of K", {"enum": list(KV_TYPES)}, quiet_in_ids=False, part=0,
         flags=((_LLAMA_BENCH, "-ctk"), (_GENERATE, "-ctk"), (_PYBENCH, "--type-k"))),
    Knob("type_v", "kv", "type_v", "f16", choice(KV_TYPES, "KV cache type"),
         "KV cache type of V", {"enum": list(KV_TYPES)}, quiet_in_ids=False, part=1,
         flags=((_LLAMA_BENCH, "-ctv"), (_GENERATE, "-ctv"), (_PYBENCH, "--type-v"))),
    # the CPU threads, where they run, flash attention and mapping: always in the ids
    Knob("threads", "threads", "threads", 4, count(1), "CPU threads", _COUNT,
         quiet_in_ids=False,
         flags=((_LLAMA_BENCH, "-t"), (_GENERATE, "-t"), (_PYBENCH, "--threads"))),
    Knob("affinity", "affinity", "affinity", "all", _affinity,
         "the CPUs the threads may run on (all, big, or a hex mask)",
         {"type": "string", "pattern": "^(all|big|0x[0-9a-fA-F]+)$"}, quiet_in_ids=False),
    Knob("flash_attn", "flash_attn", "flash_attn", "auto", _flash, "flash attention",
         {"oneOf": [{"enum": list(FLASH_ATTN)}, {"type": "boolean"}]}, quiet_in_ids=False,
         flags=((_LLAMA_BENCH, "-fa"), (_GENERATE, "-fa"), (_PYBENCH, "--flash-attn"))),
    Knob("mmap", "mmap", "mmap", True, boolean, "whether the weights are mapped from the file",
         {"type": "boolean"}, quiet_in_ids=False),
    Knob("n_batch", "n_batch", "n_batch", 2048, count(1), "logical batch size (tokens)",
         _COUNT, quiet_in_ids=False,
         flags=((_LLAMA_BENCH, "-b"), (_GENERATE, "-b"), (_PYBENCH, "--n-batch"))),
    Knob("n_ubatch", "n_ubatch", "n_ubatch", 512, count(1), "physical batch size (tokens)",
         _COUNT, quiet_in_ids=False,
         flags=((_LLAMA_BENCH, "-ub"), (_GENERATE, "-ub"), (_PYBENCH, "--n-ubatch"))),
    # llama-bench's (fixed) choice; llama-cpp-python's own default is true
    Knob("swa_full", "swa_full", "swa_full", False, boolean,
         "full-size cache for sliding-window layers", {"type": "boolean"}),
    # "": as mmap says (mmap or none, ``load_mode_of``)
    Knob("load_mode", "load_mode", "load_mode", "", choice(LOAD_MODES, "load_mode"),
         "how the engine reads its weights", {"type": "string", "enum": list(LOAD_MODES)},
         flags=((_LLAMA_BENCH, "-lm"), (_PYBENCH, "--load-mode"))),
    # "": the page cache as the phone has it
    Knob("cache", "cache", "cache", "", choice(CACHE_STATES, "cache state"),
         "the model file's page cache at launch", {"type": "string", "enum": list(CACHE_STATES)}),
    Knob("compute_device", "compute_device", "compute_device", CPU_DEVICE, _device,
         "the llama.cpp device the model runs on (none: the CPU only)",
         {"type": "string", "pattern": _DEVICE_NAME.pattern},
         flags=((_LLAMA_BENCH, "-dev"), (_GENERATE, "-dev"), (_PYBENCH, "--device"))),
    Knob("n_gpu_layers", "n_gpu_layers", "n_gpu_layers", 0, _gpu_layers,
         "layers offloaded to the device (0, a count, half, all)",
         {"oneOf": [{"type": "integer", "minimum": 0},
                    {"type": "string", "enum": ["half", "all"]}]},
         flags=((_LLAMA_BENCH, "-ngl"), (_GENERATE, "-ngl"), (_PYBENCH, "--n-gpu-layers"))),
)
#: the trials column of the knobs without one of their own: JSON, name -> value
EXTRA_COLUMN = "knobs"

# What the registry's readers derive is read from ``KNOBS`` when asked, never kept apart from it.


_BY_NAME: list[tuple[tuple[Knob, ...], dict[str, Knob]]] = []  # (KNOBS, its index by name)


def spec(name: str) -> Knob:
    """The knob whose Cell attribute is ``name`` (the index by name is made again whenever
    ``KNOBS`` is another tuple: a test's registry)."""
    if not _BY_NAME or _BY_NAME[0][0] is not KNOBS:
        _BY_NAME[:] = [(KNOBS, {k.name: k for k in reversed(KNOBS)})]
    found = _BY_NAME[0][1].get(name)
    if found is None:
        raise KeyError(f"no knob {name} in harness.knobs.KNOBS")
    return found


def axes() -> tuple[str, ...]:
    """The matrix axes of the registry, in expansion order (after the older axes)."""
    return tuple(dict.fromkeys(k.axis for k in KNOBS))


def columns() -> tuple[str, ...]:
    """The trials columns of the knobs that have one of their own."""
    return tuple(k.column for k in KNOBS if k.attribute)


def defaults() -> dict[str, Any]:
    """What a matrix that leaves a knob's axis out gets: axis -> default (an axis of several
    knobs: their defaults in order, e.g. kv ("f16", "f16"))."""
    found: dict[str, Any] = {}
    for knob in KNOBS:
        found[knob.axis] = knob.default if knob.part is None else (
            *found.get(knob.axis, ()), knob.default)
    return found


def axis_value(values: Mapping[str, Any], knob: Knob) -> Any:
    """The knob's value in a combination of axis values (its part of an axis of several)."""
    value = values[knob.axis]
    return value if knob.part is None else value[knob.part]


def axes_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """The matrix axes that give exactly these knob values (name -> value), each as one value:
    an axis of several knobs (kv) one value when its parts agree, else their mapping; a knob
    left unset ("") and mmap beside a load mode (which sets it) are left out, as a matrix
    must."""
    out: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    for knob in KNOBS:
        value = values[knob.name]
        if value == "" or (knob.name == "mmap" and values.get("load_mode")):
            continue
        if knob.part is not None:
            parts.setdefault(knob.axis, {})[knob.name] = value
            continue
        # every layer is written ``all`` in a matrix (the cell keeps llama.cpp's -1)
        out[knob.axis] = "all" if knob.name == "n_gpu_layers" and value == ALL_LAYERS else value
    for axis, named in parts.items():
        distinct = set(named.values())
        out[axis] = distinct.pop() if len(distinct) == 1 else named
    return out


def schema_properties() -> dict[str, Any]:
    """The registry's part of matrices/matrix.schema.json: axis -> schema of the axis (an axis
    of several knobs is the file's own)."""
    return {k.axis: k.axis_schema() for k in KNOBS if k.part is None}


def flag(name: str, engine: str = _LLAMA_BENCH) -> str:
    """The flag of knob ``name`` (its Cell attribute) for ``engine`` (llama-bench by default)."""
    found = spec(name).flag(engine)
    if found is None:
        raise KeyError(f"knob {name} has no flag for {engine}")
    return found


def engine_args(values: Mapping[str, Any], engine: str,
                skip: tuple[str, ...] = ()) -> list[str]:
    """``flag value`` for each knob of ``values`` (name -> value) that ``engine`` takes as is,
    in registry order, but those in ``skip``."""
    args: list[str] = []
    for knob in KNOBS:
        spelt = knob.flag(engine)
        if spelt is not None and knob.name in values and knob.name not in skip:
            args += [spelt, str(values[knob.name])]
    return args


def default(name: str) -> Any:
    """The default of the knob whose Cell attribute is ``name``."""
    return spec(name).default


def stored(row: Mapping[str, Any], name: str) -> Any:
    """The knob ``name`` (its Cell attribute) in a stored row or plan row: its column's value,
    or the knob's default where the row predates the knob (no column, empty, NaN)."""
    knob = spec(name)
    value: Any = row.get(knob.column) if knob.attribute else _extras(row).get(knob.name)
    if _missing(value):
        return knob.default
    if isinstance(knob.default, bool):
        return bool(value)
    return int(value) if isinstance(knob.default, int) else value


def _extras(row: Mapping[str, Any]) -> dict[str, Any]:
    text = row.get(EXTRA_COLUMN)
    found = json.loads(text) if isinstance(text, str) and text else {}
    return found if isinstance(found, dict) else {}


def extras_text(values: Mapping[str, Any]) -> str | None:
    """The ``knobs`` column of a row: the values of the knobs without a column of their own."""
    extra = {k.name: values[k.name] for k in KNOBS if not k.attribute}
    return json.dumps(extra, sort_keys=True) if extra else None


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value
    try:
        return bool(value != value)  # NaN is the one value unequal to itself
    except TypeError:  # pandas' NA: its truth is undefined, and it means missing
        return True


def offload_of(row: Mapping[str, Any]) -> tuple[str, int]:
    """Where a stored row's model ran: its compute device and offloaded layers (-1: all)."""
    return str(stored(row, "compute_device")), int(stored(row, "n_gpu_layers"))


def offload_problem(device: str, n_gpu_layers: int) -> str | None:
    """A CPU cell that asks for offloaded layers runs nothing anywhere else: say so."""
    if is_cpu(device) and n_gpu_layers != 0:
        return (f"device none runs every layer on the CPU; n_gpu_layers "
                f"{gpu_layers_text(n_gpu_layers)} needs a device (e.g. Vulkan0)")
    return None
