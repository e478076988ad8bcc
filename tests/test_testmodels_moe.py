"""The synthetic mixture-of-experts model: llama.cpp's expert layout, a short ladder, stable keys.

Generator tests use a small MoE variant of the tiny spec (a few MB); the slow tests make the real
"moe" ladder (about 10 s on two cores) into a temporary cache and run it through llama.cpp.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

from harness.artifacts import testmodels
from harness.artifacts.gguf_info import read_model_info
from harness.artifacts.ladder import FILE_TYPES, ladder_quants
from harness.artifacts.testmodels import (
    LADDER_QUANTS,
    LADDER_SIZES,
    LADDER_SPECS,
    SYNTHETIC_SIZES,
    cache_key,
    ensure_ladder,
    ladder_paths,
    spec_identity,
    write_model,
)
from harness.cli import main
from harness.matrix import expand, parse_matrix
from harness.plan import MissingModel, resolve_models

TINY = LADDER_SPECS["tiny"]
MOE = LADDER_SPECS["moe"]
SMALL_MOE = dataclasses.replace(TINY, size="small-moe", n_expert=4, n_expert_used=2)
MOE_RUNGS = ("F16", "Q8_0", "Q4_K_M")
# cache_key of the dense sizes before the expert fields existed (llama-cpp-python 0.3.36): the
# cached ladders and the stored results refer to these, so they must never change by accident.
DENSE_KEYS = {"tiny": "09ed73ca8656f4c4", "bench": "924549a3c497e6d4"}


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gen") / "small-moe.gguf"
    write_model(SMALL_MOE, path)
    return path


# --- spec and key -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", sorted(DENSE_KEYS))
def test_dense_sizes_keep_the_cache_key_they_had_before_experts(
    size: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testmodels, "llama_cpp_python_version", lambda: "0.3.36")
    assert cache_key(LADDER_SPECS[size]) == DENSE_KEYS[size]


def test_expert_fields_enter_the_key_only_when_set() -> None:
    assert "n_expert" not in spec_identity(TINY)
    assert "n_expert_used" not in spec_identity(TINY)
    assert spec_identity(MOE)["n_expert"] == 8
    assert spec_identity(MOE)["n_expert_used"] == 2
    assert cache_key(SMALL_MOE) != cache_key(dataclasses.replace(SMALL_MOE, size="tiny"))
    assert cache_key(dataclasses.replace(SMALL_MOE, n_expert_used=1)) != cache_key(SMALL_MOE)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_expert": 8, "n_expert_used": 0}, "n_expert_used must be in 1..n_expert"),
        ({"n_expert": 8, "n_expert_used": 9}, "n_expert_used must be in 1..n_expert"),
        ({"n_expert": 0, "n_expert_used": 2}, "needs n_expert > 0"),
        ({"n_expert": -1, "n_expert_used": 0}, "n_expert must be 0"),
        ({"n_expert": 1025, "n_expert_used": 1}, "n_expert must be 0"),
    ],
)
def test_spec_rejects_expert_counts_llama_cpp_would_refuse(
    change: dict[str, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(TINY, **change)  # type: ignore[arg-type]


def test_moe_size_is_registered_as_a_synthetic_ladder() -> None:
    assert "moe" in SYNTHETIC_SIZES and "moe" in LADDER_SIZES
    assert set(LADDER_SPECS) == set(SYNTHETIC_SIZES)
    assert (MOE.n_expert, MOE.n_expert_used, MOE.n_ff) == (8, 2, 1024)


def test_n_params_counts_every_expert_and_active_params_only_the_used_ones() -> None:
    shapes = testmodels._tensor_shapes(MOE)
    assert MOE.n_params == sum(int(np.prod(shape)) for _, shape in shapes)
    expert = sum(int(np.prod(s)) for name, s in shapes if "_exps" in name)
    embd = MOE.n_vocab * MOE.n_embd
    dense = MOE.n_params - expert - embd
    assert MOE.n_params_active == dense + expert * 2 // 8 + MOE.n_embd
    assert 0.25 < MOE.n_params_active / MOE.n_params < 0.4  # about a third read per token
    assert 240e6 < 2 * MOE.n_params < 250e6  # about 245 MB in F16


def test_a_dense_token_reads_everything_but_the_embedding_matrix() -> None:
    assert TINY.n_params_active == TINY.n_params - (TINY.n_vocab - 1) * TINY.n_embd


# --- generator --------------------------------------------------------------------------------


def test_moe_file_has_llama_cpp_expert_tensors_and_metadata(small_moe: Path) -> None:
    reader = gguf.GGUFReader(small_moe)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.expert_count") == 4
    assert _field(reader, "llama.expert_used_count") == 2
    assert _field(reader, "llama.feed_forward_length") == SMALL_MOE.n_ff  # per expert
    by_name = {t.name: t for t in reader.tensors}
    assert sum(int(t.n_elements) for t in reader.tensors) == SMALL_MOE.n_params
    e, ff, n = SMALL_MOE.n_embd, SMALL_MOE.n_ff, 4
    for i in range(SMALL_MOE.n_layer):
        assert f"blk.{i}.ffn_gate.weight" not in by_name
        # ggml's ne, as llama-model.cpp creates them for LLM_ARCH_LLAMA with n_expert > 0
        expected = {
            "ffn_gate_inp": ([e, n], "F32"),
            "ffn_gate_exps": ([e, ff, n], "F16"),
            "ffn_up_exps": ([e, ff, n], "F16"),
            "ffn_down_exps": ([ff, e, n], "F16"),
        }
        for stem, (shape, kind) in expected.items():
            tensor = by_name[f"blk.{i}.{stem}.weight"]
            assert [int(d) for d in tensor.shape] == shape, tensor.name
            assert tensor.tensor_type.name == kind, tensor.name


def test_router_sends_different_tokens_to_different_experts(small_moe: Path) -> None:
    """Layer 0's router on the normalised token embeddings (its input, but for the small
    attention output) must spread tokens over every expert, not favour one."""
    reader = gguf.GGUFReader(small_moe)
    by_name = {t.name: t for t in reader.tensors}
    embd = np.asarray(by_name["token_embd.weight"].data, dtype=np.float32)[:512]
    router = np.asarray(by_name["blk.0.ffn_gate_inp.weight"].data, dtype=np.float32)
    normed = embd / np.sqrt((embd**2).mean(axis=1, keepdims=True))
    top = np.argsort(normed @ router.T, axis=1)[:, -SMALL_MOE.n_expert_used:]
    firsts = np.bincount(top[:, -1], minlength=SMALL_MOE.n_expert)
    assert (firsts > 0).all()
    assert firsts.max() < 0.5 * len(top)
    assert len({tuple(sorted(row)) for row in top}) > SMALL_MOE.n_expert


def test_moe_generation_is_deterministic(small_moe: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.gguf"
    write_model(SMALL_MOE, again)
    assert again.read_bytes() == small_moe.read_bytes()


# --- ladder rungs -----------------------------------------------------------------------------


def test_moe_ladder_has_only_its_rungs_and_dense_ladders_all(tmp_path: Path) -> None:
    assert ladder_quants("moe") == MOE_RUNGS
    assert tuple(ladder_paths("moe", tmp_path)) == MOE_RUNGS
    assert ladder_quants("gemma3-270m") == LADDER_QUANTS
    # the dense synthetic ladders add Q4_0, the GPU backends' type, after the K-quants
    assert ladder_quants("tiny") == (*LADDER_QUANTS, "Q4_0")
    assert tuple(ladder_paths("bench", tmp_path)) == (*LADDER_QUANTS, "Q4_0")
    assert [p.name for p in ladder_paths("moe", tmp_path).values()] == [
        f"harness-moe-{q}.gguf" for q in MOE_RUNGS]


def test_a_matrix_asking_the_moe_ladder_for_a_quant_it_lacks_names_what_it_has(
    tmp_path: Path,
) -> None:
    matrix = parse_matrix({
        "name": "moe",
        "axes": {"build": ["b"], "model": ["moe"], "quant": ["Q2_K"], "n_ctx": [256]},
        "models": {"moe": {"ladder": "moe"}},
        "workload": {"n_prompt": 32, "n_gen": 16},
    }, "moe.yaml")
    facts = resolve_models(matrix, expand(matrix),
                           ladder=lambda size: ladder_paths(size, tmp_path))
    assert facts[("moe", "Q2_K")] == MissingModel(
        "the moe ladder has no Q2_K (it has F16, Q8_0, Q4_K_M)")


def test_cli_ladder_help_offers_the_moe_size() -> None:
    result = CliRunner().invoke(main, ["models", "ladder", "--help"])
    assert result.exit_code == 0, result.output
    assert "moe" in result.output
    assert "F16, Q8_0, Q4_K_M only" in " ".join(result.output.split())


# --- the real moe ladder (llama-cpp-python) ---------------------------------------------------


@pytest.fixture(scope="module")
def moe_ladder(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return ensure_ladder("moe", cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.mark.slow
def test_moe_ladder_rungs_are_their_quants_with_experts_quantised(
    moe_ladder: dict[str, Path],
) -> None:
    assert tuple(moe_ladder) == MOE_RUNGS
    sizes = [p.stat().st_size for p in moe_ladder.values()]
    assert sizes == sorted(sizes, reverse=True)
    expert_type = {"F16": "F16", "Q8_0": "Q8_0", "Q4_K_M": "Q4_K"}
    for quant, path in moe_ladder.items():
        reader = gguf.GGUFReader(path)
        assert _field(reader, "general.file_type") == FILE_TYPES[quant]
        types = {t.name: t.tensor_type.name for t in reader.tensors}
        for i in range(MOE.n_layer):
            assert types[f"blk.{i}.ffn_gate_inp.weight"] == "F32"  # the router is never quantised
            assert types[f"blk.{i}.ffn_gate_exps.weight"] == expert_type[quant]
            assert types[f"blk.{i}.ffn_up_exps.weight"] == expert_type[quant]


@pytest.mark.slow
@pytest.mark.parametrize("quant", MOE_RUNGS)
def test_moe_model_info_reports_experts_and_their_bytes(
    moe_ladder: dict[str, Path], quant: str
) -> None:
    info = read_model_info(moe_ladder[quant])
    assert (info.n_expert, info.n_expert_used) == (8, 2)
    assert info.n_ff == MOE.n_ff
    assert info.n_params == MOE.n_params
    assert 0.75 < info.expert_tensor_bytes / info.tensor_bytes < 0.85
    assert 0 < info.token_embd_bytes < info.tensor_bytes - info.expert_tensor_bytes
    if quant == "F16":
        assert info.token_embd_bytes == MOE.n_vocab * MOE.n_embd * 2
        assert info.expert_tensor_bytes == 3 * 8 * MOE.n_embd * MOE.n_ff * 2 * MOE.n_layer


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["F16", "Q4_K_M"])
def test_moe_rung_loads_as_8_experts_2_used_and_generates(
    moe_ladder: dict[str, Path], quant: str, capfd: pytest.CaptureFixture[str]
) -> None:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(moe_ladder[quant]), n_ctx=128, n_threads=2,
                          logits_all=True, verbose=True)
    try:
        llm.eval(llm.tokenize(b"the quick brown fox\n"))
        chosen = []
        for _ in range(4):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            assert logits.shape == (MOE.n_vocab,)
            assert np.isfinite(logits).all()
            assert logits.std() > 0
            chosen.append(int(np.argmax(logits)))
            llm.eval([chosen[-1]])
    finally:
        llm.close()
    log = " ".join(capfd.readouterr().err.split())
    assert "n_expert = 8" in log
    assert "n_expert_used = 2" in log
