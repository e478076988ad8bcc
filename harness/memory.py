"""Peak-memory predictor: weights + KV cache + compute buffers + engine overhead.

The planner uses it to skip cells that would be killed by the low-memory killer before spending
a phone's night on them, and the analysis layer compares it with measured peaks to calibrate it.
Everything here is a pure function of the cell and the model's shape. The KV cache term is exact
for llama.cpp's cache layout; the compute term approximates ggml's graph allocator (see
docs/memory.md for every assumption and what is left out).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness import knobs
from harness.cell import KV_TYPES, Cell
from harness.units import MIB

if TYPE_CHECKING:
    from harness.artifacts.gguf_info import ModelInfo

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


def quant_rank(quant: str) -> tuple[int, float, str]:
    """Sort key of a quant name: fewest bits per weight first, ties by name; unknown names last.

    The one ordering of quants (matrix choices, report axes, "the next lower quant"); names are
    matched case-insensitively, as llama.cpp's file type names are written either way.
    """
    bpw = BITS_PER_WEIGHT.get(quant.upper())
    return (0, bpw, quant.upper()) if bpw is not None else (1, 0.0, quant)


# Every quant the predictor knows, from fewest to most bits per weight.
QUANT_ORDER: tuple[str, ...] = tuple(sorted(BITS_PER_WEIGHT, key=quant_rank))

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
ENGINE_OVERHEAD_BYTES = 13 * MIB
# The same for llama-cpp-python's bench (harness.engines.pybench): the interpreter with llama_cpp,
# numpy and the shared libllama/ggml imported. Measured on this project's x86_64 host: `python -c
# "import llama_cpp"` peaks at 41.5 MiB; the bench on the tiny test model (Q8_0, ctx 512) at 49.9
# MiB, of which the predicted llama.cpp buffers are 4.6 MiB (docs/memory.md, "Calibration").
PYTHON_OVERHEAD_BYTES = 45 * MIB
# llama.cpp's vocabulary in memory: token strings, scores and attributes, the token-to-id map and
# the GGUF metadata they are read from. Measured: loading Gemma 3's 262,144-token vocabulary alone
# (llama-cpp-python, vocab_only) adds 43.0 MiB of anonymous memory, 172 bytes per token.
VOCAB_BYTES_PER_TOKEN = 172
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
    n_swa: int = 0  # sliding window in tokens (0: every layer caches the whole context)
    swa_pattern: int = 0  # every swa_pattern-th layer is global, the others windowed

    @property
    def head_dim_k(self) -> int:
        return self.head_dim

    @property
    def head_dim_v(self) -> int:
        return self.head_dim

    @property
    def swa_layers(self) -> tuple[bool, ...]:
        if self.n_swa <= 0:
            return ()
        p = self.swa_pattern
        return tuple(p == 0 or il % p < p - 1 for il in range(self.n_layer))

    def kv_heads(self, layer: int) -> int:
        return self.n_head_kv


# ggml types whose matrices the CPU backend repacks into interleaved layouts at load time, by the
# CPU feature that enables it (ggml-cpu/repack.cpp, ggml_repack_get_optimal_repack_type, for the
# vendored llama.cpp). The repacked copy is anonymous memory; with mmap the file pages it was read
# from stay mapped and resident too, so those bytes count twice.
_REPACK_BY_FEATURE: dict[tuple[str, str], frozenset[str]] = {
    ("x86_64", "avx2"): frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"}),
    ("x86_64", "avx512"): frozenset({"Q2_K"}),
    ("aarch64", "dotprod"): frozenset({"Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "IQ4_NL",
                                       "MXFP4"}),
    ("aarch64", "i8mm"): frozenset({"Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0"}),
}


def repacked_types(arch: str, features: Iterable[str]) -> frozenset[str]:
    """The weight types a build for ``arch`` (x86_64, aarch64) with ``features`` repacks."""
    out: set[str] = set()
    for feature in features:
        out |= _REPACK_BY_FEATURE.get((arch, feature), frozenset())
    return frozenset(out)


@dataclass(frozen=True)
class KvCache:
    """One of llama.cpp's caches: ``layers`` layers of ``cells`` tokens each."""

    name: str  # "base" (every layer, or the global ones) or "swa" (the windowed layers)
    layers: tuple[int, ...]
    cells: int
    bytes: int


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
    repack: int = 0  # the CPU backend's interleaved copy of some weight types (repacked_types)
    vocab: int = 0  # the tokenizer's tables (VOCAB_BYTES_PER_TOKEN per token)
    state: int = 0  # llama-bench's saved copy of the cache after the depth prefill
    caches: tuple[KvCache, ...] = ()  # the KV term, cache by cache
    compute_reserved: int = 0  # the compute buffer llama.cpp reserves (and logs); compute is
    # what the measured graphs touch: only the last token's logits are computed
    # The compute device's share (harness.knobs: compute_device, n_gpu_layers; 0 on the CPU): the
    # offloaded layers' weights and KV cache (parts of ``weights`` and ``kv``), and the device's
    # own compute buffer (on top of the host's). On a phone it is the same RAM (unified memory).
    device_weights: int = 0
    device_kv: int = 0
    device_compute: int = 0
    # the host's compute buffer in the device's pinned host memory (llama.cpp's Vulkan_Host):
    # part of ``compute``, allocated through the GPU's driver, so the phone counts it as GPU
    # memory; the smaller the offload, the more of the graph it holds
    device_pinned: int = 0
    # what a GPU build's drivers hold in the process (loader, user-mode driver, its caches),
    # measured once per build and phone (harness.engines.devices); a host share, CPU cells too
    driver: int = 0

    @property
    def total(self) -> int:
        return (self.weights + self.repack + self.kv + self.compute + self.vocab + self.state
                + self.overhead + self.device_compute + self.driver)

    @property
    def device(self) -> int:
        """Bytes in the compute device's buffers."""
        return self.device_weights + self.device_kv + self.device_compute + self.device_pinned

    @property
    def host(self) -> int:
        """Bytes in the process's own memory: everything the device does not hold."""
        return self.total - self.device

    def terms(self) -> dict[str, int]:
        return {
            "weights": self.weights,
            "repack": self.repack,
            "kv": self.kv,
            "compute": self.compute,
            "vocab": self.vocab,
            "state": self.state,
            "overhead": self.overhead,
            "device_compute": self.device_compute,
            "driver": self.driver,
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


def kv_caches(model: ModelInfo | ModelCard, n_ctx: int, n_ubatch: int, type_k: str,
              type_v: str, swa_full: bool) -> tuple[KvCache, ...]:
    """llama.cpp's caches for a context of ``n_ctx`` cells (already padded).

    A model with sliding-window attention gets two (llama_kv_cache_iswa): the global layers
    cache every cell, the windowed layers ``min(n_ctx, n_swa + n_ubatch)`` cells rounded up to
    256 (one sequence), or every cell too when ``swa_full``. Rows are per layer, with that
    layer's KV heads.
    """
    swa = model.swa_layers if model.n_swa > 0 else ()
    layers = range(model.n_layer)

    def cache(name: str, members: list[int], cells: int) -> KvCache:
        size = sum(
            cells * (kv_row_bytes(type_k, model.kv_heads(il) * model.head_dim_k)
                     + kv_row_bytes(type_v, model.kv_heads(il) * model.head_dim_v))
            for il in members)
        return KvCache(name, tuple(members), cells, size)

    if not swa or not any(swa):
        return (cache("base", list(layers), n_ctx),)
    cells_swa = n_ctx if swa_full else min(
        n_ctx, math.ceil((model.n_swa + n_ubatch) / CTX_PADDING) * CTX_PADDING)
    return (cache("base", [il for il in layers if not swa[il]], n_ctx),
            cache("swa", [il for il in layers if swa[il]], cells_swa))


def depth_state_bytes(caches: tuple[KvCache, ...], n_depth: int) -> int:
    """llama-bench's copy of the cache after the depth prefill (tools/llama-bench, ``ctx_state``:
    ``llama_state_seq_get_data`` into a host buffer, restored before every repetition instead of
    recomputing the depth): the rows of the cells the depth occupies, per cache."""
    if n_depth <= 0:
        return 0
    return sum(c.bytes // c.cells * min(c.cells, n_depth) for c in caches if c.cells)


def repack_bytes(model: ModelInfo | ModelCard, types: frozenset[str]) -> int:
    """Bytes of the matrices the CPU backend repacks (rows a multiple of 8, not the embedding)."""
    tensors = getattr(model, "matmul_tensors", ())
    return sum(n_bytes for type_name, rows, n_bytes in tensors
               if type_name in types and rows % 8 == 0)


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
    n_outputs: int | None = None,
    n_ctx_swa: int = 0,
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

    ``n_outputs`` is how many tokens of the micro-batch produce logits: all of them (the default)
    is what llama.cpp reserves; a benchmark's prompt asks only for the last token's, and pages of
    the buffer no graph writes to are never resident. ``n_ctx_swa`` adds the windowed layers'
    own attention mask.
    """
    ub = n_ubatch
    outputs = ub if n_outputs is None else max(0, min(n_outputs, ub))
    mask = (n_ctx + n_ctx_swa) * ub * (2 if flash_attn else F32)
    scores = 0 if flash_attn else n_ctx * n_head * F32
    attention = scores + F32 * (
        n_head * head_dim_k + n_head_kv * (head_dim_k + head_dim_v) + n_head * head_dim_v
        + 3 * n_embd
    )
    feed_forward = F32 * (3 * n_ff + 4 * n_embd)
    output = F32 * (n_vocab + 5 * n_embd)
    small_inputs = 6 * 4  # token ids, positions, output ids ... (int32 per token)
    if outputs == ub:
        return mask + ub * (max(attention, feed_forward, output) + small_inputs)
    return mask + ub * (max(attention, feed_forward) + small_inputs) + outputs * output


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


@dataclass(frozen=True)
class EngineMemory:
    """What an engine adds around llama.cpp's own buffers."""

    overhead_bytes: int  # the process itself: binary, runtime, libraries, allocator
    saves_depth_state: bool  # keeps a copy of the cache after the depth prefill (llama-bench)


ENGINE_MEMORY = {
    "llama-bench": EngineMemory(ENGINE_OVERHEAD_BYTES, True),
    # the interpreter, numpy and libllama.so, imported (see PYTHON_OVERHEAD_BYTES); the bench
    # prefills the depth again before every test instead of restoring a saved copy
    "llama-cpp-python": EngineMemory(PYTHON_OVERHEAD_BYTES, False),
}


def engine_memory(engine: str) -> EngineMemory:
    """An engine's own memory terms; an engine without figures counts as llama-bench."""
    return ENGINE_MEMORY.get(engine, ENGINE_MEMORY["llama-bench"])


def predict_peak(cell: Cell, model: ModelInfo | ModelCard,
                 repack: frozenset[str] = frozenset(), driver: int = 0) -> MemoryPrediction:
    """Predict the peak resident memory of running ``cell`` on ``model``.

    With mmap the weights are file-backed pages, but every one is touched while decoding, so
    they count in RSS/PSS just as an anonymous copy would. ``repack`` names the weight types the
    build repacks (``repacked_types``): with mmap they count twice, without it once.
    ``driver`` is what the build's GPU drivers hold in the process on this phone (0: none).
    """
    if isinstance(model, ModelCard):
        weights = estimate_weights_bytes(model, cell.quant)
        source = "card"
    else:
        weights = model.tensor_bytes
        source = "gguf"
    engine = engine_memory(cell.engine)
    flash = cell.flash_attn != "off"
    n_ctx = padded_ctx(cell.n_ctx)
    ubatch = effective_ubatch(cell.n_ctx, cell.n_batch, cell.n_ubatch)
    caches = kv_caches(model, n_ctx, ubatch, cell.type_k, cell.type_v, cell.swa_full)
    swa_cells = next((c.cells for c in caches if c.name == "swa"), 0)
    shape = dict(n_ctx=n_ctx, n_ubatch=ubatch, n_embd=model.n_embd, n_ff=model.n_ff,
                 n_head=model.n_head, n_head_kv=model.n_head_kv, head_dim_k=model.head_dim_k,
                 head_dim_v=model.head_dim_v, n_vocab=model.n_vocab, flash_attn=flash,
                 n_ctx_swa=swa_cells)
    repacked = repack_bytes(model, repack)
    split = offload_split(cell, model, weights)
    kv = sum(c.bytes for c in caches)
    reserved = compute_buffer_bytes(**shape)  # type: ignore[arg-type]
    compute = compute_buffer_bytes(**shape, n_outputs=1)  # type: ignore[arg-type]
    return MemoryPrediction(
        weights=(weights if cell.mmap else weights - repacked) + split.duplicate,
        kv=kv,
        compute=compute,
        overhead=engine.overhead_bytes,
        n_ctx=n_ctx,
        n_ubatch=ubatch,
        flash_attn=flash,
        weights_source=source,
        repack=repacked,
        vocab=model.n_vocab * VOCAB_BYTES_PER_TOKEN,
        state=depth_state_bytes(caches, cell.n_depth) if engine.saves_depth_state else 0,
        caches=caches,
        compute_reserved=reserved,
        device_weights=split.weights,
        device_kv=round(kv * split.layer_share),
        device_compute=reserved if split.weights or split.layer_share else 0,
        device_pinned=(min(compute, round(reserved * (1 - split.layer_share)))
                       if cell.compute_device != knobs.CPU_DEVICE else 0),
        driver=driver,
    )


@dataclass(frozen=True)
class OffloadSplit:
    """What an offload puts on the device: weight bytes (the tied output's copy included), the
    share of the repeating layers (their KV cache follows them), and the bytes the device holds
    in addition to the host's weights (a tied embedding's copy as the output layer)."""

    weights: int = 0
    layer_share: float = 0.0
    duplicate: int = 0


def offload_split(cell: Cell, model: ModelInfo | ModelCard, weights: int) -> OffloadSplit:
    """The device's part of the weights for ``cell``'s device and n_gpu_layers.

    llama.cpp (src/llama-model.cpp) keeps the input embedding on the CPU and offloads from the
    end: the output layer first, then the last repeating layers. A file gives each layer's
    bytes (``layer_bytes``); a card spreads the non-embedding weights evenly over the layers.
    A tied embedding used as the output layer is copied to the device (llama.cpp duplicates it).
    """
    if cell.compute_device == knobs.CPU_DEVICE or cell.n_gpu_layers == 0:
        return OffloadSplit()
    n_layer = model.n_layer
    layers = knobs.offloaded_layers(cell.n_gpu_layers, n_layer)
    output = knobs.output_offloaded(cell.n_gpu_layers)
    per_layer = tuple(getattr(model, "layer_bytes", ()) or ())
    embedding = int(getattr(model, "token_embd_bytes", 0) or 0)
    tied = bool(getattr(model, "tied_embeddings", False))
    output_bytes = int(getattr(model, "output_bytes", 0) or 0)
    if len(per_layer) == n_layer and per_layer:
        on_device = sum(per_layer[n_layer - layers:]) if layers else 0
    else:  # a card: no per-layer figures; an untied embedding as big as the output matrix
        output_bytes = output_bytes or model.n_vocab * model.n_embd * weights // max(
            getattr(model, "n_params", 0) or 1, 1)
        embedding = embedding or output_bytes
        body = max(weights - output_bytes - embedding, 0)
        on_device = body * layers // max(n_layer, 1)
    duplicate = embedding if (output and tied) else 0
    if output:
        on_device += duplicate or output_bytes
    return OffloadSplit(on_device, layers / n_layer if n_layer else 0.0, duplicate)
