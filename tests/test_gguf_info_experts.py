"""GGUF metadata of a mixture of experts: expert counts, expert and embedding bytes.

A benchmark of mmap paging compares resident memory with what a token reads: the expert tensors
(of which it touches n_expert_used / n_expert) and one row of the token embedding.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gguf
import numpy as np
from test_gguf_info import write_gguf

from harness.artifacts.gguf_info import ModelInfo, read_model_info

N_EMBD, N_FF, N_EXPERT, N_VOCAB = 64, 128, 4, 32


def _write_moe(path: Path, used: int | list[int] = 2) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(N_EMBD)
    writer.add_head_count(4)
    writer.add_feed_forward_length(N_FF)
    writer.add_expert_count(N_EXPERT)
    if isinstance(used, int):
        writer.add_expert_used_count(used)
    else:  # per layer, as llama.cpp's get_key_or_arr accepts
        writer.add_array("llama.expert_used_count", used)
    writer.add_token_list([f"t{i}".encode() for i in range(N_VOCAB)])
    writer.add_tensor("token_embd.weight", np.zeros((N_VOCAB, N_EMBD), np.float16))
    for layer in range(2):
        writer.add_tensor(f"blk.{layer}.ffn_gate_inp.weight",
                          np.zeros((N_EXPERT, N_EMBD), np.float32))
        for stem, shape in (("gate", (N_EXPERT, N_FF, N_EMBD)), ("up", (N_EXPERT, N_FF, N_EMBD)),
                            ("down", (N_EXPERT, N_EMBD, N_FF))):
            writer.add_tensor(f"blk.{layer}.ffn_{stem}_exps.weight", np.zeros(shape, np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_expert_counts_and_bytes_are_read(tmp_path: Path) -> None:
    info = read_model_info(_write_moe(tmp_path / "moe.gguf"))
    assert (info.n_expert, info.n_expert_used) == (4, 2)
    assert info.expert_tensor_bytes == 2 * 3 * N_EXPERT * N_FF * N_EMBD * 2  # F16, 2 layers
    assert info.token_embd_bytes == N_VOCAB * N_EMBD * 2
    router_bytes = 2 * N_EXPERT * N_EMBD * 4  # F32, not an expert tensor
    assert info.tensor_bytes == info.expert_tensor_bytes + info.token_embd_bytes + router_bytes


def test_per_layer_expert_used_counts_give_the_largest(tmp_path: Path) -> None:
    info = read_model_info(_write_moe(tmp_path / "moe.gguf", used=[1, 3]))
    assert info.n_expert_used == 3


def test_a_dense_model_has_no_experts_but_its_embedding_bytes(tmp_path: Path) -> None:
    info = read_model_info(write_gguf(tmp_path / "dense.gguf", n_vocab=32, n_embd=64))
    assert (info.n_expert, info.n_expert_used, info.expert_tensor_bytes) == (0, 0, 0)
    assert info.token_embd_bytes == 32 * 64 * 2


def test_model_info_built_without_the_expert_fields_defaults_to_dense(tmp_path: Path) -> None:
    info = read_model_info(write_gguf(tmp_path / "dense.gguf"))
    older = {f.name: getattr(info, f.name) for f in dataclasses.fields(ModelInfo)
             if f.name not in ("n_expert", "n_expert_used", "expert_tensor_bytes",
                               "token_embd_bytes")}
    rebuilt = ModelInfo(**older)
    assert (rebuilt.n_expert, rebuilt.n_expert_used) == (0, 0)
    assert (rebuilt.expert_tensor_bytes, rebuilt.token_embd_bytes) == (0, 0)
