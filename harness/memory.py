"""Peak-memory predictor: weights + KV cache + compute buffers + engine overhead.

The planner uses it to skip cells that would be killed by the low-memory killer before spending
a phone's night on them, and the analysis layer compares it with measured peaks to calibrate it.
Everything here is a pure function of the cell and the model's shape. The KV cache term is exact
for llama.cpp's cache layout; the compute term approximates ggml's graph allocator (see
docs/memory.md for every assumption and what is left out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.cell import KV_TYPES, Cell

if TYPE_CHECKING:
    from harness.artifacts.gguf_info import ModelInfo

MiB = 1024 * 1024

# ggml block layout of each KV cache type: (bytes per block, elements per block).
KV_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q4_0": (18, 32),
    "q4_1": (20, 32),
    "q5_0": (22, 32),
    "q5_1": (24, 32),
    "iq4_nl": (18, 32),
}
assert set(KV_BLOCKS) == set(KV_TYPES)

# Model file sizes llama.cpp's quantize tool lists for Llama-3-8B (8,030,261,248 parameters),
# in GiB (tools/quantize/quantize.cpp, QUANT_OPTIONS). Bits per weight are derived from them, so
# they include llama.cpp's per-tensor mixes (e.g. Q4_K_M keeps some tensors at Q6_K).
_LLAMA3_8B_PARAMS = 8_030_261_248
_LLAMA3_8B_GIB = {
    "Q2_K": 2.96, "Q2_K_S": 2.96, "Q3_K_S": 3.41, "Q3_K_M": 3.74, "Q3_K_L": 4.03,
    "Q4_0": 4.34, "Q4_1": 4.78, "Q4_K_S": 4.37, "Q4_K_M": 4.58, "Q5_0": 5.21, "Q5_1": 5.65,
    "Q5_K_S": 5.21, "Q5_K_M": 5.33, "Q6_K": 6.14, "Q8_0": 7.96,
}
# Types quantize.cpp only gives as a bits-per-weight figure, plus the unquantised ones.
_NOMINAL_BPW = {
    "F32": 32.0, "F16": 16.0, "BF16": 16.0,
    "IQ1_S": 1.56, "IQ1_M": 1.75, "TQ1_0": 1.69, "TQ2_0": 2.06, "IQ2_XXS": 2.06, "IQ2_XS": 2.31,
    "IQ2_S": 2.5, "IQ2_M": 2.7, "IQ3_XXS": 3.06, "IQ3_XS": 3.3, "IQ3_S": 3.44, "IQ3_M": 3.66,
    "IQ4_XS": 4.25, "IQ4_NL": 4.5,
}
BITS_PER_WEIGHT: dict[str, float] = {
    **_NOMINAL_BPW,
    **{
        name: round(gib * 2**30 * 8 / _LLAMA3_8B_PARAMS, 3)
        for name, gib in _LLAMA3_8B_GIB.items()
    },
}
# llama.cpp stores the output projection (or the tied token embedding) as Q6_K for every
# quantised file type except Q8_0 (llama_tensor_get_type); 210 bytes per 256 weights.
_OUTPUT_Q6K_BPW = 210 * 8 / 256

# llama.cpp rounds the context up to its KV padding (256 with flash attention, 32 without);
# we always round to 256: at most 255 tokens of over-estimate.
CTX_PADDING = 256
# The engine binary, libc++/ggml runtime, thread stacks, graph metadata and the one-token
# output buffer, taken together. A flat figure calibrated on a measured peak: a static x86_64
# llama-bench (GGML_NATIVE=OFF) on the 2.3M-parameter test model peaks at 16-18 MiB RSS of which
# weights, KV cache and compute buffers are 4-5 MiB (see docs/memory.md, "Calibration").
ENGINE_OVERHEAD_BYTES = 13 * MiB
F32 = 4


@dataclass(frozen=True)
class ModelCard:
    """A model's architecture as a matrix declares it, to plan without the GGUF file."""

    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_embd: int
    n_ff: int
    n_vocab: int
    n_params: int

    @property
    def head_dim_k(self) -> int:
        return self.head_dim

    @property
    def head_dim_v(self) -> int:
        return self.head_dim


@dataclass(frozen=True)
class MemoryPrediction:
    """Predicted peak resident memory of one cell, each term kept for calibration."""

    weights: int
    kv: int
    compute: int
    overhead: int
    n_ctx: int  # the context after llama.cpp's padding
    n_ubatch: int  # the micro-batch after llama.cpp's clamping
    flash_attn: bool  # as resolved ("auto" counts as on: the CPU backend supports it)
    weights_source: str  # "gguf" (tensor bytes of the file) or "card" (params x bits/weight)

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.overhead

    def terms(self) -> dict[str, int]:
        return {
            "weights": self.weights,
            "kv": self.kv,
            "compute": self.compute,
            "overhead": self.overhead,
        }


def kv_row_bytes(kv_type: str, n_elements: int) -> int:
    """Bytes of one cache row of ``n_elements`` values (ggml_row_size)."""
    if kv_type not in KV_BLOCKS:
        raise ValueError(f"unknown KV cache type {kv_type!r} (allowed: {', '.join(KV_TYPES)})")
    block_bytes, block_elems = KV_BLOCKS[kv_type]
    if n_elements % block_elems:
        raise ValueError(
            f"a {kv_type} cache row needs a multiple of {block_elems} values, got {n_elements}"
        )
    return n_elements // block_elems * block_bytes


