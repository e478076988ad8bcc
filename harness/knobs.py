"""The knobs of a cell, declared once: name, matrix key, type, default, store column, id rule.

A knob is one entry of ``KNOBS``; the matrix (its keys, defaults and value checks), the cell
(its field defaults and which knobs stay out of the ids at their default), the configuration
columns ``harness.labels`` reads, the store's column check and the CLI's lists all read it. An
engine maps the knob to its own flags; the memory predictor uses what changes memory. Adding a
knob is one ``Knob`` here, one field on ``Cell`` and ``TrialRecord`` (a test holds them to the
registry), each engine's mapping, and the predictor's use.

Parsers are pure: they return the normalised value or raise ``ValueError`` with the problem
(``harness.matrix`` adds the file and key path).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: ``device: none`` runs every tensor on the CPU (llama.cpp's ``-dev none``): no backend device
#: is used, even for the large batched ops llama.cpp offloads at ``-ngl 0``.
CPU_DEVICE = "none"
#: ``n_gpu_layers: all`` (llama.cpp's -1): every layer and the output layer on the device.
ALL_LAYERS = -1
#: llama.cpp's device names: Vulkan0, GPUOpenCL, HTP0, CUDA0, MTL0, BLAS, ...
_DEVICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def _device(value: Any) -> str:
    if isinstance(value, str) and value.lower() in ("none", "cpu"):
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

    def axis_schema(self) -> dict[str, Any]:
        """The schema of the axis: one value or a non-empty list of them."""
        one = dict(self.schema)
        return {"oneOf": [one, {"type": "array", "minItems": 1, "items": one}]}


KNOBS: tuple[Knob, ...] = (
    Knob("compute_device", "device", "compute_device", CPU_DEVICE, _device,
         "the llama.cpp device the model runs on (none: the CPU only)",
         {"type": "string", "pattern": _DEVICE_NAME.pattern}),
    Knob("n_gpu_layers", "n_gpu_layers", "n_gpu_layers", 0, _gpu_layers,
         "layers offloaded to the device (0, a count, half, all)",
         {"oneOf": [{"type": "integer", "minimum": 0},
                    {"type": "string", "enum": ["half", "all"]}]}),
)
BY_AXIS: Mapping[str, Knob] = {k.axis: k for k in KNOBS}
BY_NAME: Mapping[str, Knob] = {k.name: k for k in KNOBS}
#: matrix axes of the registry, in expansion order (after the older axes)
AXES: tuple[str, ...] = tuple(k.axis for k in KNOBS)
COLUMNS: tuple[str, ...] = tuple(k.column for k in KNOBS)
DEFAULTS: Mapping[str, Any] = {k.axis: k.default for k in KNOBS}


def default(name: str) -> Any:
    """The default of the knob whose Cell attribute is ``name``."""
    return BY_NAME[name].default


def stored(row: Mapping[str, Any], name: str) -> Any:
    """The knob ``name`` (its Cell attribute) in a stored row or plan row: its column's value,
    or the knob's default where the row predates the knob (no column, empty, NaN)."""
    knob = BY_NAME[name]
    value: Any = row.get(knob.column)
    if _missing(value):
        return knob.default
    return int(value) if isinstance(knob.default, int) else value


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
    if device == CPU_DEVICE and n_gpu_layers != 0:
        return (f"device none runs every layer on the CPU; n_gpu_layers "
                f"{gpu_layers_text(n_gpu_layers)} needs a device (e.g. Vulkan0)")
    return None
