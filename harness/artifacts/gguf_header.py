"""A GGUF file's metadata and tensor table, read without touching its vocabulary.

The ``gguf`` package's reader builds a numpy view per element of every array it meets, so a
header with Gemma 3's 262,144-token vocabulary (three arrays of it) took 8 s to open on this
machine, for facts (sizes, layers, tensor shapes) that sit in a few hundred bytes around it.
Here an array's elements are skipped (strings by their lengths, numbers by their width) unless a
caller asks for them, and the layout is the format's own (ggml/docs/gguf.md): the header, the
key/values, the tensor infos, then the data at the next multiple of ``general.alignment``.

Every count is checked against the bytes left, so a corrupt count is a ``ValueError`` (the
caller names the file), never a loop over 2^60 entries or an allocation of that size.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ALIGNMENT = 32
# GGUF value types: uint8 .. bool, string, array, then the 64-bit ones
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Cursor:
    """Little-endian reads from a buffer, each bounds-checked."""

    def __init__(self, data: mmap.mmap | bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def take(self, size: int) -> int:
        start = self.offset
        if size < 0 or start + size > len(self.data):
            raise ValueError(f"needs {size} bytes at offset {start}, the file has {len(self.data)}")
        self.offset += size
        return start

    def unpack(self, fmt: str) -> Any:
        layout = struct.Struct(fmt)
        return layout.unpack_from(self.data, self.take(layout.size))[0]

    def string(self) -> str:
        length = self.unpack("<Q")
        start = self.take(length)
        return bytes(self.data[start:start + length]).decode("utf-8")

    def skip_strings(self, count: int) -> None:
        if count * 8 > len(self.data) - self.offset:
            raise ValueError(f"an array of {count} strings at offset {self.offset} cannot fit")
        for _ in range(count):
            self.take(self.unpack("<Q"))


@dataclass(frozen=True)
class Field:
    """One key/value: a scalar's value, or an array's element type and count (a numeric array
    with its bytes; a string array, e.g. the vocabulary, with its count only)."""

    name: str
    value: Any  # the scalar, or None for an array
    element_type: int = -1  # arrays only
    count: int = 0  # arrays only
    data: bytes | None = None  # numeric arrays only: their elements' bytes

    def contents(self) -> Any:
        """The value; a numeric array's elements as a list (a string array's are not kept)."""
        if self.element_type < 0:
            return self.value
        if self.data is None:
            raise ValueError(f"key {self.name!r}: a string array's elements are not read")
        cursor = _Cursor(self.data, 0)
        return [_scalar(cursor, self.element_type) for _ in range(self.count)]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # as stored: ne[0] (the row length) first
    type_id: int
    data_offset: int  # from the start of the file
    n_elements: int
    n_bytes: int

    @property
    def tensor_type(self) -> Any:
        from gguf import GGMLQuantizationType

        return GGMLQuantizationType(self.type_id)


def _scalar(cursor: _Cursor, kind: int) -> Any:
    if kind == _STRING:
        return cursor.string()
    if kind not in _SCALARS:
        raise ValueError(f"unknown GGUF value type {kind} at offset {cursor.offset}")
    return cursor.unpack(_SCALARS[kind])


def _value(cursor: _Cursor, name: str, kind: int) -> Field:
    if kind != _ARRAY:
        return Field(name, _scalar(cursor, kind))
    element, count = cursor.unpack("<I"), cursor.unpack("<Q")
    if element == _STRING:
        cursor.skip_strings(count)
        return Field(name, None, element, count)
    if element not in _SCALARS:
        raise ValueError(f"key {name!r}: an array of GGUF type {element} is not readable here")
    size = count * struct.calcsize(_SCALARS[element])
    start = cursor.take(size)
    return Field(name, None, element, count, bytes(cursor.data[start:start + size]))


def _tensor_bytes(type_id: int, n_elements: int) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
    return n_elements * size // block


@dataclass(frozen=True)
class Header:
    fields: dict[str, Field]
    tensors: list[TensorInfo]


def read_header(path: Path, header_size: int, n_tensors: int, n_kv: int) -> Header:
    """The key/values and tensor infos after the fixed header (already checked by the caller)."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        cursor = _Cursor(data, header_size)
        fields: dict[str, Field] = {}
        for _ in range(n_kv):
            name = cursor.string()
            fields[name] = _value(cursor, name, cursor.unpack("<I"))
        raw = []
        for _ in range(n_tensors):
            name = cursor.string()
            n_dims = cursor.unpack("<I")
            if n_dims > 8:
                raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
            shape = tuple(cursor.unpack("<Q") for _ in range(n_dims))
            raw.append((name, shape, cursor.unpack("<I"), cursor.unpack("<Q")))
    align = fields.get("general.alignment")
    alignment = int(align.value) if align is not None and align.value else DEFAULT_ALIGNMENT
    start = -(-cursor.offset // alignment) * alignment
    tensors = []
    for name, shape, type_id, offset in raw:
        n_elements = math.prod(shape)
        tensors.append(TensorInfo(name, shape, type_id, start + offset, n_elements,
                                  _tensor_bytes(type_id, n_elements)))
    return Header(fields, tensors)

