"""Deterministic synthetic llama-architecture GGUF models and their cached quant ladder.

Tests, the demo and benchmarks need real GGUF files that llama.cpp loads and runs, at every quant
level, without downloading weights. These models are generated from a seed: random (small,
scaled) weights in the exact tensor layout of a llama model with grouped-query attention, and an
SPM ("llama") vocabulary with byte-fallback tokens that llama.cpp's tokenizer accepts. Their text
is gibberish; their shapes, memory and speed are what a benchmark needs.

A spec with experts (``n_expert`` > 0) is a Mixtral-style mixture of experts, which llama.cpp
loads as architecture "llama": each layer's FFN is a router (``ffn_gate_inp``) and three 3-D
expert tensors (``ffn_{gate,up,down}_exps``), of which a token touches only ``n_expert_used``
experts' slices. That is what makes resident memory stay below the file size under mmap.

The ladder (F16 base plus llama.cpp quantisations) is cached by content under
``$HARNESS_CACHE/models/<key>/`` (default ``~/.cache/harness``), so only the first call pays.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from harness.artifacts import realmodel
from harness.artifacts.ladder import (
    FILE_TYPES,
    LADDER_QUANTS,
    LADDER_SIZES,
    REAL_LADDERS,
    SYNTHETIC_SIZES,
    atomic_output,
    default_cache_root,
    exclusive,
    ladder_quants,
    llama_cpp_python_version,
    quantize_ladder,
)
from harness.errors import ConfigError

__all__ = [
    "GENERATOR_VERSION",
    "LADDER_QUANTS",
    "LADDER_SIZES",
    "LADDER_SPECS",
    "REAL_LADDERS",
    "SYNTHETIC_SIZES",
    "ModelSpec",
    "cache_key",
    "ensure_ladder",
    "ladder_dir",
    "ladder_quants",
    "spec_identity",
    "write_model",
]

# Bump whenever write_model's output changes, so cached ladders are remade.
GENERATOR_VERSION = 1

# K-quants pack 256-element super-blocks along a row; shorter rows fall back to other types.
QK_K = 256
MAX_EXPERTS = 1024  # llama.cpp's LLAMA_MAX_EXPERTS (llama-hparams.h, in 0.3.36's vendored copy)
N_SPECIAL = 3  # <unk>, <s>, </s>
N_BYTE = 256  # <0x00>..<0xFF>
SPACE = "\u2581"  # SentencePiece's word-boundary marker


@dataclass(frozen=True)
class ModelSpec:
    """The shape of one synthetic model; every field takes part in the cache key.

    ``n_ff`` is the FFN width of one expert when ``n_expert`` > 0. The expert fields enter the
    key only when non-zero (``spec_identity``), so the dense sizes keep the keys they always had.
    """

    size: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx_train: int = 8192
    rope_freq_base: float = 10000.0
    rms_norm_eps: float = 1e-5
    init_std: float = 0.02
    seed: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    # What attention and the FFN add to the residual stream, as a factor on init_std; 0 is
    # GPT-2's 1/sqrt(2 * n_layer). The moe model keeps it tiny, so each layer's router sees the
    # token's own embedding: routing is independent and uniform from token to token (no expert
    # locality, the case harness.paging_predict predicts), not steered by a context all tokens
    # share.
    residual_gain: float = 0.0

    def __post_init__(self) -> None:
        for name in ("n_embd", "n_ff"):
            if getattr(self, name) % QK_K:
                raise ValueError(f"{name} must be a multiple of {QK_K} for K-quants")
        if self.n_embd % self.n_head or self.n_head % self.n_head_kv:
            raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
        if not self.n_head_kv < self.n_head:
            raise ValueError("n_head_kv must be below n_head (grouped-query attention)")
        if self.n_vocab <= N_SPECIAL + N_BYTE:
            raise ValueError(f"n_vocab must exceed {N_SPECIAL + N_BYTE} (special + byte tokens)")
        if self.n_expert < 0 or self.n_expert > MAX_EXPERTS:
            raise ValueError(f"n_expert must be 0 (dense) or 1..{MAX_EXPERTS} (llama.cpp's limit)")
        if self.n_expert and not 1 <= self.n_expert_used <= self.n_expert:
            raise ValueError("n_expert_used must be in 1..n_expert for a mixture of experts")
        if not self.n_expert and self.n_expert_used:
            raise ValueError("n_expert_used needs n_expert > 0 (a dense model uses no experts)")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_embd_kv(self) -> int:
        return self.head_dim * self.n_head_kv

    @property
    def _dense_per_layer(self) -> int:
        """A layer's parameters outside the experts: norms, attention, and the router."""
        return (
            2 * self.n_embd  # attn_norm, ffn_norm
            + 2 * self.n_embd * self.n_embd  # attn_q, attn_output
            + 2 * self.n_embd * self.n_embd_kv  # attn_k, attn_v
            + self.n_expert * self.n_embd  # ffn_gate_inp (the router); 0 when dense
        )

    @property
    def _ffn_per_expert(self) -> int:
        return 3 * self.n_embd * self.n_ff  # gate, up, down

    @property
    def n_params(self) -> int:
        """Parameter count, embeddings, output head and every expert included."""
        per_layer = self._dense_per_layer + max(self.n_expert, 1) * self._ffn_per_expert
        return 2 * self.n_vocab * self.n_embd + self.n_embd + self.n_layer * per_layer

    @property
    def n_params_active(self) -> int:
        """Parameters one token's forward pass reads: the dense part, ``n_expert_used`` experts
        per layer, and one row of the token embedding (a lookup, not a matrix product)."""
        per_layer = self._dense_per_layer + max(self.n_expert_used, 1) * self._ffn_per_expert
        return self.n_vocab * self.n_embd + 2 * self.n_embd + self.n_layer * per_layer


