"""The predictor's split of a cell's memory between the host and its compute device."""

from __future__ import annotations

import dataclasses

from analysis.factory import cell

from harness.artifacts.gguf_info import ModelInfo
from harness.memory import ModelCard, predict_peak

LAYER = 1_000_000
INFO = ModelInfo(
    path="m.gguf", architecture="llama", name="m", n_layer=4, n_head=4, n_head_kv=2,
    head_dim_k=64, head_dim_v=64, n_embd=256, n_ff=512, n_vocab=1024, context_length=512,
    file_type=7, file_type_name="Q8_0", tensor_bytes=4 * LAYER + 300_000 + 200_000,
    n_params=5_000_000, file_size=5_000_000, token_embd_bytes=300_000,
    layer_bytes=(LAYER,) * 4, output_bytes=200_000,
)

CELL = cell()  # a CPU cell of the tiny model (analysis/factory.py)


def test_a_cpu_cell_holds_nothing_on_a_device() -> None:
    cpu = predict_peak(CELL, INFO)
    assert cpu.device == 0 and cpu.host == cpu.total


def test_full_offload_puts_layers_output_kv_and_a_compute_buffer_on_the_device() -> None:
    cpu = predict_peak(CELL, INFO)
    full = predict_peak(dataclasses.replace(CELL, compute_device="Vulkan0", n_gpu_layers=-1),
                        INFO)
    assert full.device_weights == 4 * LAYER + 200_000  # the embedding stays on the CPU
    assert full.device_kv == full.kv
    assert full.device_compute == full.compute_reserved > 0
    assert full.total == cpu.total + full.device_compute  # the device's buffer is extra
    assert full.host == full.total - full.device


def test_partial_offload_takes_the_last_layers_and_the_output_first() -> None:
    gpu = dataclasses.replace(CELL, compute_device="Vulkan0")
    one = predict_peak(dataclasses.replace(gpu, n_gpu_layers=1), INFO)
    assert one.device_weights == 200_000 and one.device_kv == 0  # the output layer alone
    three = predict_peak(dataclasses.replace(gpu, n_gpu_layers=3), INFO)
    assert three.device_weights == 2 * LAYER + 200_000
    assert three.device_kv == round(three.kv / 2)
    host = [predict_peak(dataclasses.replace(gpu, n_gpu_layers=n), INFO).host
            for n in (0, 1, 3, 5)]
    assert host == sorted(host, reverse=True) and host[0] > host[-1]


def test_a_tied_embedding_is_copied_to_the_device_as_the_output() -> None:
    tied = dataclasses.replace(INFO, tied_embeddings=True, output_bytes=0,
                               tensor_bytes=4 * LAYER + 300_000)
    cpu = predict_peak(CELL, tied)
    full = predict_peak(dataclasses.replace(CELL, compute_device="Vulkan0", n_gpu_layers=-1),
                        tied)
    assert full.device_weights == 4 * LAYER + 300_000
    assert full.weights == cpu.weights + 300_000  # two copies: the input's and the output's


def test_a_card_spreads_its_layers_evenly() -> None:
    card = ModelCard(n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_embd=256, n_ff=512,
                     n_vocab=1024, n_params=5_000_000)
    half = predict_peak(dataclasses.replace(CELL, quant="Q8_0", compute_device="Vulkan0",
                                            n_gpu_layers=3), card)
    full = predict_peak(dataclasses.replace(CELL, quant="Q8_0", compute_device="Vulkan0",
                                            n_gpu_layers=-1), card)
    assert 0 < half.device_weights < full.device_weights < full.weights
