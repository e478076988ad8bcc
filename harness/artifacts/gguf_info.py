"""Model facts read from a GGUF file's metadata, for the memory predictor and the store.

Only the header and tensor table are read (``gguf_header``: the vocabulary is skipped, not
parsed), so this is cheap even for multi-GB models. A file that is not a sound GGUF ends in a
``ModelError`` naming the file and the problem, never in a numpy or struct traceback.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.artifacts.gguf_header import read_header
from harness.artifacts.hashing import cached_file_sha256, sha256_cache_size
from harness.errors import ModelError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
_HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, metadata key/value count
# Smallest possible entries: a tensor info is a name (u64 length + 1 byte), n_dims (u32), one
# dimension (u64), a type (u32) and an offset (u64); a key/value is a key (u64 + 1), a type
# (u32) and at least one byte of value. More entries than fit in the file is an absurd count.
_MIN_TENSOR_INFO = 8 + 1 + 4 + 8 + 4 + 8
_MIN_KV = 8 + 1 + 4 + 1


@dataclass(frozen=True)
class ModelInfo:
    path: str
    architecture: str
    name: str
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_embd: int
    n_ff: int
    n_vocab: int
    context_length: int
    file_type: int  # general.file_type, -1 when the file does not say
    file_type_name: str  # llama.cpp's name, e.g. Q4_K_M ("unknown" when absent)
    tensor_bytes: int  # sum of the tensors' data sizes
    n_params: int  # sum of the tensors' element counts
    file_size: int
    # Sliding-window attention (llama.cpp's iSWA cache): the window in tokens (0: none), and per
    # layer whether the layer is a windowed one; both from the metadata or the architecture's
    # default pattern (SWA_PATTERNS).
    n_swa: int = 0
    swa_layers: tuple[bool, ...] = ()
    head_count_kv_layers: tuple[int, ...] = ()  # per layer when the file gives an array
    tied_embeddings: bool = False  # no output.weight: the token embedding is the output matrix
    # (ggml type, ne[1], bytes) of every matrix but the token embedding: what the CPU may repack
    matmul_tensors: tuple[tuple[str, int, int], ...] = ()
    # Mixture of experts: experts per layer and how many a token uses (0: dense), and the data
    # bytes of the expert tensors (names with "_exps"), of which a token reads about
    # n_expert_used / n_expert; under mmap only those pages need to be resident.
    n_expert: int = 0
    n_expert_used: int = 0
    expert_tensor_bytes: int = 0
    # Data bytes of token_embd.weight: a token reads one row of it, not the matrix.
    token_embd_bytes: int = 0
    # Data bytes of each repeating layer's tensors (blk.N.*), and of the output layer's
    # (output.weight, output_norm.weight): how an offload of n_gpu_layers splits the weights.
    layer_bytes: tuple[int, ...] = ()
    output_bytes: int = 0

    @property
    def n_swa_layers(self) -> int:
        return sum(self.swa_layers)

    def kv_heads(self, layer: int) -> int:
        heads = self.head_count_kv_layers
        return heads[layer] if layer < len(heads) else self.n_head_kv


def file_type_name(file_type: int) -> str:
    """llama.cpp's name of a ``general.file_type`` value (``15`` -> ``Q4_K_M``)."""
    from gguf import LlamaFileType

    try:
        member = LlamaFileType(file_type)
    except ValueError:
        return f"unknown({file_type})"
    return member.name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _check_header(path: Path, size: int) -> tuple[int, int]:
    """The tensor and key/value counts of a sound fixed header, else a ModelError."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEADER.size)
    except OSError as error:
        raise ModelError(f"{path}: cannot read ({error.strerror or error})") from error
    if len(head) < _HEADER.size:
        raise ModelError(
            f"{path}: truncated GGUF ({size} bytes; the header alone needs {_HEADER.size})"
        )
    magic, version, n_tensors, n_kv = _HEADER.unpack(head)
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
    if version not in SUPPORTED_VERSIONS:
        raise ModelError(f"{path}: unsupported GGUF version {version} (supported: 2, 3)")
    if n_tensors * _MIN_TENSOR_INFO > size:
        raise ModelError(f"{path}: absurd tensor count {n_tensors} for a file of {size} bytes")
    if n_kv * _MIN_KV > size:
        raise ModelError(f"{path}: absurd metadata count {n_kv} for a file of {size} bytes")
    return n_tensors, n_kv


# The layer pattern llama.cpp assumes when a file with a sliding window gives none (its models/
# ARCH.cpp, load_swa_pattern(ml, N[, dense_first])): N-1 windowed layers then one global one, or
# with dense_first the global layer leads. Architectures not listed must say it in the file.
SWA_PATTERNS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False), "gemma3": (6, False), "gemma-embedding": (6, False),
    "gemma3n": (5, False), "cohere2": (4, False), "cohere2moe": (4, True),
    "exaone4": (4, False), "llama4": (4, False), "olmo2": (4, False), "gpt-oss": (2, False),
}


def swa_pattern(n_layer: int, n_pattern: int, dense_first: bool = False) -> tuple[bool, ...]:
    """Which layers are windowed (llama_hparams::set_swa_pattern); 0 means every layer."""
    if dense_first:
        return tuple(n_pattern == 0 or il % n_pattern != 0 for il in range(n_layer))
    return tuple(n_pattern == 0 or il % n_pattern < n_pattern - 1 for il in range(n_layer))


def _swa_layers(fields: dict[str, Any], arch: str, n_layer: int, n_swa: int,
                path: Path) -> tuple[bool, ...]:
    if n_swa <= 0:
        return ()
    key = f"{arch}.attention.sliding_window_pattern"
    field = fields.get(key)
    if field is not None:
        value = field.contents()
        if isinstance(value, list):
            if len(value) < n_layer:
                raise ModelError(f"{path}: GGUF metadata '{key}' has {len(value)} entries for "
                                 f"{n_layer} layers")
            return tuple(bool(v) for v in value[:n_layer])
        if isinstance(value, int | float):
            return swa_pattern(n_layer, int(value), SWA_PATTERNS.get(arch, (0, False))[1])
    if arch not in SWA_PATTERNS:
        raise ModelError(f"{path}: GGUF metadata lacks '{key}' (a {arch} model with a sliding "
                         "window must say which layers use it)")
    n_pattern, dense_first = SWA_PATTERNS[arch]
    return swa_pattern(n_layer, n_pattern, dense_first)


def _int_list(fields: dict[str, Any], key: str) -> tuple[int, ...]:
    field = fields.get(key)
    if field is None:
        return ()
    value = field.contents()
    return tuple(int(v) for v in value) if isinstance(value, list) else ()


def _field(fields: dict[str, Any], key: str) -> Any:
    field = fields.get(key)
    if field is None:
        return None
    value = field.contents()
    if isinstance(value, list):  # per-layer arrays (e.g. head_count_kv): the largest bounds memory
        numbers = [v for v in value if isinstance(v, int | float)]
        return max(numbers) if numbers else value
    return value


def _need_int(fields: dict[str, Any], key: str, path: Path) -> int:
    value = _field(fields, key)
    if value is None:
        raise ModelError(f"{path}: GGUF metadata lacks '{key}'")
    if not isinstance(value, int | float):
        raise ModelError(f"{path}: GGUF metadata '{key}' is not a number ({value!r})")
    return int(value)


def _optional_int(fields: dict[str, Any], key: str, default: int) -> int:
    value = _field(fields, key)
    return int(value) if isinstance(value, int | float) else default


def read_model_info(path: Path | str) -> ModelInfo:
    """Architecture, sizes and file type of a GGUF model, from its metadata.

    Cached in this process by (path, size, mtime): parsing a large model's header takes seconds
    and every run and plan asks again.
    """
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as error:
        raise ModelError(f"{path}: cannot read ({error.strerror or error})") from error
    return _read_model_info(path, str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _read_model_info(path: Path, resolved: str, size: int, mtime_ns: int) -> ModelInfo:
    if not path.is_file():
        raise ModelError(f"{path}: not a file")
    n_tensors, n_kv = _check_header(path, size)
    try:
        header = read_header(path, _HEADER.size, n_tensors, n_kv)
        fields: dict[str, Any] = dict(header.fields)
        tensors = header.tensors
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, struct.error,
            UnicodeDecodeError, MemoryError) as error:
        raise ModelError(f"{path}: truncated or corrupt GGUF ({error})") from error
    except OSError as error:
        raise ModelError(f"{path}: cannot read ({error.strerror or error})") from error

    for tensor in tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size:
            raise ModelError(
                f"{path}: truncated GGUF (tensor '{tensor.name}' ends at byte {end}, "
                f"the file has {size})"
            )

    arch = _field(fields, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelError(f"{path}: GGUF metadata lacks 'general.architecture'")
    n_layer = _need_int(fields, f"{arch}.block_count", path)
    n_embd = _need_int(fields, f"{arch}.embedding_length", path)
    n_head = _need_int(fields, f"{arch}.attention.head_count", path)
    n_head_kv = _optional_int(fields, f"{arch}.attention.head_count_kv", n_head)
    default_head_dim = n_embd // n_head if n_head else 0
    n_vocab = _optional_int(fields, f"{arch}.vocab_size", 0)
    if not n_vocab and "tokenizer.ggml.tokens" in fields:
        n_vocab = fields["tokenizer.ggml.tokens"].count
    if not n_vocab:
        embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
        n_vocab = int(embd.shape[-1]) if embd is not None and len(embd.shape) > 1 else 0
    if n_vocab <= 0:
        raise ModelError(f"{path}: GGUF metadata lacks '{arch}.vocab_size' and "
                         "'tokenizer.ggml.tokens' (the predictor needs the vocabulary size)")
    file_type = _optional_int(fields, "general.file_type", -1)
    name = _field(fields, "general.name")
    n_swa = _optional_int(fields, f"{arch}.attention.sliding_window", 0)
    names = {t.name for t in tensors}
    return ModelInfo(
        path=str(path),
        architecture=arch,
        name=name if isinstance(name, str) and name else path.stem,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=_optional_int(fields, f"{arch}.attention.key_length", default_head_dim),
        head_dim_v=_optional_int(fields, f"{arch}.attention.value_length", default_head_dim),
        n_embd=n_embd,
        n_ff=_optional_int(fields, f"{arch}.feed_forward_length", 4 * n_embd),
        n_vocab=n_vocab,
        context_length=_optional_int(fields, f"{arch}.context_length", 0),
        file_type=file_type,
        file_type_name=file_type_name(file_type) if file_type >= 0 else "unknown",
        tensor_bytes=sum(int(t.n_bytes) for t in tensors),
        n_params=sum(int(t.n_elements) for t in tensors),
        file_size=size,
        n_swa=n_swa,
        swa_layers=_swa_layers(fields, arch, n_layer, n_swa, path),
        head_count_kv_layers=_int_list(fields, f"{arch}.attention.head_count_kv"),
        tied_embeddings="token_embd.weight" in names and "output.weight" not in names,
        matmul_tensors=tuple(
            (t.tensor_type.name, int(t.shape[1]), int(t.n_bytes)) for t in tensors
            if len(t.shape) >= 2 and t.name != "token_embd.weight"),
        n_expert=_optional_int(fields, f"{arch}.expert_count", 0),
        n_expert_used=_optional_int(fields, f"{arch}.expert_used_count", 0),
        expert_tensor_bytes=sum(int(t.n_bytes) for t in tensors if "_exps" in t.name),
        token_embd_bytes=sum(int(t.n_bytes) for t in tensors if t.name == "token_embd.weight"),
        layer_bytes=_layer_bytes(tensors, n_layer),
        output_bytes=sum(int(t.n_bytes) for t in tensors if t.name.startswith("output")),
    )


def _layer_bytes(tensors: list[Any], n_layer: int) -> tuple[int, ...]:
    """Data bytes per repeating layer, from the ``blk.<i>.`` tensor names."""
    sizes = [0] * n_layer
    for tensor in tensors:
        parts = tensor.name.split(".")
        if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < n_layer:
            sizes[int(parts[1])] += int(tensor.n_bytes)
    return tuple(sizes)


def file_sha256(path: Path | str) -> str:
    """SHA-256 of a model file, cached in this process by (path, size, mtime).

    Hashing a multi-GB model takes seconds; the planner, the push cache and the store all want
    the digest, so it is computed once per file version (``hashing.cached_file_sha256``).
    """
    try:
        return cached_file_sha256(path)
    except OSError as error:
        raise ModelError(f"{path}: cannot read ({error.strerror or error})") from error


__all__ = ["ModelInfo", "file_sha256", "file_type_name", "read_model_info", "sha256_cache_size"]