LADDER_SPECS: dict[str, ModelSpec] = {
    # A few MB: loads in milliseconds, so tests can run every rung.
    "tiny": ModelSpec(
        size="tiny", n_vocab=1024, n_embd=256, n_layer=3, n_head=4, n_head_kv=2, n_ff=512
    ),
    # Tens of millions of parameters: a p64/g32 trial takes seconds on two cores.
    "bench": ModelSpec(
        size="bench", n_vocab=16384, n_embd=768, n_layer=8, n_head=12, n_head_kv=4, n_ff=2048
    ),
    # 8 experts, 2 used per token: about 245 MB in F16 of which a token reads about a third, so
    # a run by mmap paging keeps less resident than the file (only the active experts' pages).
    "moe": ModelSpec(
        size="moe", n_vocab=16384, n_embd=512, n_layer=8, n_head=8, n_head_kv=2, n_ff=1024,
        n_expert=8, n_expert_used=2, residual_gain=0.002,
    ),
}


def spec_for(size: str) -> ModelSpec:
    """The spec of a ladder size; an unknown size is the user's mistake (ConfigError)."""
    try:
        return LADDER_SPECS[size]
    except KeyError:
        if size in REAL_LADDERS:
            raise ConfigError(f"{size} is a real model, not a synthetic spec") from None
        allowed = ", ".join(LADDER_SIZES)
        raise ConfigError(f"unknown model size {size!r}; use one of: {allowed}") from None


# --- vocabulary -------------------------------------------------------------------------------


