"""Sliding-window attention in the predictor, against the cache sizes llama.cpp itself reports.

The figures below are llama.cpp's own "llama_kv_cache: size" lines for Gemma 3 270M (18 layers,
one KV head of 256 for K and for V, a 512-token window on 15 layers), flash attention on and
n_ubatch 512, summed over its two caches: facts of the vendored llama.cpp, which the predictor
must reproduce from the model's shape alone. tests/test_realmodel.py checks the same on the real
file, through llama.cpp, for every cell of matrices/real-kv.yaml.
"""

from __future__ import annotations

import pytest

from harness.artifacts.gguf_info import swa_pattern
from harness.cell import Cell
from harness.memory import (
    VOCAB_BYTES_PER_TOKEN,
    ModelCard,
    kv_caches,
    predict_peak,
    repacked_types,
)

MiB = 1024 * 1024
GEMMA3_270M = ModelCard(n_layer=18, n_head=4, n_head_kv=1, head_dim=256, n_embd=640,
                        n_ff=2048, n_vocab=262_144, n_params=268_098_176, n_swa=512,
                        swa_pattern=6)


def _cell(n_ctx: int, kv: str = "f16", swa_full: bool = False, ubatch: int = 512,
          mmap: bool = True) -> Cell:
    return Cell(build="b", model="gemma3", quant="Q4_K_M", n_ctx=n_ctx, type_k=kv, type_v=kv,
                threads=1, affinity="all", flash_attn="on", mmap=mmap, n_batch=2048,
                n_ubatch=ubatch, n_prompt=64, n_gen=16, swa_full=swa_full)


@pytest.mark.parametrize(("n_ctx", "kv", "swa_full", "mib"), [
    (2048, "f16", False, 21.0), (2048, "f16", True, 36.0),
    (8192, "f16", False, 39.0), (8192, "f16", True, 144.0),
    (8192, "q8_0", False, 20.72), (8192, "q8_0", True, 76.5),
    (32768, "f16", False, 111.0), (32768, "f16", True, 576.0),
    (32768, "q4_0", False, 31.22), (512, "f16", False, 9.0),
])
def test_the_kv_term_is_llama_cpps_own_figure(n_ctx: int, kv: str, swa_full: bool,
                                               mib: float) -> None:
    kv_bytes = predict_peak(_cell(n_ctx, kv, swa_full), GEMMA3_270M).kv
    assert kv_bytes / MiB == pytest.approx(mib, abs=0.006)  # llama.cpp prints 2 decimals


def test_gemma3_keeps_every_sixth_layer_global() -> None:
    layers = GEMMA3_270M.swa_layers
    assert [il for il, windowed in enumerate(layers) if not windowed] == [5, 11, 17]
    assert swa_pattern(6, 2, dense_first=True) == (False, True, False, True, False, True)


def test_the_windowed_cache_holds_the_window_plus_a_micro_batch_rounded_to_256() -> None:
    caches = {c.name: c for c in kv_caches(GEMMA3_270M, 8192, 256, "f16", "f16", False)}
    assert caches["base"].layers == (5, 11, 17) and caches["base"].cells == 8192
    assert len(caches["swa"].layers) == 15 and caches["swa"].cells == 768  # 512 + 256
    small = {c.name: c for c in kv_caches(GEMMA3_270M, 512, 512, "f16", "f16", False)}
    assert small["swa"].cells == 512  # never more than the context
    full = {c.name: c for c in kv_caches(GEMMA3_270M, 8192, 256, "f16", "f16", True)}
    assert full["swa"].cells == 8192


def test_the_window_shrinks_the_cache_by_more_the_longer_the_context() -> None:
    ratios = [predict_peak(_cell(n, swa_full=True), GEMMA3_270M).kv
              / predict_peak(_cell(n), GEMMA3_270M).kv for n in (2048, 8192, 32768)]
    assert ratios == sorted(ratios) and ratios[-1] > 5


def test_a_model_without_a_window_has_one_cache() -> None:
    plain = ModelCard(n_layer=4, n_head=8, n_head_kv=2, head_dim=64, n_embd=512, n_ff=1024,
                      n_vocab=1000, n_params=10_000_000)
    (cache,) = kv_caches(plain, 1024, 512, "f16", "f16", False)
    assert cache.name == "base" and cache.cells == 1024 and cache.layers == (0, 1, 2, 3)


def test_the_prediction_counts_the_vocabulary_and_only_the_last_tokens_logits() -> None:
    prediction = predict_peak(_cell(512), GEMMA3_270M)
    assert prediction.vocab == 262_144 * VOCAB_BYTES_PER_TOKEN
    # llama.cpp reserves logits for every token of the micro-batch (512 x 262,144 x 4 bytes),
    # but a benchmark's graphs compute only the last token's: those pages are never touched.
    assert prediction.compute_reserved - prediction.compute > 500 * MiB
    assert prediction.total == sum(prediction.terms().values())


def test_repacked_weights_count_twice_with_mmap_and_once_without() -> None:
    assert "Q4_K" in repacked_types("x86_64", ["sse42", "avx2"])
    assert "Q4_K" not in repacked_types("x86_64", ["sse42"])
    assert repacked_types("aarch64", ["dotprod"]) >= {"Q4_0", "Q4_K", "Q8_0"}
    assert repacked_types("aarch64", []) == frozenset()


def test_llama_bench_keeps_a_copy_of_the_depths_cache() -> None:
    # tools/llama-bench saves the cache after the depth prefill (llama_state_seq_get_data) and
    # restores it before each repetition: the rows of the cells the depth fills, per cache.
    cell = _cell(2048, ubatch=256)
    filled = predict_peak(Cell(**{**cell.__dict__, "n_depth": 2000}), GEMMA3_270M)
    empty = predict_peak(cell, GEMMA3_270M)
    assert empty.state == 0
    # 3 global layers x 2000 cells + 15 windowed layers x their 768 cells, 1 KiB a row pair
    assert filled.state == (3 * 2000 + 15 * 768) * 1024
    assert filled.total - empty.total == filled.state
