"""GGUF metadata: the facts the predictor needs, and one clear error for a broken file."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from harness.artifacts.gguf_info import file_sha256, file_type_name, read_model_info
from harness.errors import ModelError


def write_gguf(
    path: Path,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_vocab: int = 32,
    key_length: int | None = None,
    value_length: int | None = None,
    file_type: int | None = 1,
    with_block_count: bool = True,
) -> Path:
    """A small llama-architecture GGUF with real (zero) tensors, written by gguf.GGUFWriter."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("test-model")
    if with_block_count:
        writer.add_block_count(n_layer)
    writer.add_embedding_length(n_embd)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_feed_forward_length(n_ff)
    writer.add_context_length(2048)
    if key_length is not None:
        writer.add_key_length(key_length)
    if value_length is not None:
        writer.add_value_length(value_length)
    if file_type is not None:
        writer.add_file_type(file_type)
    writer.add_token_list([f"t{i}".encode() for i in range(n_vocab)])
    writer.add_tensor("token_embd.weight", np.zeros((n_vocab, n_embd), dtype=np.float16))
    for layer in range(n_layer):
        writer.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((n_embd, n_embd), np.float32))
        writer.add_tensor(f"blk.{layer}.ffn_up.weight", np.zeros((n_ff, n_embd), np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_reads_architecture_sizes_and_file_type(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", file_type=15)
    info = read_model_info(path)
    assert (info.architecture, info.name) == ("llama", "test-model")
    assert (info.n_layer, info.n_head, info.n_head_kv, info.n_embd, info.n_ff) == (2, 4, 2, 64, 128)
    assert (info.head_dim_k, info.head_dim_v) == (16, 16)  # n_embd / n_head
    assert info.n_vocab == 32 and info.context_length == 2048
    assert (info.file_type, info.file_type_name) == (15, "Q4_K_M")
    # token_embd 32x64 f16 + 2 x (attn_q 64x64 f32 + ffn_up 128x64 f16)
    assert info.tensor_bytes == 32 * 64 * 2 + 2 * (64 * 64 * 4 + 128 * 64 * 2)
    assert info.n_params == 32 * 64 + 2 * (64 * 64 + 128 * 64)
    assert info.file_size == path.stat().st_size > info.tensor_bytes


def test_explicit_key_and_value_lengths_win_over_n_embd_over_n_head(tmp_path: Path) -> None:
    info = read_model_info(write_gguf(tmp_path / "m.gguf", key_length=32, value_length=24))
    assert (info.head_dim_k, info.head_dim_v) == (32, 24)


def test_file_type_names_follow_llama_cpp() -> None:
    assert [file_type_name(n) for n in (0, 1, 7, 10, 12, 15, 17, 18)] == [
        "F32", "F16", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K",
    ]
    assert file_type_name(9999) == "unknown(9999)"


def test_missing_file_type_is_reported_as_unknown(tmp_path: Path) -> None:
    info = read_model_info(write_gguf(tmp_path / "m.gguf", file_type=None))
    assert (info.file_type, info.file_type_name) == (-1, "unknown")


def _error(path: Path) -> str:
    with pytest.raises(ModelError) as caught:
        read_model_info(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_wrong_magic_is_named(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_bytes(b"GGML" + bytes(100))
    assert _error(path) == f"{path}: not a GGUF file (magic b'GGML', expected b'GGUF')"


def test_truncated_header_is_named(tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(b"GGUF\x03\x00")
    assert _error(path) == f"{path}: truncated GGUF (6 bytes; the header alone needs 24)"


def test_empty_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    assert "truncated GGUF (0 bytes" in _error(path)


def test_truncated_tensor_data_is_named(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    # the table is whole, the data is not: the tensor that runs past the end is named
    error = _error(path)
    assert error.startswith(f"{path}: truncated GGUF (tensor '") and "ends at byte" in error
    assert f"the file has {len(data) - 1000})" in error


def test_truncated_metadata_is_named(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf")
    path.write_bytes(path.read_bytes()[:200])
    assert _error(path).startswith(f"{path}: truncated or corrupt GGUF (")


def test_absurd_tensor_count_is_named(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    data[8:16] = struct.pack("<Q", 2**60)
    path.write_bytes(bytes(data))
    assert _error(path) == (
        f"{path}: absurd tensor count {2**60} for a file of {len(data)} bytes"
    )


def test_unsupported_version_is_named(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 99)
    path.write_bytes(bytes(data))
    assert _error(path) == f"{path}: unsupported GGUF version 99 (supported: 2, 3)"


def test_missing_architecture_key_is_named(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", with_block_count=False)
    assert _error(path) == f"{path}: GGUF metadata lacks 'llama.block_count'"


def test_unreadable_paths_are_named(tmp_path: Path) -> None:
    assert "No such file" in _error(tmp_path / "absent.gguf")
    assert _error(tmp_path) == f"{tmp_path}: not a file"


def test_sha256_is_correct_and_cached_by_path_size_and_mtime(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"a" * 1000)
    stamp = (1_700_000_000, 1_700_000_000)
    os.utime(path, stamp)
    first = file_sha256(path)
    assert first == hashlib.sha256(b"a" * 1000).hexdigest()
    # Same size and mtime: the cache answers without reading (so it returns the old digest).
    path.write_bytes(b"b" * 1000)
    os.utime(path, stamp)
    assert file_sha256(path) == first
    # A new mtime is a new version of the file.
    os.utime(path, (1_700_000_100, 1_700_000_100))
    assert file_sha256(path) == hashlib.sha256(b"b" * 1000).hexdigest()


def test_sha256_of_a_missing_file_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="cannot read"):
        file_sha256(tmp_path / "absent.bin")


def test_an_absurd_array_count_is_named_at_once(tmp_path: Path) -> None:
    """A vocabulary of 2^60 strings in a 100-byte file: refused from the bytes left, not
    walked (the header reader skips arrays instead of parsing them)."""
    key = b"tokenizer.ggml.tokens"
    path = tmp_path / "m.gguf"
    path.write_bytes(struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", len(key)) + key
                     + struct.pack("<IIQ", 9, 8, 1 << 60) + b"\0" * 16)
    error = _error(path)
    assert error.startswith(f"{path}: truncated or corrupt GGUF (") and "cannot fit" in error
