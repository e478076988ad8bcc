"""The synthetic GGUF models are deterministic, llama.cpp-shaped, and their ladder is real.

GGUF-level tests need only the `gguf` package; the ladder tests quantise with llama-cpp-python
(through the shared, cached `tiny_ladder` fixture) and run every rung for a few tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

from harness.artifacts import testmodels
from harness.artifacts.ladder import FILE_TYPES, MAIN_TENSOR_TYPES, atomic_output
from harness.artifacts.testmodels import (
    LADDER_QUANTS,
    LADDER_SIZES,
    LADDER_SPECS,
    REAL_LADDERS,
    SYNTHETIC_SIZES,
    ModelSpec,
    cache_key,
    ensure_ladder,
    ladder_quants,
    vocabulary,
    write_model,
)
from harness.cli import main
from harness.errors import ConfigError

TINY = LADDER_SPECS["tiny"]
# Types llama.cpp falls back to when a row is not a multiple of 256: their presence in a K-quant
# rung means the spec's shapes are wrong and the file is not the quant its name says.
LEGACY_FALLBACKS = {"Q4_0", "Q4_1", "Q5_0", "Q5_1"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


@pytest.fixture(scope="module")
def tiny_f16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gen") / "tiny.gguf"
    write_model(TINY, path)
    return path


# --- generator --------------------------------------------------------------------------------


def test_generating_twice_gives_identical_bytes(tiny_f16: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.gguf"
    write_model(TINY, again)
    assert _sha256(again) == _sha256(tiny_f16)


def test_another_seed_gives_other_weights(tiny_f16: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    write_model(dataclasses.replace(TINY, seed=1), other)
    assert other.stat().st_size == tiny_f16.stat().st_size
    assert _sha256(other) != _sha256(tiny_f16)


def test_base_model_has_llama_metadata_with_grouped_query_attention(tiny_f16: Path) -> None:
    reader = gguf.GGUFReader(tiny_f16)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "general.file_type") == FILE_TYPES["F16"]
    assert _field(reader, "llama.block_count") == TINY.n_layer
    assert _field(reader, "llama.embedding_length") == TINY.n_embd
    assert _field(reader, "llama.feed_forward_length") == TINY.n_ff
    assert _field(reader, "llama.attention.head_count") == TINY.n_head
    assert _field(reader, "llama.attention.head_count_kv") == TINY.n_head_kv
    assert TINY.n_head_kv < TINY.n_head
    assert _field(reader, "llama.rope.dimension_count") == TINY.head_dim


def test_base_model_tensors_are_f32_norms_and_f16_matrices(tiny_f16: Path) -> None:
    reader = gguf.GGUFReader(tiny_f16)
    by_name = {t.name: t for t in reader.tensors}
    assert len(by_name) == 9 * TINY.n_layer + 3
    assert sum(int(t.n_elements) for t in reader.tensors) == TINY.n_params
    for tensor in reader.tensors:
        expected = "F32" if tensor.name.endswith("norm.weight") else "F16"
        assert tensor.tensor_type.name == expected, tensor.name
        assert np.isfinite(tensor.data).all(), tensor.name
    # ggml order: ne[0] is the row length, which K-quants need to be a multiple of 256.
    assert list(by_name["blk.0.attn_k.weight"].shape) == [TINY.n_embd, TINY.n_embd_kv]
    assert list(by_name["blk.0.ffn_down.weight"].shape) == [TINY.n_ff, TINY.n_embd]
    assert list(by_name["output.weight"].shape) == [TINY.n_embd, TINY.n_vocab]


def test_vocabulary_is_spm_with_byte_fallback(tiny_f16: Path) -> None:
    reader = gguf.GGUFReader(tiny_f16)
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type")
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    assert isinstance(tokens, list) and isinstance(types, list)
    assert len(tokens) == len(set(tokens)) == TINY.n_vocab
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3:259] == [f"<0x{b:02X}>" for b in range(256)]
    assert set(types[3:259]) == {gguf.TokenType.BYTE}
    assert types[1] == types[2] == gguf.TokenType.CONTROL
    assert len(_field(reader, "tokenizer.ggml.scores")) == TINY.n_vocab  # type: ignore[arg-type]


def test_every_word_piece_can_be_reached_by_merging_shorter_pieces() -> None:
    tokens, _, _ = vocabulary(4096)
    pieces = set(tokens[259:])
    for piece in pieces:
        if len(piece) > 1:
            assert piece[:-1] in pieces or piece[1:] in pieces, piece


@pytest.mark.parametrize(
    "change",
    [{"n_embd": 320}, {"n_ff": 600}, {"n_head_kv": 4}, {"n_head": 3}, {"n_vocab": 200}],
)
def test_spec_rejects_shapes_that_would_break_k_quants_or_gqa(change: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        dataclasses.replace(TINY, **change)  # type: ignore[arg-type]


def test_bench_spec_has_tens_of_millions_of_parameters() -> None:
    assert 10_000_000 <= LADDER_SPECS["bench"].n_params < 100_000_000
    assert TINY.n_params < 5_000_000
    assert set(LADDER_SPECS) == set(SYNTHETIC_SIZES)
    assert set(LADDER_SIZES) == set(SYNTHETIC_SIZES) | set(REAL_LADDERS)


def test_cache_key_changes_with_spec_seed_and_quantiser_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = cache_key(TINY)
    assert key == cache_key(dataclasses.replace(TINY))
    assert key != cache_key(dataclasses.replace(TINY, seed=7))
    assert key != cache_key(LADDER_SPECS["bench"])
    monkeypatch.setattr(testmodels, "llama_cpp_python_version", lambda: "0.0.0-other")
    assert key != cache_key(TINY)


def test_unknown_size_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="huge"):
        ensure_ladder("huge", cache_dir=tmp_path)


def test_atomic_output_leaves_nothing_behind_on_failure(tmp_path: Path) -> None:
    dest = tmp_path / "model.gguf"
    with pytest.raises(RuntimeError), atomic_output(dest) as tmp:
        tmp.write_bytes(b"half a file")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


# --- the ladder (llama-cpp-python) ------------------------------------------------------------


def test_ladder_has_every_quant_in_order(tiny_ladder: dict[str, Path]) -> None:
    """The K-quant ladder largest first, then Q4_0 (the GPU backends' type) after it."""
    assert tuple(tiny_ladder) == (*LADDER_QUANTS, "Q4_0") == ladder_quants("tiny")
    for quant, path in tiny_ladder.items():
        assert path.name == f"harness-tiny-{quant}.gguf"
    sizes = [tiny_ladder[q].stat().st_size for q in LADDER_QUANTS]
    assert sizes == sorted(sizes, reverse=True)
    # Q4_0 (4.5 bits a weight) lies between Q5_K_M and Q3_K_M
    assert tiny_ladder["Q3_K_M"].stat().st_size < tiny_ladder["Q4_0"].stat().st_size < \
        tiny_ladder["Q5_K_M"].stat().st_size


@pytest.mark.parametrize("quant", ladder_quants("tiny"))
def test_ladder_file_really_is_its_quant(tiny_ladder: dict[str, Path], quant: str) -> None:
    reader = gguf.GGUFReader(tiny_ladder[quant])
    assert _field(reader, "general.file_type") == FILE_TYPES[quant]
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    for i in range(TINY.n_layer):
        assert types[f"blk.{i}.ffn_gate.weight"] == MAIN_TENSOR_TYPES[quant]
        assert types[f"blk.{i}.ffn_up.weight"] == MAIN_TENSOR_TYPES[quant]
        assert types[f"blk.{i}.attn_norm.weight"] == "F32"
    # a K-quant rung has no fallback types; the Q4_0 rung is one by design
    assert not (LEGACY_FALLBACKS - {quant}) & set(types.values())


@pytest.mark.parametrize("quant", ladder_quants("tiny"))
def test_ladder_file_loads_and_generates_with_finite_logits(
    tiny_ladder: dict[str, Path], quant: str
) -> None:
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(tiny_ladder[quant]),
        n_ctx=128,
        n_threads=2,
        logits_all=True,  # this version fills Llama.scores only then
        verbose=False,
    )
    try:
        tokens = llm.tokenize(b"the quick brown fox\n")
        assert len(tokens) < 1 + len(b"the quick brown fox\n")  # pieces merged, not all bytes
        assert tokens[0] == 1  # <s>
        assert llm.detokenize(tokens[1:]) == b" the quick brown fox\n"
        llm.eval(tokens)
        for _ in range(4):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            assert logits.shape == (TINY.n_vocab,)
            assert np.isfinite(logits).all()
            assert logits.std() > 0  # a real forward pass, not a constant
            llm.eval([int(np.argmax(logits))])
    finally:
        llm.close()


