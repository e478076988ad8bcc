"""The memory predictor: the exact KV formula for every cache type, and the shape of the rest."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cell import KV_TYPES, Cell
from harness.memory import (
    BITS_PER_WEIGHT,
    ENGINE_OVERHEAD_BYTES,
    QUANT_ORDER,
    ModelCard,
    compute_buffer_bytes,
    estimate_weights_bytes,
    kv_cache_bytes,
    kv_type_fits,
    predict_peak,
    quant_rank,
)

LLAMA_32_1B = ModelCard(
    n_layer=16, n_head=32, n_head_kv=8, head_dim=64, n_embd=2048, n_ff=8192,
    n_vocab=128256, n_params=1_235_814_400,
)

# Two layers, 4 KV heads of 64 (rows of 256 values = 8 blocks of 32), 100 tokens of context.
# Bytes of one K row plus one V row, by hand: f32 256*4*2, f16 256*2*2, q8_0 8 blocks*34*2 ...
HAND_COMPUTED_PER_TOKEN_LAYER = {
    "f32": 2048,
    "f16": 1024,
    "bf16": 1024,
    "q8_0": 544,
    "q4_0": 288,
    "q4_1": 320,
    "q5_0": 352,
    "q5_1": 384,
    "iq4_nl": 288,
}


def test_the_hand_computed_table_covers_every_cache_type() -> None:
    assert set(HAND_COMPUTED_PER_TOKEN_LAYER) == set(KV_TYPES)


@pytest.mark.parametrize("kv_type", KV_TYPES)
def test_kv_cache_bytes_is_exact_for_each_cache_type(kv_type: str) -> None:
    got = kv_cache_bytes(2, 4, 64, 64, 100, kv_type, kv_type)
    assert got == 2 * 100 * HAND_COMPUTED_PER_TOKEN_LAYER[kv_type]


def test_kv_cache_bytes_matches_the_reference_llama_8b_figure() -> None:
    assert kv_cache_bytes(32, 8, 128, 128, 4096, "f16", "f16") == 536_870_912


def test_kv_cache_bytes_adds_k_and_v_of_different_types_and_head_sizes() -> None:
    # K: 4 heads x 64 in q8_0 = 272 bytes; V: 4 heads x 128 in f16 = 1024 bytes.
    assert kv_cache_bytes(3, 4, 64, 128, 10, "q8_0", "f16") == 3 * 10 * (272 + 1024)


def test_quantised_cache_rows_must_be_whole_blocks() -> None:
    assert kv_type_fits("q4_0", 64) and kv_type_fits("f16", 48)
    assert not kv_type_fits("q4_0", 48) and not kv_type_fits("q9_9", 64)
    with pytest.raises(ValueError, match="multiple of 32"):
        kv_cache_bytes(1, 1, 48, 48, 16, "q4_0", "q4_0")
    with pytest.raises(ValueError, match="unknown KV cache type"):
        kv_cache_bytes(1, 1, 64, 64, 16, "q3_0", "f16")


def _cell(**changes: object) -> Cell:
    base = Cell(
        build="b", model="m", quant="Q4_K_M", n_ctx=4096, type_k="f16", type_v="f16",
        threads=4, affinity="all", flash_attn="on", mmap=True, n_batch=512, n_ubatch=512,
        n_prompt=128, n_gen=32,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_predicted_peak_grows_with_context_and_shrinks_with_cache_precision() -> None:
    totals = [predict_peak(_cell(n_ctx=n), LLAMA_32_1B).total for n in (512, 1024, 4096, 8192)]
    assert totals == sorted(totals) and len(set(totals)) == 4
    by_type = [
        predict_peak(_cell(type_k=t, type_v=t), LLAMA_32_1B).kv
        for t in ("f32", "f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0")
    ]
    assert by_type == sorted(by_type, reverse=True) and len(set(by_type)) == len(by_type)


def test_card_weights_shrink_down_the_quant_ladder() -> None:
    ladder = ["F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K"]
    weights = [estimate_weights_bytes(LLAMA_32_1B, q) for q in ladder]
    assert weights == sorted(weights, reverse=True) and len(set(weights)) == len(ladder)


def test_card_weights_follow_bits_per_weight_with_the_output_matrix_at_q6_k() -> None:
    assert estimate_weights_bytes(LLAMA_32_1B, "F16") == 2 * LLAMA_32_1B.n_params
    output = 128256 * 2048
    body = LLAMA_32_1B.n_params - output
    expected = body * BITS_PER_WEIGHT["Q4_K_M"] / 8 + output * 6.5625 / 8
    assert abs(estimate_weights_bytes(LLAMA_32_1B, "Q4_K_M") - expected) <= 1
    # Q8_0 keeps its output matrix in Q8_0: a plain params x bpw.
    assert abs(estimate_weights_bytes(LLAMA_32_1B, "Q8_0")
               - LLAMA_32_1B.n_params * BITS_PER_WEIGHT["Q8_0"] / 8) <= 1


def test_bits_per_weight_derive_from_llama_cpp_quantize_sizes() -> None:
    # quantize.cpp: Q4_K_M is 4.58 GiB and Q8_0 7.96 GiB for Llama-3-8B (8.03e9 parameters).
    assert BITS_PER_WEIGHT["Q4_K_M"] == pytest.approx(4.899, abs=0.001)
    assert BITS_PER_WEIGHT["Q8_0"] == pytest.approx(8.515, abs=0.001)
    assert BITS_PER_WEIGHT["Q2_K"] == pytest.approx(3.166, abs=0.001)


def test_card_prediction_keeps_every_term_and_sums_them() -> None:
    prediction = predict_peak(_cell(n_ctx=1000), LLAMA_32_1B)
    assert prediction.weights_source == "card"
    assert prediction.n_ctx == 1024  # padded to 256
    assert prediction.kv == kv_cache_bytes(16, 8, 64, 64, 1024, "f16", "f16")
    assert prediction.overhead == ENGINE_OVERHEAD_BYTES
    assert prediction.total == sum(prediction.terms().values())
    assert prediction.weights == estimate_weights_bytes(LLAMA_32_1B, "Q4_K_M")


# CPU compute buffer sizes llama.cpp logged (llama-cpp-python 0.3.36, n_batch 512, f16 cache)
# for synthetic llama models: (n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx, n_ubatch,
# flash_attn, MiB). head_dim is 64 throughout.
MEASURED_COMPUTE_MIB = [
    (256, 512, 4, 2, 1024, 512, 512, True, 5.01),
    (256, 512, 4, 2, 1024, 512, 128, True, 1.25),
    (256, 512, 4, 2, 1024, 512, 512, False, 8.01),
    (256, 512, 4, 2, 1024, 2048, 512, False, 23.01),
    (256, 2048, 4, 2, 1024, 512, 512, True, 14.51),
    (256, 2048, 4, 2, 1024, 512, 512, False, 15.01),
    (512, 512, 8, 4, 1024, 512, 512, True, 5.51),
    (512, 512, 8, 4, 1024, 2048, 512, False, 42.01),
    (256, 512, 4, 2, 8192, 512, 512, True, 18.51),
    (256, 512, 4, 2, 8192, 512, 128, True, 4.63),
    (256, 512, 4, 2, 8192, 512, 512, False, 17.50),
]


@pytest.mark.parametrize("case", MEASURED_COMPUTE_MIB)
def test_compute_buffer_is_at_or_a_little_above_what_llama_cpp_allocates(
    case: tuple[int, int, int, int, int, int, int, bool, float],
) -> None:
    n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx, ubatch, flash, measured = case
    predicted = compute_buffer_bytes(
        n_ctx=n_ctx, n_ubatch=ubatch, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
        n_head_kv=n_head_kv, head_dim_k=64, head_dim_v=64, n_vocab=n_vocab, flash_attn=flash,
    ) / 2**20
    assert measured - 0.01 <= predicted <= measured * 1.4


def test_attention_scores_appear_only_without_flash_attention() -> None:
    on = predict_peak(_cell(n_ctx=8192, flash_attn="on"), LLAMA_32_1B)
    auto = predict_peak(_cell(n_ctx=8192, flash_attn="auto"), LLAMA_32_1B)
    off = predict_peak(_cell(n_ctx=8192, flash_attn="off"), LLAMA_32_1B)
    scores = 8192 * 512 * 32 * 4  # n_ctx x n_ubatch x n_head, f32
    assert on.compute == auto.compute < scores
    assert off.compute > scores


def test_micro_batch_is_clamped_to_the_batch() -> None:
    prediction = predict_peak(_cell(n_batch=128, n_ubatch=512), LLAMA_32_1B)
    assert prediction.n_ubatch == 128
    smaller = predict_peak(_cell(n_batch=512, n_ubatch=512), LLAMA_32_1B)
    assert prediction.compute < smaller.compute


def test_quants_rank_by_bits_per_weight_with_unknown_names_last() -> None:
    assert QUANT_ORDER[0] == "IQ1_S" and QUANT_ORDER[-1] == "F32"
    assert sorted(["F16", "q4_k_m", "Q2_K", "mystery", "Q8_0"], key=quant_rank) == [
        "Q2_K", "q4_k_m", "Q8_0", "F16", "mystery"]
