"""What two engines' trials on the same configurations did not have in common."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.analysis.ab import compare_builds
from harness.analysis.engines import engine_table
from harness.analysis.frames import Side
from harness.analysis.samework import differences
from harness.store import read_table

from .factory import cell, noisy, trial, write

MNN = "mnn-llm-bench"


def _store(root: Path, **mnn: object) -> None:
    rng = np.random.default_rng(3)
    gguf = cell(build="rel")
    other = cell(build="mnn-3", engine=MNN)
    records = [trial(gguf, rep=i, tg_tps=v, model_file="tiny-Q4_K_M.gguf",
                     ttft_definition="prefill")
               for i, v in enumerate(noisy(rng, 30.0, 5))]
    records += [trial(other, rep=i, tg_tps=v, run_id="mnn", model_sha256="cd" * 32,
                      model_file="config.json", **mnn)
                for i, v in enumerate(noisy(rng, 25.0, 5))]
    write(root, records)


def test_other_files_other_ttft_and_engine_means_are_each_said(tmp_path: Path) -> None:
    _store(tmp_path, ttft_definition="prefill+first_decode", engine_aggregate_n=5,
           model_converted_from="tiny F16 GGUF through llmexport")
    frame = read_table(tmp_path, "trials")
    found = differences(frame, Side("rel"), Side("mnn-3", MNN), {cell().config_id})
    assert found == (
        "model files differ on 1 of 1 configurations: llama-bench ran tiny-Q4_K_M.gguf, "
        f"{MNN} ran config.json (made from tiny F16 GGUF through llmexport): the same weights "
        "only if one was converted from the other",
        f"time to first token counts different things: llama-bench prefill, {MNN} "
        "prefill+first_decode",
        f"{MNN}'s figures are its own means over up to 5 runs per trial, not one run each: "
        "its spread is smaller than a per-run engine's",
    )
    result = compare_builds(frame, "rel", "mnn-3", ["tg_tps"], candidate_engine=MNN)
    assert result.differences == found and result.to_json()["differences"] == list(found)
    notes = engine_table(frame).notes
    assert any("not the same work: model files differ" in n for n in notes)


def test_files_of_unknown_origin_are_named_and_same_files_say_nothing(tmp_path: Path) -> None:
    _store(tmp_path)
    frame = read_table(tmp_path, "trials")
    (line,) = differences(frame, Side("rel"), Side("mnn-3", MNN), {cell().config_id})
    assert line.endswith("neither side says what its files were made from "
                         "(models.NAME.converted_from)")
    same = frame.assign(model_sha256="ab" * 32)
    assert differences(same, Side("rel"), Side("mnn-3", MNN), {cell().config_id}) == ()
    assert differences(frame, Side("rel"), Side("rel"), {cell().config_id}) == ()


def test_configurations_apart_only_in_their_device_name_the_backends(tmp_path: Path) -> None:
    """llama.cpp's Vulkan0 and LiteRT-LM's gpu are two backends: named, never paired."""
    litert = "litert-lm-advanced"
    vulkan = cell(build="rel", compute_device="Vulkan0", n_gpu_layers=-1)
    gpu = cell(build="litert-1", engine=litert, compute_device="gpu", n_gpu_layers=-1)
    records = [trial(vulkan, rep=i, model_file="tiny-Q4_K_M.gguf") for i in range(3)]
    records += [trial(gpu, rep=i, run_id="lit", model_file="tiny.litertlm") for i in range(3)]
    records += [trial(cell(build="litert-1", engine=litert), rep=i, run_id="lit2")
                for i in range(3)]  # on the CPU: a configuration llama-bench did not run
    write(tmp_path, records)
    frame = read_table(tmp_path, "trials")
    result = compare_builds(frame, "rel", "litert-1", ["tg_tps"], candidate_engine=litert)
    assert result.cells == ()
    assert result.differences == (
        f"backends differ on 1 configurations the two sides ran alike but for their device: "
        f"llama-bench ran them on Vulkan0, {litert} on gpu, each engine's own backend, so they "
        "are not paired and none of them is compared",)
    same = differences(frame, Side("rel"), Side("rel"), {vulkan.config_id})
    assert same == ()