def test_second_ensure_ladder_rewrites_nothing(tiny_ladder: dict[str, Path]) -> None:
    before = {q: p.stat().st_mtime_ns for q, p in tiny_ladder.items()}
    again = ensure_ladder("tiny")
    assert again == tiny_ladder
    assert {q: p.stat().st_mtime_ns for q, p in again.items()} == before


def test_interrupted_ladder_is_completed_without_touching_finished_files(
    tiny_ladder: dict[str, Path], tmp_path: Path
) -> None:
    directory = testmodels.ladder_dir("tiny", tmp_path)
    shutil.copytree(tiny_ladder["F16"].parent, directory)
    missing = directory / tiny_ladder["Q2_K"].name
    missing.unlink()
    # What an interrupted quantisation leaves behind must not count as a finished file.
    stale = directory / f".{missing.name}.tmp-99999"
    stale.write_bytes(b"half")
    kept = {p.name: p.stat().st_mtime_ns for p in directory.glob("*.gguf")}
    made: list[str] = []
    paths = ensure_ladder("tiny", cache_dir=tmp_path, progress=made.append)
    assert made == [f"quantising {missing.name}"]
    assert paths["Q2_K"] == missing
    assert _sha256(missing) == _sha256(tiny_ladder["Q2_K"])
    assert {n: (directory / n).stat().st_mtime_ns for n in kept} == kept
    assert not stale.exists()


# --- CLI --------------------------------------------------------------------------------------


def test_cli_ladder_json_lists_every_quant(tiny_ladder: dict[str, Path]) -> None:
    result = CliRunner().invoke(main, ["models", "ladder", "--size", "tiny", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [row["quant"] for row in rows] == list(ladder_quants("tiny"))
    for row in rows:
        path = tiny_ladder[row["quant"]]
        assert row["path"] == str(path)
        assert row["bytes"] == path.stat().st_size
        assert row["sha256"] == _sha256(path)
        assert row["n_params"] == TINY.n_params


def test_cli_ladder_table_names_every_quant(tiny_ladder: dict[str, Path]) -> None:
    result = CliRunner().invoke(main, ["models", "ladder"])
    assert result.exit_code == 0, result.output
    for quant in ladder_quants("tiny"):
        assert quant in result.stdout


def test_cli_bad_size_exits_2_with_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["models", "ladder", "--size", "huge"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "huge" in lines[0] and "tiny" in lines[0]
    assert "Traceback" not in result.output


def test_model_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TINY.seed = 3  # type: ignore[misc]
    assert isinstance(TINY, ModelSpec)