def kv_type_fits(kv_type: str, n_elements: int) -> bool:
    """Whether a row of ``n_elements`` can be stored as ``kv_type`` (whole blocks only)."""
    return kv_type in KV_BLOCKS and n_elements % KV_BLOCKS[kv_type][1] == 0


def kv_cache_bytes(
    n_layer: int,
    n_head_kv: int,
    head_dim_k: int,
    head_dim_v: int,
    n_ctx: int,
    type_k: str,
    type_v: str,
) -> int:
    """Exact size of llama.cpp's KV cache: per layer, one K and one V row per cell of context.

    A row holds ``n_head_kv * head_dim`` values (grouped-query attention shares K/V heads), and
    quantised types store them in blocks of 32.
    """
    per_token = kv_row_bytes(type_k, n_head_kv * head_dim_k) + kv_row_bytes(
        type_v, n_head_kv * head_dim_v
    )
    return n_layer * n_ctx * per_token


def padded_ctx(n_ctx: int) -> int:
    return math.ceil(n_ctx / CTX_PADDING) * CTX_PADDING


def effective_ubatch(n_ctx: int, n_batch: int, n_ubatch: int) -> int:
    """llama.cpp clamps n_batch to n_ctx (causal models) and n_ubatch to n_batch."""
    return max(1, min(n_ubatch, n_batch, n_ctx))


def compute_buffer_bytes(
    *,
    n_ctx: int,
    n_ubatch: int,
    n_embd: int,
    n_ff: int,
    n_head: int,
    n_head_kv: int,
    head_dim_k: int,
    head_dim_v: int,
    n_vocab: int,
    flash_attn: bool,
) -> int:
    """The CPU compute buffer of the worst-case (prompt) graph, approximated.

    llama.cpp reserves the graph for a full micro-batch with every token an output; ggml's
    allocator reuses memory between nodes, so the buffer is about the largest set of tensors
    alive at once. Graph inputs live throughout, the largest being the attention mask
    (n_ctx x n_ubatch, f16 with flash attention, else f32). On top of it we take the largest of
    three moments, per token of the micro-batch: inside attention (the n_ctx x n_head score
    matrix in f32 when flash attention is off, Q/K/V, the attention output and three hidden
    states), inside the feed-forward block (three n_ff tensors and four hidden states) and at
    the output (the n_vocab logits and five hidden states). The hidden-state counts were fitted
    to llama.cpp's logged buffer sizes (docs/memory.md); they over-estimate small graphs a little.
    """
    ub = n_ubatch
    mask = n_ctx * ub * (2 if flash_attn else F32)
    scores = 0 if flash_attn else n_ctx * n_head * F32
    attention = scores + F32 * (
        n_head * head_dim_k + n_head_kv * (head_dim_k + head_dim_v) + n_head * head_dim_v
        + 3 * n_embd
    )
    feed_forward = F32 * (3 * n_ff + 4 * n_embd)
    output = F32 * (n_vocab + 5 * n_embd)
    small_inputs = 6 * 4  # token ids, positions, output ids ... (int32 per token)
    return mask + ub * (max(attention, feed_forward, output) + small_inputs)


def estimate_weights_bytes(card: ModelCard, quant: str) -> int:
    """Weights of a model file that is not at hand: parameters x bits per weight / 8.

    One n_vocab x n_embd matrix (the output projection, or the tied embedding) is counted at
    Q6_K's 6.5625 bits for quantised types other than Q8_0, as llama.cpp's quantiser does;
    without this, small models with large vocabularies come out 10-20 % light.
    """
    name = quant.upper()
    if name not in BITS_PER_WEIGHT:
        raise ValueError(f"no bits-per-weight figure for quant {quant!r}")
    bpw = BITS_PER_WEIGHT[name]
    output_params = min(card.n_vocab * card.n_embd, card.n_params)
    if name in ("F32", "F16", "BF16", "Q8_0"):
        return math.ceil(card.n_params * bpw / 8)
    body = card.n_params - output_params
    return math.ceil(body * bpw / 8 + output_params * _OUTPUT_Q6K_BPW / 8)


def predict_peak(cell: Cell, model: ModelInfo | ModelCard) -> MemoryPrediction:
    """Predict the peak resident memory of running ``cell`` on ``model``.

    With mmap the weights are file-backed pages, but every one is touched while decoding, so
    they count in RSS/PSS just as an anonymous copy would.
    """
    if isinstance(model, ModelCard):
        weights = estimate_weights_bytes(model, cell.quant)
        source = "card"
    else:
        weights = model.tensor_bytes
        source = "gguf"
    flash = cell.flash_attn != "off"
    n_ctx = padded_ctx(cell.n_ctx)
    ubatch = effective_ubatch(n_ctx, cell.n_batch, cell.n_ubatch)
    kv = kv_cache_bytes(
        model.n_layer, model.n_head_kv, model.head_dim_k, model.head_dim_v,
        n_ctx, cell.type_k, cell.type_v,
    )
    compute = compute_buffer_bytes(
        n_ctx=n_ctx,
        n_ubatch=ubatch,
        n_embd=model.n_embd,
        n_ff=model.n_ff,
        n_head=model.n_head,
        n_head_kv=model.n_head_kv,
        head_dim_k=model.head_dim_k,
        head_dim_v=model.head_dim_v,
        n_vocab=model.n_vocab,
        flash_attn=flash,
    )
    return MemoryPrediction(
        weights=weights,
        kv=kv,
        compute=compute,
        overhead=ENGINE_OVERHEAD_BYTES,
        n_ctx=n_ctx,
        n_ubatch=ubatch,
        flash_attn=flash,
        weights_source=source,
    )
