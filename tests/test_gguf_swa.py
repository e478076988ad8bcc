"""The shape facts of real GGUFs the predictor needs: sliding window, its layer pattern, per-layer
KV heads, tied embeddings; and one clear error when a file lacks one."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from harness.artifacts.gguf_info import read_model_info
from harness.errors import ModelError


def _write(path: Path, arch: str, *, window: int | None = None,
           pattern: int | list[bool] | None = None, kv_heads: int | list[int] = 1,
           with_output: bool = False, with_vocab: bool = True) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(4)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(kv_heads)  # type: ignore[arg-type]
    writer.add_feed_forward_length(128)
    if window is not None:
        writer.add_sliding_window(window)
    if isinstance(pattern, int):
        writer.add_uint32(f"{arch}.attention.sliding_window_pattern", pattern)
    elif pattern is not None:
        writer.add_array(f"{arch}.attention.sliding_window_pattern", pattern)
    if with_vocab:
        writer.add_token_list([f"t{i}".encode() for i in range(32)])
    writer.add_tensor("token_embd.weight", np.zeros((32, 64), dtype=np.float16))
    if with_output:
        writer.add_tensor("output.weight", np.zeros((32, 64), dtype=np.float16))
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((128, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gemma3_without_a_pattern_gets_llama_cpps_default_of_six(tmp_path: Path) -> None:
    info = read_model_info(_write(tmp_path / "g.gguf", "gemma3", window=512))
    assert info.n_swa == 512 and info.swa_layers == (True, True, True, True)  # 4 layers < 6
    assert info.tied_embeddings


def test_a_pattern_in_the_file_wins(tmp_path: Path) -> None:
    info = read_model_info(_write(tmp_path / "g.gguf", "gemma3", window=256, pattern=2))
    assert info.swa_layers == (True, False, True, False)
    listed = read_model_info(_write(tmp_path / "l.gguf", "gemma3", window=256,
                                    pattern=[True, True, False, True]))
    assert listed.swa_layers == (True, True, False, True)


def test_per_layer_kv_heads_are_kept(tmp_path: Path) -> None:
    info = read_model_info(_write(tmp_path / "k.gguf", "llama", kv_heads=[1, 2, 4, 2],
                                  with_output=True))
    assert [info.kv_heads(il) for il in range(4)] == [1, 2, 4, 2]
    assert info.n_head_kv == 4 and not info.tied_embeddings and info.swa_layers == ()


def test_an_unknown_architecture_with_a_window_must_say_which_layers(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.gguf", "mystery", window=128)
    with pytest.raises(ModelError) as caught:
        read_model_info(path)
    assert str(caught.value) == (
        f"{path}: GGUF metadata lacks 'mystery.attention.sliding_window_pattern' (a mystery "
        "model with a sliding window must say which layers use it)")


def test_a_file_without_a_vocabulary_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "v.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((128, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match=r"lacks 'llama.vocab_size' and 'tokenizer.ggml.tokens'"):
        read_model_info(path)