def _pieces(n_normal: int) -> list[str]:
    """Word pieces, shortest first, each reachable by SPM merges of pieces already listed."""
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    singles = [chr(c) for c in range(0x21, 0x7F)]
    pieces: dict[str, None] = dict.fromkeys([SPACE])
    for char in singles:
        pieces[char] = None
        pieces[SPACE + char] = None
    stems = list(letters)
    while len(pieces) < n_normal:
        stems = [stem + letter for stem in stems for letter in letters]
        for stem in stems:
            pieces[SPACE + stem] = None
            pieces[stem] = None
            if len(pieces) >= n_normal:
                break
    return list(pieces)[:n_normal]


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of an SPM vocabulary of ``n_vocab`` entries.

    Ids 0-2 are <unk>, <s>, </s> (llama.cpp's SPM defaults); 3-258 are the byte-fallback tokens
    <0x00>..<0xFF> that llama.cpp needs for any text outside the vocabulary (and for "\\n").
    """
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(N_BYTE)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * N_BYTE
    scores = [0.0] * len(tokens)
    normal = _pieces(n_vocab - len(tokens))
    tokens += normal
    scores += [-float(i) for i in range(len(normal))]
    types += [gguf.TokenType.NORMAL] * len(normal)
    return tokens, scores, [int(t) for t in types]


# --- weights ----------------------------------------------------------------------------------


def _ffn_shapes(spec: ModelSpec, i: int) -> list[tuple[str, tuple[int, ...]]]:
    """One layer's FFN: dense, or a router and the experts stacked along the first numpy axis.

    numpy shapes are ggml's ne reversed, so (n_expert, n_ff, n_embd) is llama.cpp's
    ne = [n_embd, n_ff, n_expert] for gate/up, and (n_expert, n_embd, n_ff) its [n_ff, n_embd,
    n_expert] for down (llama-model.cpp, LLM_ARCH_LLAMA with n_expert > 0).
    """
    e, ff, n = spec.n_embd, spec.n_ff, spec.n_expert
    if not n:
        return [
            (f"blk.{i}.ffn_gate.weight", (ff, e)),
            (f"blk.{i}.ffn_up.weight", (ff, e)),
            (f"blk.{i}.ffn_down.weight", (e, ff)),
        ]
    return [
        (f"blk.{i}.ffn_gate_inp.weight", (n, e)),
        (f"blk.{i}.ffn_gate_exps.weight", (n, ff, e)),
        (f"blk.{i}.ffn_up_exps.weight", (n, ff, e)),
        (f"blk.{i}.ffn_down_exps.weight", (n, e, ff)),
    ]


def _tensor_shapes(spec: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    """llama tensor names and numpy shapes (rows = outputs), in file order."""
    e, kv = spec.n_embd, spec.n_embd_kv
    shapes: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (spec.n_vocab, e))]
    for i in range(spec.n_layer):
        shapes += [
            (f"blk.{i}.attn_norm.weight", (e,)),
            (f"blk.{i}.attn_q.weight", (e, e)),
            (f"blk.{i}.attn_k.weight", (kv, e)),
            (f"blk.{i}.attn_v.weight", (kv, e)),
            (f"blk.{i}.attn_output.weight", (e, e)),
            (f"blk.{i}.ffn_norm.weight", (e,)),
            *_ffn_shapes(spec, i),
        ]
    shapes += [("output_norm.weight", (e,)), ("output.weight", (spec.n_vocab, e))]
    return shapes


def _is_router(name: str) -> bool:
    return name.endswith("ffn_gate_inp.weight")


def _file_dtype(name: str, shape: tuple[int, ...]) -> np.dtype[np.floating]:
    """F32 for norms and the router (as convert_hf_to_gguf writes them; llama.cpp's quantiser
    never touches the router either), F16 for every other matrix."""
    return np.dtype(np.float32 if len(shape) == 1 or _is_router(name) else np.float16)


def _weights(spec: ModelSpec) -> Iterator[tuple[str, np.ndarray]]:
    """Seeded weights in file order: F32 norms near 1, F16 matrices with small variance.

    Projections back into the residual stream are scaled down by sqrt(2 * n_layer) (as GPT-2
    does), so activations stay bounded through the layers and no rung produces NaNs. The router
    has unit-variance logits on a normalised input (std 1/sqrt(n_embd)), so its top experts
    differ from token to token rather than being a near tie that one expert always wins.
    """
    rng = np.random.default_rng(spec.seed)
    residual_scale = spec.residual_gain or 1.0 / np.sqrt(2.0 * spec.n_layer)
    for name, shape in _tensor_shapes(spec):
        dtype = _file_dtype(name, shape)
        if len(shape) == 1:
            norm = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
            yield name, norm.astype(dtype)
            continue
        std = spec.init_std
        if _is_router(name):
            std = 1.0 / np.sqrt(spec.n_embd)
        elif name.endswith(("attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight")):
            std *= residual_scale
        matrix = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        yield name, matrix.astype(dtype)


# --- file -------------------------------------------------------------------------------------


def write_model(spec: ModelSpec, path: Path) -> None:
    """Write the F16 GGUF of ``spec`` to ``path``; the same spec always gives the same bytes."""
    tokens, scores, types = vocabulary(spec.n_vocab)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(f"harness-{spec.size}")
    writer.add_file_type(FILE_TYPES["F16"])
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    if spec.n_expert:
        writer.add_expert_count(spec.n_expert)
        writer.add_expert_used_count(spec.n_expert_used)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(spec.rope_freq_base)
    writer.add_layer_norm_rms_eps(spec.rms_norm_eps)
    writer.add_vocab_size(spec.n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    # Declare every tensor first, then stream the data: the bench model never sits in memory.
    for name, shape in _tensor_shapes(spec):
        dtype = _file_dtype(name, shape)
        writer.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, array in _weights(spec):
        writer.write_tensor_data(array)
    writer.close()


# --- cached ladder ----------------------------------------------------------------------------


# Fields added after ladders were cached: in the key only when they differ from the default, so
# the keys of existing sizes (and the results stored against them) stay what they were.
_KEY_OPTIONAL = ("n_expert", "n_expert_used", "residual_gain")


def spec_identity(spec: ModelSpec) -> dict[str, object]:
    """The spec as the cache key sees it: every field, minus later ones left at zero."""
    fields = dataclasses.asdict(spec)
    return {k: v for k, v in fields.items() if k not in _KEY_OPTIONAL or v}


def cache_key(spec: ModelSpec) -> str:
    """Content key of a ladder: generator version, spec (seed included), quantiser version."""
    identity = {
        "generator": GENERATOR_VERSION,
        "spec": spec_identity(spec),
        "llama_cpp_python": llama_cpp_python_version(),
    }
    blob = json.dumps(identity, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def ladder_dir(size: str = "tiny", cache_dir: Path | None = None) -> Path:
    """Where the ladder of ``size`` lives: ``<cache root>/models/<key>/``."""
    root = cache_dir if cache_dir is not None else default_cache_root()
    if size in REAL_LADDERS:
        return realmodel.ladder_dir(root)
    return root / "models" / cache_key(spec_for(size))


def ladder_paths(size: str = "tiny", cache_dir: Path | None = None) -> dict[str, Path]:
    """quant -> file path of each rung of the ``size`` ladder (whether or not made yet); a
    ladder with fewer rungs than LADDER_QUANTS (``ladder_quants``) has no entry for the rest."""
    if size in REAL_LADDERS:
        return realmodel.ladder_paths(cache_dir if cache_dir is not None else default_cache_root())
    directory = ladder_dir(size, cache_dir)
    return {q: directory / f"harness-{size}-{q}.gguf" for q in ladder_quants(size)}


def ensure_ladder(
    size: str = "tiny",
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """Make (or find) the quant ladder of ``size``; return quant -> GGUF file, in ladder order.

    ``cache_dir`` replaces the cache root ($HARNESS_CACHE). Files already present are kept as
    they are, so a second call returns at once without rewriting anything.
    """
    if size in REAL_LADDERS:
        root = cache_dir if cache_dir is not None else default_cache_root()
        return realmodel.ensure_real_ladder(root, progress)
    paths = ladder_paths(size, cache_dir)
    if all(path.exists() for path in paths.values()):
        return paths
    spec = spec_for(size)
    with exclusive(paths["F16"].parent):
        # Holding the lock, no one else is writing here: temporaries are from a killed run.
        for stale in paths["F16"].parent.glob(".*.tmp-*"):
            stale.unlink()
        base = paths["F16"]
        if not base.exists():
            if progress is not None:
                progress(f"generating {base.name} ({spec.n_params:,} parameters)")
            with atomic_output(base) as tmp:
                write_model(spec, tmp)
        quantize_ladder(base, {q: p for q, p in paths.items() if q != "F16"}, progress)
    return paths
